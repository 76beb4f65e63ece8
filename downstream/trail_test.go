package downstream_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/store"
)

// tokenSentinel is a secret the configuration knows (an operator's bearer
// token, say) that an agent writes into a tool's arguments: the trail must
// keep the call without it.
const tokenSentinel = "tok-SENTINEL-trail-7731"

// wholeTrail reads every entry of the tasks' trails, in order.
func wholeTrail(t *testing.T, r engine.TrailReader, tasks ...string) []engine.TrailEntry {
	t.Helper()
	var out []engine.TrailEntry
	for _, task := range tasks {
		if err := engine.ReadAllTrail(context.Background(), r, engine.TrailQuery{TaskID: task}, func(e engine.TrailEntry) error {
			out = append(out, e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestTrailAcceptance (issue 16): a scripted task with tool calls on the
// durable trail. After it finished — its steps deleted by finish_task — and
// after a restart of the MAS and of the store, the trail holds every LLM
// request and answer, agent by agent in the order the fake LLM received
// them (the counts match its log exactly), every tool call in order with
// its arguments and result, and every step's end; no configured secret is
// in it.
func TestTrailAcceptance(t *testing.T) {
	dataDir := t.TempDir()
	st, err := store.Open(context.Background(), store.Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	tr, err := st.OpenTrail(context.Background(), store.TrailOptions{Secrets: []string{teststack.SentinelKey, tokenSentinel}})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "out.txt")
	cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{
		"filesystem": {Command: serverBin(t, "mcp-server-filesystem"), Args: []string{dir}, Description: "Files under the work directory.",
			AutoApprove: []string{"write_file"}},
	}}
	calls := []scripted.Call{
		{Server: "filesystem", Describe: true},
		{Server: "filesystem", Tool: "write_file", Args: map[string]any{"path": file, "content": "hello; token=" + tokenSentinel}},
		{Server: "filesystem", Tool: "read_text_file", Args: map[string]any{"path": file}},
	}
	s := newToolStackWith(t, cfg, calls, stackOptions{trail: tr})
	sys := s.Sys
	w, task := s.startWorker(t, "filesystem")
	s.waitSummary(w, task)
	var toolSteps []string
	for _, ts := range s.toolSteps(w) {
		toolSteps = append(toolSteps, ts.StepID)
	}
	if len(toolSteps) != 3 {
		t.Fatalf("%d tool steps, want 3\n%s", len(toolSteps), s.Dump())
	}
	// At rest first (the manager has read the stage's end): no LLM call is
	// cut short by finish_task, so every call the trail holds reached the
	// fake LLM. (A call cut short is in the trail too, with its error.)
	s.WaitFor("rest", func() bool { return teststack.AtRest(sys) })
	if _, err := sys.TaskInstruction(sys.OperatorID(), engine.TaskInstruction{Action: engine.ActionFinishTask, TaskID: task, Summary: "done"}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor("the worker's steps of the task to be cleaned", func() bool {
		a, _ := sys.Agent(w)
		for _, st := range a.AgentStep.StepList {
			if st.TaskID == task {
				return false
			}
		}
		return true
	})
	s.WaitFor("rest after finish_task", func() bool { return teststack.AtRest(sys) })
	base := sys.BaseTaskID()
	before := wholeTrail(t, tr, task, base)
	checkTrail(t, s.LLM.Calls(), before, calls, toolSteps, file)

	// A restart of the MAS, then of the store: the same trail.
	s.Restart()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(context.Background(), store.Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	tr2, err := st.OpenTrail(context.Background(), store.TrailOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	after := wholeTrail(t, tr2, task, base)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the trail after a restart differs (-before +after):\n%s", diff)
	}
}

func checkTrail(t *testing.T, llmCalls []fakellm.Call, entries []engine.TrailEntry, calls []scripted.Call, toolSteps []string, file string) {
	t.Helper()
	raw, _ := json.Marshal(entries)
	for _, secret := range []string{teststack.SentinelKey, tokenSentinel} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the secret %q is in the trail", secret)
		}
	}

	// Every LLM request, agent by agent in order, with its answer.
	byAgent := map[string][]engine.TrailEntry{}
	n := 0
	for _, e := range entries {
		if e.Kind == engine.TrailKindLLMCall {
			byAgent[e.AgentID] = append(byAgent[e.AgentID], e)
			n++
		}
	}
	if n != len(llmCalls) {
		t.Errorf("the trail holds %d LLM calls, the fake LLM's log %d", n, len(llmCalls))
		for _, e := range entries {
			if e.Kind == engine.TrailKindLLMCall {
				t.Logf("trail: %s %s step %s error %q", e.AgentID[:8], e.Skill, e.StepID[:8], e.LLM.Error)
			}
		}
		for _, c := range llmCalls {
			t.Logf("fake: %s %s step %s", c.AgentID[:8], c.Skill, c.StepID[:8])
		}
	}
	seen := map[string]int{}
	for _, c := range llmCalls {
		i := seen[c.AgentID]
		seen[c.AgentID]++
		if i >= len(byAgent[c.AgentID]) {
			t.Errorf("request %d (%s of %s) is not in the trail", c.N, c.Skill, c.AgentName)
			continue
		}
		e := byAgent[c.AgentID][i]
		if len(e.LLM.Request) != len(c.Messages) {
			t.Errorf("request %d: %d messages in the trail, %d sent", c.N, len(e.LLM.Request), len(c.Messages))
			continue
		}
		for j, m := range c.Messages {
			// The tool history in later prompts holds the token: the trail
			// keeps the prompt with it scrubbed.
			sent := strings.ReplaceAll(m.Content, tokenSentinel, "[redacted]")
			if got := e.LLM.Request[j]; got.Role != m.Role || got.Content.Text != sent {
				t.Errorf("request %d message %d: the trail has %s %.60q, sent %s %.60q", c.N, j, got.Role, got.Content.Text, m.Role, m.Content)
			}
		}
		if e.StepID != c.StepID || e.Skill != c.Skill || e.LLM.Answer.Text == "" || (e.LLM.Parsed == nil && e.LLM.ParseError == "") {
			t.Errorf("request %d (%s, step %s): trail entry step %s skill %s answer %.40q parsed %v parse error %q",
				c.N, c.Skill, c.StepID, e.StepID, e.Skill, e.LLM.Answer.Text, e.LLM.Parsed != nil, e.LLM.ParseError)
		}
	}

	// Every tool call, in order, on its step, with arguments and result.
	var tools []engine.TrailEntry
	for _, e := range entries {
		if e.Kind == engine.TrailKindToolCall {
			tools = append(tools, e)
		}
	}
	if len(tools) != len(calls) {
		t.Fatalf("%d tool calls in the trail, want %d", len(tools), len(calls))
	}
	wantOps := []string{"describe", "call_tool", "call_tool"}
	for i, e := range tools {
		tc := e.Tool
		if e.StepID != toolSteps[i] || tc.Server != "filesystem" || tc.Op != wantOps[i] || tc.Name != calls[i].Tool || tc.Error != "" || tc.Result.Text == "" {
			t.Errorf("tool call %d: step %s (want %s) %+v", i, e.StepID, toolSteps[i], tc)
		}
	}
	if args := tools[1].Tool.Arguments.Text; !strings.Contains(args, filepath.Base(file)) || !strings.Contains(args, "[redacted]") {
		t.Errorf("write_file's arguments in the trail: %s", args)
	}
	if res := tools[2].Tool.Result.Text; !strings.Contains(res, "hello; token=[redacted]") {
		t.Errorf("read_text_file's result in the trail: %.200s", res)
	}
	// Each tool step's end, after finish_task deleted the steps.
	ended := map[string]bool{}
	for _, e := range entries {
		if e.Kind == engine.TrailKindStep && e.Step != nil && e.Step.ExecutionState == engine.StateFinished {
			ended[e.StepID] = true
		}
	}
	for _, id := range toolSteps {
		if !ended[id] {
			t.Errorf("tool step %s: its end is not in the trail", id)
		}
	}
	// The operator's finish_task is a step of its HumanAgent.
	if !slices.ContainsFunc(entries, func(e engine.TrailEntry) bool {
		return e.Kind == engine.TrailKindOperatorAction && e.Action.Action == "task_manager" && strings.Contains(e.Action.Input.Text, "finish_task")
	}) {
		t.Errorf("the operator's finish_task is not in the trail")
	}
}
