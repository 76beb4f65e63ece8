package engine

import (
	"context"
	"strings"
	"testing"
)

// TestStagesPastTheDocumentBoundAreRefused: stages are never shed from a
// task's document, so an add_stage (or retry_stage) whose stages would
// make it pass MaxDocumentBytes, after all its bound can shed, is refused
// before anything is written, with an error naming the field, the size
// and the limit — for an operator, and for a manager's step alike. The
// store refuses nothing; the task keeps its stages. Stages that fit are
// added.
func TestStagesPastTheDocumentBoundAreRefused(t *testing.T) {
	const docBound = 40_000
	st := &payloadStore{MemoryStore: NewMemoryStore(), max: docBound * 3 / 2}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = docBound })
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	big := func(n int) []StageSpec {
		var out []StageSpec
		for range n {
			out = append(out, StageSpec{StageIntention: strings.Repeat("s", 12_000), AgentAllocation: map[string]string{alice: "collect"}})
		}
		return out
	}

	// The operator: four stages of 12,000 bytes pass the 40,000.
	_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddStage, TaskID: id, Stages: big(4)})
	isErr(t, err, ErrLimit, "stages")
	for _, part := range []string{"40000", "over its limit"} {
		if err != nil && !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	if n := len(b.task(id).StageList); n != 0 {
		t.Errorf("after the refused add_stage the task has %d stages", n)
	}
	// Two fit.
	stages := b.addStages(id, big(2)...)

	// A retry of the running stage whose new intention does not fit.
	_, err = b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionRetryStage, TaskID: id, OldStageID: stages[0],
		NewStageIntention: strings.Repeat("r", 20_000), NewAgentAllocation: map[string]string{alice: "again"}})
	isErr(t, err, ErrLimit, "new_stage_intention")
	if n := len(b.task(id).StageList); n != 2 {
		t.Errorf("after the refused retry_stage the task has %d stages, want 2", n)
	}

	// The manager's model: its task_manager step fails, naming the field.
	b.sc.onText("stage it big", func(_ context.Context, in *ExecInput) *Output {
		return &Output{TaskInstruction: &TaskInstruction{Action: ActionAddStage, TaskID: id, Stages: big(2)}}
	})
	ids := b.inject(b.mgr(), id, NoRelative, false, spec(SkillTaskManager, "stage it big"))
	b.waitFor("the manager's add_stage step to end", func() bool { return b.stepDone(b.mgr(), ids[0]) })
	step, _ := b.step(b.mgr(), ids[0])
	if msg, _ := step.ExecuteResult["error"].(string); step.ExecutionState != StateFailed || !strings.Contains(msg, "stages") || !strings.Contains(msg, "40000") {
		t.Errorf("the manager's add_stage step is %s with error %q: want it failed naming stages and the limit", step.ExecutionState, msg)
	}
	if n := len(b.task(id).StageList); n != 2 {
		t.Errorf("after the manager's refused add_stage the task has %d stages, want 2", n)
	}
	if n := st.refused.Load(); n != 0 {
		t.Errorf("the store refused %d writes", n)
	}
}

// TestAgentProfilePastTheDocumentBoundIsRefused: an agent's name, role
// and profile are never shortened; an init_new_agent whose texts would
// take more than a quarter of the agent's document bound is refused
// naming the field and the limit, and no agent is created. A profile
// that fits is taken.
func TestAgentProfilePastTheDocumentBoundIsRefused(t *testing.T) {
	const docBound = 40_000
	st := &payloadStore{MemoryStore: NewMemoryStore(), max: docBound * 3 / 2}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = docBound })
	before := len(b.sys.AgentBriefs())
	_, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionInitNewAgent,
		AgentConfig: &AgentConfig{Template: "researcher", Name: "wordy", Profile: strings.Repeat("p", 12_000)}})
	isErr(t, err, ErrLimit, "agent_config.profile")
	if err != nil && !strings.Contains(err.Error(), "10000") {
		t.Errorf("error %q does not name the limit (10000 bytes)", err)
	}
	if n := len(b.sys.AgentBriefs()); n != before {
		t.Errorf("%d agents after the refused init_new_agent, %d before", n, before)
	}
	if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionInitNewAgent,
		AgentConfig: &AgentConfig{Template: "researcher", Name: "brief", Profile: strings.Repeat("p", 8_000)}}); err != nil {
		t.Errorf("a profile within the limit: %v", err)
	}
}
