package server_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// The error contract (docs/errors.md) for every tool: what the caller can
// correct is a tool result with isError whose text names the field and the
// problem, and a failed call changes nothing in the MAS.

// badCall is a tool call that must fail with a tool error naming the field
// and the problem, and change nothing in the MAS.
type badCall struct {
	name string
	tool string
	args any
	// want are substrings of the error text (the field, the problem).
	want []string
	// sdk: the SDK's schema validation rejects it before our handler runs.
	sdk bool
}

// TestToolBadInput calls every tool with missing, empty, mistyped and
// unknown arguments. The SDK validates the arguments against the input
// schema (required properties, JSON types, additionalProperties false,
// minimum 0 for unsigned integers) and answers a violation as a tool error
// "validating \"arguments\": validating root: …" naming the property; empty
// strings, unknown IDs, enum values and numeric ranges pass the schema and
// are caught by the server or the engine, whose messages start with the
// field's name.
func TestToolBadInput(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	base := e.stack.Sys.BaseTaskID()
	var cases []badCall
	add := func(tool string, l ...badCall) {
		for _, c := range l {
			c.tool = tool
			cases = append(cases, c)
		}
	}
	add("add_task",
		badCall{name: "no arguments", args: nil, want: []string{"required", "task_name", "task_intention"}, sdk: true},
		badCall{name: "missing task_intention", args: map[string]any{"task_name": "x"}, want: []string{"missing properties", "task_intention"}, sdk: true},
		badCall{name: "empty task_name", args: map[string]any{"task_name": "", "task_intention": "x"}, want: []string{"task_name: is empty"}},
		badCall{name: "blank task_intention", args: map[string]any{"task_name": "x", "task_intention": " \n "}, want: []string{"task_intention: is empty"}},
		badCall{name: "task_name a number", args: map[string]any{"task_name": 5, "task_intention": "x"}, want: []string{"/properties/task_name", `want "string"`}, sdk: true},
		badCall{name: "unknown task_manager", args: map[string]any{"task_name": "x", "task_intention": "y", "task_manager": noSuchID}, want: []string{`task_manager "` + noSuchID + `": no such agent`}},
		badCall{name: "human task_manager", args: map[string]any{"task_name": "x", "task_intention": "y", "task_manager": f.Operator}, want: []string{"task_manager", "must be an LLM agent with the task_manager skill"}},
		badCall{name: "unknown property", args: map[string]any{"task_name": "x", "task_intention": "y", "priority": 1}, want: []string{"unexpected additional properties", "priority"}, sdk: true},
		badCall{name: "arguments not an object", args: []string{"x"}, want: []string{"unmarshaling arguments"}, sdk: true},
	)
	msg := func(kv ...any) map[string]any {
		m := map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "hi"}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return m
	}
	add("send_message",
		badCall{name: "missing task_id", args: msg("task_id", nil), want: []string{"missing properties", "task_id"}, sdk: true},
		badCall{name: "missing receiver", args: msg("receiver", nil), want: []string{"missing properties", "receiver"}, sdk: true},
		badCall{name: "missing content", args: msg("content", nil), want: []string{"missing properties", "content"}, sdk: true},
		badCall{name: "empty task_id", args: msg("task_id", ""), want: []string{`task_id "": no such task`}},
		badCall{name: "unknown task_id", args: msg("task_id", noSuchID), want: []string{`task_id "` + noSuchID + `": no such task`}},
		badCall{name: "empty content", args: msg("content", "  "), want: []string{"content: is empty"}},
		badCall{name: "empty receiver", args: msg("receiver", []string{}), want: []string{"receiver: is empty"}},
		badCall{name: "unknown receiver", args: msg("receiver", []string{noSuchID}), want: []string{`receiver "` + noSuchID + `": no such agent`}},
		badCall{name: "receiver outside the group", args: msg("task_id", base), want: []string{`receiver "` + f.Alice + `": not in the task group`}},
		badCall{name: "receiver is the sender", args: msg("receiver", []string{f.Operator}), want: []string{"receiver", "is the sender itself"}},
		badCall{name: "receiver a number", args: msg("receiver", 5), want: []string{"/properties/receiver", "anyOf"}, sdk: true},
		badCall{name: "receiver of numbers", args: msg("receiver", []int{1}), want: []string{"/properties/receiver", "anyOf"}, sdk: true},
		badCall{name: "unknown stage_relative", args: msg("stage_relative", noSuchID), want: []string{`stage_relative "` + noSuchID + `": no such stage`}},
		badCall{name: "unknown reply_to", args: msg("reply_to", noSuchID), want: []string{`reply_to "` + noSuchID + `": no such message`}},
		badCall{name: "need_reply a string", args: msg("need_reply", "yes"), want: []string{"/properties/need_reply", `want "boolean"`}, sdk: true},
		badCall{name: "waiting a number", args: msg("waiting", 1), want: []string{"/properties/waiting", `want "boolean"`}, sdk: true},
	)
	q := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	add("ask_info",
		badCall{name: "missing type", args: q(), want: []string{"missing properties", "type"}, sdk: true},
		badCall{name: "empty type", args: q("type", ""), want: []string{"/properties/type", "enum", engine.QueryTaskInfo}, sdk: true},
		badCall{name: "unknown type", args: q("type", "weather"), want: []string{"/properties/type", "enum", "weather", engine.QuerySkillsAndTools}, sdk: true},
		badCall{name: "type a number", args: q("type", 3), want: []string{"/properties/type", `want "string"`}, sdk: true},
		badCall{name: "task_info without task_id", args: q("type", "task_info"), want: []string{"task_id: is empty"}},
		badCall{name: "task_info unknown task", args: q("type", "task_info", "task_id", noSuchID), want: []string{`task_id "` + noSuchID + `": no such task`}},
		badCall{name: "stage_info without stage_id", args: q("type", "stage_info", "task_id", f.TaskID), want: []string{"stage_id: is empty"}},
		badCall{name: "stage_info unknown stage", args: q("type", "stage_info", "task_id", f.TaskID, "stage_id", noSuchID), want: []string{`stage_id "` + noSuchID + `": no such stage`}},
		badCall{name: "stage_agents unknown task", args: q("type", "stage_agents", "task_id", noSuchID, "stage_id", f.Stages[0]), want: []string{`task_id "` + noSuchID + `": no such task`}},
		badCall{name: "task_agents unknown task", args: q("type", "task_agents", "task_id", noSuchID), want: []string{`task_id "` + noSuchID + `": no such task`}},
		badCall{name: "agent without agent_id", args: q("type", "agent"), want: []string{"agent_id: is empty"}},
		badCall{name: "agent unknown", args: q("type", "agent", "agent_id", []string{f.Alice, noSuchID}), want: []string{`agent_id "` + noSuchID + `": no such agent`}},
		badCall{name: "agent_id a number", args: q("type", "agent", "agent_id", 5), want: []string{"/properties/agent_id", "anyOf"}, sdk: true},
		badCall{name: "unknown team", args: q("type", "team_agents", "team_id", "red"), want: []string{`team_id "red": no such team`}},
	)
	add("answer_approval",
		badCall{name: "missing approve", args: q("message_id", "m"), want: []string{"missing properties", "approve"}, sdk: true},
		badCall{name: "approve a string", args: q("message_id", "m", "approve", "yes"), want: []string{"/properties/approve", `want "boolean"`}, sdk: true},
		badCall{name: "unknown message", args: q("message_id", noSuchID, "approve", true), want: []string{`message_id "` + noSuchID + `": no such message`}},
		badCall{name: "not a question", args: q("message_id", f.Question.MessageID, "approve", true), want: []string{"is not an approval question"}},
		badCall{name: "arguments on a refusal", args: q("message_id", "m", "approve", false, "arguments", map[string]any{"x": 1}), want: []string{"arguments: only with approve true"}},
	)
	add("get_inbox",
		badCall{name: "negative limit", args: q("limit", -1), want: []string{"/properties/limit", "minimum"}, sdk: true},
		badCall{name: "limit a string", args: q("limit", "5"), want: []string{"/properties/limit", `want "integer"`}, sdk: true},
		badCall{name: "limit a fraction", args: q("limit", 2.5), want: []string{"/properties/limit", `want "integer"`}, sdk: true},
		badCall{name: "only_awaiting_reply a string", args: q("only_awaiting_reply", "yes"), want: []string{"/properties/only_awaiting_reply", `want "boolean"`}, sdk: true},
		badCall{name: "unknown property", args: q("operator", f.Operator), want: []string{"unexpected additional properties", "operator"}, sdk: true},
	)
	add("wait_for_updates",
		badCall{name: "negative timeout", args: q("timeout_seconds", -1), want: []string{"/properties/timeout_seconds", "minimum"}, sdk: true},
		badCall{name: "timeout too long", args: q("timeout_seconds", 301), want: []string{"/properties/timeout_seconds", "maximum", "300"}, sdk: true},
		badCall{name: "timeout a fraction", args: q("timeout_seconds", 1.5), want: []string{"/properties/timeout_seconds", `want "integer"`}, sdk: true},
		badCall{name: "negative max_events", args: q("max_events", -5), want: []string{"/properties/max_events", "minimum"}, sdk: true},
		badCall{name: "negative cursor", args: q("cursor", -1), want: []string{"/properties/cursor", "minimum"}, sdk: true},
		badCall{name: "cursor a string", args: q("cursor", "abc"), want: []string{"/properties/cursor", `want "integer"`}, sdk: true},
		badCall{name: "task_id a number", args: q("task_id", 7), want: []string{"/properties/task_id", `want "string"`}, sdk: true},
	)
	mt := func(action string, kv ...any) map[string]any {
		m := map[string]any{"action": action, "task_id": f.TaskID}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return m
	}
	stage := func(intention string, alloc map[string]string) []map[string]any {
		return []map[string]any{{"stage_intention": intention, "agent_allocation": alloc}}
	}
	add("manage_task",
		badCall{name: "missing action", args: mt("", "action", nil), want: []string{"missing properties", "action"}, sdk: true},
		badCall{name: "missing task_id", args: mt("cancel_task", "task_id", nil), want: []string{"missing properties", "task_id"}, sdk: true},
		badCall{name: "empty action", args: mt(""), want: []string{"/properties/action", "enum", "add_stage finish_stage retry_stage finish_task cancel_task"}, sdk: true},
		badCall{name: "unknown action", args: mt("snooze_task"), want: []string{"/properties/action", "enum", "snooze_task"}, sdk: true},
		badCall{name: "add_task is add_task's job", args: mt("add_task"), want: []string{"/properties/action", "enum", "add_task"}, sdk: true},
		badCall{name: "action a number", args: mt("", "action", 1), want: []string{"/properties/action", `want "string"`}, sdk: true},
		badCall{name: "empty task_id", args: mt("cancel_task", "task_id", ""), want: []string{"task_id: is empty"}},
		badCall{name: "unknown task_id", args: mt("cancel_task", "task_id", noSuchID), want: []string{`task_id "` + noSuchID + `": no such task`}},
		badCall{name: "finish_stage without stage_id", args: mt("finish_stage"), want: []string{"stage_id: is empty"}},
		badCall{name: "finish_stage unknown stage", args: mt("finish_stage", "stage_id", noSuchID), want: []string{`stage_id "` + noSuchID + `": no such stage`}},
		badCall{name: "finish_stage not running", args: mt("finish_stage", "stage_id", f.Stages[1]), want: []string{`stage_id "` + f.Stages[1] + `": is init, not running`}},
		badCall{name: "add_stage without stages", args: mt("add_stage"), want: []string{"stages: is empty"}},
		badCall{name: "add_stage stages a string", args: mt("add_stage", "stages", "review"), want: []string{"/properties/stages", `want "array"`}, sdk: true},
		badCall{name: "add_stage stage without intention", args: mt("add_stage", "stages", []map[string]any{{"agent_allocation": map[string]string{f.Bob: "x"}}}),
			want: []string{"/properties/stages/items", "missing properties", "stage_intention"}, sdk: true},
		badCall{name: "add_stage empty intention", args: mt("add_stage", "stages", stage(" ", map[string]string{f.Bob: "x"})), want: []string{"stages[0].stage_intention: is empty"}},
		badCall{name: "add_stage empty allocation", args: mt("add_stage", "stages", stage("x", map[string]string{})), want: []string{"stages[0].agent_allocation: is empty"}},
		badCall{name: "add_stage unknown agent", args: mt("add_stage", "stages", stage("x", map[string]string{noSuchID: "y"})), want: []string{`stages[0].agent_allocation: agent "` + noSuchID + `": no such agent`}},
		badCall{name: "add_stage to a HumanAgent", args: mt("add_stage", "stages", stage("x", map[string]string{f.Operator: "y"})), want: []string{"stages[0].agent_allocation", "is a HumanAgent"}},
		badCall{name: "add_stage empty goal", args: mt("add_stage", "stages", stage("x", map[string]string{f.Bob: ""})), want: []string{"stages[0].agent_allocation", "its goal is empty"}},
		badCall{name: "add_stage to the base task", args: mt("add_stage", "task_id", base, "stages", stage("x", map[string]string{f.Manager: "y"})), want: []string{"task_id", "base task"}},
		badCall{name: "retry_stage without intention", args: mt("retry_stage", "old_stage_id", f.Stages[0], "new_agent_allocation", map[string]string{f.Bob: "x"}), want: []string{"new_stage_intention: is empty"}},
		badCall{name: "retry_stage without old_stage_id", args: mt("retry_stage", "new_stage_intention", "x", "new_agent_allocation", map[string]string{f.Bob: "x"}), want: []string{"old_stage_id: is empty"}},
		badCall{name: "retry_stage unknown old stage", args: mt("retry_stage", "old_stage_id", noSuchID, "new_stage_intention", "x", "new_agent_allocation", map[string]string{f.Bob: "x"}), want: []string{`old_stage_id "` + noSuchID + `": no such stage`}},
		badCall{name: "retry_stage of a later stage", args: mt("retry_stage", "old_stage_id", f.Stages[1], "new_stage_intention", "x", "new_agent_allocation", map[string]string{f.Bob: "x"}), want: []string{`old_stage_id "` + f.Stages[1] + `"`, "only the running stage"}},
		badCall{name: "retry_stage unknown agent", args: mt("retry_stage", "old_stage_id", f.Stages[0], "new_stage_intention", "x", "new_agent_allocation", map[string]string{noSuchID: "x"}), want: []string{`new_agent_allocation: agent "` + noSuchID + `": no such agent`}},
		badCall{name: "retry_stage allocation a list", args: mt("retry_stage", "new_agent_allocation", []string{f.Bob}), want: []string{"/properties/new_agent_allocation", `want "object"`}, sdk: true},
		badCall{name: "finish_task without summary", args: mt("finish_task"), want: []string{"summary: is empty"}},
		badCall{name: "finish_task of the base task", args: mt("finish_task", "task_id", base, "summary", "x"), want: []string{"the base task never ends"}},
	)
	ma := func(action string, kv ...any) map[string]any {
		m := q(kv...)
		if action != "" {
			m["action"] = action
		}
		return m
	}
	add("manage_agent",
		badCall{name: "missing action", args: ma(""), want: []string{"missing properties", "action"}, sdk: true},
		badCall{name: "unknown action", args: ma("fire_agent"), want: []string{"/properties/action", "enum", "fire_agent", "init_new_agent add_task_participant"}, sdk: true},
		badCall{name: "init without agent_config", args: ma("init_new_agent"), want: []string{"agent_config: is missing"}},
		badCall{name: "agent_config a string", args: ma("init_new_agent", "agent_config", "researcher"), want: []string{"/properties/agent_config", `want "object"`}, sdk: true},
		badCall{name: "unknown template", args: ma("init_new_agent", "agent_config", map[string]any{"template": "astronaut"}), want: []string{`agent_config.template "astronaut": no such template`, "researcher"}},
		badCall{name: "no name", args: ma("init_new_agent", "agent_config", map[string]any{"role": "r"}), want: []string{"agent_config.name: is empty"}},
		badCall{name: "no role", args: ma("init_new_agent", "agent_config", map[string]any{"name": "n"}), want: []string{"agent_config.role: is empty"}},
		badCall{name: "unknown skill", args: ma("init_new_agent", "agent_config", map[string]any{"name": "n", "role": "r", "skills": []string{"fly"}}), want: []string{`agent_config.skills: "fly" is not a skill`}},
		badCall{name: "unknown tool", args: ma("init_new_agent", "agent_config", map[string]any{"name": "n", "role": "r", "tools": []string{"github"}}), want: []string{`agent_config.tools: "github" is not a configured MCP server`}},
		badCall{name: "unknown agent_config property", args: ma("init_new_agent", "agent_config", map[string]any{"template": "writer", "mood": "happy"}), want: []string{"/properties/agent_config", "unexpected additional properties", "mood"}, sdk: true},
		badCall{name: "participant without task_id", args: ma("add_task_participant", "agents", []string{f.Bob}), want: []string{"task_id: is empty"}},
		badCall{name: "participant unknown task", args: ma("add_task_participant", "task_id", noSuchID, "agents", []string{f.Bob}), want: []string{`task_id "` + noSuchID + `": no such task`}},
		badCall{name: "participant without agents", args: ma("add_task_participant", "task_id", f.TaskID), want: []string{"agents: is empty"}},
		badCall{name: "participant unknown agent", args: ma("add_task_participant", "task_id", f.TaskID, "agents", []string{f.Bob, noSuchID}), want: []string{`agents: "` + noSuchID + `": no such agent`}},
	)
	add("show_task",
		badCall{name: "task_id a number", args: q("task_id", 7), want: []string{"/properties/task_id", `want "string"`}, sdk: true},
		badCall{name: "unknown task", args: q("task_id", noSuchID), want: []string{`task_id "` + noSuchID + `": no such task`}},
		badCall{name: "unknown property", args: q("stage_id", f.Stages[0]), want: []string{"unexpected additional properties", "stage_id"}, sdk: true},
	)
	add("read_resource",
		badCall{name: "missing uri", args: q(), want: []string{"missing properties", "uri"}, sdk: true},
		badCall{name: "uri a number", args: q("uri", 1), want: []string{"/properties/uri", `want "string"`}, sdk: true},
		badCall{name: "empty uri", args: q("uri", ""), want: []string{`uri "": not a mas:// resource URI`}},
		badCall{name: "other scheme", args: q("uri", "file:///etc/passwd"), want: []string{`uri "file:///etc/passwd": not a mas:// resource URI`}},
		badCall{name: "unknown resource", args: q("uri", "mas://weather"), want: []string{`uri "mas://weather": no such resource`}},
		badCall{name: "unknown task", args: q("uri", "mas://tasks/"+noSuchID), want: []string{"no such task"}},
		badCall{name: "unknown stage", args: q("uri", "mas://tasks/"+f.TaskID+"/stages/"+noSuchID), want: []string{"no such stage in task " + f.TaskID}},
		badCall{name: "unknown agent", args: q("uri", "mas://agents/"+noSuchID+"/steps"), want: []string{"no such agent"}},
		badCall{name: "unknown operator", args: q("uri", "mas://operators/"+noSuchID+"/inbox"), want: []string{"no such operator"}},
	)

	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.tool] = true
		t.Run(c.tool+"/"+c.name, func(t *testing.T) {
			before := masSnapshot(e.stack.Sys)
			txt := e.callErr(c.tool, c.args)
			for _, w := range c.want {
				if !strings.Contains(txt, w) {
					t.Errorf("error %q does not contain %q", txt, w)
				}
			}
			if got := strings.HasPrefix(txt, sdkPrefix); got != c.sdk {
				t.Errorf("caught by the SDK's schema validation: %v, want %v (error %q)", got, c.sdk, txt)
			}
			e.unchanged(c.tool, before)
		})
	}
	for _, tool := range allTools {
		if !covered[tool] {
			t.Errorf("no bad-input case for %s", tool)
		}
	}
}

// TestToolErrorsAreNotProtocolErrors: an unknown tool is the one call
// failure that is a JSON-RPC error (docs/errors.md).
func TestToolErrorsAreNotProtocolErrors(t *testing.T) {
	e := newEnv(t)
	_, err := e.client.CallTool(t.Context(), mcpCall("no_such_tool", map[string]any{}))
	if err == nil || !strings.Contains(err.Error(), "no_such_tool") {
		t.Errorf("unknown tool: err %v, want a JSON-RPC error naming the tool", err)
	}
	// A number too big for the Go field passes the schema ("integer") and
	// fails decoding in the SDK: still a tool error naming the field.
	txt := e.callErr("wait_for_updates", json.RawMessage(`{"timeout_seconds": 1e20}`))
	if !strings.Contains(txt, "timeout_seconds") {
		t.Errorf("error %q does not name timeout_seconds", txt)
	}
}

// TestEndedTask: a task that has ended refuses management and messages,
// with an error saying so.
func TestEndedTask(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	e.call("manage_task", map[string]any{"action": "cancel_task", "task_id": f.TaskID}, nil)
	before := masSnapshot(e.stack.Sys)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"manage_task", map[string]any{"action": "cancel_task", "task_id": f.TaskID}, "has already ended"},
		{"manage_task", map[string]any{"action": "add_stage", "task_id": f.TaskID,
			"stages": []map[string]any{{"stage_intention": "x", "agent_allocation": map[string]string{f.Alice: "y"}}}}, "has ended"},
		{"send_message", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "hi"}, "has ended"},
		{"manage_agent", map[string]any{"action": "add_task_participant", "task_id": f.TaskID, "agents": []string{f.Manager}}, "has ended"},
	} {
		if txt := e.callErr(tc.tool, tc.args); !strings.Contains(txt, tc.want) || !strings.Contains(txt, f.TaskID) {
			t.Errorf("%s %v: error %q, want it to name the task and say %q", tc.tool, tc.args, txt, tc.want)
		}
	}
	// Cancelling released alice; the engine may still be settling, so only
	// compare the task itself.
	if diff := cmp.Diff(findTask(before.Tasks, f.TaskID), e.stack.Task(f.TaskID)); diff != "" {
		t.Errorf("the failed calls changed the ended task:\n%s", diff)
	}
}

func findTask(l []engine.TaskState, id string) engine.TaskState {
	for _, t := range l {
		if t.TaskID == id {
			return t
		}
	}
	return engine.TaskState{}
}

// TestAskInfoBadTypeListsEveryType: the error for a bad type (now the
// schema's enum) lists every type the tool accepts, the server's own
// "tasks" included.
func TestAskInfoBadTypeListsEveryType(t *testing.T) {
	e := newEnv(t)
	for _, typ := range []string{"", "weather"} {
		txt := e.callErr("ask_info", map[string]any{"type": typ})
		for _, want := range append(slices.Clone(engine.QueryTypes), "tasks]") {
			if !strings.Contains(txt, want) {
				t.Errorf("type %q: error %q does not list %s", typ, txt, want)
			}
		}
	}
}
