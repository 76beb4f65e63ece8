package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// readTrail pages through a trail URI (following next_uri), checking that
// every page but the last is full and carries a next_cursor.
func (p *peer) readTrail(uri string, limit int) []engine.TrailEntry {
	p.t.Helper()
	var all []engine.TrailEntry
	uri += fmt.Sprintf("%slimit=%d", map[bool]string{true: "&", false: "?"}[strings.Contains(uri, "?")], limit)
	for range 1000 {
		var doc server.TrailDocument
		p.read(uri, &doc)
		all = append(all, doc.Entries...)
		if doc.NextCursor == "" {
			if doc.NextURI != "" {
				p.t.Errorf("last page with next_uri %q", doc.NextURI)
			}
			return all
		}
		// A page but the last holds limit entries the reader may see
		// (trailPage reads past those it may not).
		if len(doc.Entries) != limit {
			p.t.Errorf("%s: %d entries, not the limit %d", uri, len(doc.Entries), limit)
		}
		uri = doc.NextURI
	}
	p.t.Fatal("more than 1000 pages")
	return nil
}

func chatOf(es []engine.TrailChat) []string {
	var out []string
	for _, m := range es {
		out = append(out, m.Role+": "+m.Content.Text)
	}
	return out
}

// checkLLMCalls compares, agent by agent, every request the fake LLM
// received with the trail's llm_call entries: same number, same order,
// same messages, same step, repair rounds as round 2.
func checkLLMCalls(t *testing.T, calls []fakellm.Call, entries []engine.TrailEntry) {
	t.Helper()
	byAgent := map[string][]engine.TrailEntry{}
	n := 0
	for _, e := range entries {
		if e.Kind == engine.TrailKindLLMCall {
			byAgent[e.AgentID] = append(byAgent[e.AgentID], e)
			n++
		}
	}
	if n != len(calls) {
		t.Errorf("the trail holds %d LLM calls, the fake LLM received %d", n, len(calls))
	}
	seen := map[string]int{}
	for _, c := range calls {
		i := seen[c.AgentID]
		seen[c.AgentID]++
		es := byAgent[c.AgentID]
		if i >= len(es) {
			t.Errorf("request %d (%s by %s) is not in the trail", c.N, c.Skill, c.AgentName)
			continue
		}
		e := es[i]
		var msgs []string
		for _, m := range c.Messages {
			msgs = append(msgs, m.Role+": "+m.Content)
		}
		if diff := cmp.Diff(msgs, chatOf(e.LLM.Request)); diff != "" {
			t.Errorf("request %d (%s by %s): trail's request differs (-fake +trail):\n%s", c.N, c.Skill, c.AgentName, diff)
		}
		if e.StepID != c.StepID || e.Skill != c.Skill || (e.LLM.Round == 2) != c.Repair {
			t.Errorf("request %d: step %s skill %s repair %v; trail: step %s skill %s round %d", c.N, c.StepID, c.Skill, c.Repair, e.StepID, e.Skill, e.LLM.Round)
		}
		if e.LLM.Answer.Text == "" || e.LLM.PromptTokens == 0 || e.LLM.Attempts != 1 {
			t.Errorf("request %d: answer %.40q, prompt tokens %d, attempts %d", c.N, e.LLM.Answer.Text, e.LLM.PromptTokens, e.LLM.Attempts)
		}
		if e.LLM.Parsed == nil && e.LLM.ParseError == "" {
			t.Errorf("request %d: neither a parse result nor a parse error", c.N)
		}
	}
}

// TestTrailResources: the trail of a running task, paged and filtered, as a
// resource and through get_trail; a step's record; every LLM request the
// fake received is in it, in order.
func TestTrailResources(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	sys := e.stack.Sys
	task := e.readTrail(trailURIOf(f.TaskID), 7)
	base := e.readTrail(trailURIOf(sys.BaseTaskID()), 50)
	checkLLMCalls(t, e.stack.LLM.Calls(), append(slices.Clone(task), base...))

	// add_task is an operator action: a step of the operator's HumanAgent.
	i := slices.IndexFunc(task, func(x engine.TrailEntry) bool { return x.Kind == engine.TrailKindOperatorAction })
	if i < 0 || task[i].AgentID != f.Operator || task[i].Action.Action != "task_manager" || !strings.Contains(task[i].Action.Input.Text, "add_task") || task[i].StepID == "" {
		t.Errorf("no add_task operator action by the operator in the task's trail: %+v", task)
	}
	// Instructions and messages are there too.
	for _, kind := range []string{engine.TrailKindInstruction, engine.TrailKindMessage, engine.TrailKindStep} {
		if !slices.ContainsFunc(task, func(x engine.TrailEntry) bool { return x.Kind == kind }) {
			t.Errorf("no %s in the task's trail", kind)
		}
	}

	// Filters.
	var alice []engine.TrailEntry
	for _, x := range task {
		if x.AgentID == f.Alice && x.Kind == engine.TrailKindLLMCall {
			alice = append(alice, x)
		}
	}
	if len(alice) == 0 {
		t.Fatal("alice made no LLM call in the task")
	}
	got := e.readTrail(trailURIOf(f.TaskID)+"?agent="+f.Alice+"&kind=llm_call", 2)
	if diff := cmp.Diff(alice, got); diff != "" {
		t.Errorf("agent and kind filters (-want +got):\n%s", diff)
	}
	// get_trail gives the same pages.
	var out struct {
		Entries    []engine.TrailEntry `json:"entries"`
		NextCursor string              `json:"next_cursor"`
		Step       *engine.StepState   `json:"step"`
	}
	e.call("get_trail", map[string]any{"task_id": f.TaskID, "agent": f.Alice, "kind": "llm_call", "limit": 500}, &out)
	if diff := cmp.Diff(alice, out.Entries); diff != "" || out.NextCursor != "" {
		t.Errorf("get_trail (-want +got), next cursor %q:\n%s", out.NextCursor, diff)
	}

	// One step's record.
	step := alice[0].StepID
	var rec server.StepRecord
	e.read(stepURIOf(f.TaskID, step), &rec)
	if rec.Step == nil || rec.Step.StepID != step || rec.Step.ExecutionState != engine.StateFinished {
		t.Errorf("step record's step: %+v", rec.Step)
	}
	if len(rec.Entries) < 2 || rec.Entries[0].LLM == nil || rec.Entries[0].LLM.Answer.Text != alice[0].LLM.Answer.Text {
		t.Errorf("step record's entries: %+v", rec.Entries)
	}
	e.call("get_trail", map[string]any{"task_id": f.TaskID, "step_id": step}, &out)
	if out.Step == nil || out.Step.StepID != step || len(out.Entries) != len(rec.Entries) {
		t.Errorf("get_trail of step %s: step %+v, %d entries, want %d", step, out.Step, len(out.Entries), len(rec.Entries))
	}

	for _, bad := range []struct{ uri, want string }{
		{trailURIOf(f.TaskID) + "?kind=bogus", "kind"},
		{trailURIOf(f.TaskID) + "?color=red", "unknown"},
		{trailURIOf(f.TaskID) + "?cursor=x", "cursor"},
		{trailURIOf("no-such-task"), "not found"},
		{stepURIOf(f.TaskID, "no-such-step"), "not found"},
	} {
		_, err := e.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: bad.uri})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one saying %q", bad.uri, err, bad.want)
		}
	}
}

// TestTrailNextURIAtTheLeastNameBytes: the server bounds the URIs clients
// send back as names (limits.name_bytes), and a trail page's next_uri is
// the longest it gives out. At the least name_bytes a config may set
// (server.MinNameBytes) a client still follows every next_uri, filters
// and all.
func TestTrailNextURIAtTheLeastNameBytes(t *testing.T) {
	e := newEnvWith(t, envOptions{Config: func(c *server.Config) { c.Limits.NameBytes = server.MinNameBytes }})
	f := e.startTask()
	perStep := map[string][]engine.TrailEntry{}
	for _, x := range e.readTrail(trailURIOf(f.TaskID), engine.MaxTrailPage) {
		if x.AgentID == f.Alice && x.StepID != "" {
			perStep[x.StepID] = append(perStep[x.StepID], x)
		}
	}
	var step string
	for id, xs := range perStep {
		if len(xs) > 1 && (step == "" || len(xs) > len(perStep[step])) {
			step = id
		}
	}
	if step == "" {
		t.Fatal("no step of alice with two trail entries: not the case meant")
	}
	got := e.readTrail(trailURIOf(f.TaskID)+"?agent="+f.Alice+"&step="+step, 1)
	if diff := cmp.Diff(perStep[step], got); diff != "" {
		t.Errorf("alice's step %s a page at a time, following next_uri (-want +got):\n%s", step, diff)
	}
}

// TestTrailVisibility: an operator reads the trail of its own tasks only,
// and never another operator's actions or private messages.
func TestTrailVisibility(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	sys := o.stack.Sys
	var added server.AddTaskOut
	o.annPeer.call("add_task", map[string]any{"task_name": "report", "task_intention": "Research a topic and write a report."}, &added)
	o.stack.WaitFor("alice's question to ann", func() bool {
		entries, _ := sys.Inbox(o.ann)
		return len(entries) > 0 && atRest(sys)
	})
	uri := trailURIOf(added.TaskID)
	annSees := o.annPeer.readTrail(uri, 50)
	if !slices.ContainsFunc(annSees, func(x engine.TrailEntry) bool {
		return x.Message != nil && x.Message.Text.Text == scripted.OperatorQuestion
	}) {
		t.Errorf("ann does not see alice's question to her in the trail")
	}
	if !slices.ContainsFunc(annSees, func(x engine.TrailEntry) bool { return x.AgentID == o.ann && x.Kind == engine.TrailKindOperatorAction }) {
		t.Errorf("ann does not see her add_task in the trail")
	}
	if _, err := o.beaPC.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil {
		t.Errorf("bea read ann's task's trail")
	}
	if txt := o.beaPC.callErr("get_trail", map[string]any{"task_id": added.TaskID}); !strings.Contains(txt, "no such task") {
		t.Errorf("bea's get_trail of ann's task: %q", txt)
	}
	// Shared with bea: she sees the task's trail, but neither ann's
	// actions nor the messages between ann and the agents.
	if _, err := sys.ShareTask(o.ann, added.TaskID, o.bea); err != nil {
		t.Fatal(err)
	}
	beaSees := o.beaPC.readTrail(uri, 50)
	if len(beaSees) == 0 {
		t.Fatal("bea sees nothing of the shared task's trail")
	}
	for _, x := range beaSees {
		if x.AgentID == o.ann || (x.Message != nil && (x.Message.SenderID == o.ann || slices.Contains(x.Message.Receiver, o.ann))) {
			t.Errorf("bea sees ann's %s entry (step %s)", x.Kind, x.StepID)
		}
	}
}

func trailURIOf(task string) string      { return "mas://tasks/" + task + "/trail" }
func stepURIOf(task, step string) string { return "mas://tasks/" + task + "/steps/" + step }

// tokenSentinel is a secret the trail is configured to scrub (a bearer
// token, say) that the operator pastes into a message.
const tokenSentinel = "tok-SENTINEL-resource-9090"

// TestTrailNoSecrets (issue 16 item 5): neither the LLM API key nor a
// configured token shows in the trail's resources or get_trail, though the
// operator wrote the token into a message that agents then read in their
// prompts.
func TestTrailNoSecrets(t *testing.T) {
	e := newEnv(t)
	e.stack.Trail.(*engine.MemoryTrail).Scrub(teststack.SentinelKey, tokenSentinel)
	f := e.startTask()
	e.call("send_message", map[string]any{"task_id": f.TaskID, "receiver": f.Alice, "content": "Markdown, and use " + tokenSentinel}, nil)
	e.stack.WaitFor("alice's prompt with the operator's answer, and rest", func() bool {
		p, err := e.stack.Trail.ReadTrail(context.Background(), engine.TrailQuery{TaskID: f.TaskID, AgentID: f.Alice, Kind: engine.TrailKindLLMCall, Limit: engine.MaxTrailPage})
		if err != nil {
			return false
		}
		return atRest(e.stack.Sys) && slices.ContainsFunc(p.Entries, func(x engine.TrailEntry) bool {
			return slices.ContainsFunc(x.LLM.Request, func(c engine.TrailChat) bool { return strings.Contains(c.Content.Text, "Markdown, and use [redacted]") })
		})
	})
	var texts []string
	entries := e.readTrail(trailURIOf(f.TaskID), 100)
	for _, uri := range []string{trailURIOf(f.TaskID) + "?limit=500", trailURIOf(e.stack.Sys.BaseTaskID()) + "?limit=500"} {
		res, err := e.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, res.Contents[0].Text)
	}
	steps := map[string]bool{}
	for _, x := range entries {
		// The records of the steps whose prompts quote the message.
		quotes := x.LLM != nil && slices.ContainsFunc(x.LLM.Request, func(c engine.TrailChat) bool { return strings.Contains(c.Content.Text, "[redacted]") })
		if quotes && !steps[x.StepID] {
			steps[x.StepID] = true
			res, err := e.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: stepURIOf(f.TaskID, x.StepID)})
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, res.Contents[0].Text)
		}
	}
	res := e.call("get_trail", map[string]any{"task_id": f.TaskID, "limit": 500}, nil)
	texts = append(texts, resultText(res), jsonString(res.StructuredContent))
	all := strings.Join(texts, "\n")
	for _, secret := range []string{teststack.SentinelKey, tokenSentinel} {
		if strings.Contains(all, secret) {
			t.Errorf("%q is in the trail's resources", secret)
		}
	}
	if !strings.Contains(all, "Markdown, and use [redacted]") {
		t.Errorf("the operator's message is not in the trail (scrubbed)")
	}
	if !slices.ContainsFunc(entries, func(x engine.TrailEntry) bool {
		return x.Kind == engine.TrailKindLLMCall && x.AgentID == f.Alice && slices.ContainsFunc(x.LLM.Request, func(c engine.TrailChat) bool {
			return strings.Contains(c.Content.Text, "[redacted]")
		})
	}) {
		t.Errorf("no prompt of alice's in the trail quotes the operator's message")
	}
}
