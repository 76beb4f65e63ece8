package engine

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestCheckPlan(t *testing.T) {
	s := bareSystem(t, nil)
	full := &AgentState{
		AgentID: "a-1",
		Skills: []string{SkillPlanning, SkillReflection, SkillSummary, SkillThink, SkillSendMessage,
			SkillProcessMessage, SkillInstructionGeneration, SkillToolDecision, SkillDecision},
		Tools: []string{"search"},
	}
	noIG := &AgentState{AgentID: "a-2", Skills: []string{SkillPlanning, SkillReflection, SkillSummary, SkillThink}, Tools: []string{"search"}}

	sk := func(exec string) StepSpec {
		return StepSpec{StepIntention: exec + " it", Type: StepSkill, Executor: exec, TextContent: exec + " text"}
	}
	tool := func(exec string) StepSpec {
		return StepSpec{StepIntention: "call " + exec, Type: StepTool, Executor: exec, TextContent: "use " + exec}
	}
	igFor := func(sp StepSpec) StepSpec {
		return StepSpec{StepIntention: "Generate the call for: " + sp.StepIntention, Type: StepSkill, Executor: SkillInstructionGeneration, TextContent: sp.TextContent}
	}
	planEnd := s.reflectionSpec("a plan ends with a reflection")
	reflEnd := s.reflectionSpec("a reflection's new steps end with a reflection")
	goalMet := s.summarySpec("reflection found the stage goal met")

	tests := []struct {
		name  string
		agent *AgentState
		skill string
		in    []StepSpec
		want  []StepSpec
		// wantRej lists, per rejection in order, a substring of its reason
		// (naming the executor where the executor is the problem).
		wantRej []string
	}{
		{name: "planning gets a trailing reflection", skill: SkillPlanning,
			in: []StepSpec{sk(SkillThink)}, want: []StepSpec{sk(SkillThink), planEnd}},
		{name: "planning ending in reflection is kept", skill: SkillPlanning,
			in: []StepSpec{sk(SkillThink), sk(SkillReflection)}, want: []StepSpec{sk(SkillThink), sk(SkillReflection)}},
		{name: "empty planning becomes a reflection", skill: SkillPlanning,
			in: nil, want: []StepSpec{planEnd}},
		{name: "summary is never planned", skill: SkillPlanning,
			in: []StepSpec{sk(SkillThink), sk(SkillSummary)}, want: []StepSpec{sk(SkillThink), planEnd},
			wantRej: []string{`executor "summary": summary may only end a reflection's list`}},
		{name: "tool_decision is never planned", skill: SkillPlanning,
			in: []StepSpec{sk(SkillToolDecision)}, want: []StepSpec{planEnd},
			wantRej: []string{`executor "tool_decision": tool_decision is never planned`}},
		{name: "decision may not plan summary", skill: SkillDecision,
			in: []StepSpec{sk(SkillSummary), sk(SkillThink)}, want: []StepSpec{sk(SkillThink)},
			wantRej: []string{"summary may only end a reflection's list"}},
		{name: "decision may not plan tool_decision", skill: SkillDecision,
			in: []StepSpec{sk(SkillToolDecision)}, want: nil,
			wantRej: []string{"tool_decision is never planned"}},
		{name: "reflection ending in summary is kept", skill: SkillReflection,
			in: []StepSpec{sk(SkillThink), sk(SkillSummary)}, want: []StepSpec{sk(SkillThink), sk(SkillSummary)}},
		{name: "reflection summary not last is rejected", skill: SkillReflection,
			in: []StepSpec{sk(SkillSummary), sk(SkillThink)}, want: []StepSpec{sk(SkillThink), reflEnd},
			wantRej: []string{"summary may only end a reflection's list"}},
		{name: "empty reflection means the goal is met", skill: SkillReflection,
			in: []StepSpec{}, want: []StepSpec{goalMet}},
		{name: "reflection of only rejected steps means the goal is met", skill: SkillReflection,
			in: []StepSpec{sk("fly")}, want: []StepSpec{goalMet}, wantRej: []string{"no such skill"}},
		{name: "reflection list gets a trailing reflection", skill: SkillReflection,
			in: []StepSpec{sk(SkillThink)}, want: []StepSpec{sk(SkillThink), reflEnd}},
		{name: "reflection ending in reflection is kept", skill: SkillReflection,
			in: []StepSpec{sk(SkillThink), sk(SkillReflection)}, want: []StepSpec{sk(SkillThink), sk(SkillReflection)}},
		{name: "unknown skill", skill: SkillDecision,
			in: []StepSpec{sk("fly")}, wantRej: []string{`executor "fly": no such skill`}},
		{name: "skill the agent lacks", skill: SkillDecision,
			in: []StepSpec{sk(SkillTaskManager)}, wantRej: []string{`executor "task_manager": you lack this skill`}},
		{name: "tool outside the agent's tools", skill: SkillDecision,
			in:      []StepSpec{sk(SkillInstructionGeneration), tool("web")},
			wantRej: []string{`executor "web": not one of your tools (search)`, `executor "instruction_generation": instruction_generation must directly precede`}},
		{name: "unknown type", skill: SkillDecision,
			in: []StepSpec{{Type: "magic", Executor: SkillThink}}, wantRej: []string{`type "magic"`}},
		{name: "type and executor are normalised", skill: SkillDecision,
			in:   []StepSpec{{StepIntention: "i", Type: " Skill ", Executor: " think ", TextContent: "t"}},
			want: []StepSpec{{StepIntention: "i", Type: StepSkill, Executor: SkillThink, TextContent: "t"}}},
		{name: "type inferred for a skill", skill: SkillDecision,
			in:   []StepSpec{{StepIntention: "i", Executor: SkillThink}},
			want: []StepSpec{{StepIntention: "i", Type: StepSkill, Executor: SkillThink}}},
		{name: "type inferred for a tool", skill: SkillDecision,
			in:   []StepSpec{{StepIntention: "i", Executor: SkillInstructionGeneration}, {StepIntention: "j", Executor: "search"}},
			want: []StepSpec{{StepIntention: "i", Type: StepSkill, Executor: SkillInstructionGeneration}, {StepIntention: "j", Type: StepTool, Executor: "search"}}},
		{name: "instruction_generation not followed by a tool", skill: SkillDecision,
			in: []StepSpec{sk(SkillInstructionGeneration), sk(SkillThink)}, want: []StepSpec{sk(SkillThink)},
			wantRej: []string{`executor "instruction_generation": instruction_generation must directly precede`}},
		{name: "instruction_generation at the end", skill: SkillDecision,
			in:      []StepSpec{sk(SkillInstructionGeneration)},
			wantRej: []string{"must directly precede"}},
		{name: "a paired tool step is kept", skill: SkillPlanning,
			in: []StepSpec{sk(SkillInstructionGeneration), tool("search")}, want: []StepSpec{sk(SkillInstructionGeneration), tool("search"), planEnd}},
		{name: "a tool step without instruction_generation gets one", skill: SkillPlanning,
			in:   []StepSpec{sk(SkillThink), tool("search"), tool("search")},
			want: []StepSpec{sk(SkillThink), igFor(tool("search")), tool("search"), igFor(tool("search")), tool("search"), planEnd}},
		{name: "a tool step needs instruction_generation the agent lacks", agent: noIG, skill: SkillPlanning,
			in: []StepSpec{tool("search")}, want: []StepSpec{planEnd},
			wantRej: []string{`executor "search": a tool step needs an instruction_generation step, a skill you lack`}},
		{name: "tool_decision keeps one pair", skill: SkillToolDecision,
			in:      []StepSpec{sk(SkillInstructionGeneration), tool("search"), sk(SkillInstructionGeneration), tool("search")},
			want:    []StepSpec{sk(SkillInstructionGeneration), tool("search")},
			wantRej: []string{"exactly one [instruction_generation, tool] pair", "exactly one [instruction_generation, tool] pair"}},
		{name: "tool_decision with a bare tool gets its pair", skill: SkillToolDecision,
			in: []StepSpec{tool("search")}, want: []StepSpec{igFor(tool("search")), tool("search")}},
		{name: "tool_decision may stop", skill: SkillToolDecision, in: []StepSpec{}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ag := tt.agent
			if ag == nil {
				ag = full
			}
			got, rej := s.checkPlan(ag, tt.skill, tt.in)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("kept steps mismatch (-want +got):\n%s", diff)
			}
			if len(rej) != len(tt.wantRej) {
				t.Fatalf("rejections = %+v, want %d", rej, len(tt.wantRej))
			}
			for i, r := range rej {
				if !strings.Contains(r.Reason, tt.wantRej[i]) {
					t.Errorf("rejection %d reason %q lacks %q", i, r.Reason, tt.wantRej[i])
				}
			}
		})
	}
}

func TestCheckPlanUnknownExecutorWithoutType(t *testing.T) {
	s := bareSystem(t, nil)
	ag := &AgentState{Skills: []string{SkillPlanning, SkillThink}, Tools: []string{}}
	_, rej := s.checkPlan(ag, SkillPlanning, []StepSpec{{StepIntention: "fly", Executor: "fly_to_the_moon"}})
	if len(rej) != 1 {
		t.Fatalf("rejections = %+v, want 1", rej)
	}
	if !strings.Contains(rej[0].Reason, "fly_to_the_moon") {
		t.Errorf("reason %q does not name the unknown executor", rej[0].Reason)
	}
}

// popForTest marks the next pending step running, as the agent loop does.
func popForTest(a *agent) string {
	id := a.st.AgentStep.TodoList[0]
	a.st.AgentStep.TodoList = a.st.AgentStep.TodoList[1:]
	a.stepLocked(id).ExecutionState = StateRunning
	return id
}

func stepIDs(a *agent) []string {
	var out []string
	for _, s := range a.st.AgentStep.StepList {
		out = append(out, s.StepID)
	}
	return out
}

func TestAddStepsNextKeepsExecutionOrder(t *testing.T) {
	s := bareSystem(t, nil)
	a := looseAgent(s, "x", SkillThink)
	a.mu.Lock()
	defer a.mu.Unlock()

	abc := a.addStepsLocked("T", "S", []StepSpec{spec(SkillThink, "a"), spec(SkillThink, "b"), spec(SkillThink, "c")}, false, "")
	running := popForTest(a)
	xy := a.addStepsLocked("T", "S", []StepSpec{spec(SkillThink, "x"), spec(SkillThink, "y")}, true, "")
	z := a.addStepsLocked("T", "S2", []StepSpec{spec(SkillThink, "z")}, true, "")
	w := a.addStepsLocked("T", "S", []StepSpec{spec(SkillThink, "w")}, false, "")

	wantList := []string{running, z[0], xy[0], xy[1], abc[1], abc[2], w[0]}
	if diff := cmp.Diff(wantList, stepIDs(a)); diff != "" {
		t.Errorf("step_list mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantList[1:], a.st.AgentStep.TodoList); diff != "" {
		t.Errorf("todo_list mismatch (-want +got):\n%s", diff)
	}
	wantWM := map[string]map[string][]string{"T": {
		"S":  {abc[0], abc[1], abc[2], xy[0], xy[1], w[0]},
		"S2": {z[0]},
	}}
	if diff := cmp.Diff(wantWM, a.st.WorkingMemory); diff != "" {
		t.Errorf("working_memory mismatch (-want +got):\n%s", diff)
	}
	for _, st := range a.st.AgentStep.StepList {
		if st.AgentID != a.id || st.TaskID != "T" || (st.ExecutionState != StateInit && st.StepID != running) {
			t.Errorf("step %+v: want agent %s, task T, state init", st, a.id)
		}
	}

	// With nothing pending, next appends after the running step.
	y := looseAgent(s, "y", SkillThink)
	y.mu.Lock()
	defer y.mu.Unlock()
	first := y.addStepsLocked("T", "S", []StepSpec{spec(SkillThink, "1")}, false, "")
	popForTest(y)
	second := y.addStepsLocked("T", "S", []StepSpec{spec(SkillThink, "2")}, true, "")
	if diff := cmp.Diff([]string{first[0], second[0]}, stepIDs(y)); diff != "" {
		t.Errorf("next on an empty todo list mismatch (-want +got):\n%s", diff)
	}
}

func TestAddStepsLinksInstructionGeneration(t *testing.T) {
	s := bareSystem(t, nil)
	a := looseAgent(s, "x")
	a.mu.Lock()
	defer a.mu.Unlock()
	tool := StepSpec{Type: StepTool, Executor: "search"}
	ids := a.addStepsLocked("T", "S", []StepSpec{
		spec(SkillInstructionGeneration, "ig1"), spec(SkillThink, "between"), tool,
		spec(SkillInstructionGeneration, "ig2"), tool,
		spec(SkillInstructionGeneration, "dangling"),
	}, false, "", stepOpts{replyTo: "r", returnWaitingID: "w"})
	want := []string{ids[2], "", "", ids[4], "", ""}
	var got []string
	for _, st := range a.st.AgentStep.StepList {
		got = append(got, st.TargetStepID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("target_step_id mismatch (-want +got):\n%s", diff)
	}
	if st := a.st.AgentStep.StepList[0]; st.ReplyTo != "r" || st.ReturnWaitingID != "w" {
		t.Errorf("first step reply_to %q return_waiting_id %q, want the opts", st.ReplyTo, st.ReturnWaitingID)
	}
	if st := a.st.AgentStep.StepList[1]; st.ReplyTo != "" || st.ReturnWaitingID != "" {
		t.Errorf("second step got opts it was not given: %+v", st)
	}
	if got := a.addStepsLocked("T", "S", nil, true, ""); got != nil {
		t.Errorf("adding no steps returned %v", got)
	}
}

func TestApplyPlan(t *testing.T) {
	s := bareSystem(t, nil)
	a := looseAgent(s, "x", SkillThink, SkillSendMessage, SkillDecision, SkillInstructionGeneration, SkillReflection)
	a.st.Tools = []string{"search"}
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := a.addStepsLocked("T", "S", []StepSpec{
		{StepIntention: "send", Type: StepSkill, Executor: SkillSendMessage, TextContent: "send text"},
		spec(SkillThink, "later"),
		{Type: StepTool, Executor: "search"},
	}, false, "", stepOpts{replyTo: "peer", returnWaitingID: "wait-1"})
	send := a.st.AgentStep.StepList[0]
	popForTest(a)

	t.Run("get_more_info and react_action insert next", func(t *testing.T) {
		result := map[string]any{}
		err := a.applyPlanLocked(&send, &Output{
			GetMoreInfo: &StepSpec{StepIntention: "find out", TextContent: "what is missing"},
			AddSteps:    []StepSpec{spec(SkillThink, "appended"), spec("fly", "rejected")},
		}, result)
		if err != nil {
			t.Fatal(err)
		}
		todo := a.st.AgentStep.TodoList
		dec, again := a.stepLocked(todo[0]), a.stepLocked(todo[1])
		if dec.Executor != SkillDecision || dec.TextContent != "what is missing" || dec.StepIntention != "find out" {
			t.Errorf("first inserted step %+v, want the decision", dec)
		}
		if again.Executor != SkillSendMessage || again.ReplyTo != "peer" || again.ReturnWaitingID != "wait-1" || again.TextContent != "send text" {
			t.Errorf("second inserted step %+v, want the same send_message answering the same message", again)
		}
		if todo[2] != ids[1] || todo[3] != ids[2] {
			t.Errorf("todo = %v, want the inserted steps before %v", todo, ids[1:])
		}
		rej, _ := result["rejected_steps"].([]Rejection)
		if len(rej) != 1 || rej[0].Step.Executor != "fly" {
			t.Errorf("rejected_steps = %+v, want the unknown skill", result["rejected_steps"])
		}
		// A send_message step's own steps get no trailing reflection.
		if last := a.stepLocked(todo[len(todo)-1]); last.TextContent != "appended" {
			t.Errorf("last pending step %+v, want the appended one", last)
		}
	})
	t.Run("react_action", func(t *testing.T) {
		if err := a.applyPlanLocked(&send, &Output{ReactAction: &StepSpec{StepIntention: "react", TextContent: "now"}}, map[string]any{}); err != nil {
			t.Fatal(err)
		}
		if st := a.stepLocked(a.st.AgentStep.TodoList[0]); st.Executor != SkillDecision || st.TextContent != "now" {
			t.Errorf("next step %+v, want the react_action decision", st)
		}
	})
	t.Run("tool instruction", func(t *testing.T) {
		call := &ToolCall{ToolName: "lookup", Arguments: map[string]any{"q": "x"}}
		if err := a.applyPlanLocked(&send, &Output{ToolInstruction: &ToolInstruction{StepID: ids[2], Instruction: call}}, map[string]any{}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(call, a.stepLocked(ids[2]).InstructionContent); diff != "" {
			t.Errorf("instruction_content mismatch (-want +got):\n%s", diff)
		}
		errs := []struct {
			stepID string
			kind   error
			field  string
		}{
			{"nope", ErrNotFound, `tool step "nope": no such step`},
			{ids[1], ErrInvalid, "is a skill step, not a tool step"},
		}
		for _, e := range errs {
			err := a.applyPlanLocked(&send, &Output{ToolInstruction: &ToolInstruction{StepID: e.stepID}}, map[string]any{})
			isErr(t, err, e.kind, e.field)
		}
		a.stepLocked(ids[2]).ExecutionState = StateFinished
		err := a.applyPlanLocked(&send, &Output{ToolInstruction: &ToolInstruction{StepID: ids[2]}}, map[string]any{})
		isErr(t, err, ErrInvalid, "already finished")
	})
}
