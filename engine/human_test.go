package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sayTo scripts a step whose text is key: it sends text to receiver.
func sayTo(b *testbed, key, receiver, text string, needReply, waiting bool) {
	b.sc.onText(key, func(context.Context, *ExecInput) *Output {
		return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{receiver}, Message: text, NeedReply: needReply, Waiting: waiting}}
	})
}

// runSteps injects steps into the base task and waits until they ran.
func runSteps(b *testbed, agentID string, texts ...string) []string {
	b.t.Helper()
	var specs []StepSpec
	for _, tx := range texts {
		specs = append(specs, spec(SkillSendMessage, tx))
	}
	ids := b.inject(agentID, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, specs...)
	b.waitFor("steps "+strings.Join(texts, ", "), func() bool { return b.stepDone(agentID, ids[len(ids)-1]) })
	return ids
}

func privates(b *testbed, humanID, peer string) []PrivateMessage {
	return b.agent(humanID).ConversationPool.ConversationPrivates[peer]
}

func TestAddOperator(t *testing.T) {
	b := newTestbed(t, nil)
	id, err := b.sys.AddOperator(" second ")
	if err != nil {
		t.Fatal(err)
	}
	a := b.agent(id)
	if a.Kind != KindHuman || a.Name != "second" || a.HumanConfig == nil || a.HumanConfig.Name != "second" || a.ConversationPool == nil || a.LLMConfig != nil {
		t.Errorf("operator %+v, want a HumanAgent named second with a conversation pool", a)
	}
	if _, ok := a.WorkingMemory[b.sys.BaseTaskID()]; !ok {
		t.Errorf("working memory %v lacks the base task", a.WorkingMemory)
	}
	if g := b.task(b.sys.BaseTaskID()).TaskGroup; g[len(g)-1] != id {
		t.Errorf("base task group %v lacks the new operator", g)
	}
	_, err = b.sys.AddOperator("  ")
	isErr(t, err, ErrInvalid, "name")
}

func TestHumanReceivesAndAnswersAWaitingMessage(t *testing.T) {
	b := newTestbed(t, nil)
	op, base, baseStage := b.op(), b.sys.BaseTaskID(), b.sys.BaseStageID()
	alice := b.newAgent("alice")
	b.join(base, alice)
	sayTo(b, "ask op", op, "may I?", true, true)
	ask := runSteps(b, alice, "ask op")[0]

	a := b.agent(alice)
	if len(a.Waits) != 1 {
		t.Fatalf("alice's waits = %+v, want one", a.Waits)
	}
	waitID := a.Waits[0].WaitingID
	st, _ := b.step(alice, ask)
	if diff := cmp.Diff(jsonNorm(t, []string{waitID}), jsonNorm(t, st.ExecuteResult["waiting"])); diff != "" {
		t.Errorf("send step's waiting mismatch (-want +got):\n%s", diff)
	}
	got := privates(b, op, alice)
	if len(got) != 1 {
		t.Fatalf("operator's conversation with alice = %+v, want one message", got)
	}
	want := PrivateMessage{
		SenderID: alice, Content: "may I?", StageRelative: baseStage, Timestamp: got[0].Timestamp,
		NeedReply: true, Waiting: true, ReturnWaitingID: waitID, TaskID: base, MessageID: fmt.Sprint(st.ExecuteResult["message_id"]),
	}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("private message mismatch (-want +got):\n%s", diff)
	}
	gm := b.agent(op).ConversationPool.GlobalMessages
	if len(gm) == 0 || !strings.Contains(gm[len(gm)-1], alice) || !strings.Contains(gm[len(gm)-1], "needs your reply") {
		t.Errorf("global messages %q, want a reply-needed notice naming alice", gm)
	}

	sent, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "yes"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0].ReturnWaitingID != waitID || sent[0].StageRelative != NoRelative || sent[0].SenderID != op {
		t.Fatalf("sent %+v, want one message carrying the waiting ID", sent)
	}
	b.waitFor("alice to digest the reply", func() bool {
		return len(b.steps(alice, func(s StepState) bool { return s.Executor == SkillProcessMessage && s.ExecutionState == StateFinished })) == 1
	})
	if a := b.agent(alice); len(a.StepLock) != 0 {
		t.Errorf("alice's lock %v, want released", a.StepLock)
	}
	got = privates(b, op, alice)
	if len(got) != 2 || !got[0].Replied || got[1].SenderID != op || got[1].Content != "yes" || got[1].MessageID != sent[0].MessageID {
		t.Errorf("conversation %+v, want the question replied and the answer recorded", got)
	}
}

func TestHumanSendErrors(t *testing.T) {
	b := newTestbed(t, nil)
	op, base := b.op(), b.sys.BaseTaskID()
	w1, outsider := b.newAgent("w1"), b.newAgent("outsider")
	b.join(base, w1)
	op2, err := b.sys.AddOperator("op2")
	if err != nil {
		t.Fatal(err)
	}
	task := b.newTask("private", w1)
	ended := b.newTask("ended", w1)
	if _, err := b.sys.TaskInstruction(op, TaskInstruction{Action: ActionCancelTask, TaskID: ended}); err != nil {
		t.Fatal(err)
	}
	b.settle()
	ok := HumanMessage{TaskID: base, Receiver: []string{w1}, Content: "hi"}
	with := func(f func(*HumanMessage)) HumanMessage { m := ok; f(&m); return m }
	tests := []struct {
		name  string
		human string
		hm    HumanMessage
		kind  error
		field string
	}{
		{"unknown human", "a-404", ok, ErrNotFound, `human_agent_id "a-404"`},
		{"an LLM agent is no human", w1, with(func(m *HumanMessage) { m.Receiver = []string{b.mgr()} }), ErrNotFound, "human_agent_id"},
		{"unknown task", op, with(func(m *HumanMessage) { m.TaskID = "t-404" }), ErrNotFound, `task_id "t-404"`},
		{"empty content", op, with(func(m *HumanMessage) { m.Content = " \n" }), ErrInvalid, "content"},
		{"another operator's task", op2, with(func(m *HumanMessage) { m.TaskID = task }), ErrForbidden, "only its owner, operators it is shared with and admins may manage it"},
		{"no receiver", op, with(func(m *HumanMessage) { m.Receiver = nil }), ErrInvalid, "receiver: is empty"},
		{"unknown receiver", op, with(func(m *HumanMessage) { m.Receiver = []string{w1, "a-404"} }), ErrNotFound, `receiver "a-404"`},
		{"receiver outside the group", op, with(func(m *HumanMessage) { m.Receiver = []string{outsider} }), ErrInvalid, "not in the task group"},
		{"self", op, with(func(m *HumanMessage) { m.Receiver = []string{op} }), ErrInvalid, "is the sender itself"},
		{"bad stage_relative", op, with(func(m *HumanMessage) { m.StageRelative = "s-404" }), ErrNotFound, `stage_relative "s-404"`},
		{"unknown reply_to", op, with(func(m *HumanMessage) { m.ReplyTo = "m-404" }), ErrNotFound, `reply_to "m-404"`},
		{"ended task", op, with(func(m *HumanMessage) { m.TaskID = ended }), ErrEnded, "has ended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seq := b.sys.EventSeq()
			sent, err := b.sys.HumanSend(tt.human, tt.hm)
			if sent != nil {
				t.Errorf("sent %+v alongside the error", sent)
			}
			isErr(t, err, tt.kind, tt.field)
			if got := b.sys.EventSeq(); got != seq {
				t.Errorf("a refused message changed the state (%d events)", got-seq)
			}
		})
	}
}

func TestHumanSendOneMessagePerReceiver(t *testing.T) {
	b := newTestbed(t, nil)
	op, base, baseStage := b.op(), b.sys.BaseTaskID(), b.sys.BaseStageID()
	w1, w2 := b.newAgent("w1"), b.newAgent("w2")
	b.join(base, w1, w2)
	before := len(b.agent(op).AgentStep.StepList)
	sent, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{w1, w2, w1}, Content: "both of you", StageRelative: baseStage, NeedReply: true, Waiting: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 2 {
		t.Fatalf("sent %d messages, want one per distinct receiver", len(sent))
	}
	for i, r := range []string{w1, w2} {
		m := sent[i]
		if diff := cmp.Diff([]string{r}, m.Receiver); diff != "" {
			t.Errorf("message %d receivers mismatch (-want +got):\n%s", i, diff)
		}
		if len(m.Waiting) != 1 || !m.NeedReply || m.StageRelative != baseStage {
			t.Errorf("message %d = %+v, want need_reply with its own waiting ID in the stage", i, m)
		}
		if p := privates(b, op, r); len(p) != 1 || p[0].MessageID != m.MessageID || p[0].SenderID != op || !p[0].Waiting {
			t.Errorf("conversation with %s = %+v, want the sent message", r, p)
		}
	}
	if sent[0].Waiting[0] == sent[1].Waiting[0] {
		t.Errorf("both messages share the waiting ID %s", sent[0].Waiting[0])
	}
	a := b.agent(op)
	if len(a.AgentStep.TodoList) != 0 || len(a.StepLock) != 0 {
		t.Errorf("operator todo %v lock %v, want none: it never waits", a.AgentStep.TodoList, a.StepLock)
	}
	recorded := a.AgentStep.StepList[before:]
	if len(recorded) != 2 {
		t.Fatalf("operator recorded %d steps, want 2", len(recorded))
	}
	for i, s := range recorded {
		m, _ := jsonNorm(t, s.ExecuteResult["send_message"]).(map[string]any)
		if s.Executor != SkillSendMessage || s.ExecutionState != StateFinished || s.FinishedAt.IsZero() || m["message_id"] != sent[i].MessageID || s.StageID != baseStage {
			t.Errorf("recorded step %d = %+v, want a finished send_message with the message", i, s)
		}
	}
	for _, r := range []string{w1, w2} {
		b.waitFor("the reply steps", func() bool {
			return len(b.steps(r, func(s StepState) bool { return s.ReplyTo == op && s.ExecutionState == StateFinished })) == 1
		})
	}
}

func TestHumanReplyToPicksTheMessage(t *testing.T) {
	b := newTestbed(t, nil)
	op, base := b.op(), b.sys.BaseTaskID()
	alice := b.newAgent("alice")
	b.join(base, alice)
	sayTo(b, "first", op, "question one", true, false)
	sayTo(b, "second", op, "question two", true, true)
	runSteps(b, alice, "first", "second")
	msgs := privates(b, op, alice)
	if len(msgs) != 2 || !msgs[1].Waiting {
		t.Fatalf("conversation %+v, want two questions, the second waiting", msgs)
	}

	sent, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "about one", ReplyTo: msgs[0].MessageID})
	if err != nil {
		t.Fatal(err)
	}
	if sent[0].ReturnWaitingID != "" {
		t.Errorf("reply to the non-waiting question carries %q", sent[0].ReturnWaitingID)
	}
	msgs = privates(b, op, alice)
	if !msgs[0].Replied || msgs[1].Replied {
		t.Errorf("replied flags %v %v, want true false", msgs[0].Replied, msgs[1].Replied)
	}
	b.settle()
	if a := b.agent(alice); len(a.StepLock) != 1 {
		t.Fatalf("alice's lock %v, want still waiting for the second answer", a.StepLock)
	}

	sent, err = b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "about two"})
	if err != nil {
		t.Fatal(err)
	}
	if sent[0].ReturnWaitingID != msgs[1].ReturnWaitingID || sent[0].ReturnWaitingID == "" {
		t.Errorf("default reply carries %q, want the waiting question's %q", sent[0].ReturnWaitingID, msgs[1].ReturnWaitingID)
	}
	b.waitFor("alice's lock to be released", func() bool { return len(b.agent(alice).StepLock) == 0 })
}

func TestInboxOrder(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Now = steppingClock(time.Millisecond) })
	op, base := b.op(), b.sys.BaseTaskID()
	alice, bob := b.newAgent("alice"), b.newAgent("bob")
	b.join(base, alice, bob)
	sayTo(b, "m1", op, "m1 plain", false, false)
	sayTo(b, "m2", op, "m2 asks", true, false)
	sayTo(b, "m3", op, "m3 waits", true, true)
	sayTo(b, "m4", op, "m4 plain", false, false)
	runSteps(b, alice, "m1", "m2")
	runSteps(b, bob, "m3")
	runSteps(b, alice, "m4")
	// The operator's own messages never appear in its inbox; this one
	// answers bob's waiting question.
	if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{bob}, Content: "not in the inbox"}); err != nil {
		t.Fatal(err)
	}

	type row struct {
		Content  string
		Awaiting bool
	}
	inbox := func() []row {
		es, err := b.sys.Inbox(op)
		if err != nil {
			t.Fatal(err)
		}
		var out []row
		for _, e := range es {
			out = append(out, row{e.Content, e.AwaitingReply})
		}
		return out
	}
	want := []row{{"m2 asks", true}, {"m4 plain", false}, {"m3 waits", false}, {"m1 plain", false}}
	if diff := cmp.Diff(want, inbox()); diff != "" {
		t.Errorf("inbox mismatch (-want +got):\n%s", diff)
	}

	sayTo(b, "m5", op, "m5 waits", true, true)
	runSteps(b, bob, "m5")
	want = []row{{"m5 waits", true}, {"m2 asks", true}, {"m4 plain", false}, {"m3 waits", false}, {"m1 plain", false}}
	if diff := cmp.Diff(want, inbox()); diff != "" {
		t.Errorf("inbox mismatch (-want +got):\n%s", diff)
	}
	if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: base, Receiver: []string{alice}, Content: "answer"}); err != nil {
		t.Fatal(err)
	}
	want = []row{{"m5 waits", true}, {"m4 plain", false}, {"m3 waits", false}, {"m2 asks", false}, {"m1 plain", false}}
	if diff := cmp.Diff(want, inbox()); diff != "" {
		t.Errorf("inbox after answering alice mismatch (-want +got):\n%s", diff)
	}
	_, err := b.sys.Inbox(alice)
	isErr(t, err, ErrNotFound, "human_agent_id")
}

func TestFinishTaskClearsTheOperatorsConversations(t *testing.T) {
	b := newTestbed(t, nil)
	op := b.op()
	alice := b.newAgent("alice")
	b.join(b.sys.BaseTaskID(), alice)
	task := b.newTask("end me", alice)
	sayTo(b, "in base", op, "base chat", false, false)
	sayTo(b, "in task", op, "task chat", true, false)
	runSteps(b, alice, "in base")
	id := b.inject(alice, task, NoRelative, false, spec(SkillSendMessage, "in task"))[0]
	b.waitFor("the task message", func() bool { return b.stepDone(alice, id) })
	if got := len(privates(b, op, alice)); got != 2 {
		t.Fatalf("conversation has %d messages, want 2", got)
	}

	if _, err := b.sys.TaskInstruction(op, TaskInstruction{Action: ActionCancelTask, TaskID: task}); err != nil {
		t.Fatal(err)
	}
	got := privates(b, op, alice)
	if len(got) != 1 || got[0].Content != "base chat" {
		t.Errorf("conversation after the task ended = %+v, want only the base-task message", got)
	}
	a := b.agent(op)
	if _, ok := a.WorkingMemory[task]; ok {
		t.Errorf("operator's working memory still has the task")
	}
	gm := a.ConversationPool.GlobalMessages
	last := gm[len(gm)-1]
	if !strings.Contains(last, task) {
		t.Fatalf("last global message %q does not name the task", last)
	}
	if want := `Task "end me" (` + task + `) ended: failed.`; !strings.Contains(last, want) {
		t.Errorf("the operator's task-finished notice shows the task ID as its name and an empty state: got %q, want it to contain %q", last, want)
	}
}

func TestOperatorPassword(t *testing.T) {
	store := NewMemoryStore()
	b := newTestbed(t, func(c *Config) { c.Store = store })
	op := b.op()
	const pw = "correct horse battery staple"
	if b.sys.CheckOperatorPassword(op, "") {
		t.Errorf("an operator without a password accepts the empty one")
	}
	if err := b.sys.SetOperatorPassword(op, pw); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		agent, pw string
		want      bool
	}{
		{op, pw, true},
		{op, pw + " ", false},
		{op, "", false},
		{"a-404", pw, false},
		{b.mgr(), pw, false},
	}
	for _, c := range checks {
		if got := b.sys.CheckOperatorPassword(c.agent, c.pw); got != c.want {
			t.Errorf("CheckOperatorPassword(%s, %q) = %v, want %v", c.agent, c.pw, got, c.want)
		}
	}
	isErr(t, b.sys.SetOperatorPassword(b.mgr(), pw), ErrNotFound, "human_agent_id")
	isErr(t, b.sys.SetOperatorPassword("a-404", pw), ErrNotFound, "human_agent_id")

	// Touch the operator so the store gets a fresh document.
	if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: b.sys.BaseTaskID(), Receiver: []string{b.mgr()}, Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(pw))
	js, _ := json.Marshal(b.agent(op))
	stored, _ := store.Agent(op)
	js2, _ := json.Marshal(stored)
	for _, doc := range []string{string(js), string(js2)} {
		for _, secret := range []string{pw, hex.EncodeToString(h[:]), string(h[:])} {
			if strings.Contains(doc, secret) {
				t.Errorf("the agent document contains the password or its hash")
			}
		}
	}
}

func TestHumanStageNotices(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	op2, err := b.sys.AddOperator("op2")
	if err != nil {
		t.Fatal(err)
	}
	task := b.newTask("watched", w)
	b.join(task, op2)
	stage := b.addStages(task, StageSpec{StageIntention: "s", AgentAllocation: map[string]string{w: "g"}})[0]
	if _, err := b.sys.HumanSend(op2, HumanMessage{TaskID: task, Receiver: []string{w}, Content: "in the stage", StageRelative: stage}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sys.HumanSend(op2, HumanMessage{TaskID: task, Receiver: []string{w}, Content: "outside stages"}); err != nil {
		t.Fatal(err)
	}
	h, _ := b.sys.agent(op2)
	h.receive(b.sys.instruction("", task, stage, op2, "", &Instruction{StartStage: &StartStage{TaskID: task, StageID: stage}}))
	h.receive(b.sys.instruction("", task, stage, op2, "finished", &Instruction{FinishStage: &StageRef{TaskID: task, StageID: stage}}))

	a := b.agent(op2)
	gm := a.ConversationPool.GlobalMessages
	if len(gm) < 2 || !strings.Contains(gm[len(gm)-2], "Stage "+stage+" of task "+task+" has started") || !strings.Contains(gm[len(gm)-1], "Stage "+stage+" of task "+task+" ended") {
		t.Errorf("global messages %q, want start and end notices of the stage", gm)
	}
	var left []string
	for _, s := range a.AgentStep.StepList {
		if s.TaskID == task {
			left = append(left, s.StageID)
		}
	}
	if diff := cmp.Diff([]string{NoRelative}, left); diff != "" {
		t.Errorf("operator's steps of the task mismatch (-want +got):\n%s", diff)
	}
	if _, ok := a.WorkingMemory[task][stage]; ok {
		t.Errorf("working memory still has the finished stage: %v", a.WorkingMemory[task])
	}
}

// TestOperatorActionsAreHumanSteps: spec §7 — the operator's task and
// agent management is recorded as finished steps of their HumanAgent, in
// the base task, naming the task they were about; a refused one changes
// nothing (the trail keeps it).
func TestOperatorActionsAreHumanSteps(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	task := b.newTask("recorded", w)
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddStage, TaskID: task,
		Stages: []StageSpec{{StageIntention: "s", AgentAllocation: map[string]string{w: "g"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: "no-such-stage"}); err == nil {
		t.Fatal("finishing a missing stage succeeded")
	}
	steps := b.steps(b.op(), func(s StepState) bool { return s.Executor == SkillTaskManager })
	var addStage int
	for _, s := range steps {
		if s.TaskID != b.sys.BaseTaskID() || !strings.Contains(s.StepIntention, task) || s.ExecutionState != StateFinished {
			t.Errorf("step %+v: want it finished, in the base task, naming task %s", s, task)
		}
		if in, _ := s.ExecuteResult["instruction"].(map[string]any); in["action"] == ActionFinishStage {
			t.Errorf("the refused finish_stage was recorded as a step: %+v", s)
		}
		if in, _ := s.ExecuteResult["instruction"].(map[string]any); in["action"] == ActionAddStage {
			addStage++
		}
	}
	if addStage != 1 {
		t.Errorf("%d add_stage steps of the operator, want 1\n%s", addStage, b.dump())
	}
	a, _ := b.sys.Agent(b.op())
	if len(a.AgentStep.TodoList) != 0 {
		t.Errorf("the operator's recorded steps are in its todo list: %v", a.AgentStep.TodoList)
	}
}
