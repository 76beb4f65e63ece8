package skills

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/mas-mcp/mas-mcp/engine"
)

// Short constructors for hand-built step lists: stage-1 of task-1 unless
// moved with inStage / inTask.
func toolStep(id, server string) engine.StepState {
	return mkStep(id, "stage-1", engine.StepTool, server, engine.StateFinished, "call "+server, "")
}

func skillStep(id, executor string) engine.StepState {
	return mkStep(id, "stage-1", engine.StepSkill, executor, engine.StateFinished, executor, "")
}

func inStage(s engine.StepState, stage string) engine.StepState { s.StageID = stage; return s }

func inTask(s engine.StepState, task string) engine.StepState { s.TaskID = task; return s }

func withState(s engine.StepState, st string) engine.StepState { s.ExecutionState = st; return s }

// decidingOn builds the input of the current tool_decision step "cur" at the
// end of steps (or wherever steps already hold a step "cur").
func decidingOn(text string, steps ...engine.StepState) *engine.ExecInput {
	cur := mkStep("cur", "stage-1", engine.StepSkill, engine.SkillToolDecision, engine.StateRunning, "decide", text)
	found := false
	for _, s := range steps {
		found = found || s.StepID == "cur"
	}
	if !found {
		steps = append(steps, cur)
	}
	a := testAgent()
	a.AgentStep.StepList = steps
	return &engine.ExecInput{Agent: a, Step: cur}
}

const (
	srvFS    = "filesystem"
	srvWeb   = "web_search"
	execIG   = engine.SkillInstructionGeneration
	execTD   = engine.SkillToolDecision
	execSend = engine.SkillSendMessage
)

// chainIDs is a chain as "tool>decision" pairs ("tool>" for the latest).
func chainIDs(c []toolCall) []string {
	var out []string
	for _, call := range c {
		d := ""
		if call.decision != nil {
			d = call.decision.StepID
		}
		out = append(out, call.tool.StepID+">"+d)
	}
	return out
}

func TestToolChain(t *testing.T) {
	tests := []struct {
		name  string
		tool  string
		steps []engine.StepState
		want  []string
	}{
		{"no steps", srvFS, nil, nil},
		{"no step of that tool", srvFS, []engine.StepState{skillStep("p", "planning"), skillStep("i", execIG), toolStep("w", srvWeb)}, nil},
		{"one call", srvFS, []engine.StepState{skillStep("p", "planning"), skillStep("i1", execIG), toolStep("t1", srvFS)}, []string{"t1>"}},
		{"two calls, oldest first", srvFS,
			[]engine.StepState{skillStep("i1", execIG), toolStep("t1", srvFS), skillStep("d1", execTD), skillStep("i2", execIG), toolStep("t2", srvFS)},
			[]string{"t1>d1", "t2>"}},
		{"three calls with send_message gaps", srvFS,
			[]engine.StepState{skillStep("i1", execIG), toolStep("t1", srvFS), skillStep("m1", execSend), skillStep("d1", execTD), skillStep("i2", execIG), skillStep("m2", execSend),
				toolStep("t2", srvFS), skillStep("d2", execTD), skillStep("m3", execSend), skillStep("i3", execIG), toolStep("t3", srvFS)},
			[]string{"t1>d1", "t2>d2", "t3>"}},
		{"tool directly after its decision (no instruction_generation)", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), skillStep("d1", execTD), toolStep("t2", srvFS)},
			[]string{"t1>d1", "t2>"}},
		{"another step before the decision ends the chain", srvFS,
			[]engine.StepState{skillStep("i0", execIG), toolStep("t0", srvFS), skillStep("d0", execTD), skillStep("r", "reflection"), skillStep("i1", execIG),
				toolStep("t1", srvFS), skillStep("d1", execTD), skillStep("i2", execIG), toolStep("t2", srvFS)},
			[]string{"t1>d1", "t2>"}},
		{"another step between a decision and its tool ends the chain", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), skillStep("d1", execTD), skillStep("k", "think"), skillStep("i2", execIG), toolStep("t2", srvFS)},
			[]string{"t2>"}},
		{"another step between a tool and the next decision ends the chain", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), skillStep("k", "quick_think"), skillStep("d1", execTD), skillStep("i2", execIG), toolStep("t2", srvFS)},
			[]string{"t2>"}},
		{"a decision with no tool before it ends the chain", srvFS,
			[]engine.StepState{skillStep("p", "planning"), skillStep("d1", execTD), skillStep("i2", execIG), toolStep("t2", srvFS)},
			[]string{"t2>"}},
		{"a decision that stopped the tool ends the chain (a separate, later use)", srvFS,
			[]engine.StepState{skillStep("i1", execIG), toolStep("t1", srvFS),
				withResult(skillStep("d1", execTD), map[string]any{"tool_decision": []engine.StepSpec{}}),
				skillStep("i2", execIG), toolStep("t2", srvFS)},
			[]string{"t2>"}},
		{"a stopping decision read back from JSON ([]any) ends it too", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), withResult(skillStep("d1", execTD), map[string]any{"tool_decision": []any{}}), toolStep("t2", srvFS)},
			[]string{"t2>"}},
		{"two tool steps in a row: only the latest", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), toolStep("t2", srvFS)},
			[]string{"t2>"}},
		{"a different tool's call ends the chain", srvFS,
			[]engine.StepState{skillStep("i1", execIG), toolStep("t1", srvFS), skillStep("d1", execTD), skillStep("iw", execIG), toolStep("w1", srvWeb), skillStep("dw", execTD),
				skillStep("i2", execIG), toolStep("t2", srvFS)},
			[]string{"t2>"}},
		{"the other tool's own chain", srvWeb,
			[]engine.StepState{skillStep("i1", execIG), toolStep("w1", srvWeb), skillStep("d1", execTD), skillStep("i2", execIG), toolStep("w2", srvWeb), skillStep("d2", execTD),
				skillStep("i3", execIG), toolStep("t3", srvFS)},
			[]string{"w1>d1", "w2>"}},
		{"starts from the latest call even with steps after it", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), skillStep("d1", execTD), toolStep("t2", srvFS), skillStep("r", "reflection"), skillStep("k", "think")},
			[]string{"t1>d1", "t2>"}},
		{"steps of other stages never count", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), inStage(skillStep("x1", "reflection"), "stage-2"), skillStep("d1", execTD),
				inStage(toolStep("x2", srvFS), "stage-0"), inStage(skillStep("x3", execTD), "stage-0"), skillStep("i2", execIG), toolStep("t2", srvFS),
				inStage(toolStep("x4", srvFS), "stage-2")},
			[]string{"t1>d1", "t2>"}},
		{"steps of another task never count", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), skillStep("d1", execTD), inTask(toolStep("x1", srvFS), "task-2"), inTask(skillStep("x2", execTD), "task-2"),
				skillStep("i2", execIG), toolStep("t2", srvFS), inTask(toolStep("x3", srvFS), "task-2")},
			[]string{"t1>d1", "t2>"}},
		{"steps after the current one never count", srvFS,
			[]engine.StepState{toolStep("t1", srvFS), skillStep("d1", execTD), toolStep("t2", srvFS), skillStep("cur", execTD), skillStep("i3", execIG), withState(toolStep("t3", srvFS), engine.StateInit)},
			[]string{"t1>d1", "t2>"}},
		{"failed calls count", srvFS,
			[]engine.StepState{withState(toolStep("t1", srvFS), engine.StateFailed), skillStep("d1", execTD), skillStep("i2", execIG), toolStep("t2", srvFS)},
			[]string{"t1>d1", "t2>"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := decidingOn("<tool_name>"+tt.tool+"</tool_name>", tt.steps...)
			got := chainIDs(toolChain(in, tt.tool))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("chain mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToolChainKeepsSteps(t *testing.T) {
	t1 := withResult(withInstruction(toolStep("t1", srvFS), &engine.ToolCall{InstructionType: "get_description"}), map[string]any{"tools": "list"})
	d1 := withResult(skillStep("d1", execTD), map[string]any{"tool_decision": []any{"go on"}})
	t2 := withResult(toolStep("t2", srvFS), map[string]any{"content": "text"})
	got := toolChain(decidingOn("", t1, d1, skillStep("i2", execIG), t2), srvFS)
	want := []toolCall{{tool: t1, decision: &d1}, {tool: t2}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(toolCall{})); diff != "" {
		t.Errorf("chain mismatch (-want +got):\n%s", diff)
	}
}

func TestToolName(t *testing.T) {
	tests := []struct {
		name, text string
		steps      []engine.StepState
		want       string
	}{
		{"from the text", "<tool_name>filesystem</tool_name>\nThe call finished.", []engine.StepState{toolStep("w", srvWeb)}, srvFS},
		{"trimmed", "Result of <tool_name> web_search </tool_name>:", nil, srvWeb},
		{"last tag wins", "<tool_name>web_search</tool_name> then <tool_name>filesystem</tool_name>", nil, srvFS},
		{"blank tag falls back", "<tool_name>  </tool_name>", []engine.StepState{toolStep("t1", srvFS), skillStep("d1", execTD), toolStep("w1", srvWeb)}, srvWeb},
		{"no tag: the latest tool step before", "The tool finished.", []engine.StepState{toolStep("t1", srvFS), skillStep("d1", execTD), toolStep("w1", srvWeb), skillStep("r", "reflection")}, srvWeb},
		{"fallback ignores other stages, tasks and later steps", "",
			[]engine.StepState{toolStep("t1", srvFS), inStage(toolStep("x1", srvWeb), "stage-2"), inTask(toolStep("x2", srvWeb), "task-2"),
				skillStep("cur", execTD), withState(toolStep("x3", srvWeb), engine.StateInit)}, srvFS},
		{"nothing to go on", "", []engine.StepState{skillStep("p", "planning")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := toolName(decidingOn(tt.text, tt.steps...)); got != tt.want {
				t.Errorf("toolName = %q, want %q", got, tt.want)
			}
		})
	}
}

// generating builds the input of the current instruction_generation step
// "cur", which must be among steps.
func generating(target string, steps ...engine.StepState) *engine.ExecInput {
	a := testAgent()
	a.AgentStep.StepList = steps
	in := &engine.ExecInput{Agent: a}
	for _, s := range steps {
		if s.StepID == "cur" {
			in.Step = s
		}
	}
	in.Step.TargetStepID = target
	return in
}

func TestTargetToolStep(t *testing.T) {
	cur := withState(skillStep("cur", execIG), engine.StateRunning)
	pending := func(s engine.StepState) engine.StepState { return withState(s, engine.StateInit) }
	tests := []struct {
		name   string
		target string
		steps  []engine.StepState
		want   string // "" for none
	}{
		{"linked step", "t9", []engine.StepState{cur, pending(toolStep("t4", srvFS)), pending(toolStep("t9", srvWeb))}, "t9"},
		{"linked step even when not init", "t9", []engine.StepState{cur, toolStep("t9", srvWeb)}, "t9"},
		{"linked step missing: no fallback", "t404", []engine.StepState{cur, pending(toolStep("t4", srvFS))}, ""},
		{"fallback: next init tool step", "", []engine.StepState{skillStep("p", "planning"), cur, pending(skillStep("k", "think")), pending(toolStep("t4", srvFS)), pending(toolStep("t5", srvWeb))}, "t4"},
		{"fallback skips other stages and tasks", "", []engine.StepState{cur, inStage(pending(toolStep("x1", srvFS)), "stage-2"),
			inTask(pending(toolStep("x2", srvFS)), "task-2"), pending(toolStep("t4", srvWeb))}, "t4"},
		{"fallback skips steps that ran", "", []engine.StepState{cur, toolStep("t3", srvFS), withState(toolStep("t4", srvFS), engine.StateFailed), pending(toolStep("t5", srvFS))}, "t5"},
		{"fallback never looks back", "", []engine.StepState{pending(toolStep("t1", srvFS)), cur}, ""},
		{"fallback: none", "", []engine.StepState{cur, pending(skillStep("r", "reflection"))}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := targetToolStep(generating(tt.target, tt.steps...))
			got := ""
			if ok {
				got = s.StepID
			}
			if got != tt.want {
				t.Errorf("targetToolStep = %q (ok %t), want %q", got, ok, tt.want)
			}
		})
	}
}

// TestToolHistoryPrompt checks the rendered tool history of the golden
// fixture, and the notice when there is none.
func TestToolHistoryPrompt(t *testing.T) {
	set := loadSet(t, "en")
	r := newTestRunner(t, set, execTD, nil)
	var b strings.Builder
	r.writeToolHistory(&b, fixture(execTD), DefaultPromptBudget)
	got := b.String()
	for _, want := range []string{
		"- tool: filesystem\n- initial_step_intention: Read the report\n",
		"#### [1] step_id step-3 (finished)\n",
		`- instruction_content: {"instruction_type":"get_description"}`,
		`- tool_decision_result: {"tool_decision":[`,
		"#### [2] step_id step-6 (finished)\n",
		`- instruction_content: {"arguments":{"path":"/data/report.md"},"tool_name":"read_file"}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("tool history lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "tool_decision_result"); n != 1 {
		t.Errorf("%d decisions shown, want 1 (the latest call has none yet)", n)
	}
	if strings.Contains(got, markOldChain) || strings.Contains(got, "#### [3]") {
		t.Errorf("tool history shows an earlier chain:\n%s", got)
	}

	// Over a budget one character short of both calls whole (with the
	// folding note and digest line it keeps room for), the newest call
	// stays whole, the older one folds to one line, and the prompt says
	// how to read it.
	both := utf8.RuneCountInString(got) + utf8.RuneCountInString(set.Heading("history_folded")+"\n"+
		set.Text("history_digest", map[string]any{"N": 2, "Finished": 2, "Failed": 2})+"\n")
	b.Reset()
	r.writeToolHistory(&b, fixture(execTD), both-1)
	folded := b.String()
	for _, want := range []string{
		set.Heading("history_folded") + "\n",
		"#### [1] - step_id step-3 [finished] filesystem: Read the report → ",
		"#### [2] step_id step-6 (finished)\n",
		`- instruction_content: {"arguments":{"path":"/data/report.md"},"tool_name":"read_file"}`,
	} {
		if !strings.Contains(folded, want) {
			t.Errorf("folded tool history lacks %q:\n%s", want, folded)
		}
	}

	b.Reset()
	r.writeToolHistory(&b, decidingOn("<tool_name>filesystem</tool_name>", skillStep("p", "planning")), DefaultPromptBudget)
	if want := set.Heading("tool_history") + "\n" + set.Heading("no_tool_history") + "\n"; b.String() != want {
		t.Errorf("empty tool history = %q, want %q", b.String(), want)
	}
}

// TestExecuteInstructionGeneration checks the call written onto the target
// tool step in each shape of spec §4.3, and that no call is made without a
// tool step to write to.
func TestExecuteInstructionGeneration(t *testing.T) {
	execIG := engine.SkillInstructionGeneration
	good := []struct {
		name, answer string
		want         map[string]any // the step's result shows the instruction as written
		call         *engine.ToolCall
	}{
		{"get_description", `{"instruction_type": "get_description"}`, map[string]any{"instruction_type": "get_description"},
			&engine.ToolCall{InstructionType: "get_description"}},
		{"tool call", `{"tool_name": "write_file", "arguments": {"path": "/data/reports/sources.md", "content": "1. a"}}`,
			map[string]any{"tool_name": "write_file", "arguments": map[string]any{"path": "/data/reports/sources.md", "content": "1. a"}},
			&engine.ToolCall{ToolName: "write_file", Arguments: map[string]any{"path": "/data/reports/sources.md", "content": "1. a"}}},
		{"tool call without arguments gets {}", `{"tool_name": "list_allowed_directories"}`,
			map[string]any{"tool_name": "list_allowed_directories", "arguments": map[string]any{}},
			&engine.ToolCall{ToolName: "list_allowed_directories", Arguments: map[string]any{}}},
		{"function_call type", `{"instruction_type": "function_call", "tool_name": "read_file", "arguments": {"path": "/data/a.md"}}`,
			map[string]any{"instruction_type": "function_call", "tool_name": "read_file", "arguments": map[string]any{"path": "/data/a.md"}},
			&engine.ToolCall{InstructionType: "function_call", ToolName: "read_file", Arguments: map[string]any{"path": "/data/a.md"}}},
		{"resource", `{"resource_name": "readme", "arguments": {"uri": "file:///data/README.md"}}`,
			map[string]any{"resource_name": "readme", "arguments": map[string]any{"uri": "file:///data/README.md"}},
			&engine.ToolCall{ResourceName: "readme", Arguments: map[string]any{"uri": "file:///data/README.md"}}},
		{"prompt with None arguments", `{"prompt_name": "code_review", "arguments": None}`,
			map[string]any{"prompt_name": "code_review", "arguments": nil},
			&engine.ToolCall{PromptName: "code_review"}},
		{"prompt with arguments, fenced", "```json\n{\"prompt_name\": \"code_review\", \"arguments\": {\"code\": \"x\"},}\n```",
			map[string]any{"prompt_name": "code_review", "arguments": map[string]any{"code": "x"}},
			&engine.ToolCall{PromptName: "code_review", Arguments: map[string]any{"code": "x"}}},
		{"keys beyond the call's are left out of it", `{"tool_name": "read_file", "arguments": {"path": "/data/a.md"}, "reason": "to read it"}`,
			map[string]any{"tool_name": "read_file", "arguments": map[string]any{"path": "/data/a.md"}, "reason": "to read it"},
			&engine.ToolCall{ToolName: "read_file", Arguments: map[string]any{"path": "/data/a.md"}}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			out, calls := execute(t, execIG, fixture(execIG), replyWith(tagged("tool_instruction", tt.answer)))
			if out.Err != nil {
				t.Fatalf("Err = %v", out.Err)
			}
			want := &engine.Output{
				ToolInstruction: &engine.ToolInstruction{StepID: "step-4", Instruction: tt.call},
				Result:          map[string]any{"instruction_generation": tt.want, "tool_step_id": "step-4"},
			}
			if diff := cmp.Diff(want, out, ignoreRun); diff != "" {
				t.Errorf("output mismatch (-want +got):\n%s", diff)
			}
			if len(calls) != 1 {
				t.Errorf("got %d calls, want 1", len(calls))
			}
		})
	}

	t.Run("fallback target without TargetStepID", func(t *testing.T) {
		in := fixture(execIG)
		in.Step.TargetStepID = ""
		out, _ := execute(t, execIG, in, replyWith(tagged("tool_instruction", `{"instruction_type": "get_description"}`)))
		if out.Err != nil || out.ToolInstruction == nil || out.ToolInstruction.StepID != "step-4" {
			t.Errorf("got err %v, instruction %+v; want one for step-4", out.Err, out.ToolInstruction)
		}
	})

	refused := []struct {
		name    string
		edit    func(in *engine.ExecInput)
		wantErr string
	}{
		{"no tool step follows", func(in *engine.ExecInput) {
			in.Step.TargetStepID = ""
			in.Agent.AgentStep.StepList = dropStep(in.Agent.AgentStep.StepList, "step-4")
		}, "no pending tool step follows"},
		{"target ID unknown", func(in *engine.ExecInput) { in.Step.TargetStepID = "step-404" }, "no pending tool step follows"},
		{"target is not a tool step", func(in *engine.ExecInput) { in.Step.TargetStepID = "step-5" }, "step step-5 is not a tool step"},
		{"target already ran", func(in *engine.ExecInput) {
			for i := range in.Agent.AgentStep.StepList {
				if in.Agent.AgentStep.StepList[i].StepID == "step-4" {
					in.Agent.AgentStep.StepList[i].ExecutionState = engine.StateFinished
				}
			}
		}, "tool step step-4 is already finished"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			in := fixture(execIG)
			tt.edit(in)
			out, calls := execute(t, execIG, in)
			if out.Err == nil || !strings.Contains(out.Err.Error(), tt.wantErr) {
				t.Errorf("Err = %v, want one containing %q", out.Err, tt.wantErr)
			}
			if len(calls) != 0 {
				t.Errorf("got %d LLM calls, want none", len(calls))
			}
		})
	}
}

func dropStep(steps []engine.StepState, id string) []engine.StepState {
	var out []engine.StepState
	for _, s := range steps {
		if s.StepID != id {
			out = append(out, s)
		}
	}
	return out
}
