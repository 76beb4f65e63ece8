package server

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestOutboxFoldsAndBounds: while a session's goroutine waits on a
// client that does not read, its queue holds one resources/updated per
// key however many come, and at most outboxBacklog others: those past it
// are dropped, the first drop logged, and the count logged when the
// backlog ends. Once the client reads again it gets what was kept, in
// order.
func TestOutboxFoldsAndBounds(t *testing.T) {
	var logged bytes.Buffer
	o := newOutbox(context.Background(), slog.New(slog.NewTextHandler(&logged, nil)), 0, nil)
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	_, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })

	var sent []string // only the session's goroutine appends, until done
	record := func(what string) func(context.Context) error {
		return func(context.Context) error { sent = append(sent, what); return nil }
	}
	blocked, release := make(chan struct{}), make(chan struct{})
	o.post(ss, "op", delivery{send: func(context.Context) error { close(blocked); <-release; return nil }})
	<-blocked

	for range 3 {
		o.post(ss, "op", delivery{key: "mas://tasks", send: record("tasks")})
		o.post(ss, "op", delivery{key: "mas://agents", send: record("agents")})
	}
	done := make(chan struct{})
	for i := range outboxBacklog + 5 {
		send := record("log")
		if i == outboxBacklog-1 {
			send = func(ctx context.Context) error { _ = record("log")(ctx); close(done); return nil }
		}
		o.post(ss, "op", delivery{send: send})
	}
	close(release)
	<-done
	o.close()

	want := append([]string{"tasks", "agents"}, slices.Repeat([]string{"log"}, outboxBacklog)...)
	if diff := cmp.Diff(want, sent); diff != "" {
		t.Errorf("delivered mismatch (-want +got):\n%s", diff)
	}
	log := logged.String()
	if n := strings.Count(log, "does not take its notifications"); n != 1 {
		t.Errorf("logged the backlog's first drop %d times, want once:\n%s", n, log)
	}
	if !strings.Contains(log, "backlog ended") || !strings.Contains(log, "dropped=5") {
		t.Errorf("the backlog's end is not logged with its 5 drops:\n%s", log)
	}
}
