package server_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/server"
)

// noSuchID is a well-formed ID that names nothing.
const noSuchID = "00000000-0000-4000-8000-000000000000"

// sdkPrefix starts the text of a tool error when the SDK's validation of the
// arguments against the tool's input schema rejected them (our handler never
// ran).
const sdkPrefix = `validating "arguments": `

func TestAddTask(t *testing.T) {
	e := newEnv(t)
	sys := e.stack.Sys
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"default manager", map[string]any{"task_name": "report", "task_intention": "Write a report."}},
		{"explicit manager", map[string]any{"task_name": "  padded  ", "task_intention": "Write it.", "task_manager": sys.ManagerID()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out server.AddTaskOut
			res := e.call("add_task", tc.args, &out)
			task, ok := sys.Task(out.TaskID)
			if !ok {
				t.Fatalf("add_task = %+v: no such task in the MAS", out)
			}
			want := server.AddTaskOut{TaskID: task.TaskID, TaskManager: sys.ManagerID(), ResourceURI: "mas://tasks/" + task.TaskID}
			if diff := cmp.Diff(want, out); diff != "" {
				t.Errorf("add_task output (-want +got):\n%s", diff)
			}
			if task.TaskName != strings.TrimSpace(tc.args["task_name"].(string)) || task.TaskIntention != tc.args["task_intention"] {
				t.Errorf("task %q / %q, want the arguments %v", task.TaskName, task.TaskIntention, tc.args)
			}
			if task.Operator != sys.OperatorID() || !slices.Contains(task.TaskGroup, sys.OperatorID()) {
				t.Errorf("task operator %q, group %v: want the default operator %s in it", task.Operator, task.TaskGroup, sys.OperatorID())
			}
			if txt := resultText(res); !strings.Contains(txt, out.TaskID) || !strings.Contains(txt, out.ResourceURI) {
				t.Errorf("text %q does not name the task_id and its URI", txt)
			}
		})
	}
}

// conversationMessage finds a message of a task's conversation by ID.
func (e *env) conversationMessage(taskID, messageID string) (engine.Message, bool) {
	e.t.Helper()
	var conv server.ConversationDocument
	e.read("mas://tasks/"+taskID+"/conversation", &conv)
	for _, m := range conv.Messages {
		if m.MessageID == messageID {
			return m, true
		}
	}
	return engine.Message{}, false
}

func TestSendMessage(t *testing.T) {
	t.Run("answer defaults", func(t *testing.T) {
		// Sending to the agent whose question waits answers it: the message
		// carries the return_waiting_id, need_reply defaults to false, and
		// the agent is released.
		e := newEnv(t)
		f := e.startTask()
		var out server.SendMessageOut
		res := e.call("send_message", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "Markdown."}, &out)
		if len(out.Messages) != 1 || out.Messages[0].Receiver != f.Alice || !out.Messages[0].Answers || out.Messages[0].MessageID == "" {
			t.Fatalf("send_message = %+v, want one message to alice answering her question", out)
		}
		if !strings.Contains(resultText(res), out.Messages[0].MessageID) {
			t.Errorf("text %q does not name the message_id", resultText(res))
		}
		m, ok := e.conversationMessage(f.TaskID, out.Messages[0].MessageID)
		if !ok {
			t.Fatalf("message %s is not in the task's conversation", out.Messages[0].MessageID)
		}
		if m.NeedReply || m.ReturnWaitingID == "" || m.SenderID != f.Operator || m.Message != "Markdown." {
			t.Errorf("delivered %+v, want the operator's answer with a return_waiting_id and need_reply false", m)
		}
		var inbox server.GetInboxOut
		e.call("get_inbox", map[string]any{"only_awaiting_reply": true}, &inbox)
		for _, q := range inbox.Messages {
			if q.MessageID == f.Question.MessageID {
				t.Errorf("the answered question still awaits a reply: %+v", q)
			}
		}
	})
	t.Run("explicit fields", func(t *testing.T) {
		e := newEnv(t)
		f := e.startTask()
		var out server.SendMessageOut
		e.call("send_message", map[string]any{
			"task_id": f.TaskID, "receiver": []string{f.Bob, f.Bob}, "content": "FYI: the deadline moved.",
			"stage_relative": f.Stages[0], "need_reply": false, "waiting": false,
		}, &out)
		if len(out.Messages) != 1 || out.Messages[0].Receiver != f.Bob || out.Messages[0].Answers {
			t.Fatalf("send_message = %+v, want one plain message to bob (duplicate receivers folded)", out)
		}
		m, ok := e.conversationMessage(f.TaskID, out.Messages[0].MessageID)
		if !ok {
			t.Fatalf("message not in the conversation")
		}
		want := engine.Message{TaskID: f.TaskID, SenderID: f.Operator, Receiver: []string{f.Bob}, Message: "FYI: the deadline moved.",
			StageRelative: f.Stages[0], MessageID: out.Messages[0].MessageID}
		if diff := cmp.Diff(want, m, cmpopts.IgnoreFields(engine.Message{}, "Timestamp")); diff != "" {
			t.Errorf("delivered message (-want +got):\n%s", diff)
		}
	})
	t.Run("reply_to and waiting", func(t *testing.T) {
		e := newEnv(t)
		f := e.startTask()
		var out server.SendMessageOut
		e.call("send_message", map[string]any{
			"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "Markdown, and tell me when done.",
			"reply_to": f.Question.MessageID, "need_reply": true, "waiting": true,
		}, &out)
		if len(out.Messages) != 1 || !out.Messages[0].Answers {
			t.Fatalf("send_message = %+v, want it to answer the question", out)
		}
		m, _ := e.conversationMessage(f.TaskID, out.Messages[0].MessageID)
		if !m.NeedReply || len(m.Waiting) != 1 || m.ReturnWaitingID == "" {
			t.Errorf("delivered %+v, want need_reply, one waiting ID and a return_waiting_id", m)
		}
	})
}

func TestAskInfo(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	sys := e.stack.Sys
	// Each query's data, decoded as JSON, checked for the facts the query
	// is about.
	for _, tc := range []struct {
		args  map[string]any
		check func(t *testing.T, data any)
	}{
		{map[string]any{"type": "tasks"}, func(t *testing.T, d any) {
			ids := fieldOfAll(d, "task_id")
			if !slices.Contains(ids, f.TaskID) || !slices.Contains(ids, sys.BaseTaskID()) {
				t.Errorf("task_ids %v, want the task and the base task", ids)
			}
		}},
		{map[string]any{"type": engine.QueryManagedTaskAndStageInfo}, func(t *testing.T, d any) {
			// The operator manages no task.
			if ids := fieldOfAll(d, "task_id"); len(ids) != 0 {
				t.Errorf("the operator manages %v, want none", ids)
			}
		}},
		{map[string]any{"type": engine.QueryAssignedTaskAndStageInfo}, func(t *testing.T, d any) {
			if ids := fieldOfAll(d, "task_id"); !slices.Contains(ids, f.TaskID) {
				t.Errorf("assigned tasks %v, want the operator's task", ids)
			}
		}},
		{map[string]any{"type": engine.QueryTaskInfo, "task_id": f.TaskID}, func(t *testing.T, d any) {
			m := d.(map[string]any)
			if m["task_id"] != f.TaskID || len(m["stage_list"].([]any)) != 2 {
				t.Errorf("task_info = %v", m)
			}
		}},
		{map[string]any{"type": engine.QueryStageInfo, "task_id": f.TaskID, "stage_id": f.Stages[0]}, func(t *testing.T, d any) {
			m := d.(map[string]any)
			if m["stage_id"] != f.Stages[0] || m["execution_state"] != engine.StateRunning || m["every_agent_state"] == nil {
				t.Errorf("stage_info = %v", m)
			}
		}},
		{map[string]any{"type": engine.QueryAvailableAgentsConfig}, func(t *testing.T, d any) {
			if names := fieldOfAll(d, "template"); !slices.Contains(names, "researcher") || !slices.Contains(names, "writer") {
				t.Errorf("templates %v", names)
			}
		}},
		{map[string]any{"type": engine.QueryAllAgents}, func(t *testing.T, d any) {
			if ids := fieldOfAll(d, "agent_id"); len(ids) != 4 {
				t.Errorf("all_agents %v, want manager, operator, alice, bob", ids)
			}
		}},
		{map[string]any{"type": engine.QueryTeamAgents, "team_id": engine.DefaultTeamID}, func(t *testing.T, d any) {
			if ids := fieldOfAll(d, "agent_id"); len(ids) != 4 {
				t.Errorf("team_agents %v", ids)
			}
		}},
		{map[string]any{"type": engine.QueryTaskAgents, "task_id": f.TaskID}, func(t *testing.T, d any) {
			ids := fieldOfAll(d, "agent_id")
			for _, id := range []string{f.Manager, f.Operator, f.Alice, f.Bob} {
				if !slices.Contains(ids, id) {
					t.Errorf("task_agents %v lacks %s", ids, id)
				}
			}
		}},
		{map[string]any{"type": engine.QueryStageAgents, "task_id": f.TaskID, "stage_id": f.Stages[0]}, func(t *testing.T, d any) {
			if diff := cmp.Diff(sorted(f.Alice, f.Bob), sorted(fieldOfAll(d, "agent_id")...)); diff != "" {
				t.Errorf("stage_agents (-want +got):\n%s", diff)
			}
		}},
		{map[string]any{"type": engine.QueryAgent, "agent_id": []string{f.Alice, f.Operator}}, func(t *testing.T, d any) {
			l := d.([]any)
			if len(l) != 2 || l[0].(map[string]any)["agent_id"] != f.Alice {
				t.Fatalf("agent = %v", d)
			}
			for _, a := range l {
				if _, ok := a.(map[string]any)["conversation_pool"]; ok {
					t.Errorf("agent query shows a conversation_pool: %v", a)
				}
			}
		}},
		{map[string]any{"type": engine.QuerySkillsAndTools}, func(t *testing.T, d any) {
			skills, _ := d.(map[string]any)["skills"].(map[string]any)
			if _, ok := skills["planning"]; !ok {
				t.Errorf("skills_and_tools = %v", d)
			}
		}},
	} {
		typ := tc.args["type"].(string)
		t.Run(typ, func(t *testing.T) {
			var out server.AskInfoOut
			res := e.call("ask_info", tc.args, &out)
			if out.Type != typ || strings.TrimSpace(out.Markdown) == "" {
				t.Errorf("type %q, markdown %q", out.Type, out.Markdown)
			}
			if resultText(res) != out.Markdown {
				t.Errorf("text %q != markdown %q", resultText(res), out.Markdown)
			}
			tc.check(t, out.Data)
		})
	}
}

// fieldOfAll returns the string field key of every object in a JSON list.
func fieldOfAll(data any, key string) []string {
	var out []string
	l, _ := data.([]any)
	for _, x := range l {
		if m, ok := x.(map[string]any); ok {
			if s, ok := m[key].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func sorted(s ...string) []string { return slices.Sorted(slices.Values(s)) }

func TestGetInbox(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	// A second, plain message to the operator: not awaiting a reply.
	if _, err := e.stack.Sys.HumanSend(f.Operator, engine.HumanMessage{TaskID: e.stack.Sys.BaseTaskID(),
		Receiver: []string{f.Manager}, Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	var all server.GetInboxOut
	res := e.call("get_inbox", nil, &all)
	if all.OperatorID != f.Operator || all.AwaitingReply != 1 || len(all.Messages) == 0 {
		t.Fatalf("get_inbox = %+v, want the operator's inbox with the one question awaiting a reply", all)
	}
	if first := all.Messages[0]; first.MessageID != f.Question.MessageID || !first.AwaitingReply || !first.Waiting {
		t.Errorf("first message %+v, want alice's waiting question first", first)
	}
	if txt := resultText(res); !strings.Contains(txt, "URGENT") || !strings.Contains(txt, scripted.OperatorQuestion) {
		t.Errorf("text %q does not flag the urgent question", txt)
	}
	var only server.GetInboxOut
	e.call("get_inbox", map[string]any{"only_awaiting_reply": true}, &only)
	for _, m := range only.Messages {
		if !m.AwaitingReply {
			t.Errorf("only_awaiting_reply returned %+v", m)
		}
	}
	var one server.GetInboxOut
	e.call("get_inbox", map[string]any{"limit": 1}, &one)
	if len(one.Messages) != 1 || one.AwaitingReply != 1 {
		t.Errorf("limit 1: %d messages, awaiting %d", len(one.Messages), one.AwaitingReply)
	}
	e.call("send_message", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "Markdown."}, nil)
	var after server.GetInboxOut
	e.call("get_inbox", map[string]any{"only_awaiting_reply": true}, &after)
	if after.AwaitingReply != 0 || len(after.Messages) != 0 {
		t.Errorf("after the answer: %+v, want nothing awaiting a reply", after)
	}
}

func TestManageTask(t *testing.T) {
	for _, tc := range []struct {
		action string
		args   func(f taskFixture) map[string]any
		check  func(t *testing.T, f taskFixture, res map[string]any, task engine.TaskState)
	}{
		{engine.ActionAddStage, func(f taskFixture) map[string]any {
			return map[string]any{"stages": []map[string]any{{"stage_intention": "review the report", "agent_allocation": map[string]string{f.Bob: "review it"}}}}
		}, func(t *testing.T, f taskFixture, res map[string]any, task engine.TaskState) {
			ids, _ := res["stage_ids"].([]any)
			if len(ids) != 1 || len(task.StageList) != 3 || task.StageList[2].StageID != ids[0] || task.StageList[2].ExecutionState != engine.StateInit {
				t.Errorf("result %v, stages %+v: want a third stage, not started", res, task.StageList)
			}
		}},
		{engine.ActionFinishStage, func(f taskFixture) map[string]any {
			return map[string]any{"stage_id": f.Stages[0]}
		}, func(t *testing.T, f taskFixture, res map[string]any, task engine.TaskState) {
			if res["finished_stage"] != f.Stages[0] || res["next_stage"] != f.Stages[1] {
				t.Errorf("result %v", res)
			}
			if task.StageList[0].ExecutionState != engine.StateFinished {
				t.Errorf("stage 0 is %s", task.StageList[0].ExecutionState)
			}
		}},
		{engine.ActionRetryStage, func(f taskFixture) map[string]any {
			return map[string]any{"old_stage_id": f.Stages[0], "new_stage_intention": "collect facts, with sources",
				"new_agent_allocation": map[string]string{f.Alice: "collect again"}}
		}, func(t *testing.T, f taskFixture, res map[string]any, task engine.TaskState) {
			if res["failed_stage"] != f.Stages[0] || len(task.StageList) != 3 {
				t.Fatalf("result %v, %d stages", res, len(task.StageList))
			}
			if ns := task.StageList[1]; ns.StageID != res["new_stage"] || ns.RetryOf != f.Stages[0] || task.StageList[0].ExecutionState != engine.StateFailed {
				t.Errorf("stages %+v: want the old failed and the retry right after it", task.StageList)
			}
		}},
		{engine.ActionFinishTask, func(f taskFixture) map[string]any {
			return map[string]any{"summary": "Done by hand."}
		}, func(t *testing.T, f taskFixture, res map[string]any, task engine.TaskState) {
			if task.ExecutionState != engine.StateFinished || task.TaskSummary != "Done by hand." || res["execution_state"] != engine.StateFinished {
				t.Errorf("task %s %q, result %v", task.ExecutionState, task.TaskSummary, res)
			}
		}},
		{engine.ActionPauseTask, func(f taskFixture) map[string]any {
			return map[string]any{}
		}, func(t *testing.T, f taskFixture, res map[string]any, task engine.TaskState) {
			if !task.Paused || res["paused"] != true || res["changed"] != true {
				t.Errorf("task paused=%v, result %v", task.Paused, res)
			}
		}},
		{engine.ActionResumeTask, func(f taskFixture) map[string]any {
			return map[string]any{}
		}, func(t *testing.T, f taskFixture, res map[string]any, task engine.TaskState) {
			if task.Paused || res["paused"] != false || res["changed"] != false {
				t.Errorf("task paused=%v, result %v: resuming a running task changes nothing", task.Paused, res)
			}
		}},
		{engine.ActionCancelTask, func(f taskFixture) map[string]any {
			return map[string]any{}
		}, func(t *testing.T, f taskFixture, res map[string]any, task engine.TaskState) {
			if task.ExecutionState != engine.StateFailed {
				t.Errorf("task %s, want failed", task.ExecutionState)
			}
		}},
	} {
		t.Run(tc.action, func(t *testing.T) {
			e := newEnv(t)
			f := e.startTask()
			args := tc.args(f)
			args["action"], args["task_id"] = tc.action, f.TaskID
			var out instructionOut
			res := e.call("manage_task", args, &out)
			if out.Action != tc.action || out.Result["task_id"] != f.TaskID {
				t.Errorf("manage_task = %+v", out)
			}
			if !strings.HasPrefix(resultText(res), tc.action+" done") {
				t.Errorf("text %q", resultText(res))
			}
			tc.check(t, f, out.Result, e.stack.Task(f.TaskID))
		})
	}
}

func TestManageAgent(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	sys := e.stack.Sys
	var fromTemplate instructionOut
	e.call("manage_agent", map[string]any{"action": "init_new_agent", "agent_config": map[string]any{"template": "reviewer", "name": "carol"}}, &fromTemplate)
	carol, _ := fromTemplate.Result["agent_id"].(string)
	a, ok := sys.Agent(carol)
	if !ok || a.Name != "carol" || a.Template != "reviewer" || a.Kind != engine.KindLLM || fromTemplate.Result["name"] != "carol" {
		t.Fatalf("init_new_agent from a template = %+v; agent %+v", fromTemplate, a)
	}
	var full instructionOut
	e.call("manage_agent", map[string]any{"action": "init_new_agent", "agent_config": map[string]any{
		"name": "dave", "role": "tester", "profile": "tests things", "skills": []string{"think"}}}, &full)
	dave, _ := full.Result["agent_id"].(string)
	if a, ok := sys.Agent(dave); !ok || a.Role != "tester" || !slices.Contains(a.Skills, "think") || !slices.Contains(a.Skills, "planning") {
		t.Errorf("init_new_agent from a configuration: %+v (core skills are added)", a)
	}
	var joined instructionOut
	e.call("manage_agent", map[string]any{"action": "add_task_participant", "task_id": f.TaskID, "agents": []string{carol, f.Alice}}, &joined)
	if added, _ := joined.Result["added"].([]any); len(added) != 1 || added[0] != carol {
		t.Errorf("added %v, want only carol (alice is a member already)", joined.Result["added"])
	}
	if g := e.stack.Task(f.TaskID).TaskGroup; !slices.Contains(g, carol) || slices.Contains(g, dave) {
		t.Errorf("task group %v, want carol and not dave", g)
	}
	var paused instructionOut
	e.call("manage_agent", map[string]any{"action": "pause_agent", "agents": carol}, &paused)
	if a, _ := sys.Agent(carol); !a.Paused || a.WorkingState != engine.WorkingPaused {
		t.Errorf("after pause_agent carol is paused=%v %s", a.Paused, a.WorkingState)
	}
	e.call("manage_agent", map[string]any{"action": "resume_agent", "agents": []string{carol}}, &paused)
	if a, _ := sys.Agent(carol); a.Paused {
		t.Error("carol is still paused after resume_agent")
	}
	// Carol runs no step: there is nothing to interrupt or cancel.
	if msg := e.callErr("manage_agent", map[string]any{"action": "interrupt", "agent_id": carol, "instruction": "stop"}); !strings.Contains(msg, "runs no step now") {
		t.Errorf("interrupt of an idle agent: %q", msg)
	}
	if msg := e.callErr("manage_agent", map[string]any{"action": "cancel_step", "agent_id": carol, "step_id": "s"}); !strings.Contains(msg, "runs no step now") {
		t.Errorf("cancel_step of an idle agent: %q", msg)
	}
}

func mcpCall(name string, args any) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: name, Arguments: args}
}
