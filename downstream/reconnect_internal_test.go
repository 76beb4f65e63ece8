package downstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// restartable is a remote MCP server that can restart at the same
// address: a new mcp.Server with no sessions, answering the old session
// ID with 404 (MCP §2.5.3). Each incarnation counts the calls of its
// tools; the old ones' sessions are closed at the end of the test.
type restartable struct {
	url     string
	current atomic.Pointer[incarnation]
}

type incarnation struct {
	srv     *mcp.Server
	handler http.Handler
	calls   atomic.Int32
}

func newRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{}
	r.restart(t)
	ts := rigServer(t, func(*mcp.Server) {}, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.current.Load().handler.ServeHTTP(w, req) })
	})
	r.url = ts.URL + "/mcp"
	return r
}

// restart replaces the server: its sessions are forgotten (and closed
// when the test ends, as the old process would be gone).
func (r *restartable) restart(t *testing.T) *incarnation {
	inc := newIncarnation(t)
	r.current.Store(inc)
	return inc
}

// newIncarnation is a new server process, as it were: it knows no session
// of before. Its tools are "echo" (read-only) and "append" (it changes
// something, and is not idempotent); its sessions are closed when the test
// ends.
func newIncarnation(t *testing.T) *incarnation {
	inc := &incarnation{srv: mcp.NewServer(&mcp.Implementation{Name: "restartable", Version: "1"}, nil)}
	tool := func(name string, a *mcp.ToolAnnotations) {
		mcp.AddTool(inc.srv, &mcp.Tool{Name: name, Description: "Counts its calls.", Annotations: a},
			func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
				inc.calls.Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
			})
	}
	no := false
	tool("echo", &mcp.ToolAnnotations{ReadOnlyHint: true})
	tool("append", &mcp.ToolAnnotations{DestructiveHint: &no}) // changes something, not idempotent
	inc.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return inc.srv }, nil)
	t.Cleanup(func() {
		for ss := range inc.srv.Sessions() {
			_ = ss.Close()
		}
	})
	return inc
}

// TestRestartedHTTPServerIsReconnected: a remote server that restarts
// forgets its sessions; the connections to it drop. The pool opens a new
// session so the work goes on (an outage pauses, it does not destroy): a
// read-only call is made again on it, and the calls after it work.
func TestRestartedHTTPServerIsReconnected(t *testing.T) {
	r := newRestartable(t)
	e, _ := rigExecutor(t, map[string]ServerConfig{"srv": {URL: r.url, Timeout: Duration(time.Minute)}}, nil, nil)
	call := func() *engine.Output {
		return e.Execute(context.Background(), rigInput("srv", &engine.ToolCall{ToolName: "echo", Arguments: map[string]any{}}))
	}
	if out := call(); out.Err != nil {
		t.Fatalf("first call: %v", out.Err)
	}
	// The server restarts: same address, no sessions, connections dropped.
	inc := r.restart(t)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	for i := range 2 {
		if out := call(); out.Err != nil {
			t.Errorf("call %d after the server restarted: %v", i+1, out.Err)
		}
	}
	if n := inc.calls.Load(); n != 2 {
		t.Errorf("the restarted server got %d calls, want 2", n)
	}
}

// TestSessionMissingCallIsRepeated: a call the server refused for an
// unknown session (404) was not processed, so it is made again on the new
// session whatever the tool is, once. (A call whose connection broke after
// it may have reached the server is made again only when the tool is
// read-only or idempotent.)
func TestSessionMissingCallIsRepeated(t *testing.T) {
	r := newRestartable(t)
	e, _ := rigExecutor(t, map[string]ServerConfig{"srv": {URL: r.url, Timeout: Duration(time.Minute), AutoApprove: []string{"append"}}}, nil, nil)
	call := func() *engine.Output {
		return e.Execute(context.Background(), rigInput("srv", &engine.ToolCall{ToolName: "append", Arguments: map[string]any{}}))
	}
	if out := call(); out.Err != nil {
		t.Fatalf("first call: %v", out.Err)
	}
	inc := r.restart(t) // the connection stays: the next request is answered 404
	if out := call(); out.Err != nil {
		t.Errorf("the call after the server restarted: %v; want it made on a new session", out.Err)
	}
	if n := inc.calls.Load(); n != 1 {
		t.Errorf("the restarted server got %d calls, want 1", n)
	}
}

// TestBrokenRemote: what a remote server's transport reports when it
// broke, as go-sdk v1.8.0 wraps it, is broken; answers are not.
func TestBrokenRemote(t *testing.T) {
	// go-sdk's jsonrpc2.ErrRejected (internal): "rejected by transport".
	rejected := &jsonrpc.Error{Code: -32005, Message: "rejected by transport"}
	post := func(err error) error { return &url.Error{Op: "Post", URL: "http://h/mcp", Err: err} }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf(`calling "tools/call": sending "tools/call": failed to connect (session ID: X): %w`, mcp.ErrSessionMissing), true},
		{fmt.Errorf(`calling "tools/call": sending "tools/call": %w: %w`, rejected, post(errors.New("EOF"))), true},
		{fmt.Errorf(`calling "tools/call": %w`, post(errors.New("dial tcp: connection refused"))), true},
		{fmt.Errorf(`calling "tools/call": sending "tools/call": failed to read body: %s`, (&tooLargeError{server: "s"}).Error()), true},
		{errors.New(`calling "tools/call": sending "tools/call": failed to read body: unexpected EOF`), true},
		// A stdio server's line over the limit (go-sdk's text alone).
		{errors.New(`calling "tools/call": inbound JSON-RPC frame exceeded the configured maximum line length`), true},
		// A call's own timeout or cancellation.
		{fmt.Errorf(`calling "tools/call": %w: %w`, rejected, post(context.Canceled)), false},
		// The server (or its proxy) answered: 503, or a JSON-RPC error.
		{fmt.Errorf(`%w: sending "tools/call": Service Unavailable`, rejected), false},
		{fmt.Errorf(`sending "tools/call": %w: %w: Bad Request`, &jsonrpc.Error{Code: -32602, Message: "bad"}, rejected), false},
	} {
		if got := broken(tc.err); got != tc.want {
			t.Errorf("broken(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
