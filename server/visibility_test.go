package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/server"
)

const (
	tokenAlice = "alice-token-0123456789abcdef"
	tokenBob   = "bob-token-0123456789abcdef"
	tokenCarol = "carol-token-0123456789abcdef"

	// ownership is what a refusal of the ownership rule says.
	ownership = "only its owner, operators it is shared with and admins may manage it"
	// unseen is what a read of a task the operator may not see says.
	unseen = "no such task visible to operator"
)

// isolation is a monitor env with three operators over HTTP, each with a
// bearer token: alice and bob, and carol, an admin. (The scripted team's
// LLM agents are also named alice and bob: the operators' names differ.)
type isolation struct {
	*monitorEnv
	alice, bob, carol          string // operator IDs
	aliceMCP, bobMCP, carolMCP *peer
	aliceAPI, bobAPI           *apiClient
}

func newIsolation(t *testing.T) *isolation {
	t.Helper()
	iso := &isolation{}
	iso.monitorEnv = newMonitorEnv(t, envOptions{Config: func(c *server.Config) {
		for name, id := range map[string]*string{"operator-alice": &iso.alice, "operator-bob": &iso.bob, "operator-carol": &iso.carol} {
			var err error
			if *id, err = c.System.AddOperator(name); err != nil {
				t.Fatal(err)
			}
		}
		c.HTTP.Tokens = map[string]string{tokenAlice: iso.alice, tokenBob: iso.bob, tokenCarol: iso.carol}
		c.HTTP.Admins = []string{iso.carol}
	}})
	iso.aliceMCP = iso.httpPeer(iso.ts.URL, tokenAlice, "2025-11-25")
	iso.bobMCP = iso.httpPeer(iso.ts.URL, tokenBob, "2025-11-25")
	iso.carolMCP = iso.httpPeer(iso.ts.URL, tokenCarol, "2025-11-25")
	iso.aliceAPI, iso.bobAPI = iso.client(), iso.client()
	iso.aliceAPI.token, iso.bobAPI.token = tokenAlice, tokenBob
	return iso
}

// TestOperatorIsolation: bob's task and bob's private messages (an agent's
// question to him, his answer, a risk-gate approval question and its
// arguments, his message to the manager in the base task) are nowhere in
// what alice can reach: resources and their list, every tool, the monitor
// API, its event stream, logging and resources/updated notifications. Every
// action of alice on bob's task is refused naming the rule; bob's own
// actions work; the admin may act on it; once bob shares it, alice may too
// (still without his private messages).
func TestOperatorIsolation(t *testing.T) {
	iso := newIsolation(t)
	sys := iso.stack.Sys
	ctx := context.Background()
	alice, bob := iso.aliceMCP, iso.bobMCP
	if err := alice.client.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	if err := alice.client.Subscribe(ctx, &mcp.SubscribeParams{URI: "mas://tasks"}); err != nil {
		t.Fatal(err)
	}
	aliceEvents := iso.aliceAPI.events()

	// Bob's task, up to his agent's waiting question (private marker 1).
	var added server.AddTaskOut
	bob.call("add_task", map[string]any{"task_name": "bobs report", "task_intention": "Research a topic and write a report."}, &added)
	task := added.TaskID
	var question engine.InboxEntry
	iso.stack.WaitFor("the agent's question to bob", func() bool {
		entries, _ := sys.Inbox(iso.bob)
		for _, e := range entries {
			if e.Content == scripted.OperatorQuestion && e.AwaitingReply {
				question = e
			}
		}
		return question.MessageID != "" && atRest(sys)
	})
	stages := iso.stack.Task(task).StageList

	// A risk-gate approval question to bob, with its arguments (marker 2).
	const approval = `APPROVE-7731 delete_file {"path": "/srv/bob-secret-plan.txt"}`
	answer := make(chan string, 1)
	askCtx, cancelAsk := context.WithCancel(ctx)
	t.Cleanup(cancelAsk)
	go func() {
		a, _ := sys.AskOperator(askCtx, engine.OperatorQuestion{TaskID: task, StageID: stages[0].StageID, AgentID: question.SenderID, Question: approval})
		answer <- a
	}()
	var gate engine.InboxEntry
	iso.stack.WaitFor("the approval question to bob", func() bool {
		entries, _ := sys.Inbox(iso.bob)
		for _, e := range entries {
			if e.Content == approval {
				gate = e
			}
		}
		return gate.MessageID != ""
	})

	// Everything alice tries on bob's task is refused, naming the rule.
	refusals := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"manage_task", map[string]any{"action": "add_stage", "task_id": task, "stages": []map[string]any{{"stage_intention": "x", "agent_allocation": map[string]string{question.SenderID: "x"}}}}, ownership},
		{"manage_task", map[string]any{"action": "finish_stage", "task_id": task, "stage_id": stages[0].StageID}, ownership},
		{"manage_task", map[string]any{"action": "retry_stage", "task_id": task, "old_stage_id": stages[0].StageID, "new_stage_intention": "x", "new_agent_allocation": map[string]string{question.SenderID: "x"}}, ownership},
		{"manage_task", map[string]any{"action": "finish_task", "task_id": task, "summary": "x"}, ownership},
		{"manage_task", map[string]any{"action": "cancel_task", "task_id": task}, ownership},
		{"manage_task", map[string]any{"action": "share", "task_id": task, "operator": iso.alice}, ownership},
		{"manage_agent", map[string]any{"action": "add_task_participant", "task_id": task, "agents": []string{iso.alice}}, ownership},
		{"send_message", map[string]any{"task_id": task, "receiver": []string{question.SenderID}, "content": "let me in"}, ownership},
		{"ask_info", map[string]any{"type": "task_info", "task_id": task}, unseen},
		{"ask_info", map[string]any{"type": "stage_info", "task_id": task, "stage_id": stages[0].StageID}, unseen},
		{"ask_info", map[string]any{"type": "task_agents", "task_id": task}, unseen},
		{"ask_info", map[string]any{"type": "stage_agents", "task_id": task, "stage_id": stages[0].StageID}, unseen},
		{"read_resource", map[string]any{"uri": "mas://tasks/" + task}, unseen},
		{"read_resource", map[string]any{"uri": "mas://tasks/" + task + "/conversation"}, unseen},
		{"read_resource", map[string]any{"uri": "mas://tasks/" + task + "/stages/" + stages[0].StageID}, unseen},
		{"wait_for_updates", map[string]any{"task_id": task, "timeout_seconds": 1}, unseen},
	}
	before := masSnapshot(sys)
	for _, r := range refusals {
		if txt := alice.callErr(r.tool, r.args); !strings.Contains(txt, r.want) {
			t.Errorf("alice's %s(%s): %q, want it to say %q", r.tool, jsonString(r.args), txt, r.want)
		}
	}
	iso.unchanged("alice's refused calls", before)
	for _, uri := range []string{"mas://tasks/" + task, "mas://tasks/" + task + "/conversation"} {
		// resources/read answers as for a task that does not exist.
		if err, none := alice.readErr(uri), alice.readErr(strings.Replace(uri, task, "no-such-task", 1)); err.Code != none.Code || err.Message != strings.Replace(none.Message, "no-such-task", task, 1) {
			t.Errorf("alice reads %s: %v, want what a missing task gets (%v)", uri, err, none)
		}
		if err := alice.client.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err == nil || !strings.Contains(err.Error(), unseen) {
			t.Errorf("alice subscribes to %s: %v, want a refusal", uri, err)
		}
	}
	iso.aliceAPI.fails("POST", "/api/send_message", map[string]any{"task_id": task, "receiver": []string{question.SenderID}, "content": "x"},
		http.StatusForbidden, ownership)

	// Bob's own actions work: he answers the agent (marker 3) and the gate,
	// and writes to the manager in the base task (marker 4).
	const bobAnswer, bobNote = "BOB-ANSWER-5521: use the secret format", "BOB-NOTE-9035 for the manager only"
	bob.call("send_message", map[string]any{"task_id": task, "receiver": []string{question.SenderID}, "content": bobAnswer, "reply_to": question.MessageID}, nil)
	bob.call("send_message", map[string]any{"task_id": task, "receiver": []string{question.SenderID}, "content": "approved", "reply_to": gate.MessageID}, nil)
	if got := <-answer; got != "approved" {
		t.Errorf("the gate's answer = %q", got)
	}
	bob.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": bobNote, "need_reply": false}, nil)
	iso.stack.WaitFor("bob's messages delivered and digested", func() bool {
		return atRest(sys) && strings.Contains(jsonString(iso.stack.Task(sys.BaseTaskID())), "BOB-NOTE-9035") &&
			strings.Contains(jsonString(iso.stack.Task(task)), "BOB-ANSWER-5521")
	})
	markers := []string{scripted.OperatorQuestion, "APPROVE-7731", "bob-secret-plan", "BOB-ANSWER-5521", "BOB-NOTE-9035"}

	// Bob sees his own: the grep below is not vacuous.
	bobView := iso.view(bob, iso.bobAPI, nil, nil)
	for _, m := range markers {
		if !strings.Contains(bobView, m) {
			t.Errorf("bob's own view lacks %q", m)
		}
	}

	// Alice's message in the base task: the last event her stream must show.
	var ping server.SendMessageOut
	alice.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": "alice here", "need_reply": false}, &ping)
	var stream strings.Builder
	for !strings.Contains(stream.String(), ping.Messages[0].MessageID) {
		ev := aliceEvents.next(t, 20*time.Second)
		stream.WriteString(ev.Event + " " + ev.Data + "\n")
	}
	iso.stack.WaitFor("rest after alice's message", func() bool { return atRest(sys) })
	// Her session gets step logs of the base task: the logs in her view
	// are not empty by accident.
	var logs []*mcp.LoggingMessageParams
	for len(logs) == 0 || !strings.Contains(jsonString(logs[len(logs)-1].Data), sys.BaseTaskID()) {
		select {
		case l := <-alice.logs:
			logs = append(logs, l)
		case <-time.After(20 * time.Second):
			t.Fatalf("alice's session got no step log of the base task (got %s)", jsonString(logs))
		}
	}

	aliceView := iso.view(alice, iso.aliceAPI, aliceEvents, []string{task}) + stream.String() + jsonString(logs)
	for _, want := range []string{"alice here", "operator-carol", sys.BaseTaskID(), "== /api/states?type=step", "message_delivered"} {
		if !strings.Contains(aliceView, want) {
			t.Errorf("alice's view lacks %q: it is not the whole view", want)
		}
	}
	for _, m := range append(markers, task) {
		if i := strings.Index(aliceView, m); i >= 0 {
			t.Errorf("alice can reach %q: …%s…", m, aliceView[max(0, i-300):min(len(aliceView), i+200)])
		}
	}

	// The admin may read and act on bob's task, but not read his messages.
	var info server.AskInfoOut
	iso.carolMCP.call("ask_info", map[string]any{"type": "task_info", "task_id": task}, &info)
	var conv server.ConversationDocument
	iso.carolMCP.read("mas://tasks/"+task+"/conversation", &conv)
	if s := jsonString(conv); len(conv.Messages) == 0 || strings.Contains(s, "BOB-ANSWER-5521") || strings.Contains(s, "APPROVE-7731") {
		t.Errorf("the admin's view of the conversation: want the agents' messages, not bob's: %.2000s", s)
	}

	// Bob shares the task with alice: she may see it, still without bob's
	// private messages.
	bob.call("manage_task", map[string]any{"action": "share", "task_id": task, "operator": iso.alice}, nil)
	alice.read("mas://tasks/"+task+"/conversation", &conv)
	if s := jsonString(conv); len(conv.Messages) == 0 || strings.Contains(s, "BOB-ANSWER-5521") || strings.Contains(s, scripted.OperatorQuestion) {
		t.Errorf("alice's view of the shared task's conversation: %.2000s", s)
	}
	alice.call("ask_info", map[string]any{"type": "task_info", "task_id": task}, &info)

	// A running task bob shares: alice messages inside it and cancels it.
	bob.call("add_task", map[string]any{"task_name": "second", "task_intention": "Research a topic and write a report."}, &added)
	alice.callErr("manage_task", map[string]any{"action": "cancel_task", "task_id": added.TaskID})
	bob.call("manage_task", map[string]any{"action": "share", "task_id": added.TaskID, "operator": iso.alice}, nil)
	alice.call("send_message", map[string]any{"task_id": added.TaskID, "receiver": []string{sys.ManagerID()}, "content": "hello from alice", "need_reply": false}, nil)
	alice.call("manage_task", map[string]any{"action": "cancel_task", "task_id": added.TaskID, "summary": "alice stops it"}, nil)
	if got := iso.stack.Task(added.TaskID).ExecutionState; got != engine.StateFailed {
		t.Errorf("after alice's cancel_task the shared task is %s", got)
	}
}

// view is everything an operator reads through every resource, every
// tool, the monitor API and what its session was notified of, as one text.
// The event stream's events so far are read too when events is not nil.
//
// Every task is probed, those in probed too: their IDs are masked in the
// probes' names and in refusals (which name the ID asked for), so that a
// search of the view for them finds only what the server volunteered.
func (iso *isolation) view(p *peer, api *apiClient, events *eventStream, probed []string) string {
	iso.t.Helper()
	sys := iso.stack.Sys
	var b strings.Builder
	mask := func(s string) string {
		for _, id := range probed {
			s = strings.ReplaceAll(s, id, "<probed task>")
		}
		return s
	}
	add := func(what string, v any) { b.WriteString("\n== " + mask(what) + "\n" + jsonString(v)) }
	read := func(uri string) {
		res, err := p.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			add(uri, "error: "+mask(err.Error()))
			return
		}
		add(uri, res)
	}
	tool := func(name string, args map[string]any) {
		res, err := p.client.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		switch {
		case err != nil:
			add(name, "error: "+mask(err.Error()))
		case res.IsError:
			add(name+jsonString(args), "isError: "+mask(resultText(res)))
		default:
			add(name+jsonString(args), resultText(res)+jsonString(res.StructuredContent))
		}
	}

	list, err := p.client.ListResources(context.Background(), nil)
	if err != nil {
		iso.t.Fatal(err)
	}
	add("resources/list", list)
	uris := []string{"mas://tasks", "mas://agents", "mas://catalog"}
	for _, r := range list.Resources {
		uris = append(uris, r.URI)
	}
	var agentIDs []string
	for _, a := range sys.AgentBriefs() {
		agentIDs = append(agentIDs, a.AgentID)
		uris = append(uris, "mas://agents/"+a.AgentID, "mas://agents/"+a.AgentID+"/steps", "mas://operators/"+a.AgentID+"/inbox")
	}
	for _, t := range sys.Tasks() {
		uris = append(uris, "mas://tasks/"+t.TaskID, "mas://tasks/"+t.TaskID+"/conversation")
		for _, st := range t.StageList {
			uris = append(uris, "mas://tasks/"+t.TaskID+"/stages/"+st.StageID)
		}
	}
	for _, uri := range uris {
		read(uri)
		tool("read_resource", map[string]any{"uri": uri})
	}
	for _, typ := range []string{"tasks", "managed_task_and_stage_info", "assigned_task_and_stage_info", "available_agents_config", "all_agents", "team_agents", "skills_and_tools"} {
		tool("ask_info", map[string]any{"type": typ})
	}
	tool("ask_info", map[string]any{"type": "agent", "agent_id": agentIDs})
	for _, t := range sys.Tasks() {
		tool("ask_info", map[string]any{"type": "task_info", "task_id": t.TaskID})
		tool("ask_info", map[string]any{"type": "task_agents", "task_id": t.TaskID})
		for _, st := range t.StageList {
			tool("ask_info", map[string]any{"type": "stage_info", "task_id": t.TaskID, "stage_id": st.StageID})
			tool("ask_info", map[string]any{"type": "stage_agents", "task_id": t.TaskID, "stage_id": st.StageID})
		}
	}
	tool("get_inbox", nil)
	tool("wait_for_updates", map[string]any{"cursor": 1, "max_events": 100000})
	for _, typ := range []string{"task", "stage", "agent", "step"} {
		add("/api/states?type="+typ, string(api.do("GET", "/api/states?type="+typ, nil).body))
	}
	for _, path := range []string{"/api/inbox", "/api/whoami"} {
		add(path, string(api.do("GET", path, nil).body))
	}
	add("logging notifications", drain(p.logs))
	add("resources/updated notifications", drain(p.updates))
	if events != nil {
		for _, ev := range drain(events.events) {
			add("/api/events", ev)
		}
	}
	return b.String()
}

// TestAdminsMustBeOperators: an admin that is not an operator HumanAgent
// is a configuration error naming it.
func TestAdminsMustBeOperators(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{noSuchID, e.stack.Sys.ManagerID()} {
		srv, err := server.New(server.Config{System: e.stack.Sys, HTTP: server.HTTPConfig{Admins: []string{id}}})
		if err == nil {
			_ = srv.Close()
			t.Errorf("server.New accepted the admin %s", id)
		} else if !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "admins") {
			t.Errorf("admin %s: error %v, want it named", id, err)
		}
	}
}
