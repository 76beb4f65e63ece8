package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// readyLine matches the ready line's monitor URL (text log format).
var readyLine = regexp.MustCompile(`mas-mcp ready .*monitor=(http://\S+/).*`)

// lineWatch is a writer that sends the first line matching re (its
// submatches) on found, and keeps everything it is given.
type lineWatch struct {
	re    *regexp.Regexp
	found chan []string
	buf   teststack.SyncBuffer

	mu   sync.Mutex
	line strings.Builder
	done bool
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.buf.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range p {
		if b != '\n' {
			w.line.WriteByte(b)
			continue
		}
		if m := w.re.FindStringSubmatch(w.line.String()); m != nil && !w.done {
			w.done = true
			w.found <- m
		}
		w.line.Reset()
	}
	return len(p), nil
}

// TestStdioWithHTTP: `mas-mcp --stdio --http 127.0.0.1:0` serves MCP on
// stdio and the web monitor from the same process: a task handed over on
// stdio is in the monitor's /api/states at once. The ready line names both,
// the operator, that a key is set, the model and one operator.
func TestStdioWithHTTP(t *testing.T) {
	bin := teststack.Binary(t, teststack.MasRace)
	team := scripted.NewTeam()
	llm := fakellm.New(t)
	llm.Handle(team.Handle)
	watch := &lineWatch{re: readyLine, found: make(chan []string, 1)}
	cmd := exec.Command(bin, "--stdio", "--http", "127.0.0.1:0", "--log-format", "text")
	cmd.Env = relayEnv(llm, t.TempDir())
	cmd.Stderr = watch
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-http-test", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to mas-mcp --stdio --http: %v\nstderr:\n%s", err, watch.buf.String())
	}
	defer func() {
		if err := cs.Close(); err != nil {
			t.Errorf("close the stdio session: %v", err)
		}
		if t.Failed() {
			t.Logf("stderr:\n%s", lastLines(watch.buf.String(), 60))
		}
	}()
	var monitor string
	select {
	case m := <-watch.found:
		monitor = m[1]
		for _, want := range []string{`mcp="stdio and http://`, `operator="operator (`, "api_key_set=true", "model=fake", "operators=1 "} {
			if !strings.Contains(m[0], want) {
				t.Errorf("the ready line lacks %s:\n%s", want, m[0])
			}
		}
	case <-ctx.Done():
		t.Fatalf("no ready line with the monitor's URL:\n%s", watch.buf.String())
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_task",
		Arguments: map[string]any{"task_name": "both transports", "task_intention": "Be seen on the monitor."}})
	if err != nil || res.IsError {
		t.Fatalf("add_task over stdio: %v %+v", err, res)
	}
	var added struct {
		TaskID string `json:"task_id"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &added); err != nil || added.TaskID == "" {
		t.Fatalf("add_task's output %s: %v", b, err)
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, monitor+"api/states?type=task", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /api/states: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var states map[string]struct {
		TaskName string `json:"task_name"`
	}
	if err := json.Unmarshal(body, &states); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/states: %s %v\n%s", resp.Status, err, body)
	}
	if got := states[added.TaskID].TaskName; got != "both transports" {
		t.Errorf("/api/states has task %s named %q, want the task handed over on stdio (tasks: %d)", added.TaskID, got, len(states))
	}
}
