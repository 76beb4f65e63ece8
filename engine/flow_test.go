package engine_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
)

// Markers the scripted brains write into step texts so they recognise their
// own steps later.
const (
	mkStaff      = "STAFF:"
	mkAddStages  = "ADD_STAGES"
	mkAskPeer    = "ASK_PEER"
	mkFinishNow  = "FINISH_STAGE_NOW"
	mkFinishTask = "FINISH_TASK_NOW"
	mkRetry      = "RETRY_STAGE_NOW"
)

// teamBrain scripts a manager that staffs a task with two workers (alice,
// a researcher, and bob, a writer) and two stages, and workers that think,
// ask each other with need_reply and waiting, reflect and summarise. It
// records what it saw along the way.
type teamBrain struct {
	s *stack
	// retries makes the manager retry the first completed stage this many
	// times before finishing it.
	retries int

	// override, when set, answers a call before the script does (ok true).
	override func(c *fakellm.Call) (fakellm.Reply, bool)
	// onStart runs once the stack is up, before the task is added.
	onStart func(*stack)
	// bobWithoutDecision creates bob from a configuration lacking the
	// decision skill instead of the writer template.
	bobWithoutDecision bool

	mu          sync.Mutex
	taskID      string
	lockedSeen  map[string]bool // worker seen with an engaged step lock while its peer replied
	retried     int
	stageGoals  []string
	finishCalls int
}

func newTeamBrain() *teamBrain {
	return &teamBrain{lockedSeen: map[string]bool{}, stageGoals: []string{"collect facts", "write the report"}}
}

func (b *teamBrain) handle(c *fakellm.Call) fakellm.Reply {
	if b.override != nil {
		if r, ok := b.override(c); ok {
			return r
		}
	}
	switch c.AgentName {
	case "manager":
		return b.manager(c)
	case "alice", "bob":
		return b.worker(c)
	}
	return fakellm.Reply{Status: 500}
}

func (b *teamBrain) manager(c *fakellm.Call) fakellm.Reply {
	s := b.s
	stepText := stepText(c.Prompt)
	b.mu.Lock()
	taskID := b.taskID
	b.mu.Unlock()
	switch c.Skill {
	case engine.SkillPlanning:
		return jsonReply("planned_step", []engine.StepSpec{
			skill("ask_info", "See which agents can be created", "ask available_agents_config"),
			skill("agent_manager", "Create the researcher", mkStaff+"alice:researcher"),
			skill("agent_manager", "Create the writer", mkStaff+"bob:writer"),
			skill("agent_manager", "Add both to the task", mkStaff+"join"),
			skill("task_manager", "Split the task into two stages", mkAddStages),
		})
	case engine.SkillAskInfo:
		return jsonReply("ask_info", map[string]any{"type": "available_agents_config"})
	case engine.SkillAgentManager:
		switch {
		case strings.Contains(stepText, mkStaff+"alice"):
			return jsonReply("agent_instruction", map[string]any{"action": "init_new_agent",
				"agent_config": map[string]any{"template": "researcher", "name": "alice"}})
		case strings.Contains(stepText, mkStaff+"bob") && b.bobWithoutDecision:
			return jsonReply("agent_instruction", map[string]any{"action": "init_new_agent",
				"agent_config": map[string]any{"name": "bob", "role": "writer", "profile": "writes",
					"skills": []string{"planning", "reflection", "summary", "think", "send_message", "process_message"}}})
		case strings.Contains(stepText, mkStaff+"bob"):
			return jsonReply("agent_instruction", map[string]any{"action": "init_new_agent",
				"agent_config": map[string]any{"template": "writer", "name": "bob"}})
		default:
			return jsonReply("agent_instruction", map[string]any{"action": "add_task_participant",
				"task_id": taskID, "agents": []string{s.agentByName("alice"), s.agentByName("bob")}})
		}
	case engine.SkillTaskManager:
		alice, bob := s.agentByName("alice"), s.agentByName("bob")
		switch {
		case strings.Contains(stepText, mkAddStages):
			var stages []map[string]any
			for _, g := range b.stageGoals {
				stages = append(stages, map[string]any{"stage_intention": g,
					"agent_allocation": map[string]string{alice: "alice's part: " + g, bob: "bob's part: " + g}})
			}
			return jsonReply("task_instruction", map[string]any{"action": "add_stage", "task_id": taskID, "stages": stages})
		case strings.Contains(stepText, mkRetry):
			st := running(s.task(taskID))
			return jsonReply("task_instruction", map[string]any{"action": "retry_stage", "task_id": taskID,
				"old_stage_id": st.StageID, "new_stage_intention": st.StageIntention + " (retry)",
				"new_agent_allocation": st.AgentAllocation})
		case strings.Contains(stepText, mkFinishNow):
			b.mu.Lock()
			b.finishCalls++
			b.mu.Unlock()
			return jsonReply("task_instruction", map[string]any{"action": "finish_stage", "task_id": taskID,
				"stage_id": running(s.task(taskID)).StageID})
		case strings.Contains(stepText, mkFinishTask):
			return jsonReply("task_instruction", map[string]any{"action": "finish_task", "task_id": taskID,
				"summary": "Both stages done: facts collected and report written."})
		}
	case engine.SkillProcessMessage:
		// React to the engine's notices by looking at the task's state.
		t := s.task(taskID)
		if st := running(t); st != nil && len(st.CompletionSummary) == len(st.AgentAllocation) {
			b.mu.Lock()
			retry := b.retried < b.retries
			if retry {
				b.retried++
			}
			b.mu.Unlock()
			what := mkFinishNow
			if retry {
				what = mkRetry
			}
			return fakellm.Reply{Content: fakellm.Block("process_message", "Stage complete.") +
				fakellm.Block("react_action", fakellm.JSON(map[string]string{"step_intention": "Judge the stage", "text_content": what}))}
		}
		if t.ExecutionState == engine.StateRunning && running(t) == nil && len(t.StageList) > 0 {
			return fakellm.Reply{Content: fakellm.Block("process_message", "All stages done.") +
				fakellm.Block("react_action", fakellm.JSON(map[string]string{"step_intention": "Judge the task", "text_content": mkFinishTask}))}
		}
		return text("process_message", "Noted.")
	case engine.SkillDecision:
		for _, mk := range []string{mkFinishNow, mkRetry, mkFinishTask} {
			if strings.HasPrefix(stepText, mk) {
				return jsonReply("decision_step", []engine.StepSpec{skill("task_manager", "Manage the task", mk)})
			}
		}
		return jsonReply("decision_step", []engine.StepSpec{})
	case engine.SkillReflection:
		return jsonReply("reflection_step", []engine.StepSpec{})
	case engine.SkillSummary:
		return text("summary", "Staffed and staged the task.")
	}
	return fakellm.Reply{Status: 500}
}

func (b *teamBrain) worker(c *fakellm.Call) fakellm.Reply {
	s := b.s
	me := c.AgentName
	peerName := map[string]string{"alice": "bob", "bob": "alice"}[me]
	peer := s.agentByName(peerName)
	switch c.Skill {
	case engine.SkillPlanning:
		return jsonReply("planned_step", []engine.StepSpec{
			skill("think", "Think about my part", "think about the goal"),
			skill("send_message", "Ask my peer", mkAskPeer+" ask "+peerName),
		})
	case engine.SkillThink:
		return text("_think", me+" thought about it.")
	case engine.SkillSendMessage:
		if strings.HasPrefix(stepText(c.Prompt), mkAskPeer) {
			return jsonReply("send_message", map[string]any{"receiver": []string{peer}, "message": "QUESTION from " + me,
				"stage_relative": field(c.Prompt, "stage_id"), "need_reply": true, "waiting": true})
		}
		// A reply: the asker must be blocked on it right now (or its wait
		// was left out to break a wait cycle).
		if a, ok := s.sys.Agent(peer); ok && len(a.StepLock) > 0 {
			b.mu.Lock()
			b.lockedSeen[peerName] = true
			b.mu.Unlock()
		}
		return jsonReply("send_message", map[string]any{"receiver": []string{peer}, "message": "ANSWER from " + me,
			"stage_relative": field(c.Prompt, "stage_id"), "need_reply": false, "waiting": false})
	case engine.SkillProcessMessage:
		return text("process_message", me+" read the answer.")
	case engine.SkillReflection:
		return jsonReply("reflection_step", []engine.StepSpec{skill("summary", "Summarise", "summarise my part")})
	case engine.SkillSummary:
		return text("summary", me+" did its part of "+field(c.Prompt, "stage_id"))
	}
	return fakellm.Reply{Status: 500}
}

// running returns the task's running stage, or nil.
func running(t engine.TaskState) *engine.StageState {
	for i := range t.StageList {
		if t.StageList[i].ExecutionState == engine.StateRunning {
			return &t.StageList[i]
		}
	}
	return nil
}

// runTeamTask hands a task to the manager and waits until it ends.
func runTeamTask(t *testing.T, b *teamBrain, o stackOpts) (*stack, engine.TaskState) {
	o.handler = b.handle
	s := newStack(t, o)
	b.s = s
	if b.onStart != nil {
		b.onStart(s)
	}
	// The brain must know the task's ID before the manager's first call.
	b.mu.Lock()
	id, err := s.sys.AddTask(s.sys.OperatorID(), engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
	b.taskID = id
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	s.waitFor("the task to end", func() bool {
		st := s.task(id).ExecutionState
		return st == engine.StateFinished || st == engine.StateFailed
	})
	// The end is announced to the group right after the state changes.
	s.waitFor("the group to forget the task", func() bool {
		for _, member := range s.task(id).TaskGroup {
			if a, _ := s.sys.Agent(member); a.WorkingMemory[id] != nil {
				return false
			}
		}
		return true
	})
	return s, s.task(id)
}

func TestFullTask(t *testing.T) {
	b := newTeamBrain()
	s, task := runTeamTask(t, b, stackOpts{})
	alice, bob, mgr := s.agentByName("alice"), s.agentByName("bob"), s.sys.ManagerID()

	// The task and its stages, field by field.
	if task.ExecutionState != engine.StateFinished || task.TaskSummary != "Both stages done: facts collected and report written." {
		t.Errorf("task: state %q summary %q", task.ExecutionState, task.TaskSummary)
	}
	if task.TaskManager != mgr {
		t.Errorf("task_manager = %s, want the manager %s", task.TaskManager, mgr)
	}
	wantGroup := []string{mgr, s.sys.OperatorID(), alice, bob}
	if !sameSet(task.TaskGroup, wantGroup) {
		t.Errorf("task_group = %v, want %v", task.TaskGroup, wantGroup)
	}
	if len(task.StageList) != 2 {
		t.Fatalf("stages: %d, want 2", len(task.StageList))
	}
	for i, st := range task.StageList {
		if st.ExecutionState != engine.StateFinished {
			t.Errorf("stage %d: state %s", i, st.ExecutionState)
		}
		if st.StageIntention != b.stageGoals[i] {
			t.Errorf("stage %d: intention %q", i, st.StageIntention)
		}
		want := map[string]string{alice: engine.AgentFinished, bob: engine.AgentFinished}
		if !equalMaps(st.EveryAgentState, want) {
			t.Errorf("stage %d: every_agent_state %v, want %v", i, st.EveryAgentState, want)
		}
		for id, name := range map[string]string{alice: "alice", bob: "bob"} {
			if got, want := st.CompletionSummary[id], name+" did its part of "+st.StageID; got != want {
				t.Errorf("stage %d: completion_summary[%s] = %q, want %q", i, name, got, want)
			}
		}
	}

	// The conversation: in each stage, each worker asked the other with a
	// waiting ID and got an answer returning it.
	for _, st := range task.StageList {
		for _, asker := range []string{alice, bob} {
			answerer := map[string]string{alice: bob, bob: alice}[asker]
			q := findMessage(task, asker, answerer, st.StageID, "QUESTION")
			if q == nil {
				t.Fatalf("stage %s: no question from %s", st.StageID, asker)
			}
			if !q.NeedReply || len(q.Waiting) != 1 {
				t.Errorf("question %s: need_reply %v waiting %v", q.MessageID, q.NeedReply, q.Waiting)
			}
			a := findMessage(task, answerer, asker, st.StageID, "ANSWER")
			if a == nil {
				t.Fatalf("stage %s: no answer from %s", st.StageID, answerer)
			}
			if a.ReturnWaitingID != q.Waiting[0] {
				t.Errorf("answer %s: return_waiting_id %q, want the question's %q", a.MessageID, a.ReturnWaitingID, q.Waiting[0])
			}
		}
	}
	b.mu.Lock()
	if len(b.lockedSeen) == 0 {
		t.Error("no worker was ever seen blocked by its step lock while its peer replied")
	}
	b.mu.Unlock()

	// Working memory emptied, step lists cleaned, no lock left.
	for _, id := range []string{alice, bob, mgr, s.sys.OperatorID()} {
		a, _ := s.sys.Agent(id)
		if _, ok := a.WorkingMemory[task.TaskID]; ok {
			t.Errorf("%s: working_memory still has the task: %v", a.Name, a.WorkingMemory)
		}
		for _, st := range a.AgentStep.StepList {
			if st.TaskID == task.TaskID {
				t.Errorf("%s: step %s (%s) of the finished task is still listed", a.Name, st.StepID, st.Executor)
			}
		}
		if len(a.StepLock) != 0 || len(a.Waits) != 0 {
			t.Errorf("%s: step lock left engaged: %v", a.Name, a.StepLock)
		}
	}
	// Token usage was summed on the task and the agents.
	if task.Usage.Calls == 0 || task.Usage.TotalTokens == 0 {
		t.Errorf("task usage not recorded: %+v", task.Usage)
	}
	// The store got every document; the sentinel key is nowhere.
	if got, ok := s.store.Task(task.TaskID); !ok || got.ExecutionState != engine.StateFinished {
		t.Errorf("store: task state %q (found %v)", got.ExecutionState, ok)
	}
	assertNoSecret(t, s)
	if u := s.llm.Unmatched(); len(u) > 0 {
		t.Errorf("%d LLM calls had no script", len(u))
	}
	if err := s.sys.Close(); err != nil {
		t.Fatal(err)
	}
}

func findMessage(t engine.TaskState, from, to, stage, prefix string) *engine.Message {
	for i := range t.SharedConversationPool {
		m := &t.SharedConversationPool[i]
		if m.SenderID == from && slices.Contains(m.Receiver, to) && m.StageRelative == stage && strings.HasPrefix(m.Message, prefix) {
			return m
		}
	}
	return nil
}

// assertNoSecret checks that the API key appears in no task or agent state
// and no log line.
func assertNoSecret(t *testing.T, s *stack) {
	t.Helper()
	logs := s.logs.String()
	if !strings.Contains(logs, "step done") {
		t.Error("the engine logged nothing: the log check would prove nothing")
	}
	if strings.Contains(logs, sentinelKey) {
		t.Error("the API key appears in the logs")
	}
	for _, v := range []any{s.sys.Tasks(), s.sys.Agents()} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), sentinelKey) {
			t.Error("the API key appears in the state")
		}
	}
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x string) bool { return !slices.Contains(b, x) })
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
