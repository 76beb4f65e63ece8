package downstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestHTTPAnswerIsBounded: a streamable HTTP server may answer a call
// with one application/json body (the spec allows it; many servers do),
// which go-sdk reads whole. mas-mcp stops reading at MaxMessageBytes, as
// go-sdk stops at that size a stdio line or an event: the call fails with
// an error naming the server and the limit, and the next call works on a
// new session. Here the server offers 64 MiB and then cuts the connection.
func TestHTTPAnswerIsBounded(t *testing.T) {
	const offer = 64 << 20
	var written atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	ts := rigServer(t, func(srv *mcp.Server) {
		mcp.AddTool(srv, &mcp.Tool{Name: "huge", Description: "Answers with a huge text."},
			func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "not reached"}}}, nil, nil
			})
		mcp.AddTool(srv, &mcp.Tool{Name: "small", Description: "Answers with a small text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "small"}}}, nil, nil
			})
	}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				next.ServeHTTP(w, r)
				return
			}
			body, _ := io.ReadAll(r.Body)
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			_ = json.Unmarshal(body, &msg)
			if msg.Method != "tools/call" || msg.Params.Name != "huge" {
				r.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(w, r)
				return
			}
			defer once.Do(func() { close(done) })
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			n, err := io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(msg.ID)+`,"result":{"content":[{"type":"text","text":"`)
			written.Add(int64(n))
			if err != nil {
				return
			}
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			for written.Load() < offer {
				n, err := w.Write(chunk)
				written.Add(int64(n))
				if err != nil {
					return // the client stopped reading
				}
			}
			panic(http.ErrAbortHandler) // cut: the answer never ends
		})
	})
	e, _ := rigExecutor(t, map[string]ServerConfig{
		"srv": {URL: ts.URL + "/mcp", Timeout: Duration(5 * time.Minute), AutoApprove: []string{"huge"}},
	}, nil, nil)
	out := e.Execute(context.Background(), rigInput("srv", &engine.ToolCall{ToolName: "huge", Arguments: map[string]any{}}))
	<-done
	t.Logf("step error: %v", out.Err)
	if got := written.Load(); got >= offer {
		t.Errorf("the client read the whole %d MiB answer of one tool call (and would have read more): no limit on a result's size", got>>20)
	}
	if out.Err == nil || !strings.Contains(out.Err.Error(), `mcp server "srv": its answer is larger than 16 MiB`) ||
		!strings.Contains(out.Err.Error(), "MaxMessageBytes") {
		t.Errorf("step error = %v; want it to name the server and the limit", out.Err)
	}
	if out := e.Execute(context.Background(), rigInput("srv", &engine.ToolCall{ToolName: "small", Arguments: map[string]any{}})); out.Err != nil {
		t.Errorf("the call after the one over the limit: %v; want it made on a new session", out.Err)
	}
}

// TestDescriptionIsBounded: a get_description step's result (every tool
// with its description and schemas) is kept near MaxResultBytes like any
// result: a server with many or verbose tools does not put hundreds of KB
// into one step's result (and the agent's prompts after it). Every tool's
// name stays, those without their details listed by name, with a note.
func TestDescriptionIsBounded(t *testing.T) {
	const tools, descr = 400, 1000
	ts := rigServer(t, func(srv *mcp.Server) {
		for i := range tools {
			mcp.AddTool(srv, &mcp.Tool{Name: fmt.Sprintf("tool-%03d", i), Description: strings.Repeat("d", descr),
				Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
				func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
					return &mcp.CallToolResult{}, nil, nil
				})
		}
	}, nil)
	e, _ := rigExecutor(t, map[string]ServerConfig{"srv": {URL: ts.URL + "/mcp", Timeout: Duration(time.Minute)}}, nil, nil)
	out := e.Execute(context.Background(), rigInput("srv", &engine.ToolCall{InstructionType: "get_description"}))
	if out.Err != nil {
		t.Fatalf("get_description failed: %v", out.Err)
	}
	b, err := json.Marshal(out.Result)
	if err != nil {
		t.Fatal(err)
	}
	if limit := e.cfg.MaxResultBytes + 1024; len(b) > limit {
		t.Errorf("get_description's result is %d bytes, want it cut near MaxResultBytes (%d) like any result", len(b), e.cfg.MaxResultBytes)
	}
	var got struct {
		Caps struct {
			Tools     map[string]struct{ Description string } `json:"tools"`
			Bare      []string                                `json:"tools_without_details"`
			Truncated string                                  `json:"_truncated"`
		} `json:"capabilities_list_description"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for i := range tools {
		name := fmt.Sprintf("tool-%03d", i)
		if _, ok := got.Caps.Tools[name]; !ok && !strings.Contains(strings.Join(got.Caps.Bare, ","), name) {
			t.Errorf("tool %s is neither described nor listed by name", name)
		}
	}
	if got.Caps.Tools["tool-000"].Description == "" || !strings.Contains(got.Caps.Truncated, "listed by name only (tools_without_details)") {
		t.Errorf("want the first tools described and a note saying the others are listed by name; note %q", got.Caps.Truncated)
	}
}

// TestDescribedLeavesSmallOnesWhole: a description within MaxResultBytes
// is kept as it is, without a note.
func TestDescribedLeavesSmallOnesWhole(t *testing.T) {
	e := &Executor{cfg: ExecutorConfig{MaxResultBytes: 64 << 10}}
	caps := &Capabilities{Capabilities: Kinds{Tools: true}, Tools: map[string]ToolDesc{"a": {Description: strings.Repeat("x", 5000)}}}
	got, _ := e.described(caps).(map[string]any)
	tools, _ := got["tools"].(map[string]any)
	a, _ := tools["a"].(map[string]any)
	if a["description"] != strings.Repeat("x", 5000) || got["_truncated"] != nil {
		t.Errorf("described(small) = %v; want it whole", got)
	}
}
