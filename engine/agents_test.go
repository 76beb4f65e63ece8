package engine

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// toolCatalog is a fixed ToolCatalog.
type toolCatalog map[string]string

func (c toolCatalog) ToolGuides() map[string]string { return c }

func TestInitNewAgent(t *testing.T) {
	b := newTestbed(t, func(c *Config) {
		c.Tools = toolCatalog{"search": "web search", "files": "a file system"}
	})
	researcher := b.sys.Templates()[slices.IndexFunc(b.sys.Templates(), func(c AgentConfig) bool { return c.Template == "researcher" })]
	core := func(extra ...string) []string { return append(extra, CoreSkills...) }

	type want struct {
		Name, Role, Profile, Template string
		Skills, Tools                 []string
		Model                         string
	}
	tests := []struct {
		name string
		cfg  AgentConfig
		want want
	}{
		{"from a template", AgentConfig{Template: "researcher", Name: "r2"},
			want{Name: "r2", Role: researcher.Role, Profile: researcher.Profile, Template: "researcher", Skills: researcher.Skills, Tools: []string{}}},
		{"from a template, overridden", AgentConfig{Template: " researcher ", Role: "Fact checker", Skills: []string{SkillThink}, Tools: []string{"files"}},
			want{Name: "researcher", Role: "Fact checker", Profile: researcher.Profile, Template: "researcher", Skills: core(SkillThink), Tools: []string{"files"}}},
		{"from a full config, core skills added", AgentConfig{Name: " solo ", Role: " solver ", Profile: " thinks alone ", Skills: []string{SkillThink, SkillPlanning}, LLMConfig: &LLMConfig{Model: "m1"}},
			want{Name: "solo", Role: "solver", Profile: "thinks alone", Skills: []string{SkillThink, SkillPlanning, SkillReflection, SkillSummary, SkillSendMessage, SkillProcessMessage}, Tools: []string{}, Model: "m1"}},
		{"no skills at all", AgentConfig{Name: "bare", Role: "r"},
			want{Name: "bare", Role: "r", Skills: CoreSkills, Tools: []string{}}},
		{"duplicate tools are dropped", AgentConfig{Name: "tooled", Role: "r", Tools: []string{"search", "files", "search"}},
			want{Name: "tooled", Role: "r", Skills: CoreSkills, Tools: []string{"search", "files"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			res, err := b.sys.AgentInstruction(b.mgr(), AgentInstruction{Action: ActionInitNewAgent, AgentConfig: &cfg})
			if err != nil {
				t.Fatal(err)
			}
			r := res.InitNewAgent
			if r == nil || r.Name != tt.want.Name || r.Role != tt.want.Role {
				t.Fatalf("result %+v, want name %q role %q", r, tt.want.Name, tt.want.Role)
			}
			id := r.AgentID
			a := b.agent(id)
			got := want{Name: a.Name, Role: a.Role, Profile: a.Profile, Template: a.Template, Skills: a.Skills, Tools: a.Tools}
			if a.LLMConfig != nil {
				got.Model = a.LLMConfig.Model
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("agent mismatch (-want +got):\n%s", diff)
			}
			if a.Kind != KindLLM || a.WorkingState != WorkingIdle || a.HumanConfig != nil || a.ConversationPool != nil {
				t.Errorf("agent %+v, want an idle LLM agent", a)
			}
			for _, sk := range CoreSkills {
				if !slices.Contains(a.Skills, sk) {
					t.Errorf("core skill %s missing from %v", sk, a.Skills)
				}
			}
		})
	}
	// The template itself is unchanged by the override above.
	if diff := cmp.Diff(researcher, b.sys.Templates()[slices.IndexFunc(b.sys.Templates(), func(c AgentConfig) bool { return c.Template == "researcher" })]); diff != "" {
		t.Errorf("template changed (-before +after):\n%s", diff)
	}
}

func TestAgentInstructionErrors(t *testing.T) {
	w := newInstrWorld(t)
	cfg := func(c AgentConfig) *AgentConfig { return &c }
	tests := []struct {
		name  string
		actor string
		ai    AgentInstruction
		kind  error
		field string
	}{
		{"unknown actor", "a-404", AgentInstruction{Action: ActionInitNewAgent}, ErrNotFound, `agent_id "a-404"`},
		{"actor lacks agent_manager", w.w1, AgentInstruction{Action: ActionInitNewAgent, AgentConfig: cfg(AgentConfig{Name: "n", Role: "r"})}, ErrForbidden, "agent_manager skill"},
		{"empty action", w.mgr, AgentInstruction{}, ErrInvalid, "action: is empty"},
		{"unknown action", w.mgr, AgentInstruction{Action: "clone"}, ErrInvalid, `action "clone"`},
		{"init without config", w.mgr, AgentInstruction{Action: ActionInitNewAgent}, ErrInvalid, "agent_config: is missing"},
		{"unknown template", w.mgr, AgentInstruction{Action: ActionInitNewAgent, AgentConfig: cfg(AgentConfig{Template: "wizard"})}, ErrNotFound, `agent_config.template "wizard"`},
		{"unknown skill", w.mgr, AgentInstruction{Action: ActionInitNewAgent, AgentConfig: cfg(AgentConfig{Name: "n", Role: "r", Skills: []string{"fly"}})}, ErrInvalid, `agent_config.skills: "fly"`},
		{"unknown tool without a catalog", w.op, AgentInstruction{Action: ActionInitNewAgent, AgentConfig: cfg(AgentConfig{Name: "n", Role: "r", Tools: []string{"search"}})}, ErrInvalid, `agent_config.tools: "search"`},
		{"unknown tool on a template", w.mgr, AgentInstruction{Action: ActionInitNewAgent, AgentConfig: cfg(AgentConfig{Template: "writer", Tools: []string{"search"}})}, ErrInvalid, "agent_config.tools"},
		{"no name", w.mgr, AgentInstruction{Action: ActionInitNewAgent, AgentConfig: cfg(AgentConfig{Role: "r"})}, ErrInvalid, "agent_config.name"},
		{"no role", w.mgr, AgentInstruction{Action: ActionInitNewAgent, AgentConfig: cfg(AgentConfig{Name: "n", Role: " "})}, ErrInvalid, "agent_config.role"},

		{"participants without task", w.mgr, AgentInstruction{Action: ActionAddTaskParticipant, Agents: StringList{w.outsider}}, ErrInvalid, "task_id: is empty"},
		{"participants unknown task", w.mgr, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: "t-404", Agents: StringList{w.outsider}}, ErrNotFound, `task_id "t-404"`},
		{"participants none", w.mgr, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: w.task}, ErrInvalid, "agents: is empty"},
		{"participants unknown agent", w.mgr, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: w.task, Agents: StringList{w.outsider, "a-404"}}, ErrNotFound, `agents: "a-404"`},
		{"participants by another manager", w.peerMgr, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: w.task, Agents: StringList{w.outsider}}, ErrForbidden, "only its manager"},
		{"participants of an ended task", w.op, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: w.ended, Agents: StringList{w.outsider}}, ErrEnded, "has ended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seq, n := w.b.sys.EventSeq(), len(w.b.sys.Agents())
			res, err := w.b.sys.AgentInstruction(tt.actor, tt.ai)
			if res != (AgentInstructionResult{}) {
				t.Errorf("result %+v alongside the error", res)
			}
			isErr(t, err, tt.kind, tt.field)
			if got := w.b.sys.EventSeq(); got != seq || len(w.b.sys.Agents()) != n {
				t.Errorf("a refused instruction changed the state (%d events)", got-seq)
			}
		})
	}
}

func TestAddTaskParticipant(t *testing.T) {
	b := newTestbed(t, nil)
	w1, w2 := b.newAgent("w1"), b.newAgent("w2")
	task := b.newTask("team", w1)
	res, err := b.sys.AgentInstruction(b.mgr(), AgentInstruction{Action: ActionAddTaskParticipant, TaskID: task, Agents: StringList{w1, w2}})
	if err != nil {
		t.Fatal(err)
	}
	want := AgentInstructionResult{AddTaskParticipant: &AddParticipantsResult{Added: []string{w2}, TaskGroup: []string{b.mgr(), b.op(), w1, w2}, TaskID: task}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result mismatch (-want +got):\n%s", diff)
	}
	if wm, ok := b.agent(w2).WorkingMemory[task]; !ok || len(wm) != 0 {
		t.Errorf("w2's working memory of the task = %v, %v; want an empty entry", wm, ok)
	}
}

func TestInstructionsAfterClose(t *testing.T) {
	b := newTestbed(t, nil)
	if err := b.sys.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.sys.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddTask, TaskName: "n", TaskIntention: "i"}); err != ErrClosed {
		t.Errorf("TaskInstruction after Close: %v, want ErrClosed", err)
	}
	if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionInitNewAgent}); err != ErrClosed {
		t.Errorf("AgentInstruction after Close: %v, want ErrClosed", err)
	}
	if _, err := b.sys.CreateAgent(AgentConfig{Name: "n", Role: "r"}); err != ErrClosed {
		t.Errorf("CreateAgent after Close: %v, want ErrClosed", err)
	}
	if err := b.sys.Start(); err != ErrClosed {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
}
