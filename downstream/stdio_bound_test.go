package downstream_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// TestStdioAnswerOverTheLimitNamesIt: a stdio server's answer is one
// JSON-RPC line, which go-sdk reads up to MaxMessageBytes (16 MiB). Past
// it the call fails, as an HTTP answer over the limit does, with an error
// naming the server and the limit (not go-sdk's bare "frame exceeded the
// configured maximum line length"), and the next call is made on a new
// connection. Here the real server-filesystem reads a 17 MiB file.
func TestStdioAnswerOverTheLimitNamesIt(t *testing.T) {
	dir := t.TempDir()
	big, small := filepath.Join(dir, "big.txt"), filepath.Join(dir, "small.txt")
	if err := os.WriteFile(big, []byte(strings.Repeat("0123456789abcdef", (downstream.MaxMessageBytes+1<<20)/16)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(small, []byte("small and fine"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{
		"fs": {Command: serverBin(t, "mcp-server-filesystem"), Args: []string{dir}, Description: "Files."},
	}}
	s := newToolStack(t, cfg, []scripted.Call{
		{Server: "fs", Tool: "read_text_file", Args: map[string]any{"path": big}},
		{Server: "fs", Tool: "read_text_file", Args: map[string]any{"path": small}},
	})
	w := s.runWorker(t, "fs")
	steps := s.toolSteps(w)
	if len(steps) != 2 {
		t.Fatalf("tool steps: %d, want 2\n%s", len(steps), s.Dump())
	}
	errText, _ := steps[0].ExecuteResult["error"].(string)
	if steps[0].ExecutionState != engine.StateFailed || !strings.Contains(errText, `mcp server "fs": its answer is larger than 16 MiB`) ||
		!strings.Contains(errText, "MaxMessageBytes") {
		t.Errorf("the read of a 17 MiB file: %s, error %q; want it failed naming the server and the limit", steps[0].ExecutionState, errText)
	}
	if steps[1].ExecutionState != engine.StateFinished || !strings.Contains(jsonString(steps[1].ExecuteResult["mcp_server_result"]), "small and fine") {
		t.Errorf("the call after the one over the limit: %s, %v; want it made on a new connection", steps[1].ExecutionState, steps[1].ExecuteResult)
	}
}
