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

// TestLogsQueuedOnlyForSessionsThatAsk: a logging notification is queued
// in the outbox only for a session that set a logging level that lets it
// through. One that set none accumulates nothing behind its goroutine,
// however long that waits; one that set info gets its info notifications
// queued, and delivered in order, and not its debug ones.
func TestLogsQueuedOnlyForSessionsThatAsk(t *testing.T) {
	ctx := context.Background()
	s := &Server{ctx: ctx}
	s.outbox = newOutbox(ctx, slog.New(slog.DiscardHandler), 0, nil)
	impl := &mcp.Implementation{Name: "t", Version: "1"}
	srv := mcp.NewServer(impl, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}})
	srv.AddSendingMiddleware(s.queueNotifications)

	// connect returns a session whose client sets level (none if ""), and
	// the data of the logging notifications the client receives.
	connect := func(level mcp.LoggingLevel) (*mcp.ServerSession, chan any) {
		t.Helper()
		got := make(chan any, 64)
		ct, st := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ss.Close() })
		client := mcp.NewClient(impl, &mcp.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			got <- r.Params.Data
		}})
		cs, err := client.Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		if level != "" {
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
				t.Fatal(err)
			}
		}
		return ss, got
	}
	quiet, quietGot := connect("")
	loud, loudGot := connect("info")

	// Each session's goroutine waits on a delivery that does not end until
	// released: what is posted meanwhile stays queued.
	release := make(chan struct{})
	for _, ss := range []*mcp.ServerSession{quiet, loud} {
		blocked := make(chan struct{})
		s.outbox.post(ss, "op", delivery{send: func(context.Context) error { close(blocked); <-release; return nil }})
		<-blocked
	}
	const n = 10
	var want []any
	for i := range n {
		for _, ss := range []*mcp.ServerSession{quiet, loud} {
			s.postLog(ss, "op", &mcp.LoggingMessageParams{Level: "info", Data: float64(i)})
			s.postLog(ss, "op", &mcp.LoggingMessageParams{Level: "debug", Data: "debug"})
		}
		want = append(want, float64(i))
	}
	queued := func(ss *mcp.ServerSession) int {
		s.outbox.mu.Lock()
		defer s.outbox.mu.Unlock()
		if q := s.outbox.queues[ss]; q != nil {
			return len(q.items)
		}
		return 0
	}
	if got := queued(quiet); got != 0 {
		t.Errorf("a session that set no logging level has %d logging notifications queued, want none", got)
	}
	if got := queued(loud); got != n {
		t.Errorf("a session at level info has %d logging notifications queued, want its %d info ones", got, n)
	}

	close(release)
	var got []any
	for range n {
		got = append(got, <-loudGot)
	}
	<-s.outbox.whenEmpty()
	s.outbox.close()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the session at level info got (-want +got):\n%s", diff)
	}
	if len(quietGot) != 0 {
		t.Errorf("the session that set no level got %d logging notifications", len(quietGot))
	}
}
