package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
)

func TestRetryStage(t *testing.T) {
	b := newTeamBrain()
	b.retries = 1
	_, task := runTeamTask(t, b, stackOpts{})
	if task.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s", task.ExecutionState)
	}
	// [first try (failed), its retry (finished), second stage (finished)]
	if len(task.StageList) != 3 {
		t.Fatalf("stages: %d, want 3", len(task.StageList))
	}
	first, retry, second := task.StageList[0], task.StageList[1], task.StageList[2]
	if first.ExecutionState != engine.StateFailed {
		t.Errorf("retried stage: %s, want failed", first.ExecutionState)
	}
	if retry.RetryOf != first.StageID || retry.ExecutionState != engine.StateFinished {
		t.Errorf("retry stage: retry_of %q state %s, want %q finished", retry.RetryOf, retry.ExecutionState, first.StageID)
	}
	if retry.StageIntention != first.StageIntention+" (retry)" || len(retry.CompletionSummary) != 2 {
		t.Errorf("retry stage: intention %q, completions %v", retry.StageIntention, retry.CompletionSummary)
	}
	if second.ExecutionState != engine.StateFinished || second.StageIntention != b.stageGoals[1] {
		t.Errorf("second stage: %s %q", second.ExecutionState, second.StageIntention)
	}
}

// decodeResult reads an execute_result value (plain JSON values) into out.
func decodeResult(t *testing.T, v any, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("execute_result value %s: %v", b, err)
	}
}

// stepRecorder keeps copies of steps as they finish, since finished tasks
// have their steps cleaned up. It sees every agent document as the MAS
// stores it (Stack.WatchAgents): read from events, later, an agent's last
// steps could be cleaned up already (a flake, 1 run in 40 under load).
type stepRecorder struct {
	mu    sync.Mutex
	steps map[string]engine.StepState
}

func recordSteps(s *stack) *stepRecorder {
	r := &stepRecorder{steps: map[string]engine.StepState{}}
	s.WatchAgents(func(a *engine.AgentState) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, st := range a.AgentStep.StepList {
			if st.ExecutionState == engine.StateFinished || st.ExecutionState == engine.StateFailed {
				r.steps[st.StepID] = st // an ended step's maps are never changed in place
			}
		}
	})
	return r
}

// find returns the recorded steps of an agent with that executor and state.
func (r *stepRecorder) find(agentID, executor, state string) []engine.StepState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []engine.StepState
	for _, st := range r.steps {
		if st.AgentID == agentID && st.Executor == executor && (state == "" || st.ExecutionState == state) {
			out = append(out, st)
		}
	}
	return out
}

// runRecorded is runTeamTask with a step recorder attached before any work.
func runRecorded(t *testing.T, b *teamBrain, o stackOpts) (*stack, engine.TaskState, *stepRecorder) {
	var rec *stepRecorder
	b.onStart = func(s *stack) { rec = recordSteps(s) }
	s, task := runTeamTask(t, b, o)
	return s, task, rec
}

func TestGarbageTwiceFailsTheStepAndTheAgentCarriesOn(t *testing.T) {
	b := newTeamBrain()
	b.override = func(c *fakellm.Call) (fakellm.Reply, bool) {
		if c.AgentName == "alice" && c.Skill == engine.SkillThink {
			return fakellm.Reply{Content: fakellm.Garbage}, true
		}
		return fakellm.Reply{}, false
	}
	s, task, rec := runRecorded(t, b, stackOpts{})
	if task.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s", task.ExecutionState)
	}
	alice := s.agentByName("alice")
	failed := rec.find(alice, engine.SkillThink, engine.StateFailed)
	if len(failed) != 2 { // one per stage
		t.Fatalf("alice's failed think steps: %d, want 2", len(failed))
	}
	for _, st := range failed {
		msg, _ := st.ExecuteResult["error"].(string)
		if !strings.Contains(msg, "think output unusable after one repair round") || !strings.Contains(msg, "missing <_think> block") {
			t.Errorf("think step error = %q", msg)
		}
		if st.Usage.Calls != 2 {
			t.Errorf("think step made %d calls, want 2 (answer + one repair)", st.Usage.Calls)
		}
	}
	// Each garbage answer was followed by exactly one repair request.
	if n := len(s.llm.CallsFor(engine.SkillThink, "alice")); n != 4 {
		t.Errorf("alice's think calls: %d, want 4", n)
	}
	// From the stages themselves: the recorder reads an agent's steps
	// when it gets to an event, and by then the task's end may have
	// cleaned up the last ones (1 run in 40 under load).
	summarised := 0
	for _, st := range task.StageList {
		if _, ok := st.CompletionSummary[alice]; ok && st.EveryAgentState[alice] == engine.AgentFinished {
			summarised++
		}
	}
	if summarised != 2 {
		t.Errorf("alice summarised %d stages after her failed steps, want both", summarised)
	}
}

func TestRateLimitedThenSuccess(t *testing.T) {
	b := newTeamBrain()
	var limited atomic.Int32
	b.override = func(c *fakellm.Call) (fakellm.Reply, bool) {
		if c.AgentName == "manager" && c.Skill == engine.SkillPlanning && limited.Add(1) == 1 {
			return fakellm.Reply{Status: 429, RetryAfter: "0"}, true
		}
		return fakellm.Reply{}, false
	}
	s, task, rec := runRecorded(t, b, stackOpts{})
	if task.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s", task.ExecutionState)
	}
	if n := len(s.llm.CallsFor(engine.SkillPlanning, "manager")); n != 2 {
		t.Errorf("manager planning requests: %d, want 2 (429, then success)", n)
	}
	plans := rec.find(s.sys.ManagerID(), engine.SkillPlanning, engine.StateFinished)
	if len(plans) != 1 {
		t.Fatalf("manager's finished planning steps: %d", len(plans))
	}
	if plans[0].Usage.Calls != 1 || plans[0].Usage.TotalTokens == 0 {
		t.Errorf("planning usage: %+v (one Complete call with its retry inside)", plans[0].Usage)
	}
}

func TestLLMTimeoutFailsTheStep(t *testing.T) {
	b := newTeamBrain()
	b.override = func(c *fakellm.Call) (fakellm.Reply, bool) {
		if c.AgentName == "bob" && c.Skill == engine.SkillThink {
			return fakellm.Reply{Content: fakellm.Block("_think", "too late"), Delay: 5 * time.Second}, true
		}
		return fakellm.Reply{}, false
	}
	s, task, rec := runRecorded(t, b, stackOpts{llmTimeout: 200 * time.Millisecond})
	if task.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s", task.ExecutionState)
	}
	failed := rec.find(s.agentByName("bob"), engine.SkillThink, engine.StateFailed)
	if len(failed) != 2 {
		t.Fatalf("bob's failed think steps: %d, want 2", len(failed))
	}
	if msg, _ := failed[0].ExecuteResult["error"].(string); !strings.Contains(msg, "timeout") {
		t.Errorf("think error = %q, want a timeout", msg)
	}
}

func TestReplyThatNeverComesIsReleasedAfterTheTimeout(t *testing.T) {
	b := newTeamBrain()
	var asked atomic.Bool
	b.override = func(c *fakellm.Call) (fakellm.Reply, bool) {
		if c.AgentName != "alice" || c.Skill != engine.SkillSendMessage || !strings.HasPrefix(stepText(c.Prompt), mkAskPeer) || asked.Swap(true) {
			return fakellm.Reply{}, false
		}
		// Alice asks the operator instead of bob, and waits; nobody answers.
		return jsonReply("send_message", map[string]any{"receiver": []string{b.s.sys.OperatorID()},
			"message": "QUESTION for the operator", "need_reply": true, "waiting": true}), true
	}
	s, task, rec := runRecorded(t, b, stackOpts{waitTimeout: 300 * time.Millisecond})
	if task.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s", task.ExecutionState)
	}
	alice := s.agentByName("alice")
	var timeout *engine.StepState
	for _, st := range rec.find(alice, engine.SkillProcessMessage, "") {
		if strings.Contains(st.TextContent, "none came within 300ms") && strings.Contains(st.TextContent, s.sys.OperatorID()) {
			timeout = &st
		}
	}
	if timeout == nil {
		t.Fatal("alice never got a process_message step saying no reply came from the operator")
	}
	// The operator's inbox still shows the question as awaiting a reply.
	inbox, err := s.sys.Inbox(s.sys.OperatorID())
	if err != nil {
		t.Fatal(err)
	}
	_ = inbox // the task's private messages were cleared at finish_task (spec §7.3.2)
	q := findMessage(task, alice, s.sys.OperatorID(), task.StageList[0].StageID, "QUESTION")
	if q == nil || len(q.Waiting) != 1 {
		t.Fatalf("question to the operator: %+v", q)
	}
}

func TestWaitCycleIsDetectedAndBroken(t *testing.T) {
	b := newTeamBrain()
	var notes sync.Map // agent name -> note of its send step
	bobAsking := make(chan struct{})
	var bobAsks sync.Once
	var bobHeld atomic.Bool
	// Held handlers give up when the test ends (before the fake LLM's
	// server is closed), so a failure is reported, not hung.
	stop := make(chan struct{})
	b.onStart = func(*stack) { t.Cleanup(func() { close(stop) }) }
	b.override = func(c *fakellm.Call) (fakellm.Reply, bool) {
		s := b.s
		// Bob asks first thing; alice thinks, then asks.
		if c.AgentName == "bob" && c.Skill == engine.SkillPlanning {
			return jsonReply("planned_step", []engine.StepSpec{
				skill("send_message", "Ask my peer", mkAskPeer+" ask alice"),
				skill("think", "Think about my part", "think about the goal"),
			}), true
		}
		asking := c.Skill == engine.SkillSendMessage && strings.HasPrefix(stepText(c.Prompt), mkAskPeer)
		// Alice's question reaches bob while his own question is being
		// written, so his reply to her waits behind it ...
		if c.AgentName == "alice" && asking {
			select {
			case <-bobAsking:
			case <-stop:
			}
		}
		// ... and his question is written only once alice is blocked
		// waiting on him: his wait would close the cycle
		// alice → bob → alice. Both wait on events, not on time. Only his
		// first question (the first stage's): in the second stage alice
		// may have had her answer and never block again before bob asks.
		if c.AgentName == "bob" && asking && !bobHeld.Swap(true) {
			sub := s.sys.Subscribe(1 << 12)
			bobAsks.Do(func() { close(bobAsking) })
			alice := s.agentByName("alice")
		wait:
			for a, _ := s.sys.Agent(alice); len(a.StepLock) == 0; a, _ = s.sys.Agent(alice) {
				select {
				case <-sub.C:
				case <-stop:
					break wait
				}
			}
			sub.Close()
		}
		// Whatever bob does next, look at his finished send steps.
		if c.AgentName == "bob" {
			a, _ := s.sys.Agent(s.agentByName("bob"))
			for _, st := range a.AgentStep.StepList {
				if note, ok := st.ExecuteResult["note"].(string); ok {
					notes.Store(st.StepID, note)
				}
			}
		}
		return fakellm.Reply{}, false
	}
	// Bob's first question is held until alice blocks, which takes alice
	// a few LLM calls: on a loaded machine that can pass the stack's 10 s
	// LLM timeout, and a held call must not time out and be retried.
	s, task := runTeamTask(t, b, stackOpts{llmTimeout: 10 * time.Minute})
	if task.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s", task.ExecutionState)
	}
	alice := s.agentByName("alice")
	found := false
	notes.Range(func(_, v any) bool {
		n := v.(string)
		if strings.Contains(n, "is itself waiting for you") && strings.Contains(n, alice) {
			found = true
		}
		return true
	})
	if !found {
		t.Fatal("bob's send step never noted the broken wait cycle")
	}
}

func TestUnknownIDsInInstructionsFailTheStep(t *testing.T) {
	b := newTeamBrain()
	var once atomic.Bool
	b.override = func(c *fakellm.Call) (fakellm.Reply, bool) {
		if c.AgentName == "manager" && c.Skill == engine.SkillTaskManager && strings.HasPrefix(stepText(c.Prompt), mkAddStages) && !once.Swap(true) {
			return jsonReply("task_instruction", map[string]any{"action": "add_stage", "task_id": b.taskID,
				"stages": []map[string]any{{"stage_intention": "x", "agent_allocation": map[string]string{"no-such-agent": "do x"}}}}), true
		}
		if c.AgentName == "manager" && c.Skill == engine.SkillAgentManager && strings.HasPrefix(stepText(c.Prompt), mkStaff+"join") {
			return jsonReply("agent_instruction", map[string]any{"action": "add_task_participant",
				"task_id": "no-such-task", "agents": []string{"x"}}), true
		}
		return fakellm.Reply{}, false
	}
	s := newStack(t, stackOpts{handler: b.handle})
	b.s = s
	rec := recordSteps(s)
	b.mu.Lock()
	id, err := s.sys.AddTask(s.sys.OperatorID(), engine.AddTaskRequest{TaskName: "t", TaskIntention: "do"})
	b.taskID = id
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	mgr := s.sys.ManagerID()
	s.waitFor("the manager's summary", func() bool { return len(rec.find(mgr, engine.SkillSummary, "")) > 0 })
	for exec, want := range map[string]string{
		engine.SkillTaskManager:  `stages[0].agent_allocation: agent "no-such-agent": no such agent`,
		engine.SkillAgentManager: `task_id "no-such-task": no such task`,
	} {
		var got []string
		for _, st := range rec.find(mgr, exec, engine.StateFailed) {
			got = append(got, fmt.Sprint(st.ExecuteResult["error"]))
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s failures: %q, want [%q]", exec, got, want)
		}
	}
	if st := s.task(id); len(st.StageList) != 0 || st.ExecutionState != engine.StateInit {
		t.Errorf("task changed by a failed instruction: %d stages, %s", len(st.StageList), st.ExecutionState)
	}
}

func TestSkillTheAgentLacksIsRefused(t *testing.T) {
	b := newTeamBrain()
	b.override = func(c *fakellm.Call) (fakellm.Reply, bool) {
		if c.AgentName == "alice" && c.Skill == engine.SkillPlanning {
			return jsonReply("planned_step", []engine.StepSpec{
				skill("task_manager", "Manage the task myself", "finish it"),
				skill("think", "Think", "think"),
				skill("send_message", "Ask my peer", mkAskPeer),
			}), true
		}
		// Bob is a writer without the decision skill: his react_action's
		// decision step is refused when it comes up.
		if c.AgentName == "bob" && c.Skill == engine.SkillProcessMessage {
			return fakellm.Reply{Content: fakellm.Block("process_message", "ok") +
				fakellm.Block("react_action", `{"step_intention":"react","text_content":"react"}`)}, true
		}
		return fakellm.Reply{}, false
	}
	b.bobWithoutDecision = true
	s, task, rec := runRecorded(t, b, stackOpts{})
	if task.ExecutionState != engine.StateFinished {
		t.Fatalf("task %s", task.ExecutionState)
	}
	plans := rec.find(s.agentByName("alice"), engine.SkillPlanning, engine.StateFinished)
	if len(plans) == 0 {
		t.Fatal("no planning step of alice recorded")
	}
	var rej []engine.Rejection
	decodeResult(t, plans[0].ExecuteResult["rejected_steps"], &rej)
	if len(rej) != 1 || rej[0].Step.Executor != "task_manager" || !strings.Contains(rej[0].Reason, "you lack this skill") {
		t.Errorf("rejected_steps = %+v", plans[0].ExecuteResult["rejected_steps"])
	}
	refused := rec.find(s.agentByName("bob"), engine.SkillDecision, engine.StateFailed)
	if len(refused) == 0 {
		t.Fatal("bob's decision step was not refused")
	}
	if msg, _ := refused[0].ExecuteResult["error"].(string); !strings.Contains(msg, `executor "decision": agent `) || !strings.Contains(msg, "lacks this skill") {
		t.Errorf("refusal = %q", msg)
	}
}
