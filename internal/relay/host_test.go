package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mas-mcp/mas-mcp/server"
)

// jsonLines decodes what b holds, one JSON object a line: the relay's
// JSON log, or the messages it wrote to the host or the owner.
func jsonLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(b)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		recs = append(recs, m)
	}
	return recs
}

// TestRelayBoundsOwnerLines: a line from the owner longer than the limit
// (server.MaxLineBytes) is not relayed (nor kept whole): the host's request
// it answers gets an error naming the limit (a tool error for tools/call),
// a line nobody awaits is dropped with a warning naming the limit, and the
// lines after them are relayed.
func TestRelayBoundsOwnerLines(t *testing.T) {
	var host, logs bytes.Buffer
	r := newRelay(slog.New(slog.NewJSONHandler(&logs, nil)), &host)
	if r.maxLine != server.MaxLineBytes {
		t.Errorf("the relay's line limit is %d, want server.MaxLineBytes (%d)", r.maxLine, server.MaxLineBytes)
	}
	r.maxLine = 1 << 10 // a 16 MiB line is slow under -race
	r.note([]byte(`{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"mas://tasks"}}`))
	r.note([]byte(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"ask_info"}}`))
	pad := strings.Repeat("x", r.maxLine)
	r.fromOwner(bufio.NewReader(strings.NewReader(
		`{"jsonrpc":"2.0","id":7,"result":{"contents":[{"uri":"mas://tasks","text":"`+pad+`"}]}}`+"\n"+
			`{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"`+pad+`"}]}}`+"\n"+
			`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`+pad+`"}}`+"\n"+
			`{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}`+"\n")), io.Discard)
	r.out.flush(t.Context())

	limit := strconv.Itoa(r.maxLine)
	if strings.Contains(host.String(), pad) {
		t.Fatal("the host got an over-long line, want them dropped")
	}
	got := jsonLines(t, &host)
	if len(got) != 3 {
		t.Fatalf("the host got %v, want answers to 7 and 8 and the list_changed notification", got)
	}
	if e, _ := got[0]["error"].(map[string]any); got[0]["id"] != 7.0 || e == nil || !strings.Contains(fmt.Sprint(e["message"]), limit) {
		t.Errorf("the host's resources/read 7 answered %v, want a JSON-RPC error naming the limit %s", got[0], limit)
	}
	if res, _ := got[1]["result"].(map[string]any); got[1]["id"] != 8.0 || res == nil || res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), limit) {
		t.Errorf("the host's tools/call 8 answered %v, want a tool error naming the limit %s", got[1], limit)
	}
	if got[2]["method"] != "notifications/resources/list_changed" {
		t.Errorf("the host's last message %v, want the list_changed notification after the dropped lines", got[2])
	}
	if len(r.inflight) != 0 {
		t.Errorf("in flight %v after their answers, want none", r.inflight)
	}
	log := logs.String()
	var warned bool
	for _, rec := range jsonLines(t, &logs) {
		if rec["level"] == "WARN" && rec["limit_bytes"] == float64(r.maxLine) && rec["id"] == nil {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning naming the limit for the dropped notification in the log:\n%s", log)
	}
}

// TestRelayResumeFailsOnAnOverLongAnswer: an answer of the new owner to
// the relay's own request that is longer than the line limit fails the
// resume with an error naming the limit.
func TestRelayResumeFailsOnAnOverLongAnswer(t *testing.T) {
	r := newRelay(nil, &bytes.Buffer{})
	r.maxLine = 1 << 10
	r.note([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`))
	relaySide, ownerSide := net.Pipe()
	defer relaySide.Close()
	ownerDone := make(chan struct{})
	go func() {
		defer close(ownerDone)
		defer ownerSide.Close()
		if _, err := bufio.NewReader(ownerSide).ReadBytes('\n'); err != nil {
			return
		}
		fmt.Fprintf(ownerSide, `{"jsonrpc":"2.0","id":"%s1","result":{"pad":"%s"}}`+"\n", idPrefix, strings.Repeat("x", r.maxLine))
	}()
	err := r.resume(t.Context(), relaySide, bufio.NewReader(relaySide))
	relaySide.Close()
	<-ownerDone
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(r.maxLine)) {
		t.Errorf("resume with an over-long answer: %v, want an error naming the limit", err)
	}
}

// noteLine is a notification of the owner to the host.
const noteLine = `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}` + "\n"

// failingWriter fails while fail is set.
type failingWriter struct {
	fail  bool
	lines int
}

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.fail {
		return 0, errors.New("broken pipe")
	}
	w.lines++
	return len(b), nil
}

// TestRelayReportsAHostThatDoesNotReadOnce: while writing to the host
// fails, the log gets one warning, not one per message; when a write
// succeeds again, one line says how many messages the host missed.
func TestRelayReportsAHostThatDoesNotReadOnce(t *testing.T) {
	var logs bytes.Buffer
	w := &failingWriter{fail: true}
	r := newRelay(slog.New(slog.NewJSONHandler(&logs, nil)), w)
	r.fromOwner(bufio.NewReader(strings.NewReader(strings.Repeat(noteLine, 100))), io.Discard)
	r.out.flush(t.Context())
	w.fail = false
	r.fromOwner(bufio.NewReader(strings.NewReader(noteLine)), io.Discard)
	r.out.flush(t.Context())
	if w.lines != 1 {
		t.Fatalf("the host got %d lines once it read again, want 1", w.lines)
	}
	log := logs.String()
	var warns, recovered []map[string]any
	for _, rec := range jsonLines(t, &logs) {
		switch rec["level"] {
		case "WARN":
			warns = append(warns, rec)
		case "INFO":
			if rec["dropped"] != nil {
				recovered = append(recovered, rec)
			}
		}
	}
	if len(warns) != 1 {
		t.Errorf("%d warnings for 100 messages the host could not take, want 1:\n%s", len(warns), log)
	}
	if len(recovered) != 1 || recovered[0]["dropped"] != 100.0 {
		t.Errorf("log on the host reading again %v, want one line with dropped=100:\n%s", recovered, log)
	}
}

// stuckWriter is a host that stops reading its stdout without closing it:
// every Write blocks until release is closed.
type stuckWriter struct {
	once    sync.Once
	blocked chan struct{} // closed at the first Write
	release chan struct{}
}

func newStuckWriter() *stuckWriter {
	return &stuckWriter{blocked: make(chan struct{}), release: make(chan struct{})}
}

func (w *stuckWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.blocked) })
	<-w.release
	return len(b), nil
}

// TestRelayEndsWhenCancelledWhileTheHostDoesNotRead: a host that stops
// reading its stdout (a write to it blocks for ever) does not hold the
// relay: a SIGTERM (ctx cancelled) ends Serve at once.
func TestRelayEndsWhenCancelledWhileTheHostDoesNotRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := newStuckWriter()
		defer close(out.release) // the blocked write ends with the test
		// The owner sends the host a few notifications, then reads until
		// the relay closes the connection.
		cfg := takeOverOnce(t, func(c net.Conn) {
			for range 5 {
				if _, err := io.WriteString(c, noteLine); err != nil {
					return
				}
			}
			_, _ = io.Copy(io.Discard, c)
		})
		hostIn, hostW := io.Pipe()
		defer hostW.Close()
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, cfg, hostIn, out) }()
		<-out.blocked   // a write to the host blocks
		synctest.Wait() // and everything else waits on it
		cancelAtOnce(t, cancel, done, "while a write to the host blocked")
	})
}

// TestRelayEndsWhenTheHostLeavesItsOutputUnread: a host that stops reading
// its stdout while the owner's messages keep coming ends the relay once
// more than the limit waits for it (the queue stays bounded, and no
// message is dropped while the session goes on): Serve fails with an
// error naming the limit, and the log says so once.
func TestRelayEndsWhenTheHostLeavesItsOutputUnread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := newStuckWriter()
		defer close(out.release) // the blocked write ends with the test
		var logs bytes.Buffer
		r := newRelay(slog.New(slog.NewJSONHandler(&logs, nil)), out)
		r.out.limit = 1 << 10
		// The owner writes notifications until the relay hangs up.
		cfg := takeOverOnce(t, func(c net.Conn) {
			for {
				if _, err := io.WriteString(c, noteLine); err != nil {
					return
				}
			}
		})
		hostIn, hostW := io.Pipe()
		defer hostW.Close()
		err := r.run(context.Background(), cfg, hostIn)
		limit := strconv.Itoa(r.out.limit)
		if err == nil || !strings.Contains(err.Error(), limit) || !strings.Contains(err.Error(), "does not read") {
			t.Errorf("Serve with a host that does not read: %v; want an error saying so and naming the limit %s", err, limit)
		}
		var warned int
		for _, rec := range jsonLines(t, &logs) {
			if rec["level"] == "WARN" && rec["limit_bytes"] == float64(r.out.limit) {
				warned++
			}
		}
		if warned != 1 {
			t.Errorf("%d warnings naming the limit, want 1:\n%s", warned, logs.String())
		}
	})
}

// TestRelayAnswersAnOverLongRequestOfTheOwner: a request of the owner to
// the host (sampling, elicitation, roots/list) on a line longer than the
// limit cannot be relayed; the owner gets a JSON-RPC error for it naming
// the limit, so its caller does not wait for ever. An over-long
// notification or answer gets no reply, and the lines after are relayed.
func TestRelayAnswersAnOverLongRequestOfTheOwner(t *testing.T) {
	var host, toOwner bytes.Buffer
	r := newRelay(nil, &host)
	r.maxLine = 1 << 10
	pad := strings.Repeat("x", r.maxLine)
	r.fromOwner(bufio.NewReader(strings.NewReader(
		`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"`+pad+`"}}]}}`+"\n"+
			`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`+pad+`"}}`+"\n"+
			`{"jsonrpc":"2.0","id":9,"result":{"pad":"`+pad+`"}}`+"\n"+
			`{"jsonrpc":"2.0","id":"s2","method":"roots/list"}`+"\n")), &toOwner)
	r.out.flush(t.Context())

	limit := strconv.Itoa(r.maxLine)
	answers := jsonLines(t, &toOwner)
	if len(answers) != 1 {
		t.Fatalf("the owner got %v, want one answer, to its over-long request s1", answers)
	}
	if e, _ := answers[0]["error"].(map[string]any); answers[0]["id"] != "s1" || e == nil || !strings.Contains(fmt.Sprint(e["message"]), limit) {
		t.Errorf("the owner's over-long request s1 answered %v, want a JSON-RPC error naming the limit %s", answers[0], limit)
	}
	if got := strings.TrimSpace(host.String()); got != `{"jsonrpc":"2.0","id":"s2","method":"roots/list"}` {
		t.Errorf("the host got %q, want only the roots/list request after the over-long lines", got)
	}
}
