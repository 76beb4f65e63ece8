package skills

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/llm"
)

// execute runs one skill end to end against a fake model that gives the
// replies in order, and returns the output and the calls the fake saw.
func execute(t *testing.T, name string, in *engine.ExecInput, replies ...fakellm.Reply) (*engine.Output, []fakellm.Call) {
	t.Helper()
	fake := fakellm.NewInstant(nil)
	for _, r := range replies {
		fake.Script(fakellm.Rule{Reply: r})
	}
	out := newTestRunner(t, loadSet(t, "en"), name, fake).Execute(t.Context(), in)
	if out == nil {
		t.Fatalf("%s: Execute returned nil", name)
	}
	if u := fake.Unmatched(); len(u) > 0 {
		t.Errorf("%d calls beyond the script, first: %s step %s repair=%t", len(u), u[0].Skill, u[0].StepID, u[0].Repair)
	}
	return out, fake.Calls()
}

func replyWith(s string) fakellm.Reply { return fakellm.Reply{Content: s} }

// ignoreRun leaves out what the table does not state: usage and the error
// (checked on its own).
var ignoreRun = cmpopts.IgnoreFields(engine.Output{}, "Err", "Usage")

var (
	specSearch  = engine.StepSpec{StepIntention: "Search for sources", Type: "tool", Executor: "web_search", TextContent: "Search for MCP adoption in 2025."}
	specIG      = engine.StepSpec{StepIntention: "Prepare the search", Type: "skill", Executor: "instruction_generation", TextContent: "Generate the search call."}
	specReflect = engine.StepSpec{StepIntention: "Check the results", Type: "skill", Executor: "reflection", TextContent: "Check the sources found."}
	specSummary = engine.StepSpec{StepIntention: "Summarise my work", Type: "skill", Executor: "summary", TextContent: "Summarise the sources."}
	specSend    = engine.StepSpec{StepIntention: "Send the list", Type: "skill", Executor: "send_message", TextContent: "Send Bob the list."}
)

const (
	jsonPlan     = `[{"step_intention": "Prepare the search", "type": "skill", "executor": "instruction_generation", "text_content": "Generate the search call."}, {"step_intention": "Search for sources", "type": "tool", "executor": "web_search", "text_content": "Search for MCP adoption in 2025."}, {"step_intention": "Check the results", "type": "skill", "executor": "reflection", "text_content": "Check the sources found."}]`
	jsonToolPair = `[{"step_intention": "Prepare the search", "type": "skill", "executor": "instruction_generation", "text_content": "Generate the search call."}, {"step_intention": "Search for sources", "type": "tool", "executor": "web_search", "text_content": "Search for MCP adoption in 2025."}]`
	jsonSend     = `{"receiver": ["agent-2"], "message": "Here are the sources.", "stage_relative": "stage-1", "need_reply": true, "waiting": true}`
	jsonMoreInfo = `{"step_intention": "Find Bob's agent_id", "text_content": "Ask which agents take part in task-1."}`
)

func tagged(tag, body string) string { return fakellm.Block(tag, body) }

var (
	wantPlan     = []engine.StepSpec{specIG, specSearch, specReflect}
	wantToolPair = []engine.StepSpec{specIG, specSearch}
	wantSent     = engine.OutgoingMessage{Receiver: engine.StringList{"agent-2"}, Message: "Here are the sources.", StageRelative: "stage-1", NeedReply: true, Waiting: true}
	wantMoreInfo = engine.StepSpec{StepIntention: "Find Bob's agent_id", TextContent: "Ask which agents take part in task-1."}
)

func strPtr(s string) *string { return &s }

// TestExecuteOutputs drives every skill end to end with a good answer, in
// the shapes models write (fences, Python literals, trailing commas,
// reasoning with decoys, repeated blocks), and checks the Output.
func TestExecuteOutputs(t *testing.T) {
	tests := []struct {
		name   string
		skill  string
		answer string
		want   *engine.Output
	}{
		// planning
		{"planning", "planning", tagged("planned_step", jsonPlan),
			&engine.Output{AddSteps: wantPlan, Result: map[string]any{"planned_step": wantPlan}}},
		{"planning in a json fence", "planning", "<planned_step>\n```json\n" + jsonPlan + "\n```\n</planned_step>",
			&engine.Output{AddSteps: wantPlan, Result: map[string]any{"planned_step": wantPlan}}},
		{"planning, whole answer fenced", "planning", "```json\n" + tagged("planned_step", jsonPlan) + "\n```",
			&engine.Output{AddSteps: wantPlan, Result: map[string]any{"planned_step": wantPlan}}},
		{"planning with trailing commas and comments", "planning",
			"<planned_step>\n[\n  // search first\n  {\"step_intention\": \"Search for sources\", \"type\": \"tool\", \"executor\": \"web_search\", \"text_content\": \"Search for MCP adoption in 2025.\",},\n]\n</planned_step>",
			&engine.Output{AddSteps: []engine.StepSpec{specSearch}, Result: map[string]any{"planned_step": []engine.StepSpec{specSearch}}}},
		{"planning after reasoning with a decoy block", "planning",
			"<think>First idea: <planned_step>[{\"step_intention\": \"decoy\", \"type\": \"skill\", \"executor\": \"think\", \"text_content\": \"x\"}]</planned_step> no.</think>\n" + tagged("planned_step", jsonPlan),
			&engine.Output{AddSteps: wantPlan, Result: map[string]any{"planned_step": wantPlan}}},
		{"planning block repeated: last wins", "planning",
			tagged("planned_step", `[{"step_intention": "old", "type": "skill", "executor": "think", "text_content": "x"}]`) + "\nCorrected:\n" + tagged("planned_step", jsonPlan),
			&engine.Output{AddSteps: wantPlan, Result: map[string]any{"planned_step": wantPlan}}},
		{"planning [] (the engine appends the reflection)", "planning", tagged("planned_step", "[]"),
			&engine.Output{AddSteps: []engine.StepSpec{}, Result: map[string]any{"planned_step": []engine.StepSpec{}}}},

		// reflection
		{"reflection continues", "reflection", tagged("reflection_step", `[{"step_intention": "Send the list", "type": "skill", "executor": "send_message", "text_content": "Send Bob the list."}, {"step_intention": "Summarise my work", "type": "skill", "executor": "summary", "text_content": "Summarise the sources."}]`),
			&engine.Output{AddSteps: []engine.StepSpec{specSend, specSummary}, Result: map[string]any{"reflection_step": []engine.StepSpec{specSend, specSummary}}}},
		{"reflection []", "reflection", tagged("reflection_step", "[]"),
			&engine.Output{AddSteps: []engine.StepSpec{}, Result: map[string]any{"reflection_step": []engine.StepSpec{}}}},
		{"reflection empty block", "reflection", "<reflection_step></reflection_step>",
			&engine.Output{AddSteps: []engine.StepSpec{}, Result: map[string]any{"reflection_step": []engine.StepSpec{}}}},

		// summary
		{"summary", "summary", tagged("summary", "I found five sources and sent them to Bob."),
			&engine.Output{Completion: strPtr("I found five sources and sent them to Bob."), Result: map[string]any{"summary": "I found five sources and sent them to Bob."}}},
		{"summary after reasoning with a decoy", "summary", "<think>Draft: <summary>decoy</summary></think>\n<summary>\nReal summary.\n</summary>",
			&engine.Output{Completion: strPtr("Real summary."), Result: map[string]any{"summary": "Real summary."}}},

		// think, quick_think
		{"think", "think", tagged("_think", "Source 2 is primary; source 4 repeats it."),
			&engine.Output{Result: map[string]any{"think": "Source 2 is primary; source 4 repeats it."}}},
		{"think does not take <think>", "think", "<think>reasoning</think>" + tagged("_think", "answer"),
			&engine.Output{Result: map[string]any{"think": "answer"}}},
		{"quick_think", "quick_think", tagged("quick_think", "1. MCP adoption 2025"),
			&engine.Output{Result: map[string]any{"quick_think": "1. MCP adoption 2025"}}},
		{"quick_think repeated: last wins", "quick_think", tagged("quick_think", "first") + "\n" + tagged("quick_think", "second"),
			&engine.Output{Result: map[string]any{"quick_think": "second"}}},

		// send_message
		{"send_message", "send_message", tagged("send_message", jsonSend),
			&engine.Output{SendMessage: &wantSent, Result: map[string]any{"send_message": wantSent}}},
		{"send_message with Python literals and a lone receiver", "send_message",
			tagged("send_message", `{"receiver": "agent-2", "message": "Here are the sources.", "stage_relative": "stage-1", "need_reply": True, "waiting": True}`),
			&engine.Output{SendMessage: &wantSent, Result: map[string]any{"send_message": wantSent}}},
		{"send_message without receiver (a reply)", "send_message", tagged("send_message", `{"message": "Here are the sources."}`),
			&engine.Output{SendMessage: &engine.OutgoingMessage{Message: "Here are the sources."}, Result: map[string]any{"send_message": engine.OutgoingMessage{Message: "Here are the sources."}}}},
		{"send_message get_more_info", "send_message", tagged("get_more_info", jsonMoreInfo),
			&engine.Output{GetMoreInfo: &wantMoreInfo, Result: map[string]any{"get_more_info": wantMoreInfo}}},
		{"send_message then get_more_info: last wins", "send_message", tagged("send_message", jsonSend) + "\n" + tagged("get_more_info", jsonMoreInfo),
			&engine.Output{GetMoreInfo: &wantMoreInfo, Result: map[string]any{"get_more_info": wantMoreInfo}}},
		{"get_more_info then send_message: last wins", "send_message", tagged("get_more_info", jsonMoreInfo) + "\n" + tagged("send_message", jsonSend),
			&engine.Output{SendMessage: &wantSent, Result: map[string]any{"send_message": wantSent}}},
		{"send_message with a get_more_info decoy in reasoning", "send_message", "<think>" + tagged("get_more_info", jsonMoreInfo) + "</think>" + tagged("send_message", jsonSend),
			&engine.Output{SendMessage: &wantSent, Result: map[string]any{"send_message": wantSent}}},

		// process_message
		{"process_message", "process_message", tagged("process_message", "Bob sent his outline: adoption, then risks."),
			&engine.Output{Result: map[string]any{"process_message": "Bob sent his outline: adoption, then risks."}}},
		{"process_message with react_action", "process_message",
			tagged("process_message", "Bob needs the sources now.") + "\n" + tagged("react_action", `{"step_intention": "Send Bob the sources", "text_content": "Bob (agent-2) needs the source list before noon.",}`),
			&engine.Output{
				ReactAction: &engine.StepSpec{StepIntention: "Send Bob the sources", TextContent: "Bob (agent-2) needs the source list before noon."},
				Result: map[string]any{"process_message": "Bob needs the sources now.",
					"react_action": engine.StepSpec{StepIntention: "Send Bob the sources", TextContent: "Bob (agent-2) needs the source list before noon."}}}},

		// task_manager, each action
		{"task_manager add_task", "task_manager", tagged("task_instruction", `{"action": "add_task", "task_name": "MCP report", "task_intention": "Write a report on MCP adoption."}`),
			taskOut(engine.TaskInstruction{Action: "add_task", TaskName: "MCP report", TaskIntention: "Write a report on MCP adoption."})},
		{"task_manager add_stage with trailing commas", "task_manager",
			tagged("task_instruction", `{"action": " add_stage ", "task_id": "task-1", "stages": [{"stage_intention": "Review the report", "agent_allocation": {"agent-3": "Review Bob's report",},},],}`),
			taskOut(engine.TaskInstruction{Action: "add_stage", TaskID: "task-1", Stages: []engine.StageSpec{{StageIntention: "Review the report", AgentAllocation: map[string]string{"agent-3": "Review Bob's report"}}}})},
		{"task_manager finish_stage", "task_manager", tagged("task_instruction", `{"action": "finish_stage", "task_id": "task-1", "stage_id": "stage-1"}`),
			taskOut(engine.TaskInstruction{Action: "finish_stage", TaskID: "task-1", StageID: "stage-1"})},
		{"task_manager retry_stage", "task_manager",
			tagged("task_instruction", `{"action": "retry_stage", "task_id": "task-1", "old_stage_id": "stage-1", "new_stage_intention": "Collect sources from 2025 only", "new_agent_allocation": {"agent-1": "Five sources from 2025"}}`),
			taskOut(engine.TaskInstruction{Action: "retry_stage", TaskID: "task-1", OldStageID: "stage-1", NewStageIntention: "Collect sources from 2025 only", NewAgentAllocation: map[string]string{"agent-1": "Five sources from 2025"}})},
		{"task_manager finish_task", "task_manager", tagged("task_instruction", `{"action": "finish_task", "task_id": "task-1", "summary": "The report is at /data/reports/mcp.md."}`),
			taskOut(engine.TaskInstruction{Action: "finish_task", TaskID: "task-1", Summary: "The report is at /data/reports/mcp.md."})},

		// agent_manager
		{"agent_manager init_new_agent from a template", "agent_manager",
			tagged("agent_instruction", `{"action": "init_new_agent", "agent_config": {"template": "reviewer"}}`),
			agentOut(engine.AgentInstruction{Action: "init_new_agent", AgentConfig: &engine.AgentConfig{Template: "reviewer"}})},
		{"agent_manager init_new_agent full config", "agent_manager",
			tagged("agent_instruction", `{"action": "init_new_agent", "agent_config": {"name": "Carol", "role": "Reviewer", "profile": "Reviews reports.", "skills": ["planning", "reflection", "summary"], "tools": ["filesystem"]}}`),
			agentOut(engine.AgentInstruction{Action: "init_new_agent", AgentConfig: &engine.AgentConfig{Name: "Carol", Role: "Reviewer", Profile: "Reviews reports.", Skills: []string{"planning", "reflection", "summary"}, Tools: []string{"filesystem"}}})},
		{"agent_manager add_task_participant", "agent_manager",
			tagged("agent_instruction", `{"action": "add_task_participant", "task_id": "task-1", "agents": ["agent-3", "agent-4"]}`),
			agentOut(engine.AgentInstruction{Action: "add_task_participant", TaskID: "task-1", Agents: engine.StringList{"agent-3", "agent-4"}})},
		{"agent_manager add_task_participant, lone agent", "agent_manager",
			tagged("agent_instruction", `{"action": "add_task_participant", "task_id": "task-1", "agents": "agent-3"}`),
			agentOut(engine.AgentInstruction{Action: "add_task_participant", TaskID: "task-1", Agents: engine.StringList{"agent-3"}})},

		// tool_decision
		{"tool_decision empty block stops", "tool_decision", "The report is read.\n<tool_decision></tool_decision>",
			&engine.Output{AddNextSteps: []engine.StepSpec{}, Result: map[string]any{"tool_decision": []engine.StepSpec{}}}},
		{"tool_decision [] stops", "tool_decision", tagged("tool_decision", "[]"),
			&engine.Output{AddNextSteps: []engine.StepSpec{}, Result: map[string]any{"tool_decision": []engine.StepSpec{}}}},
		{"tool_decision None stops", "tool_decision", tagged("tool_decision", "None"),
			&engine.Output{AddNextSteps: []engine.StepSpec{}, Result: map[string]any{"tool_decision": []engine.StepSpec{}}}},
		{"tool_decision continues", "tool_decision", tagged("tool_decision", jsonToolPair),
			&engine.Output{AddNextSteps: wantToolPair, Result: map[string]any{"tool_decision": wantToolPair}}},
		{"tool_decision empty block last wins", "tool_decision", tagged("tool_decision", jsonToolPair) + "\nOn second thought:\n<tool_decision>\n</tool_decision>",
			&engine.Output{AddNextSteps: []engine.StepSpec{}, Result: map[string]any{"tool_decision": []engine.StepSpec{}}}},

		// decision
		{"decision", "decision", tagged("decision_step", `[{"step_intention": "Send the list", "type": "skill", "executor": "send_message", "text_content": "Send Bob the list."}]`),
			&engine.Output{AddNextSteps: []engine.StepSpec{specSend}, Result: map[string]any{"decision_step": []engine.StepSpec{specSend}}}},
	}
	for _, q := range engine.QueryTypes {
		query, body := askQuery(q)
		tests = append(tests, struct {
			name   string
			skill  string
			answer string
			want   *engine.Output
		}{"ask_info " + q, "ask_info", tagged("ask_info", body),
			&engine.Output{AskInfo: &query, Result: map[string]any{"ask_instruction": query}}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, calls := execute(t, tt.skill, fixture(tt.skill), replyWith(tt.answer))
			if out.Err != nil {
				t.Fatalf("Err = %v", out.Err)
			}
			if len(calls) != 1 {
				t.Errorf("got %d calls, want 1", len(calls))
			}
			if diff := cmp.Diff(tt.want, out, ignoreRun); diff != "" {
				t.Errorf("output mismatch (-want +got):\n%s", diff)
			}
			// nil and empty differ for the engine: an empty list is an answer
			// (reflection: "goal met"; tool_decision: "stop").
			if tt.want.AddSteps != nil && out.AddSteps == nil {
				t.Errorf("AddSteps is nil, want a non-nil list")
			}
			if tt.want.AddNextSteps != nil && out.AddNextSteps == nil {
				t.Errorf("AddNextSteps is nil, want a non-nil list")
			}
		})
	}
}

func taskOut(ti engine.TaskInstruction) *engine.Output {
	return &engine.Output{TaskInstruction: &ti, Result: map[string]any{"task_instruction": ti}}
}

func agentOut(ai engine.AgentInstruction) *engine.Output {
	return &engine.Output{AgentInstruction: &ai, Result: map[string]any{"agent_instruction": ai}}
}

// askQuery returns a query of each type with the fields it needs, and the
// JSON a model writes for it.
func askQuery(typ string) (engine.AskInfoQuery, string) {
	q := engine.AskInfoQuery{Type: typ}
	switch typ {
	case engine.QueryTaskInfo, engine.QueryTaskAgents:
		q.TaskID = "task-1"
	case engine.QueryStageInfo, engine.QueryStageAgents:
		q.TaskID, q.StageID = "task-1", "stage-1"
	case engine.QueryTeamAgents:
		q.TeamID = "team-1"
	case engine.QueryAgent:
		q.AgentID = engine.StringList{"agent-2", "agent-3"}
	}
	return q, fakellm.JSON(q)
}

// TestExecuteRejectedAnswers: answers that break a skill's contract get the
// one repair round, with the exact parse error, and the corrected answer is
// used.
func TestExecuteRejectedAnswers(t *testing.T) {
	tests := []struct {
		name, skill, bad, good, wantErr string
	}{
		{"planning: missing block", "planning", fakellm.Garbage, tagged("planned_step", jsonPlan), "missing <planned_step> block"},
		{"planning: empty block", "planning", "<planned_step></planned_step>", tagged("planned_step", jsonPlan), "empty <planned_step> block"},
		{"planning: empty executor", "planning", tagged("planned_step", `[{"step_intention": "x", "type": "skill", "executor": " ", "text_content": "y"}]`), tagged("planned_step", jsonPlan), "<planned_step> step 0: executor is empty"},
		{"planning: null", "planning", tagged("planned_step", "null"), tagged("planned_step", jsonPlan), "<planned_step>: null is not a list of steps"},
		{"planning: None", "planning", tagged("planned_step", "None"), tagged("planned_step", jsonPlan), "<planned_step>: null is not a list of steps"},
		{"planning: not a list", "planning", tagged("planned_step", `{"step_intention": "x"}`), tagged("planned_step", jsonPlan), "<planned_step> block"},
		{"reflection: invalid JSON", "reflection", tagged("reflection_step", `[{"step_intention": }]`), tagged("reflection_step", "[]"), "<reflection_step> block: invalid JSON"},
		{"summary: empty", "summary", "<summary>  </summary>", tagged("summary", "done"), "empty <summary> block"},
		{"summary: only in reasoning", "summary", "<think><summary>done</summary></think>", tagged("summary", "done"), "missing <summary> block"},
		{"instruction_generation: resource without uri", "instruction_generation", tagged("tool_instruction", `{"resource_name": "readme", "arguments": {}}`), tagged("tool_instruction", `{"instruction_type": "get_description"}`), `a resource call needs "arguments": {"uri"`},
		{"instruction_generation: arguments not an object", "instruction_generation", tagged("tool_instruction", `{"tool_name": "read_file", "arguments": "/data/a.md"}`), tagged("tool_instruction", `{"instruction_type": "get_description"}`), `"arguments" must be an object`},
		{"instruction_generation: unknown instruction_type", "instruction_generation", tagged("tool_instruction", `{"instruction_type": "list_tools"}`), tagged("tool_instruction", `{"instruction_type": "get_description"}`), `instruction_type "list_tools"`},
		{"instruction_generation: a name not a string", "instruction_generation", tagged("tool_instruction", `{"tool_name": "read_file", "prompt_name": 5}`), tagged("tool_instruction", `{"instruction_type": "get_description"}`), `"prompt_name" must be a string`},
		{"instruction_generation: no capability named", "instruction_generation", tagged("tool_instruction", `{"arguments": {"path": "/x"}}`), tagged("tool_instruction", `{"instruction_type": "get_description"}`), `one of "tool_name", "resource_name", "prompt_name"`},
		{"think: missing block", "think", "<think>x</think>", tagged("_think", "y"), "missing <_think> block"},
		{"quick_think: unclosed", "quick_think", "<quick_think>x", tagged("quick_think", "y"), "<quick_think> is never closed"},
		{"send_message: empty message", "send_message", tagged("send_message", `{"receiver": ["agent-2"], "message": " "}`), tagged("send_message", jsonSend), "message is empty"},
		{"send_message: receiver [null]", "send_message", tagged("send_message", `{"receiver": [null], "message": "hi"}`), tagged("send_message", jsonSend), "<send_message>: receiver[0] is null or blank"},
		{"send_message: a blank receiver among others", "send_message", tagged("send_message", `{"receiver": ["agent-2", " "], "message": "hi"}`), tagged("send_message", jsonSend), "<send_message>: receiver[1] is null or blank"},
		{"send_message: need_reply as a string", "send_message", tagged("send_message", `{"receiver": ["agent-2"], "message": "hi", "need_reply": "yes"}`), tagged("send_message", jsonSend), `"need_reply" must be a boolean`},
		{"send_message: get_more_info without text", "send_message", tagged("get_more_info", `{"step_intention": "Find it"}`), tagged("send_message", jsonSend), "<get_more_info>: text_content is empty"},
		{"process_message: missing digest", "process_message", tagged("react_action", jsonMoreInfo), tagged("process_message", "ok"), "missing <process_message> block"},
		{"process_message: bad react_action", "process_message", tagged("process_message", "ok") + tagged("react_action", `{"text_content": "x"}`), tagged("process_message", "ok"), "<react_action>: step_intention is empty"},
		{"task_manager: unknown action", "task_manager", tagged("task_instruction", `{"action": "cancel_task", "task_id": "task-1"}`), tagged("task_instruction", `{"action": "finish_task", "task_id": "task-1"}`), `action "cancel_task": must be one of add_task`},
		{"agent_manager: unknown action", "agent_manager", tagged("agent_instruction", `{"action": "delete_agent", "agent_id": "agent-3"}`), tagged("agent_instruction", `{"action": "add_task_participant", "task_id": "task-1", "agents": ["agent-3"]}`), `action "delete_agent": must be init_new_agent or add_task_participant`},
		{"agent_manager: init_new_agent without config", "agent_manager", tagged("agent_instruction", `{"action": "init_new_agent"}`), tagged("agent_instruction", `{"action": "init_new_agent", "agent_config": {"template": "reviewer"}}`), "init_new_agent needs agent_config"},
		{"agent_manager: agents [null]", "agent_manager", tagged("agent_instruction", `{"action": "add_task_participant", "task_id": "task-1", "agents": ["agent-3", null]}`), tagged("agent_instruction", `{"action": "add_task_participant", "task_id": "task-1", "agents": ["agent-3"]}`), "<agent_instruction>: agents[1] is null or blank"},
		{"ask_info: agent_id [null]", "ask_info", tagged("ask_info", `{"type": "agent", "agent_id": [null]}`), tagged("ask_info", `{"type": "all_agents"}`), "<ask_info>: agent_id[0] is null or blank"},
		{"ask_info: unknown type", "ask_info", tagged("ask_info", `{"type": "weather"}`), tagged("ask_info", `{"type": "all_agents"}`), `type "weather": must be one of managed_task_and_stage_info`},
		{"tool_decision: invalid JSON", "tool_decision", tagged("tool_decision", `[{"step_intention": "x",,}]`), tagged("tool_decision", ""), "<tool_decision> block"},
		{"decision: object instead of list", "decision", tagged("decision_step", `{"step_intention": "x", "type": "skill", "executor": "think", "text_content": "y"}`), tagged("decision_step", "[]"), "<decision_step> block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, calls := execute(t, tt.skill, fixture(tt.skill), replyWith(tt.bad), replyWith(tt.good))
			if out.Err != nil {
				t.Fatalf("Err = %v after a good repair answer", out.Err)
			}
			if len(calls) != 2 {
				t.Fatalf("got %d calls, want 2", len(calls))
			}
			checkRepairCall(t, calls, tt.bad, tt.wantErr)
		})
	}
}

// checkRepairCall checks the second call is the first one plus the bad
// answer plus a user message with the parse error.
func checkRepairCall(t *testing.T, calls []fakellm.Call, bad, wantErr string) {
	t.Helper()
	first, second := calls[0], calls[1]
	if first.Repair || !second.Repair {
		t.Errorf("repair flags = %t, %t; want false, true", first.Repair, second.Repair)
	}
	if len(second.Messages) != 4 {
		t.Fatalf("repair call has %d messages, want 4", len(second.Messages))
	}
	if diff := cmp.Diff(first.Messages, second.Messages[:2]); diff != "" {
		t.Errorf("repair call does not repeat the prompt (-first +repair):\n%s", diff)
	}
	if m := second.Messages[2]; m.Role != llm.RoleAssistant || m.Content != bad {
		t.Errorf("repair call's third message = %s %q, want the assistant's answer %q", m.Role, m.Content, bad)
	}
	last := second.Messages[3]
	if last.Role != llm.RoleUser || !strings.Contains(last.Content, wantErr) {
		t.Errorf("repair request = %s %q, want a user message containing %q", last.Role, last.Content, wantErr)
	}
}

// TestExecuteRepairHintForBlockInReasoning: parse.go words a missing block
// that the model wrote only inside <think>…</think> with a hint saying so
// (missingHint), the most useful repair message there is. The runner strips
// the reasoning before the skill's parser sees the answer, so the hint can
// never fire and the model only hears "missing <summary> block".
func TestExecuteRepairHintForBlockInReasoning(t *testing.T) {
	bad := "<think>Let me answer: <summary>done</summary></think>"
	_, calls := execute(t, "summary", fixture("summary"), replyWith(bad), replyWith(tagged("summary", "done")))
	if len(calls) != 2 {
		t.Fatalf("got %d calls, want 2", len(calls))
	}
	checkRepairCall(t, calls, bad, "the only <summary> is inside <think>…</think> reasoning")
}

func TestExecuteRepairFails(t *testing.T) {
	out, calls := execute(t, "planning", fixture("planning"),
		fakellm.Reply{Content: fakellm.Garbage, PromptTokens: 100, CompletionTokens: 10},
		fakellm.Reply{Content: "<planned_step>[{]</planned_step>", PromptTokens: 200, CompletionTokens: 20})
	if len(calls) != 2 {
		t.Fatalf("got %d calls, want 2", len(calls))
	}
	checkRepairCall(t, calls, fakellm.Garbage, "missing <planned_step> block")
	if out.Err == nil {
		t.Fatal("Err = nil after two unusable answers")
	}
	for _, s := range []string{"planning", "repair", "<planned_step> block: invalid JSON"} {
		if !strings.Contains(out.Err.Error(), s) {
			t.Errorf("Err %q does not mention %q", out.Err, s)
		}
	}
	if got := out.Result["raw_output"]; got != "<planned_step>[{]</planned_step>" {
		t.Errorf("raw_output = %q, want the last answer", got)
	}
	if out.Usage.Calls != 2 || out.Usage.PromptTokens != 300 || out.Usage.CompletionTokens != 30 || out.Usage.TotalTokens != 330 {
		t.Errorf("usage = %+v, want both calls summed", out.Usage)
	}
	if out.AddSteps != nil {
		t.Errorf("AddSteps = %v on failure", out.AddSteps)
	}
}

func TestExecuteRawOutputTruncated(t *testing.T) {
	long := strings.Repeat("é", 2500)
	out, _ := execute(t, "summary", fixture("summary"), replyWith(long), replyWith(long))
	raw, _ := out.Result["raw_output"].(string)
	if want := strings.Repeat("é", 2000) + "…"; raw != want {
		t.Errorf("raw_output has %d runes, want 2000 and an ellipsis", len([]rune(raw)))
	}
}

func TestExecuteUsageSummed(t *testing.T) {
	a1, a2 := fakellm.Garbage, tagged("summary", "done")
	out, _ := execute(t, "summary", fixture("summary"),
		fakellm.Reply{Content: a1, PromptTokens: 100, CompletionTokens: 10},
		fakellm.Reply{Content: a2, PromptTokens: 200, CompletionTokens: 20})
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	u := out.Usage
	if u.Calls != 2 || u.PromptTokens != 300 || u.CompletionTokens != 30 || u.TotalTokens != 330 || u.ResponseChars != len(a1)+len(a2) {
		t.Errorf("usage = %+v, want both calls summed", u)
	}
}

func TestExecuteLLMError(t *testing.T) {
	t.Run("first call", func(t *testing.T) {
		out, calls := execute(t, "planning", fixture("planning"), fakellm.Reply{Status: 500, Content: "upstream down"})
		if out.Err == nil || !errors.Is(out.Err, llm.ErrServer) || !strings.Contains(out.Err.Error(), "upstream down") {
			t.Errorf("Err = %v, want the server error", out.Err)
		}
		if len(calls) != 1 {
			t.Errorf("got %d calls, want 1 (no repair after an LLM error)", len(calls))
		}
		if out.Usage.Calls != 1 {
			t.Errorf("Usage.Calls = %d, want 1", out.Usage.Calls)
		}
		if out.AddSteps != nil || out.Result != nil {
			t.Errorf("output carries results on error: %+v", out)
		}
	})
	t.Run("repair call", func(t *testing.T) {
		out, calls := execute(t, "planning", fixture("planning"), replyWith(fakellm.Garbage), fakellm.Reply{Status: 503})
		if out.Err == nil || !errors.Is(out.Err, llm.ErrServer) {
			t.Errorf("Err = %v, want the server error", out.Err)
		}
		if len(calls) != 2 || out.Usage.Calls != 2 {
			t.Errorf("got %d calls, usage %d; want 2, 2", len(calls), out.Usage.Calls)
		}
	})
}

func TestExecutePersistentMemory(t *testing.T) {
	const mem = `<persistent_memory>
[{"add": "Bob is agent-2",}, {"delete": "20250613T103022"}]
</persistent_memory>`
	t.Run("ops", func(t *testing.T) {
		out, _ := execute(t, "planning", fixture("planning"), replyWith(tagged("planned_step", jsonPlan)+"\n"+mem))
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		want := []engine.MemoryOp{{Add: "Bob is agent-2"}, {Delete: "20250613T103022"}}
		if diff := cmp.Diff(want, out.Memory); diff != "" {
			t.Errorf("memory mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantPlan, out.AddSteps); diff != "" {
			t.Errorf("steps mismatch (-want +got):\n%s", diff)
		}
		if _, ok := out.Result["persistent_memory_error"]; ok {
			t.Errorf("persistent_memory_error set: %v", out.Result["persistent_memory_error"])
		}
	})
	t.Run("text skill", func(t *testing.T) {
		out, _ := execute(t, "summary", fixture("summary"), replyWith(mem+"\n"+tagged("summary", "done")))
		if out.Err != nil || len(out.Memory) != 2 || *out.Completion != "done" {
			t.Errorf("got err %v, memory %v, completion %v", out.Err, out.Memory, out.Completion)
		}
	})
	t.Run("only in reasoning", func(t *testing.T) {
		out, _ := execute(t, "summary", fixture("summary"), replyWith("<think>"+mem+"</think>"+tagged("summary", "done")))
		if out.Err != nil || out.Memory != nil {
			t.Errorf("got err %v, memory %v; want no memory ops", out.Err, out.Memory)
		}
	})
	t.Run("malformed keeps the skill output", func(t *testing.T) {
		out, calls := execute(t, "quick_think", fixture("quick_think"),
			replyWith(tagged("quick_think", "three queries")+"\n<persistent_memory>[{\"add\": }]</persistent_memory>"))
		if out.Err != nil {
			t.Fatalf("Err = %v: a bad memory block must not fail the step", out.Err)
		}
		if len(calls) != 1 {
			t.Errorf("got %d calls, want 1 (no repair for memory)", len(calls))
		}
		if out.Result["quick_think"] != "three queries" {
			t.Errorf("skill result lost: %v", out.Result)
		}
		e, _ := out.Result["persistent_memory_error"].(string)
		if !strings.Contains(e, "<persistent_memory> block: invalid JSON") {
			t.Errorf("persistent_memory_error = %q", e)
		}
		if out.Memory != nil {
			t.Errorf("Memory = %v, want none", out.Memory)
		}
	})
}

func TestExecuteModelSettings(t *testing.T) {
	good := replyWith(tagged("summary", "done"))
	t.Run("from llm_config", func(t *testing.T) {
		_, calls := execute(t, "summary", fixture("summary"), good)
		c := calls[0]
		if c.Model != "test-model" || c.Temperature == nil || *c.Temperature != 0.2 || c.MaxTokens != 2048 {
			t.Errorf("sent model %q temperature %v max_tokens %d; want test-model 0.2 2048", c.Model, c.Temperature, c.MaxTokens)
		}
		if len(c.Messages) != 2 || c.Messages[0].Role != llm.RoleSystem || c.Messages[1].Role != llm.RoleUser {
			t.Errorf("messages are not [system, user]: %d", len(c.Messages))
		}
	})
	t.Run("temperature unset", func(t *testing.T) {
		in := fixture("summary")
		in.Agent.LLMConfig = &engine.LLMConfig{Model: "other-model"}
		_, calls := execute(t, "summary", in, good)
		if c := calls[0]; c.Model != "other-model" || c.Temperature != nil || c.MaxTokens != 0 {
			t.Errorf("sent model %q temperature %v max_tokens %d; want other-model, unset, 0", c.Model, c.Temperature, c.MaxTokens)
		}
	})
	t.Run("no llm_config", func(t *testing.T) {
		in := fixture("summary")
		in.Agent.LLMConfig = nil
		out, calls := execute(t, "summary", in, good)
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		if c := calls[0]; c.Model != "" || c.Temperature != nil {
			t.Errorf("sent model %q temperature %v; want the client's defaults", c.Model, c.Temperature)
		}
	})
}

func TestExecutorsConfig(t *testing.T) {
	set := loadSet(t, "en")
	if _, err := Executors(Config{Prompts: set}); err == nil || !strings.Contains(err.Error(), "LLM is required") {
		t.Errorf("no LLM: err = %v", err)
	}
	if _, err := Executors(Config{LLM: fakellm.NewInstant(nil)}); err == nil || !strings.Contains(err.Error(), "Prompts is required") {
		t.Errorf("no prompts: err = %v", err)
	}
	ex, err := Executors(Config{LLM: fakellm.NewInstant(nil), Prompts: set})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range engine.SkillNames {
		if ex[n] == nil {
			t.Errorf("no executor for %s", n)
		}
	}
	if len(ex) != len(engine.SkillNames) {
		t.Errorf("got %d executors, want %d", len(ex), len(engine.SkillNames))
	}
}

// TestExecutorsConcurrent runs every skill of one Executors map from many
// goroutines at once, as agents do; -race checks they share nothing mutable.
func TestExecutorsConcurrent(t *testing.T) {
	answers := map[string]string{
		"planning":               tagged("planned_step", jsonPlan),
		"reflection":             tagged("reflection_step", "[]"),
		"summary":                tagged("summary", "done"),
		"instruction_generation": tagged("tool_instruction", `{"tool_name": "read_file"}`),
		"think":                  tagged("_think", "x"),
		"quick_think":            tagged("quick_think", "x"),
		"send_message":           tagged("send_message", jsonSend),
		"process_message":        tagged("process_message", "x"),
		"task_manager":           tagged("task_instruction", `{"action": "finish_task", "task_id": "task-1"}`),
		"agent_manager":          tagged("agent_instruction", `{"action": "init_new_agent", "agent_config": {"template": "reviewer"}}`),
		"ask_info":               tagged("ask_info", `{"type": "all_agents"}`),
		"tool_decision":          "<tool_decision></tool_decision>",
		"decision":               tagged("decision_step", "[]"),
	}
	fake := fakellm.NewInstant(func(c *fakellm.Call) fakellm.Reply { return replyWith(answers[c.Skill]) })
	ex, err := Executors(Config{LLM: fake, Prompts: loadSet(t, "en"), Tools: testCatalog})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 4
	var wg sync.WaitGroup
	for range rounds {
		for _, n := range engine.SkillNames {
			wg.Go(func() {
				if out := ex[n].Execute(t.Context(), fixture(n)); out.Err != nil {
					t.Errorf("%s: %v", n, out.Err)
				}
			})
		}
	}
	wg.Wait()
	if got, want := len(fake.Calls()), rounds*len(engine.SkillNames); got != want {
		t.Errorf("got %d calls, want %d (one per execution)", got, want)
	}
}

func TestTemplateLLM(t *testing.T) {
	temp := float32(0.5)
	for _, tc := range []struct {
		in   map[string]any
		want *engine.LLMConfig
	}{
		{nil, nil},
		{map[string]any{}, nil},
		{map[string]any{"model": "m"}, &engine.LLMConfig{Model: "m"}},
		{map[string]any{"temperature": 0.5, "max_tokens": 100}, &engine.LLMConfig{Temperature: &temp, MaxTokens: 100}},
	} {
		if diff := cmp.Diff(tc.want, templateLLM(tc.in)); diff != "" {
			t.Errorf("templateLLM(%v) mismatch (-want +got):\n%s", tc.in, diff)
		}
	}
}

// TestSendMessageWithoutReceiverIsLeftToTheEngine: a reply may omit its
// receiver (the engine sends it to the agent it answers), so the parser
// passes an empty list on instead of spending a repair round.
func TestSendMessageWithoutReceiverIsLeftToTheEngine(t *testing.T) {
	out, calls := execute(t, "send_message", fixture("send_message"), replyWith(tagged("send_message", `{"message": "the answer"}`)))
	if len(calls) != 1 || out.Err != nil || out.SendMessage == nil {
		t.Fatalf("calls %d, err %v, message %+v", len(calls), out.Err, out.SendMessage)
	}
	if len(out.SendMessage.Receiver) != 0 || out.SendMessage.Message != "the answer" {
		t.Errorf("message = %+v, want no receiver and the text", out.SendMessage)
	}
}
