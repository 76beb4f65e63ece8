package engine_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestSecretsNeverEnterTheState: an operator's message and a task's name
// and intention carrying the API key, and a manager whose plan and
// answers repeat it, leave "[redacted]" in its place, never the key, in the
// tasks' and agents' states, the store's documents, the logs and the
// prompts the model is sent.
func TestSecretsNeverEnterTheState(t *testing.T) {
	block := func(tag, body string) fakellm.Reply { return fakellm.Reply{Content: fakellm.Block(tag, body)} }
	handler := func(c *fakellm.Call) fakellm.Reply {
		if c.AgentName != "manager" {
			return fakellm.Reply{Status: 500}
		}
		switch c.Skill {
		case engine.SkillPlanning:
			return block("planned_step", steps(skill(engine.SkillThink, "Keep "+sentinelKey+" in mind", "think about "+sentinelKey)))
		case engine.SkillThink:
			return block("_think", "The key is "+sentinelKey)
		case engine.SkillProcessMessage:
			return block("process_message", "The operator gave me "+sentinelKey)
		case engine.SkillReflection:
			return block("reflection_step", steps())
		case engine.SkillDecision:
			return block("decision_step", steps())
		case engine.SkillSummary:
			return block("summary", "Done with "+sentinelKey)
		}
		return fakellm.Reply{Status: 500}
	}
	s := newStack(t, stackOpts{handler: handler})
	op, mgr := s.sys.OperatorID(), s.sys.ManagerID()

	id, err := s.sys.AddTask(op, engine.AddTaskRequest{TaskName: "call " + sentinelKey, TaskIntention: "Call the API with the key " + sentinelKey + "."})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.sys.HumanSend(op, engine.HumanMessage{TaskID: s.sys.BaseTaskID(), Receiver: []string{mgr}, Content: "My key is " + sentinelKey}); err != nil {
		t.Fatal(err)
	}
	finished := func(taskID, executor string) bool {
		a, _ := s.sys.Agent(mgr)
		return slices.ContainsFunc(a.AgentStep.StepList, func(st engine.StepState) bool {
			return st.TaskID == taskID && st.Executor == executor && st.ExecutionState == engine.StateFinished
		})
	}
	s.waitFor("the manager's thought on the task and its reading of the message", func() bool {
		return finished(id, engine.SkillThink) && finished(s.sys.BaseTaskID(), engine.SkillProcessMessage) && teststack.AtRest(s.sys)
	})

	img, err := s.store.Image()
	if err != nil {
		t.Fatal(err)
	}
	var prompts strings.Builder
	for _, c := range s.llm.Calls() {
		for _, m := range c.Messages {
			prompts.WriteString(m.Content)
		}
	}
	for name, v := range map[string]any{"the tasks": s.sys.Tasks(), "the agents": s.sys.Agents(), "the store": img, "the prompts": prompts.String()} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if i := strings.Index(text, sentinelKey); i >= 0 {
			t.Errorf("%s hold the API key: …%s…", name, text[max(0, i-120):min(len(text), i+60)])
		}
		if !strings.Contains(text, "[redacted]") {
			t.Errorf("%s lack \"[redacted]\": the check would prove nothing", name)
		}
	}
	// Each text has the word where the key was.
	if got, want := s.task(id).TaskIntention, "Call the API with the key [redacted]."; got != want {
		t.Errorf("task_intention = %q, want %q", got, want)
	}
	a, _ := s.sys.Agent(mgr)
	for _, st := range a.AgentStep.StepList {
		if st.Executor == engine.SkillThink && st.ExecuteResult["think"] != "The key is [redacted]" {
			t.Errorf("the think step's result = %v, want the thought with the key redacted", st.ExecuteResult)
		}
	}
	if strings.Contains(s.logs.String(), sentinelKey) {
		t.Error("the logs hold the API key")
	}
}
