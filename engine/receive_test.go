package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// receiver is a loose agent with a running step and two pending ones in
// (task, stage), plus one pending step in another stage and one in the
// base task.
type receiver struct {
	a                  *agent
	running            string
	pending            []string // in todo order
	otherStage, inBase string
}

func newReceiver(b *testbed, task, stage, stage2 string) *receiver {
	a := looseAgent(b.sys, "receiver", SkillThink)
	b.t.Cleanup(a.stop)
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := a.addStepsLocked(task, stage, []StepSpec{spec(SkillThink, "r"), spec(SkillThink, "p1"), spec(SkillThink, "p2")}, false, "")
	popForTest(a)
	a.count(stageKey{task, stage}).Steps = 3
	a.count(stageKey{task, stage2}).Steps = 1
	o := a.addStepsLocked(task, stage2, []StepSpec{spec(SkillThink, "other stage")}, false, "")
	base := a.addStepsLocked(b.sys.BaseTaskID(), b.sys.BaseStageID(), []StepSpec{spec(SkillThink, "base")}, false, "")
	return &receiver{a: a, running: ids[0], pending: []string{ids[1], ids[2], o[0], base[0]}, otherStage: o[0], inBase: base[0]}
}

// snapshot returns the receiver's state.
func (r *receiver) snapshot() AgentState { return r.a.snapshot() }

func TestReceiveMessage(t *testing.T) {
	b := newTestbed(t, nil)
	sender := b.newAgent("sender")
	task := b.newTask("messages")
	const stage, stage2 = "S", "S2"

	tests := []struct {
		name string
		// waitFor engages a wait of the receiver on the sender first.
		waitFor string
		msg     func(me string) Message
		// want: the new step's executor, whether it runs next, its reply
		// fields; wantLock: the receiver's lock afterwards.
		exec      string
		next      bool
		replyTo   string
		returnID  string
		wantLock  []string
		wantEdges map[string]map[string]int
	}{
		{
			name: "need_reply with waiting: reply next",
			msg: func(me string) Message {
				return Message{SenderID: sender, Receiver: []string{"someone", me}, Waiting: []string{"w-0", "w-1"}, NeedReply: true}
			},
			exec: SkillSendMessage, next: true, replyTo: sender, returnID: "w-1",
		},
		{
			name: "need_reply without waiting: reply appended",
			msg: func(me string) Message {
				return Message{SenderID: sender, Receiver: []string{me}, NeedReply: true}
			},
			exec: SkillSendMessage, replyTo: sender,
		},
		{
			name: "plain message: process_message appended",
			msg:  func(me string) Message { return Message{SenderID: sender, Receiver: []string{me}} },
			exec: SkillProcessMessage,
		},
		{
			name: "the system never asks for a reply",
			msg: func(me string) Message {
				return Message{SenderID: SystemSender, Receiver: []string{me}, NeedReply: true}
			},
			exec: SkillProcessMessage,
		},
		{
			name:    "a reply releasing our wait is processed next",
			waitFor: "w-mine",
			msg: func(me string) Message {
				return Message{SenderID: sender, Receiver: []string{me}, ReturnWaitingID: "w-mine"}
			},
			exec: SkillProcessMessage, next: true, wantEdges: map[string]map[string]int{},
		},
		{
			name:    "a reply to another wait releases nothing",
			waitFor: "w-mine",
			msg: func(me string) Message {
				return Message{SenderID: sender, Receiver: []string{me}, ReturnWaitingID: "w-else"}
			},
			exec: SkillProcessMessage, wantLock: []string{"w-mine"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReceiver(b, task, stage, stage2)
			me := r.a.id
			if tt.waitFor != "" {
				r.a.mu.Lock()
				r.a.addWaitsLocked([]Wait{{WaitingID: tt.waitFor, For: sender, TaskID: task, StageID: stage, Deadline: time.Now().Add(time.Hour)}})
				r.a.mu.Unlock()
				if cyc := b.sys.waits.add(me, sender); cyc != nil {
					t.Fatalf("cycle %v", cyc)
				}
				t.Cleanup(func() { b.sys.waits.remove(me, sender) })
			}
			m := tt.msg(me)
			m.TaskID, m.StageRelative, m.Message, m.MessageID = task, stage, "the message text", newID()
			r.a.receive(m)

			st := r.snapshot()
			todo := st.AgentStep.TodoList
			if len(todo) != len(r.pending)+1 {
				t.Fatalf("todo = %v, want one new step besides %v", todo, r.pending)
			}
			added := todo[len(todo)-1]
			wantTodo := append(slices.Clone(r.pending), added)
			if tt.next {
				added = todo[0]
				wantTodo = append([]string{added}, r.pending...)
			}
			if diff := cmp.Diff(wantTodo, todo); diff != "" {
				t.Errorf("todo mismatch (-want +got):\n%s", diff)
			}
			var got StepState
			for i, s := range st.AgentStep.StepList {
				if s.StepID == added {
					got = s
					if tt.next && st.AgentStep.StepList[i-1].StepID != r.running {
						t.Errorf("step_list: the new step is not right after the running step")
					}
				}
			}
			if got.Executor != tt.exec || got.ReplyTo != tt.replyTo || got.ReturnWaitingID != tt.returnID {
				t.Errorf("new step executor %q reply_to %q return_waiting_id %q, want %q %q %q",
					got.Executor, got.ReplyTo, got.ReturnWaitingID, tt.exec, tt.replyTo, tt.returnID)
			}
			if got.TaskID != task || got.StageID != stage {
				t.Errorf("new step in %s/%s, want %s/%s", got.TaskID, got.StageID, task, stage)
			}
			if !strings.Contains(got.TextContent, "the message text") || !strings.Contains(got.TextContent, m.SenderID) {
				t.Errorf("new step text does not carry the message and its sender:\n%s", got.TextContent)
			}
			if m.SenderID == sender && !strings.Contains(got.StepIntention, "sender") {
				t.Errorf("intention %q does not name the sender", got.StepIntention)
			}
			if diff := cmp.Diff(tt.wantLock, st.StepLock, cmpEmpty); diff != "" {
				t.Errorf("step_lock mismatch (-want +got):\n%s", diff)
			}
			if tt.wantEdges != nil {
				if diff := cmp.Diff(tt.wantEdges, edgesOf(&b.sys.waits)); diff != "" {
					t.Errorf("wait graph mismatch (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestReceiveInstructions(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	task := b.newTask("instructions", w)
	stage := b.addStages(task, StageSpec{StageIntention: "the stage intention", AgentAllocation: map[string]string{w: "w's own goal"}})[0]
	const stage2 = "S2"
	base := b.sys.BaseTaskID()
	instr := func(r *receiver, stageRel string, in *Instruction) {
		r.a.receive(b.sys.instruction("", task, stageRel, r.a.id, "", in))
	}

	t.Run("add_tool_decision runs next", func(t *testing.T) {
		r := newReceiver(b, task, stage, stage2)
		instr(r, stage, &Instruction{AddToolDecision: &ToolDecisionRequest{TaskID: task, StageID: stage, ToolName: "search", StepIntention: "decide", TextContent: "next call?"}})
		st := r.snapshot()
		next := st.AgentStep.TodoList[0]
		i := slices.IndexFunc(st.AgentStep.StepList, func(s StepState) bool { return s.StepID == next })
		got := st.AgentStep.StepList[i]
		if got.Executor != SkillToolDecision || got.StepIntention != "decide" || got.TextContent != "next call?" || got.StageID != stage {
			t.Errorf("next step %+v, want the tool_decision", got)
		}
	})
	t.Run("finish_stage removes only that stage", func(t *testing.T) {
		r := newReceiver(b, task, stage, stage2)
		instr(r, stage, &Instruction{FinishStage: &StageRef{TaskID: task, StageID: stage}})
		st := r.snapshot()
		if diff := cmp.Diff([]string{r.otherStage, r.inBase}, stepIDsOf(st)); diff != "" {
			t.Errorf("steps left mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{r.otherStage, r.inBase}, st.AgentStep.TodoList); diff != "" {
			t.Errorf("todo mismatch (-want +got):\n%s", diff)
		}
		wantWM := map[string]map[string][]string{task: {stage2: {r.otherStage}}, base: {b.sys.BaseStageID(): {r.inBase}}}
		if diff := cmp.Diff(wantWM, st.WorkingMemory); diff != "" {
			t.Errorf("working_memory mismatch (-want +got):\n%s", diff)
		}
		counted := slices.ContainsFunc(st.StageCounts, func(c StageCount) bool { return c.TaskID == task && c.StageID == stage })
		kept := slices.ContainsFunc(st.StageCounts, func(c StageCount) bool { return c.TaskID == task && c.StageID == stage2 })
		if counted || !kept {
			t.Errorf("stage counts: finished stage kept %v, other stage kept %v; want false, true", counted, kept)
		}
	})
	t.Run("finish_task removes the task", func(t *testing.T) {
		r := newReceiver(b, task, stage, stage2)
		instr(r, NoRelative, &Instruction{FinishTask: &TaskRef{TaskID: task}})
		st := r.snapshot()
		if diff := cmp.Diff([]string{r.inBase}, stepIDsOf(st)); diff != "" {
			t.Errorf("steps left mismatch (-want +got):\n%s", diff)
		}
		if _, ok := st.WorkingMemory[task]; ok {
			t.Errorf("working_memory still has the task: %v", st.WorkingMemory)
		}
		if n := len(st.StageCounts); n != 0 {
			t.Errorf("%d stage counts left, want 0: %v", n, st.StageCounts)
		}
	})
	t.Run("update_working_memory", func(t *testing.T) {
		r := newReceiver(b, task, stage, stage2)
		instr(r, "", &Instruction{UpdateWorkingMemory: &StageRef{TaskID: "T2"}})
		instr(r, "", &Instruction{UpdateWorkingMemory: &StageRef{TaskID: "T3", StageID: "S9"}})
		st := r.snapshot()
		if diff := cmp.Diff(map[string][]string{}, st.WorkingMemory["T2"]); diff != "" {
			t.Errorf("T2 mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string][]string{"S9": {}}, st.WorkingMemory["T3"]); diff != "" {
			t.Errorf("T3 mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("start_stage plans the agent's part", func(t *testing.T) {
		r := newReceiver(b, task, stage, stage2)
		instr(r, stage, &Instruction{StartStage: &StartStage{TaskID: task, StageID: stage, StageIntention: "the stage intention", Goal: "my goal here"}})
		st := r.snapshot()
		last := st.AgentStep.StepList[len(st.AgentStep.StepList)-1]
		if last.Executor != SkillPlanning || last.StageID != stage || st.AgentStep.TodoList[len(st.AgentStep.TodoList)-1] != last.StepID {
			t.Fatalf("last step %+v, want an appended planning step of the stage", last)
		}
		for _, s := range []string{"the stage intention", "my goal here", "- " + w + ": w's own goal", "intention of instructions"} {
			if !strings.Contains(last.TextContent, s) {
				t.Errorf("planning text lacks %q:\n%s", s, last.TextContent)
			}
		}
	})
	t.Run("start_task plans the staffing", func(t *testing.T) {
		r := newReceiver(b, task, stage, stage2)
		instr(r, "", &Instruction{StartTask: &TaskRef{TaskID: task}})
		st := r.snapshot()
		last := st.AgentStep.StepList[len(st.AgentStep.StepList)-1]
		if last.Executor != SkillPlanning || last.StageID != NoRelative || last.TaskID != task {
			t.Fatalf("last step %+v, want a planning step outside stages", last)
		}
		if !strings.Contains(last.TextContent, "instructions") || !strings.Contains(last.TextContent, task) {
			t.Errorf("planning text does not name the task:\n%s", last.TextContent)
		}
	})
}

func stepIDsOf(st AgentState) []string {
	var out []string
	for _, s := range st.AgentStep.StepList {
		out = append(out, s.StepID)
	}
	return out
}

func TestRunningStepOfAFinishedStage(t *testing.T) {
	b := newTestbed(t, nil)
	w := b.newAgent("w")
	task := b.newTask("cancel me", w)
	started, returned := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.sc.onAgent("w", SkillPlanning, func(ctx context.Context, _ *ExecInput) *Output {
		once.Do(func() { close(started) })
		<-ctx.Done()
		defer close(returned)
		return &Output{
			AddSteps:    []StepSpec{spec(SkillThink, "late step")},
			Memory:      []MemoryOp{{Add: "late memory"}},
			SendMessage: &OutgoingMessage{Receiver: StringList{b.op()}, Message: "late message"},
		}
	})
	stage := b.addStages(task, StageSpec{StageIntention: "slow", AgentAllocation: map[string]string{w: "plan slowly"}})[0]
	waitChan(t, started, "the planning step to start")
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stage}); err != nil {
		t.Fatal(err)
	}
	waitChan(t, returned, "the executor to see its context cancelled")
	b.settle()

	a := b.agent(w)
	if len(a.AgentStep.StepList) != 0 || len(a.AgentStep.TodoList) != 0 {
		t.Errorf("w still has steps:\n%s", b.dump())
	}
	if len(a.PersistentMemory) != 0 {
		t.Errorf("the late output's memory was applied: %v", a.PersistentMemory)
	}
	for _, m := range b.task(task).SharedConversationPool {
		if m.SenderID == w {
			t.Errorf("the late output's message was delivered: %+v", m)
		}
	}
	if st := b.stage(task, stage); st.ExecutionState != StateFinished {
		t.Errorf("stage is %s, want finished", st.ExecutionState)
	}
}

// waitChan waits for ch to be closed (20 s bound for hangs).
func waitChan(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
