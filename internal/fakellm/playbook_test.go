package fakellm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mas-mcp/mas-mcp/llm"
)

// prompt is a user message shaped like the ones mas-mcp builds: the role
// section (with a skills list whose "- name:" lines must not be taken for
// the agent's name) and the current-step section.
func prompt(agentID, name, stepID, skill string) string {
	return strings.Join([]string{
		"## Your role",
		"- agent_id: " + agentID,
		"- name: " + name,
		"- role: tester",
		"### Available skills",
		"- name: planning",
		"- name: summary",
		"## Current step",
		"- step_id: " + stepID,
		"- executor: " + skill,
		"- step_intention: do the thing",
		"",
		"Answer with the block.",
	}, "\n")
}

// ask is a first-attempt request: a system message then the prompt.
func ask(agentID, name, stepID, skill string) []llm.Message {
	return []llm.Message{
		{Role: llm.RoleSystem, Content: "You are an agent of a multi-agent system.\n- executor: not-in-system"},
		{Role: llm.RoleUser, Content: prompt(agentID, name, stepID, skill)},
	}
}

// repair is the repair round of msgs: the earlier answer and the parse error.
func repair(msgs []llm.Message, answer string) []llm.Message {
	return append(append([]llm.Message(nil), msgs...),
		llm.Message{Role: llm.RoleAssistant, Content: answer},
		llm.Message{Role: llm.RoleUser, Content: "Your answer had no <planned_step> block.\n- executor: wrong"},
	)
}

func TestNewCallRecognises(t *testing.T) {
	type got struct {
		Skill, AgentID, AgentName, StepID string
		Repair                            bool
		Prompt                            string
	}
	tests := []struct {
		name string
		msgs []llm.Message
		want got
	}{
		{
			name: "system then user",
			msgs: ask("a1", "Alice", "s1", "planning"),
			want: got{Skill: "planning", AgentID: "a1", AgentName: "Alice", StepID: "s1",
				Prompt: prompt("a1", "Alice", "s1", "planning")},
		},
		{
			name: "repair round reads the first user message",
			msgs: repair(ask("a2", "Bob", "s9", "reflection"), Garbage),
			want: got{Skill: "reflection", AgentID: "a2", AgentName: "Bob", StepID: "s9", Repair: true,
				Prompt: prompt("a2", "Bob", "s9", "reflection")},
		},
		{
			name: "assistant last is not a repair round",
			msgs: append(ask("a1", "Alice", "s1", "think"), llm.Message{Role: llm.RoleAssistant, Content: "x"}),
			want: got{Skill: "think", AgentID: "a1", AgentName: "Alice", StepID: "s1",
				Prompt: prompt("a1", "Alice", "s1", "think")},
		},
		{
			name: "two user messages without an answer are not a repair round",
			msgs: []llm.Message{
				{Role: llm.RoleUser, Content: "- executor: summary"},
				{Role: llm.RoleUser, Content: "- executor: planning"},
			},
			want: got{Skill: "summary", Prompt: "- executor: summary"},
		},
		{
			name: "indentation, CRLF and extra spaces",
			msgs: []llm.Message{{Role: llm.RoleUser,
				Content: "  - agent_id:   a3  \r\n\t- name: Carol Smith\r\n- step_id: s-1\r\n- executor: quick_think\r\n"}},
			want: got{Skill: "quick_think", AgentID: "a3", AgentName: "Carol Smith", StepID: "s-1",
				Prompt: "  - agent_id:   a3  \r\n\t- name: Carol Smith\r\n- step_id: s-1\r\n- executor: quick_think\r\n"},
		},
		{
			name: "a key not at the start of a line is ignored",
			msgs: []llm.Message{{Role: llm.RoleUser, Content: "see - executor: planning\n- executor: ask_info"}},
			want: got{Skill: "ask_info", Prompt: "see - executor: planning\n- executor: ask_info"},
		},
		{
			name: "no user message",
			msgs: []llm.Message{{Role: llm.RoleSystem, Content: "- executor: planning"}},
			want: got{},
		},
		{name: "no messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCall("m", tt.msgs, nil, 0)
			g := got{c.Skill, c.AgentID, c.AgentName, c.StepID, c.Repair, c.Prompt}
			if diff := cmp.Diff(tt.want, g); diff != "" {
				t.Errorf("newCall mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRuleMatches(t *testing.T) {
	first := newCall("m", ask("a1", "Alice", "s1", "planning"), nil, 0)
	again := newCall("m", repair(ask("a1", "Alice", "s1", "planning"), Garbage), nil, 0)
	tests := []struct {
		name  string
		rule  Rule
		first bool // matches the first attempt
		again bool // matches the repair round
	}{
		{"empty rule matches anything", Rule{}, true, true},
		{"skill", Rule{Skill: "planning"}, true, true},
		{"other skill", Rule{Skill: "summary"}, false, false},
		{"agent by id", Rule{Agent: "a1"}, true, true},
		{"agent by name", Rule{Agent: "Alice"}, true, true},
		{"other agent", Rule{Agent: "Bob"}, false, false},
		{"contains", Rule{Contains: "step_intention: do the thing"}, true, true},
		{"contains only in repair message", Rule{Contains: "had no <planned_step>"}, false, false},
		{"repair only", Rule{Repair: new(true)}, false, true},
		{"first attempt only", Rule{Repair: new(false)}, true, false},
		{"all criteria", Rule{Skill: "planning", Agent: "Alice", Contains: "do the thing", Repair: new(true)}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.matches(&first); got != tt.first {
				t.Errorf("%v matches first attempt = %t, want %t", tt.rule, got, tt.first)
			}
			if got := tt.rule.matches(&again); got != tt.again {
				t.Errorf("%v matches repair round = %t, want %t", tt.rule, got, tt.again)
			}
		})
	}
}

func TestRuleString(t *testing.T) {
	tests := []struct {
		rule Rule
		want string
	}{
		{Rule{}, "rule{times=1}"},
		{Rule{Skill: "planning", Agent: "a1", Times: -1}, `rule{skill="planning" agent="a1" times=unlimited}`},
		{Rule{Contains: "x", Repair: new(false), Times: 3}, `rule{contains="x" repair=false times=3}`},
	}
	for _, tt := range tests {
		if got := tt.rule.String(); got != tt.want {
			t.Errorf("String() = %s, want %s", got, tt.want)
		}
	}
}

func TestHelpers(t *testing.T) {
	if got, want := Block("summary", "done"), "<summary>\ndone\n</summary>"; got != want {
		t.Errorf("Block = %q, want %q", got, want)
	}
	got := JSON(map[string]any{"step_intention": "a < b & c", "n": 1})
	if want := `{"n":1,"step_intention":"a < b & c"}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
	if strings.ContainsAny(Garbage, "<>{}[]") {
		t.Errorf("Garbage %q holds tag or JSON characters", Garbage)
	}
}

func FuzzNewCall(f *testing.F) {
	f.Add(prompt("a1", "Alice", "s1", "planning"), "answer")
	f.Add("- executor:\n- name:", "")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, user, answer string) {
		c := newCall("m", []llm.Message{
			{Role: llm.RoleUser, Content: user},
			{Role: llm.RoleAssistant, Content: answer},
			{Role: llm.RoleUser, Content: "fix it"},
		}, nil, 0)
		if !c.Repair || c.Prompt != user {
			t.Errorf("Repair = %t, Prompt = %q; want true, %q", c.Repair, c.Prompt, user)
		}
		for _, v := range []string{c.Skill, c.AgentID, c.AgentName, c.StepID} {
			if strings.Contains(v, "\n") || v != strings.TrimSpace(v) {
				t.Errorf("field %q is not a trimmed single line", v)
			}
		}
	})
}
