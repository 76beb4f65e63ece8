package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// TestTokenOperatorKeepsHerWorkAcrossARestart: with http.tokens each token
// acts as its own operator. Ann adds a task through hers and alice asks
// her a question; mas-mcp stops and starts again on the same data
// directory and config. Ann's token must act as the same operator: her
// task visible to her, alice's question still in her inbox, and one
// HumanAgent named ann (each start used to add another, owning nothing).
func TestTokenOperatorKeepsHerWorkAcrossARestart(t *testing.T) {
	t.Parallel()
	const token = "token-of-ann-0123456789abcdef"
	team := scripted.NewTeam()
	team.AskOperator = true
	llm := fakellm.New(t)
	llm.Handle(team.Handle)
	cfgFile := filepath.Join(t.TempDir(), "mas.yaml")
	writeFile(t, cfgFile, "http:\n  tokens:\n    - {operator: ann, token_env: MAS_TEST_TOK_ANN}\n")
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL(), Args: []string{"--config", cfgFile},
		Env: []string{"MAS_TEST_TOK_ANN=" + token}, Token: token})
	m.start()
	taskID := addTask(m)
	waitFor(t, "alice's question in ann's inbox", func() (bool, string) {
		qs := m.inboxQuestions()
		return len(qs) == 1 && qs[0].Content == scripted.OperatorQuestion, jsonOf(qs)
	})
	before := m.inboxQuestions()[0]

	if code, _ := m.terminate(goneTimeout); code != 0 {
		t.Fatalf("mas-mcp exited %d on SIGTERM", code)
	}
	m.start()

	var anns []string
	var agents []engine.AgentBrief
	m.mustRead("mas://agents", &agents)
	for _, a := range agents {
		if a.Kind == engine.KindHuman && a.Name == "ann" {
			anns = append(anns, a.AgentID)
		}
	}
	if len(anns) != 1 {
		t.Errorf("HumanAgents named ann after a restart: %v, want one", anns)
	}
	if after := m.inboxQuestions(); len(after) != 1 || after[0].MessageID != before.MessageID {
		t.Errorf("after a restart ann's token sees %d question(s) awaiting her (%s), want alice's %s", len(after), jsonOf(after), before.MessageID)
	}
	res, err := m.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "show_task", Arguments: map[string]any{"task_id": taskID}})
	if err != nil || res.IsError {
		t.Errorf("after a restart show_task of ann's task %s: %v %s", taskID, err, textOfResult(res))
	}
}

// inboxQuestions is the operator's get_inbox entries awaiting a reply.
func (m *masInstance) inboxQuestions() []engine.InboxEntry {
	m.t.Helper()
	var inbox struct {
		Messages []engine.InboxEntry `json:"messages"`
	}
	m.callTool("get_inbox", map[string]any{"limit": 100}, &inbox)
	var out []engine.InboxEntry
	for _, e := range inbox.Messages {
		if e.AwaitingReply {
			out = append(out, e)
		}
	}
	return out
}

// textOfResult is a tool result's text, "" for none.
func textOfResult(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	return textOf(res)
}
