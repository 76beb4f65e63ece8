package engine

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestInterruptSteersTheAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		alice := b.newAgent("alice")
		id := b.newTask("report", alice)
		started := make(chan struct{})
		b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillThink, "think slowly"), spec(SkillThink, "planned later")}}
		})
		b.sc.onText("think slowly", func(ctx context.Context, _ *ExecInput) *Output {
			close(started)
			<-ctx.Done() // a slow LLM call, cancelled by the interrupt
			return &Output{Err: ctx.Err()}
		})
		var steered string
		b.sc.onAgent("alice", SkillProcessMessage, func(_ context.Context, in *ExecInput) *Output {
			steered = in.Step.TextContent
			return &Output{}
		})
		b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
		<-started
		stepID, err := b.sys.Interrupt(b.op(), alice, "wrong direction", "write the report instead")
		if err != nil {
			t.Fatal(err)
		}
		b.until("the instruction to be processed", time.Minute, func() bool { return steered != "" })
		if !strings.Contains(steered, "write the report instead") || !strings.Contains(steered, "wrong direction") {
			t.Errorf("the agent's next step reads %q", steered)
		}
		st, _ := b.step(alice, stepID)
		if e, _ := st.ExecuteResult["error"].(string); st.ExecutionState != StateFailed || e != "interrupted by the operator: wrong direction" || st.ExecuteResult["interrupted"] != true {
			t.Errorf("interrupted step %s %v", st.ExecutionState, st.ExecuteResult)
		}
		// The instruction ran before the steps planned earlier.
		order := []string{}
		for _, c := range b.sc.callsOf("alice", "") {
			order = append(order, c.Skill)
		}
		if i := strings.Index(strings.Join(order, ","), "think,process_message"); i < 0 {
			t.Errorf("calls %v: want the instruction right after the interrupted step", order)
		}
	})
}

func TestCancelToolStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calling := make(chan struct{})
		b := bubbleBed(t, func(c *Config) {
			c.Tools = toolCatalog{"slow": "a slow server"}
			c.Tool = ExecutorFunc(func(ctx context.Context, _ *ExecInput) *Output {
				close(calling)
				<-ctx.Done() // a slow downstream call; ctx carries the cancel
				return &Output{Err: ctx.Err()}
			})
		})
		alice, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: "alice", Tools: []string{"slow"}})
		if err != nil {
			t.Fatal(err)
		}
		id := b.newTask("report", alice)
		stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
		b.until("alice's plan", time.Minute, func() bool { return len(b.sc.callsOf("alice", SkillPlanning)) == 1 })
		ids := b.inject(alice, id, stages[0], true, StepSpec{StepIntention: "call it", Type: StepTool, Executor: "slow", TextContent: "call"})
		<-calling
		// Interrupting a skill step by its step ID is refused; so is another step.
		isErr(t, b.sys.CancelStep(b.op(), alice, "other", ""), ErrInvalid, "other")
		if err := b.sys.CancelStep(b.op(), alice, ids[0], "takes too long"); err != nil {
			t.Fatal(err)
		}
		b.until("the tool step to fail", time.Minute, func() bool { return b.stepDone(alice, ids[0]) })
		st, _ := b.step(alice, ids[0])
		if e, _ := st.ExecuteResult["error"].(string); e != "cancelled by the operator: takes too long" {
			t.Errorf("tool step %s %v", st.ExecutionState, st.ExecuteResult)
		}
		// The agent carries on as after any failed step: a reflection.
		b.until("alice's summary", 10*testStall, func() bool { return len(b.stage(id, stages[0]).CompletionSummary) == 1 })
	})
}

func TestInterruptRefusals(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	_, err := b.sys.Interrupt(b.op(), alice, "", "do x")
	isErr(t, err, ErrInvalid, "runs no step")
	_, err = b.sys.Interrupt(b.op(), alice, "", " ")
	isErr(t, err, ErrInvalid, "instruction")
	_, err = b.sys.Interrupt(b.mgr(), alice, "", "do x")
	isErr(t, err, ErrForbidden, "operators")
	_, err = b.sys.Interrupt(b.op(), "nobody", "", "do x")
	isErr(t, err, ErrNotFound, "nobody")
}

// The operator interrupts an agent, and its step's stage (finish_stage) or
// task (cancel_task) ends before the interrupted step returns: the
// instruction is not queued (the work it was to redirect is gone), and
// the operator is told so in its inbox, naming the agent, the step and
// why; not left believing the agent follows it.
func TestInterruptOfEndedStepTellsTheOperator(t *testing.T) {
	for _, end := range []string{"stage", "task"} {
		t.Run(end+" ended", func(t *testing.T) {
			b := newTestbed(t, nil)
			op := b.op()
			alice := b.newAgent("alice")
			task := b.newTask("interrupted then ended", alice)
			started, stopped, proceed := make(chan struct{}), make(chan struct{}), make(chan struct{})
			b.sc.onAgent("alice", SkillPlanning, func(ctx context.Context, _ *ExecInput) *Output {
				close(started)
				<-ctx.Done()
				close(stopped)
				<-proceed // the call takes a moment to give up
				return &Output{Err: ctx.Err()}
			})
			stage := b.addStages(task, StageSpec{StageIntention: "work", AgentAllocation: map[string]string{alice: "work"}})[0]
			waitChan(t, started, "alice's step")
			stepID, err := b.sys.Interrupt(op, alice, "wrong direction", "do something else")
			if err != nil {
				t.Fatal(err)
			}
			waitChan(t, stopped, "the interrupted step to see its context cancelled")
			if end == "stage" {
				if _, err := b.sys.TaskInstruction(op, TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
					t.Fatal(err)
				}
			} else {
				b.cancelTask(task)
			}
			close(proceed)
			b.settle()
			for _, s := range b.steps(alice, func(s StepState) bool { return s.Executor == SkillProcessMessage && s.TaskID == task }) {
				t.Errorf("the interrupt's instruction was queued in the ended %s: %s %q", end, s.ExecutionState, s.TextContent)
			}
			in, err := b.sys.Inbox(op)
			if err != nil {
				t.Fatal(err)
			}
			var notices []string
			for _, e := range in {
				if e.SenderID == SystemSender && strings.Contains(e.Content, stepID) {
					notices = append(notices, e.Content)
				}
			}
			if len(notices) != 1 || !strings.Contains(notices[0], "its "+end+" ended") || !strings.Contains(notices[0], "alice") || !strings.Contains(notices[0], "do something else") {
				t.Errorf("the interrupt's instruction went nowhere; the operator's notices naming step %s: %q, want one naming alice, the instruction and %q", stepID, notices, "its "+end+" ended")
			}
		})
	}
}
