package telemetry_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/mas-mcp/mas-mcp/internal/telemetry"
)

// TestMCPMiddlewares: with both middlewares on a client and a server,
// every request (with or without params) gets a client span and a server
// span, the server's a child of the client's through params._meta; a
// request sent without params (ListTools(ctx, nil)) too.
func TestMCPMiddlewares(t *testing.T) {
	tel, rcv := setup(t, false)
	srv := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "1"}, nil)
	srv.AddReceivingMiddleware(telemetry.ServerMiddleware)
	mcp.AddTool(srv, &mcp.Tool{Name: "hi", Description: "Says hi."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, nil, nil
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil)
	client.AddSendingMiddleware(telemetry.ClientMiddleware("peer"))
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hi"}); err != nil {
		t.Fatal(err)
	}
	_ = cs.Close()
	if err := tel.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	byName := map[string]map[tracepb.Span_SpanKind]string{} // name -> kind -> span id
	parents := map[string]string{}                          // server span id -> parent
	for _, s := range rcv.Spans() {
		if byName[s.Name] == nil {
			byName[s.Name] = map[tracepb.Span_SpanKind]string{}
		}
		byName[s.Name][s.Kind] = s.SpanID
		parents[s.SpanID] = s.ParentID
	}
	// (go-sdk does not hand ping's params._meta to the server's
	// middleware, and sends initialize outside the middlewares.)
	for _, name := range []string{"tools/list", "tools/call hi"} {
		c, s := byName[name][tracepb.Span_SPAN_KIND_CLIENT], byName[name][tracepb.Span_SPAN_KIND_SERVER]
		if c == "" || s == "" {
			t.Errorf("%s: client span %q, server span %q; want both", name, c, s)
			continue
		}
		if parents[s] != c {
			t.Errorf("%s: the server span's parent is %q, want the client span %q", name, parents[s], c)
		}
	}
}
