package server_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// The monitor's JSON API (server/monitor.go): GET /api/states, /api/events,
// /api/inbox, /api/whoami; POST /api/bind_human_agent, /api/send_message.

// TestMonitorAPIStates: each type answers spec §8.5's {id: state} with
// every task, stage, agent and step; a bad type is refused naming it.
func TestMonitorAPIStates(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	f := m.startTask()
	c := m.client()
	sys := m.stack.Sys

	var wantTasks, wantStages, wantAgents, wantSteps []string
	for _, task := range sys.Tasks() {
		wantTasks = append(wantTasks, task.TaskID)
		for _, st := range task.StageList {
			wantStages = append(wantStages, st.StageID)
		}
	}
	for _, a := range sys.Agents() {
		wantAgents = append(wantAgents, a.AgentID)
		for _, st := range a.AgentStep.StepList {
			wantSteps = append(wantSteps, st.StepID) // the default operator's own steps included
		}
	}
	for _, tc := range []struct {
		typ, idField string
		want         []string
	}{
		{"task", "task_id", wantTasks},
		{"stage", "stage_id", wantStages},
		{"agent", "agent_id", wantAgents},
		{"step", "step_id", wantSteps},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			var got map[string]map[string]json.RawMessage
			c.json("GET", "/api/states?type="+tc.typ, nil, http.StatusOK, &got)
			var ids []string
			for id, st := range got {
				ids = append(ids, id)
				var inner string
				if err := json.Unmarshal(st[tc.idField], &inner); err != nil || inner != id {
					t.Errorf("states[%s].%s = %s, want the key", id, tc.idField, st[tc.idField])
				}
			}
			sort.Strings(ids)
			want := slices.Clone(tc.want)
			sort.Strings(want)
			if diff := cmp.Diff(want, ids); diff != "" {
				t.Errorf("GET /api/states?type=%s IDs mismatch (-want +got):\n%s", tc.typ, diff)
			}
		})
	}

	// The documents are the engine's states, in full: check a few fields.
	var tasks map[string]engine.TaskState
	c.json("GET", "/api/states?type=task", nil, http.StatusOK, &tasks)
	task := tasks[f.TaskID]
	if task.TaskName != "report" || task.TaskManager != f.Manager || len(task.StageList) != 2 || task.Usage.TotalTokens == 0 ||
		!slices.ContainsFunc(task.SharedConversationPool, func(msg engine.Message) bool { return msg.MessageID == f.Question.MessageID }) {
		t.Errorf("task document: name %q, manager %s, %d stages, %d tokens, %d messages", task.TaskName, task.TaskManager,
			len(task.StageList), task.Usage.TotalTokens, len(task.SharedConversationPool))
	}
	var agents map[string]engine.AgentState
	c.json("GET", "/api/states?type=agent", nil, http.StatusOK, &agents)
	if a := agents[f.Alice]; a.Name != "alice" || len(a.AgentStep.StepList) == 0 || a.Usage.TotalTokens == 0 || len(a.StepLock) != 1 {
		t.Errorf("alice: name %q, %d steps, %d tokens, step lock %v", a.Name, len(a.AgentStep.StepList), a.Usage.TotalTokens, a.StepLock)
	}
	if op := agents[f.Operator]; op.ConversationPool == nil || len(op.ConversationPool.ConversationPrivates[f.Alice]) == 0 {
		t.Errorf("the operator's own conversation pool is missing from its agent state: %+v", op.ConversationPool)
	}
	var steps map[string]engine.StepState
	c.json("GET", "/api/states?type=step", nil, http.StatusOK, &steps)
	var sized bool
	for _, st := range steps {
		sized = sized || (st.Usage.PromptChars > 0 && st.Usage.ResponseChars > 0 && st.Usage.TotalTokens > 0)
	}
	if !sized {
		t.Error("no step has prompt and response sizes and tokens in its usage")
	}

	for _, q := range []string{"", "?type=", "?type=tasks", "?type=Task", "?kind=task"} {
		msg := c.fails("GET", "/api/states"+q, nil, http.StatusBadRequest, "type", "task, stage, agent or step")
		if q == "?type=tasks" && !strings.Contains(msg, `"tasks"`) {
			t.Errorf("the error %q does not quote the bad value", msg)
		}
	}
	c.fails("GET", "/api/nothing", nil, http.StatusNotFound, "GET /api/nothing")
}

// TestMonitorAPIMethods: an endpoint called with a method it does not take
// answers 405 with the methods it does (not "no such endpoint").
func TestMonitorAPIMethods(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	c := m.client()
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/api/send_message", "POST"},
		{"GET", "/api/bind_human_agent", "POST"},
		{"POST", "/api/states?type=task", "GET, HEAD"},
		{"DELETE", "/api/inbox", "GET, HEAD"},
		{"PUT", "/api/whoami", "GET, HEAD"},
		{"POST", "/api/events", "GET, HEAD"},
	} {
		r := c.do(tc.method, tc.path, nil)
		if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != tc.allow || !strings.Contains(string(r.body), tc.method) {
			t.Errorf("%s %s: %d, Allow %q, %s; want 405, Allow %q, naming the method", tc.method, tc.path, r.status, r.header.Get("Allow"), r.body, tc.allow)
		}
	}
}

// TestMonitorAPIEvents: /api/events streams a change as an event named for
// its kind, with the engine event as data, and its handler ends when the
// client goes away.
func TestMonitorAPIEvents(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	c := m.client()
	stream := c.events()
	if ct := stream.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q, want text/event-stream", ct)
	}
	if cc := stream.resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	hello := stream.next(t, 5*time.Second)
	var h struct {
		Seq *uint64 `json:"seq"`
	}
	if hello.Event != "hello" || json.Unmarshal([]byte(hello.Data), &h) != nil || h.Seq == nil {
		t.Fatalf("first event %+v, want hello with the current seq", hello)
	}

	// A change: the operator tells the manager something (no LLM involved
	// until the manager reads it).
	var sent sendAnswer
	c.json("POST", "/api/send_message", map[string]any{
		"task_id": m.stack.Sys.BaseTaskID(), "receiver": []string{m.stack.Sys.ManagerID()}, "content": "FYI: the monitor is watching.", "need_reply": false,
	}, http.StatusOK, &sent)
	var lastSeq uint64 = *h.Seq
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev := stream.next(t, time.Until(deadline))
		var got engine.Event
		if err := json.Unmarshal([]byte(ev.Data), &got); err != nil {
			t.Fatalf("event %s: data %q: %v", ev.Event, ev.Data, err)
		}
		if string(got.Kind) != ev.Event || ev.ID == "" || got.Seq <= lastSeq {
			t.Errorf("event %+v: its name, id and seq must be the engine event's kind and a rising seq (last %d)", ev, lastSeq)
		}
		lastSeq = got.Seq
		if got.Kind == engine.EventMessageDelivered && got.MessageID == sent.MessageIDs[0] {
			if got.TaskID != m.stack.Sys.BaseTaskID() || got.AgentID != m.stack.Sys.OperatorID() {
				t.Errorf("message_delivered %+v: want the base task and the operator as sender", got)
			}
			break
		}
	}

	// The client goes away: the handler returns (and its subscription closes).
	stream.close()
	select {
	case <-m.eventsDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the /api/events handler still runs 5s after its client disconnected")
	}
}

// TestMonitorAPIBind: a page binds to an operator with a token, or with a
// HumanAgent ID and its password, and then acts as that operator through
// its session cookie; wrong credentials are refused.
func TestMonitorAPIBind(t *testing.T) {
	var ann, bea string
	m := newMonitorEnv(t, tokenOperators(t, &ann, &bea))
	if err := m.stack.Sys.SetOperatorPassword(bea, "bea's password"); err != nil {
		t.Fatal(err)
	}

	t.Run("token", func(t *testing.T) {
		c := m.client()
		c.fails("GET", "/api/whoami", nil, http.StatusUnauthorized, "bind_human_agent")
		var got struct {
			Success      bool   `json:"success"`
			HumanAgentID string `json:"human_agent_id"`
			Message      string `json:"message"`
		}
		r := c.json("POST", "/api/bind_human_agent", map[string]any{"token": tokenAnn}, http.StatusOK, &got)
		if !got.Success || got.HumanAgentID != ann || got.Message == "" {
			t.Errorf("bind = %+v, want success as ann (%s)", got, ann)
		}
		cookie := r.header.Get("Set-Cookie")
		for _, want := range []string{"mas_session=", "Path=/api/", "HttpOnly", "SameSite=Strict"} {
			if !strings.Contains(cookie, want) {
				t.Errorf("Set-Cookie %q lacks %s", cookie, want)
			}
		}
		var me whoami
		c.json("GET", "/api/whoami", nil, http.StatusOK, &me)
		if me.HumanAgentID != ann || me.Name != "ann" || !me.TokensRequired {
			t.Errorf("whoami after binding = %+v, want ann with tokens required", me)
		}
	})
	t.Run("password", func(t *testing.T) {
		c := m.client()
		var got struct {
			HumanAgentID string `json:"human_agent_id"`
		}
		c.json("POST", "/api/bind_human_agent", map[string]any{"human_agent_id": bea, "password": "bea's password"}, http.StatusOK, &got)
		var me whoami
		c.json("GET", "/api/whoami", nil, http.StatusOK, &me)
		if got.HumanAgentID != bea || me.HumanAgentID != bea {
			t.Errorf("bound to %s, whoami %s: want bea (%s)", got.HumanAgentID, me.HumanAgentID, bea)
		}
	})
	t.Run("refused", func(t *testing.T) {
		c := m.client()
		for _, tc := range []struct {
			body   any
			status int
			words  []string
		}{
			{map[string]any{"token": "not-a-token-of-this-server"}, http.StatusUnauthorized, []string{"token"}},
			{map[string]any{"human_agent_id": bea, "password": "wrong"}, http.StatusUnauthorized, []string{"human_agent_id", "password"}},
			{map[string]any{"human_agent_id": ann, "password": ""}, http.StatusUnauthorized, []string{"human_agent_id"}}, // ann has no password
			{map[string]any{"human_agent_id": "no-such-agent", "password": "x"}, http.StatusUnauthorized, []string{"human_agent_id"}},
			{map[string]any{"human_agent_id": m.stack.Sys.ManagerID(), "password": "x"}, http.StatusUnauthorized, []string{"human_agent_id"}},
			{map[string]any{}, http.StatusBadRequest, []string{"token", "human_agent_id", "password", "required"}},
			{map[string]any{"token": tokenAnn, "role": "admin"}, http.StatusBadRequest, []string{`unknown field "role"`}},
			{`{"token": `, http.StatusBadRequest, []string{"body"}},
		} {
			c.fails("POST", "/api/bind_human_agent", tc.body, tc.status, tc.words...)
		}
		c.fails("GET", "/api/whoami", nil, http.StatusUnauthorized)
	})
	t.Run("without tokens", func(t *testing.T) {
		// Loopback without tokens: every page is the default operator at
		// once, and binding needs nothing.
		d := newMonitorEnv(t, envOptions{})
		c := d.client()
		var me whoami
		c.json("GET", "/api/whoami", nil, http.StatusOK, &me)
		if me.HumanAgentID != d.stack.Sys.OperatorID() || me.TokensRequired {
			t.Errorf("whoami = %+v, want the default operator, no tokens", me)
		}
		var got struct {
			HumanAgentID string `json:"human_agent_id"`
		}
		c.json("POST", "/api/bind_human_agent", map[string]any{}, http.StatusOK, &got)
		if got.HumanAgentID != d.stack.Sys.OperatorID() {
			t.Errorf("bind {} = %s, want the default operator", got.HumanAgentID)
		}
	})
}

// TestMonitorAPISendMessage: spec §7.4.1's body sends a message per
// receiver; need_reply defaults as implemented (true, but false when it
// answers the receiver's pending question); bad input changes nothing and
// is answered naming the field.
func TestMonitorAPISendMessage(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	f := m.startTask()
	c := m.client()
	sys := m.stack.Sys
	base, manager := sys.BaseTaskID(), sys.ManagerID()

	before := masSnapshot(sys)
	for _, tc := range []struct {
		name   string
		body   any
		status int
		words  []string
	}{
		{"unknown task", map[string]any{"task_id": "no-such-task", "receiver": []string{f.Alice}, "content": "hi"}, http.StatusNotFound, []string{"task_id", "no-such-task"}},
		{"no task", map[string]any{"receiver": []string{f.Alice}, "content": "hi"}, http.StatusBadRequest, []string{"task_id", "required"}},
		{"empty content", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "  "}, http.StatusBadRequest, []string{"content", "empty"}},
		{"unknown receiver", map[string]any{"task_id": f.TaskID, "receiver": []string{"no-such-agent"}, "content": "hi"}, http.StatusNotFound, []string{"receiver", "no-such-agent"}},
		{"no receiver", map[string]any{"task_id": f.TaskID, "receiver": []string{}, "content": "hi"}, http.StatusBadRequest, []string{"receiver"}},
		{"receiver outside the group", map[string]any{"task_id": base, "receiver": []string{f.Alice}, "content": "hi"}, http.StatusBadRequest, []string{"receiver", f.Alice, "task group"}},
		{"receiver is the sender", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Operator}, "content": "hi"}, http.StatusBadRequest, []string{"receiver", "sender"}},
		{"another operator's id", map[string]any{"human_agent_id": manager, "task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "hi"}, http.StatusForbidden, []string{"human_agent_id", manager}},
		{"unknown stage", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "hi", "stage_relative": "no-such-stage"}, http.StatusNotFound, []string{"stage_relative"}},
		{"unknown reply_to", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "hi", "reply_to": "no-such-message"}, http.StatusNotFound, []string{"reply_to"}},
		{"unknown field", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "hi", "urgent": true}, http.StatusBadRequest, []string{`unknown field "urgent"`}},
		{"receiver not a list", map[string]any{"task_id": f.TaskID, "receiver": f.Alice, "content": "hi"}, http.StatusBadRequest, []string{"receiver"}},
		{"malformed JSON", `{"task_id": "` + f.TaskID, http.StatusBadRequest, []string{"body"}},
		{"empty body", "", http.StatusBadRequest, []string{"body"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.fails("POST", "/api/send_message", tc.body, tc.status, tc.words...)
		})
	}
	huge := `{"task_id": "` + strings.Repeat("x", 5<<20) + `"}`
	if r := c.do("POST", "/api/send_message", huge); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 5 MiB body: status %d, want 413", r.status)
	}
	m.unchanged("refused send_message calls", before)

	pool := func(taskID, messageID string) engine.Message {
		t.Helper()
		for _, msg := range m.stack.Task(taskID).SharedConversationPool {
			if msg.MessageID == messageID {
				return msg
			}
		}
		t.Fatalf("message %s is not in task %s's conversation", messageID, taskID)
		return engine.Message{}
	}

	// Defaults: need_reply true, not waiting, no stage.
	var sent sendAnswer
	c.json("POST", "/api/send_message", map[string]any{"task_id": base, "receiver": []string{manager}, "content": "Hello manager."}, http.StatusOK, &sent)
	if !sent.Success || sent.Message == "" || len(sent.MessageIDs) != 1 {
		t.Fatalf("send_message = %+v, want success and one message id", sent)
	}
	if msg := pool(base, sent.MessageIDs[0]); !msg.NeedReply || msg.Waiting != nil || msg.StageRelative != engine.NoRelative || msg.SenderID != f.Operator {
		t.Errorf("defaults: %+v, want need_reply, not waiting, no_relative, from the operator", msg)
	}
	// Urgent: waiting gives the receiver a waiting ID.
	c.json("POST", "/api/send_message", map[string]any{"task_id": base, "receiver": []string{manager}, "content": "Urgent!", "waiting": true}, http.StatusOK, &sent)
	if msg := pool(base, sent.MessageIDs[0]); !msg.NeedReply || len(msg.Waiting) != 1 {
		t.Errorf("waiting: %+v, want need_reply and one waiting id", msg)
	}

	// Spec §7.4.1's whole body, answering alice: one message per receiver
	// (alice and bob); the one to alice answers her waiting question.
	c.json("POST", "/api/send_message", map[string]any{
		"human_agent_id": f.Operator, "task_id": f.TaskID, "receiver": []string{f.Alice, f.Bob},
		"content": "Use markdown.", "stage_relative": f.Stages[0], "need_reply": false, "waiting": false,
	}, http.StatusOK, &sent)
	if len(sent.MessageIDs) != 2 {
		t.Fatalf("send to alice and bob: %d message ids, want 2", len(sent.MessageIDs))
	}
	toAlice := pool(f.TaskID, sent.MessageIDs[0])
	if toAlice.Receiver[0] != f.Alice || toAlice.NeedReply || toAlice.StageRelative != f.Stages[0] || toAlice.ReturnWaitingID == "" {
		t.Errorf("message to alice: %+v, want no reply needed, the stage, and the return_waiting_id of her question", toAlice)
	}
	if toBob := pool(f.TaskID, sent.MessageIDs[1]); toBob.Receiver[0] != f.Bob || toBob.ReturnWaitingID != "" {
		t.Errorf("message to bob: %+v", toBob)
	}

	// The task runs to its end; an ended task's chat takes no message.
	m.stack.WaitFor("the task to finish", func() bool { return m.stack.Task(f.TaskID).ExecutionState == engine.StateFinished })
	c.fails("POST", "/api/send_message", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "Thanks."}, http.StatusBadRequest, "task_id", "ended")
}

// TestMonitorAPIDefaultNeedReply: an answer to the receiver's pending
// question needs no reply unless need_reply says so.
func TestMonitorAPIDefaultNeedReply(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	f := m.startTask()
	c := m.client()
	var sent sendAnswer
	c.json("POST", "/api/send_message", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "Markdown."}, http.StatusOK, &sent)
	for _, msg := range m.stack.Task(f.TaskID).SharedConversationPool {
		if msg.MessageID == sent.MessageIDs[0] && (msg.NeedReply || msg.ReturnWaitingID == "") {
			t.Errorf("the answer %+v: want need_reply false by default and the return_waiting_id", msg)
		}
	}
}

// TestMonitorAPIInbox: the operator's inbox, awaiting-reply first, and how
// an answer marks the question.
func TestMonitorAPIInbox(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	f := m.startTask()
	c := m.client()
	var inbox server.InboxDocument
	c.json("GET", "/api/inbox", nil, http.StatusOK, &inbox)
	if inbox.OperatorID != f.Operator || len(inbox.Messages) != 1 {
		t.Fatalf("inbox = %+v, want the operator's, with alice's question", inbox)
	}
	q := inbox.Messages[0]
	if q.MessageID != f.Question.MessageID || q.SenderID != f.Alice || !q.AwaitingReply || !q.Waiting || !q.NeedReply || q.TaskID != f.TaskID {
		t.Errorf("question = %+v, want alice's waiting question awaiting a reply", q)
	}
	c.json("POST", "/api/send_message", map[string]any{"task_id": f.TaskID, "receiver": []string{f.Alice}, "content": "Markdown.", "reply_to": q.MessageID}, http.StatusOK, nil)
	c.json("GET", "/api/inbox", nil, http.StatusOK, &inbox)
	for _, e := range inbox.Messages {
		if e.MessageID == q.MessageID && (e.AwaitingReply || !e.Replied) {
			t.Errorf("after the answer: %+v, want replied and no longer awaiting", e)
		}
	}
}
