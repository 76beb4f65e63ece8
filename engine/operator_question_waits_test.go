package engine

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
)

// A task whose operator has a question of it awaiting a reply waits on
// someone who has been told (ARCHITECTURE.md, Liveness): supervision does
// not count it quiet, however long the operator is away.

// TestSupervisionWaitsForTheOperatorsAnswer: the manager asks the operator
// a question it waits on before it staffs the task, and the operator is
// away for an hour. The manager's wait times out (WaitTimeout, 10
// minutes) but the question stays in the operator's inbox awaiting its
// reply: the task is not quiet, so its manager is not told it is stuck and
// it is not failed (which would take the question out of the inbox). The
// operator's late answer still reaches the manager.
func TestSupervisionWaitsForTheOperatorsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil) // WaitTimeout: its 10-minute default
		const question = "before I staff this task: should the report be written in English or in Chinese?"
		b.sc.onAgent("manager", SkillPlanning, func(_ context.Context, in *ExecInput) *Output {
			if in.Step.TaskID == b.sys.BaseTaskID() {
				return &Output{}
			}
			return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "ask the operator")}}
		})
		b.sc.onText("ask the operator", func(context.Context, *ExecInput) *Output {
			return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{b.op()}, Message: question, NeedReply: true, Waiting: true}}
		})
		id := b.newTask("report")
		b.until("the manager's question in the operator's inbox", testStall, func() bool { return len(awaitingIn(b, id)) == 1 })
		mgr := awaitingIn(b, id)[0].SenderID
		timedOut := func() bool {
			for _, c := range b.sc.callsOf("manager", SkillProcessMessage) {
				if c.TaskID == id && strings.Contains(c.Text, b.sys.cfg.WaitTimeout.String()) {
					return true
				}
			}
			return false
		}
		b.until("the manager's wait to time out", 2*b.sys.cfg.WaitTimeout, timedOut)
		if st := b.agent(mgr); len(st.StepLock) > 0 {
			t.Fatalf("setup: the manager still waits (%v) after its wait timed out", st.StepLock)
		}

		// The operator is away for an hour of fake time.
		if untilOr(20*testStall, func() bool { return b.ended(id) }) {
			st := b.task(id)
			t.Fatalf("the task was ended (%s: %q) while its manager's question awaited the operator's reply", st.ExecutionState, st.TaskSummary)
		}
		if ns := b.stallNotices(); len(ns) > 0 {
			t.Errorf("the manager was told the task is quiet while the operator's answer was awaited: %q", ns[0].Text)
		}
		open := awaitingIn(b, id)
		if len(open) != 1 {
			t.Fatalf("after an hour: %d question(s) of the task await the operator's reply, want the manager's 1", len(open))
		}

		// The operator comes back and answers: the manager takes it.
		const answer = "English, please"
		if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: id, Receiver: []string{mgr}, Content: answer, ReplyTo: open[0].MessageID}); err != nil {
			t.Fatal(err)
		}
		b.until("the manager to take the late answer", testStall, func() bool {
			for _, c := range b.sc.callsOf("manager", SkillProcessMessage) {
				if c.TaskID == id && strings.Contains(c.Text, answer) {
					return true
				}
			}
			return false
		})
		if open := awaitingIn(b, id); len(open) > 0 {
			t.Errorf("the answered question still awaits a reply: %q", open[0].Content)
		}
	})
}
