package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// queryWorld is a settled MAS with one task of two stages: s1 allocated to
// w1 (it ran: w1 summarised), s2 to w2 (not started).
type queryWorld struct {
	b               *testbed
	w1, w2          string
	task, s1, s2    string
	base, baseStage string
}

func newQueryWorld(t *testing.T) *queryWorld {
	b := newTestbed(t, nil)
	w := &queryWorld{b: b, w1: b.newAgent("w1"), w2: b.newAgent("w2"), base: b.sys.BaseTaskID(), baseStage: b.sys.BaseStageID()}
	w.task = b.newTask("report", w.w1, w.w2)
	ids := b.addStages(w.task,
		StageSpec{StageIntention: "collect facts", AgentAllocation: map[string]string{w.w1: "goal one"}},
		StageSpec{StageIntention: "write it up", AgentAllocation: map[string]string{w.w2: "goal two"}},
	)
	w.s1, w.s2 = ids[0], ids[1]
	b.waitFor("w1 to finish stage 1", func() bool { return b.stage(w.task, w.s1).EveryAgentState[w.w1] == AgentFinished })
	b.settle()
	return w
}

// taskStages projects task infos onto task ID -> stage IDs.
func taskStages(infos []TaskInfo) [][]string {
	var out [][]string
	for _, ti := range infos {
		row := []string{ti.TaskID}
		for _, st := range ti.StageList {
			row = append(row, st.StageID)
		}
		out = append(out, row)
	}
	return out
}

func briefIDs(bs []AgentBrief) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, b.AgentID)
	}
	return out
}

func TestQueryTypes(t *testing.T) {
	w := newQueryWorld(t)
	b := w.b
	mgr, op := b.mgr(), b.op()
	allIDs := []string{op, mgr, w.w1, w.w2}
	hidePool := func(a AgentState) AgentState { a.ConversationPool = nil; return a }

	tests := []struct {
		name     string
		asker    string
		q        AskInfoQuery
		markdown []string // substrings
		check    func(t *testing.T, data any)
	}{
		{
			name: "managed by the manager", asker: mgr, q: AskInfoQuery{Type: QueryManagedTaskAndStageInfo},
			markdown: []string{"#### task " + w.base, "#### task " + w.task, "- stage " + w.s2},
			check: func(t *testing.T, data any) {
				want := [][]string{{w.base, w.baseStage}, {w.task, w.s1, w.s2}}
				if diff := cmp.Diff(want, taskStages(data.([]TaskInfo))); diff != "" {
					t.Errorf("tasks mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "managed by a worker: none", asker: w.w1, q: AskInfoQuery{Type: QueryManagedTaskAndStageInfo},
			markdown: []string{"(none)"},
			check: func(t *testing.T, data any) {
				if got := data.([]TaskInfo); got == nil || len(got) != 0 {
					t.Errorf("data = %#v, want an empty non-nil list", got)
				}
			},
		},
		{
			name: "assigned: only the agent's stages", asker: w.w1, q: AskInfoQuery{Type: QueryAssignedTaskAndStageInfo},
			markdown: []string{"#### task " + w.task, "- stage " + w.s1, "completion_summary: done by w1"},
			check: func(t *testing.T, data any) {
				want := [][]string{{w.task, w.s1}}
				if diff := cmp.Diff(want, taskStages(data.([]TaskInfo))); diff != "" {
					t.Errorf("tasks mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "assigned to the manager", asker: mgr, q: AskInfoQuery{Type: QueryAssignedTaskAndStageInfo},
			check: func(t *testing.T, data any) {
				want := [][]string{{w.base, w.baseStage}, {w.task}}
				if diff := cmp.Diff(want, taskStages(data.([]TaskInfo))); diff != "" {
					t.Errorf("tasks mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "task_info", asker: w.w2, q: AskInfoQuery{Type: QueryTaskInfo, TaskID: w.task},
			markdown: []string{"#### task " + w.task + " — report", "- task_manager: " + mgr, "- execution_state: running", "- stage " + w.s1 + " [running]", "- stage " + w.s2 + " [init]"},
			check: func(t *testing.T, data any) {
				got := data.(TaskInfo)
				ts := b.task(w.task)
				if diff := cmp.Diff(taskInfo(ts), got); diff != "" {
					t.Errorf("task info mismatch (-want +got):\n%s", diff)
				}
				if got.ConversationLength == 0 || got.ConversationLength != len(ts.SharedConversationPool) {
					t.Errorf("conversation_length = %d, want %d", got.ConversationLength, len(ts.SharedConversationPool))
				}
				if diff := cmp.Diff([]string{mgr, op, w.w1, w.w2}, got.TaskGroup); diff != "" {
					t.Errorf("task_group mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "stage_info", asker: w.w1, q: AskInfoQuery{Type: QueryStageInfo, TaskID: w.task, StageID: w.s2},
			markdown: []string{"- stage " + w.s2 + " [init]: write it up", w.w2 + " (-): goal two"},
			check: func(t *testing.T, data any) {
				if diff := cmp.Diff(b.stage(w.task, w.s2), data.(StageState)); diff != "" {
					t.Errorf("stage mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "available_agents_config", asker: mgr, q: AskInfoQuery{Type: QueryAvailableAgentsConfig},
			markdown: []string{`template "researcher"`, `template "writer"`, "init_new_agent"},
			check: func(t *testing.T, data any) {
				if diff := cmp.Diff(b.sys.Templates(), data.([]AgentConfig)); diff != "" {
					t.Errorf("templates mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "all_agents", asker: mgr, q: AskInfoQuery{Type: QueryAllAgents},
			markdown: []string{"- " + op + ": operator", "- " + w.w2 + ": w2 — Researcher (llm, idle)"},
			check: func(t *testing.T, data any) {
				if diff := cmp.Diff(allIDs, briefIDs(data.([]AgentBrief))); diff != "" {
					t.Errorf("agents mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "team_agents without team_id", asker: mgr, q: AskInfoQuery{Type: QueryTeamAgents},
			check: func(t *testing.T, data any) {
				if diff := cmp.Diff(allIDs, briefIDs(data.([]AgentBrief))); diff != "" {
					t.Errorf("agents mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "team_agents of the default team", asker: mgr, q: AskInfoQuery{Type: QueryTeamAgents, TeamID: DefaultTeamID},
			check: func(t *testing.T, data any) {
				if diff := cmp.Diff(b.sys.AgentBriefs(), data.([]AgentBrief)); diff != "" {
					t.Errorf("agents mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "task_agents", asker: w.w1, q: AskInfoQuery{Type: QueryTaskAgents, TaskID: w.task},
			markdown: []string{"- " + mgr + ": manager", "- " + w.w1 + ": w1"},
			check: func(t *testing.T, data any) {
				if diff := cmp.Diff([]string{mgr, op, w.w1, w.w2}, briefIDs(data.([]AgentBrief))); diff != "" {
					t.Errorf("agents mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "stage_agents", asker: w.w1, q: AskInfoQuery{Type: QueryStageAgents, TaskID: w.task, StageID: w.s1},
			markdown: []string{"- " + w.w1 + ": w1", "stage goal: goal one"},
			check: func(t *testing.T, data any) {
				if diff := cmp.Diff([]string{w.w1}, briefIDs(data.([]AgentBrief))); diff != "" {
					t.Errorf("agents mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "one agent", asker: w.w2, q: AskInfoQuery{Type: QueryAgent, AgentID: StringList{w.w1}},
			markdown: []string{"#### agent " + w.w1 + " — w1", "- role: Researcher", "- pending steps: 0"},
			check: func(t *testing.T, data any) {
				if diff := cmp.Diff([]AgentState{b.agent(w.w1)}, data.([]AgentState)); diff != "" {
					t.Errorf("agent mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "several agents, the operator's conversations hidden", asker: mgr, q: AskInfoQuery{Type: QueryAgent, AgentID: StringList{op, w.w1}},
			markdown: []string{"#### agent " + op + " — operator", "#### agent " + w.w1 + " — w1", "- kind: human"},
			check: func(t *testing.T, data any) {
				want := []AgentState{hidePool(b.agent(op)), b.agent(w.w1)}
				if diff := cmp.Diff(want, data.([]AgentState)); diff != "" {
					t.Errorf("agents mismatch (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "skills_and_tools", asker: w.w1, q: AskInfoQuery{Type: QuerySkillsAndTools},
			markdown: []string{"#### skills", "- **planning**: ", "- **decision**: ", "#### tools (MCP servers)", "(none configured)"},
			check: func(t *testing.T, data any) {
				want := map[string]any{"skills": loadTexts(t).SkillGuides(), "tools": map[string]string{}}
				if diff := cmp.Diff(want, data); diff != "" {
					t.Errorf("data mismatch (-want +got):\n%s", diff)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := b.sys.Query(tt.asker, tt.q)
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			if res.Type != tt.q.Type {
				t.Errorf("type = %q, want %q", res.Type, tt.q.Type)
			}
			head := "### Result of ask_info query " + tt.q.Type
			if !strings.HasPrefix(res.Markdown, head) {
				t.Errorf("markdown does not start with %q:\n%s", head, res.Markdown)
			}
			for _, s := range tt.markdown {
				if !strings.Contains(res.Markdown, s) {
					t.Errorf("markdown lacks %q:\n%s", s, res.Markdown)
				}
			}
			tt.check(t, res.Data)
		})
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.q.Type] = true
	}
	for _, typ := range QueryTypes {
		if !covered[typ] {
			t.Errorf("query type %s is not covered", typ)
		}
	}
}

func TestQueryErrors(t *testing.T) {
	w := newQueryWorld(t)
	tests := []struct {
		name  string
		q     AskInfoQuery
		kind  error
		field string
	}{
		{"empty type", AskInfoQuery{}, ErrInvalid, "type"},
		{"unknown type", AskInfoQuery{Type: "everything"}, ErrInvalid, `type "everything"`},
		{"task_info without task", AskInfoQuery{Type: QueryTaskInfo}, ErrInvalid, "task_id"},
		{"task_info unknown task", AskInfoQuery{Type: QueryTaskInfo, TaskID: "t-404"}, ErrNotFound, `task_id "t-404"`},
		{"stage_info without task", AskInfoQuery{Type: QueryStageInfo, StageID: w.s1}, ErrInvalid, "task_id"},
		{"stage_info without stage", AskInfoQuery{Type: QueryStageInfo, TaskID: w.task}, ErrInvalid, "stage_id"},
		{"stage_info unknown stage", AskInfoQuery{Type: QueryStageInfo, TaskID: w.task, StageID: "s-404"}, ErrNotFound, `stage_id "s-404"`},
		{"stage_info stage of another task", AskInfoQuery{Type: QueryStageInfo, TaskID: w.base, StageID: w.s1}, ErrNotFound, "stage_id"},
		{"team_agents unknown team", AskInfoQuery{Type: QueryTeamAgents, TeamID: "blue"}, ErrNotFound, `team_id "blue"`},
		{"task_agents without task", AskInfoQuery{Type: QueryTaskAgents}, ErrInvalid, "task_id"},
		{"task_agents unknown task", AskInfoQuery{Type: QueryTaskAgents, TaskID: "t-404"}, ErrNotFound, "task_id"},
		{"stage_agents without stage", AskInfoQuery{Type: QueryStageAgents, TaskID: w.task}, ErrInvalid, "stage_id"},
		{"stage_agents unknown stage", AskInfoQuery{Type: QueryStageAgents, TaskID: w.task, StageID: "s-404"}, ErrNotFound, "stage_id"},
		{"stage_agents unknown task", AskInfoQuery{Type: QueryStageAgents, TaskID: "t-404", StageID: w.s1}, ErrNotFound, "task_id"},
		{"agent without id", AskInfoQuery{Type: QueryAgent}, ErrInvalid, "agent_id"},
		{"agent unknown id", AskInfoQuery{Type: QueryAgent, AgentID: StringList{"a-404"}}, ErrNotFound, `agent_id "a-404"`},
		{"agent one of several unknown", AskInfoQuery{Type: QueryAgent, AgentID: StringList{w.w1, "a-404"}}, ErrNotFound, `agent_id "a-404"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := w.b.sys.Query(w.w1, tt.q)
			if res != nil {
				t.Errorf("result %+v alongside the error", res)
			}
			isErr(t, err, tt.kind, tt.field)
		})
	}
}

func TestAskInfoStep(t *testing.T) {
	b := newTestbed(t, nil)
	mgr, base, baseStage := b.mgr(), b.sys.BaseTaskID(), b.sys.BaseStageID()
	w1 := b.newAgent("w1")
	events := b.sys.Subscribe(1 << 14)
	defer events.Close()
	b.sc.onText("ask for all agents", func(context.Context, *ExecInput) *Output {
		return &Output{AskInfo: &AskInfoQuery{Type: QueryAllAgents}}
	})
	ids := b.inject(mgr, base, baseStage, false, spec(SkillAskInfo, "ask for all agents"), spec(SkillThink, "use the answer"))
	b.waitFor("the think step", func() bool { return b.stepDone(mgr, ids[1]) })
	b.settle()

	var got []string
	for _, c := range b.sc.callsOf("manager", "") {
		got = append(got, c.Skill)
	}
	if diff := cmp.Diff([]string{SkillAskInfo, SkillProcessMessage, SkillThink}, got); diff != "" {
		t.Errorf("manager's executions mismatch (-want +got):\n%s", diff)
	}
	ask, _ := b.step(mgr, ids[0])
	if ask.ExecutionState != StateFinished {
		t.Errorf("ask_info step is %s (%v), want finished", ask.ExecutionState, ask.ExecuteResult["error"])
	}
	pm := b.steps(mgr, func(s StepState) bool { return s.Executor == SkillProcessMessage })
	if len(pm) != 1 {
		t.Fatalf("process_message steps = %d, want 1\n%s", len(pm), b.dump())
	}
	if pm[0].TaskID != base || pm[0].StageID != baseStage {
		t.Errorf("answer step in %s/%s, want the asking step's %s/%s", pm[0].TaskID, pm[0].StageID, base, baseStage)
	}
	for _, s := range []string{"Result of ask_info query all_agents", w1, SystemSender} {
		if !strings.Contains(pm[0].TextContent, s) {
			t.Errorf("answer step text lacks %q:\n%s", s, pm[0].TextContent)
		}
	}
	if a := b.agent(mgr); len(a.StepLock) != 0 || len(a.Waits) != 0 {
		t.Errorf("lock = %v, waits = %+v; want released", a.StepLock, a.Waits)
	}
	var lockEvents []string
	for len(events.C) > 0 {
		ev := <-events.C
		if ev.AgentID == mgr && strings.HasPrefix(ev.Detail, "step_lock") {
			lockEvents = append(lockEvents, ev.Detail)
		}
	}
	if diff := cmp.Diff([]string{"step_lock", "step_lock_released"}, lockEvents); diff != "" {
		t.Errorf("manager's step-lock events mismatch (-want +got):\n%s", diff)
	}
}

func TestAskInfoStepBadQuery(t *testing.T) {
	b := newTestbed(t, nil)
	mgr, base, baseStage := b.mgr(), b.sys.BaseTaskID(), b.sys.BaseStageID()
	events := b.sys.Subscribe(1 << 14)
	defer events.Close()
	b.sc.onText("ask badly", func(context.Context, *ExecInput) *Output {
		return &Output{AskInfo: &AskInfoQuery{Type: QueryTaskInfo, TaskID: "t-404"}}
	})
	id := b.inject(mgr, base, baseStage, false, spec(SkillAskInfo, "ask badly"))[0]
	b.waitFor("the ask_info step", func() bool { return b.stepDone(mgr, id) })
	b.settle()

	st, _ := b.step(mgr, id)
	errText, _ := st.ExecuteResult["error"].(string)
	if st.ExecutionState != StateFailed || !strings.Contains(errText, `task_id "t-404"`) {
		t.Errorf("step %s with error %q, want failed naming task_id", st.ExecutionState, errText)
	}
	a := b.agent(mgr)
	if len(a.StepLock) != 0 || len(a.Waits) != 0 {
		t.Errorf("lock = %v, waits = %+v; want none", a.StepLock, a.Waits)
	}
	if pm := b.steps(mgr, func(s StepState) bool { return s.Executor == SkillProcessMessage }); len(pm) != 0 {
		t.Errorf("a bad query produced %d answer steps", len(pm))
	}
	for len(events.C) > 0 {
		if ev := <-events.C; ev.AgentID == mgr && ev.Detail == "step_lock" {
			t.Errorf("the step lock was engaged for a bad query: %+v", ev)
		}
	}
}
