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
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mas-mcp/mas-mcp/server"
)

// lineWriter writes whole lines to the host from a goroutine of its own,
// so that a host that stops reading its stdout without closing it never
// holds the relay: line queues the line and returns, and cancelling the
// relay's context ends it while a write to the host blocks.
//
// The queue is bounded (limit bytes, default maxQueued). A host that
// leaves more than that unread is stuck: the first line past the limit is
// logged once with the count of messages waiting, nothing more is queued,
// and onStuck ends the relay with that error (the process exits, which
// the host sees). Dropping messages instead would break the session
// silently: a dropped answer leaves the host's caller waiting for ever.
//
// When the relay ends, close stops the writer: a write to the host that
// blocks is interrupted where the host's stream allows it (see
// stopWriting), so that the goroutine writing ends with Serve instead of
// with the process.
//
// Writes that fail must not log a warning per message: the first failure
// is logged, the lines lost until a write succeeds again are counted, and
// the count is logged then (or by report, when the relay ends). (In the
// mas-mcp process a host that closes its end of a stdout pipe ends the
// process by SIGPIPE at the first write; this covers the other write
// errors.)
type lineWriter struct {
	log     *slog.Logger // fixed at creation
	w       io.Writer    // written by the drain goroutine only: one line is one Write
	limit   int          // bytes queued at most; fixed before the first line
	onStuck func(error)  // called once when the queue goes over limit (nil: nothing); fixed before the first line

	mu      sync.Mutex
	queue   [][]byte      // lines not yet handed to w; guarded by mu
	pending int           // lines queued or being written; guarded by mu
	queued  int           // their bytes; guarded by mu
	drained chan struct{} // closed when the drain goroutine ends; nil when none runs; guarded by mu
	stuck   error         // set when the queue went over limit: nothing is queued any more; guarded by mu
	closed  bool          // set by close: nothing is queued or written any more; guarded by mu
	lost    int           // lines not written since the last one that was; guarded by mu
}

// maxQueued is lineWriter.limit's default: four messages of the largest
// size, far more than a host that reads at all leaves unread.
const maxQueued = 4 * server.MaxLineBytes

// flushWait bounds the wait for the host to take what is queued for it
// when the relay ends otherwise than by its context (the host closed
// stdin but not stdout, say).
const flushWait = 5 * time.Second

func newLineWriter(log *slog.Logger, w io.Writer) *lineWriter {
	return &lineWriter{log: log, w: w, limit: maxQueued}
}

// line queues b, a line with or without its line ending, for the host.
// It fails only once the host is stuck (see lineWriter); a write that
// fails later is logged by the writer.
func (w *lineWriter) line(b []byte) error {
	b = bytes.TrimRight(b, "\r\n")
	b = append(append(make([]byte, 0, len(b)+1), b...), '\n') // the caller may reuse b
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errWriterClosed
	}
	if w.stuck != nil {
		w.lost++
		err := w.stuck
		w.mu.Unlock()
		return err
	}
	if w.pending > 0 && w.queued+len(b) > w.limit {
		w.stuck = fmt.Errorf("relay: the host does not read its stdout: %d messages (%d bytes) wait for it, "+
			"and the next would pass the limit of %d bytes queued for the host; ending the session", w.pending, w.queued, w.limit)
		w.lost++
		err := w.stuck
		w.mu.Unlock()
		w.log.Warn("the host does not read its stdout; ending the session", "waiting", w.pending, "waiting_bytes", w.queued, "limit_bytes", w.limit)
		if w.onStuck != nil {
			w.onStuck(err)
		}
		return err
	}
	w.queue = append(w.queue, b)
	w.pending++
	w.queued += len(b)
	if w.drained == nil {
		w.drained = make(chan struct{})
		go w.drain(w.drained)
	}
	w.mu.Unlock()
	return nil
}

// errWriterClosed is what line returns once the relay has ended.
var errWriterClosed = errors.New("relay: the session with the host ended")

// drain writes the queued lines to the host until the queue is empty or
// the writer is closed, then ends (closing done). A write that blocks
// for ever holds nothing else; close interrupts it where it can.
func (w *lineWriter) drain(done chan struct{}) {
	defer close(done)
	for {
		w.mu.Lock()
		if len(w.queue) == 0 || w.closed {
			// What close left queued stays counted in pending: report
			// logs it as unwritten.
			w.queue, w.drained = nil, nil
			w.mu.Unlock()
			return
		}
		b := w.queue[0]
		w.queue[0], w.queue = nil, w.queue[1:]
		w.mu.Unlock()

		_, err := w.w.Write(b)
		w.mu.Lock()
		if w.closed && err != nil {
			// close interrupted the write: the line is unwritten, not a
			// failure of the host's to log.
			w.queue, w.drained = nil, nil
			w.mu.Unlock()
			return
		}
		w.pending--
		w.queued -= len(b)
		first, recovered := false, 0
		if err != nil {
			first = w.lost == 0
			w.lost++
		} else {
			recovered, w.lost = w.lost, 0
		}
		w.mu.Unlock()
		switch {
		case first:
			w.log.Warn("writing to the host failed; its messages are dropped (and counted) until a write succeeds", "err", err)
		case recovered > 0:
			w.log.Info("writing to the host works again", "dropped", recovered)
		}
	}
}

// flush waits until the host has been handed every queued line, or ctx
// is done. It reports whether the queue emptied.
func (w *lineWriter) flush(ctx context.Context) bool {
	for {
		w.mu.Lock()
		ch := w.drained
		w.mu.Unlock()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// close stops the writer when the relay ends: nothing more is queued or
// written, and a write to the host that blocks is interrupted if the
// host's stream allows it (stopWriting), then waited for (up to
// stopWait). One that cannot be interrupted (a stdout in blocking mode)
// is left to end with the process. Lines not written stay counted for
// report.
func (w *lineWriter) close() {
	w.mu.Lock()
	w.closed = true
	drained := w.drained
	w.mu.Unlock()
	if drained == nil {
		return
	}
	select {
	case <-drained:
		return
	default:
	}
	if !stopWriting(w.w) {
		w.log.Debug("a write to the host blocks and cannot be interrupted; it ends with the process")
		return
	}
	waitEnded(w.log, drained, "the write to the host")
}

// err returns the error the writer ended the relay with (the host is
// stuck), or nil.
func (w *lineWriter) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stuck
}

// send encodes msg and writes it to the host.
func (w *lineWriter) send(msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return w.line(b)
}

// report logs how many messages the host missed: lost since writing to it
// last failed (or since it got stuck), and still waiting to be written.
func (w *lineWriter) report() {
	w.mu.Lock()
	lost, waiting := w.lost, w.pending
	w.mu.Unlock()
	if lost > 0 || waiting > 0 {
		w.log.Warn("the host never got the last messages: writing to it failed, or it did not read them", "dropped", lost, "unwritten", waiting)
	}
}

// readOwnerLine reads the owner's next line, without its newline. A line
// longer than limit bytes is read to its end but not kept: line is nil,
// tooLong is set, and head says what the line's start names.
func readOwnerLine(br *bufio.Reader, limit int) (line []byte, tooLong bool, head lineHead, err error) {
	line, tooLong, err = server.ReadLine(br, limit, maxHead)
	if tooLong {
		head, line = headOf(line), nil
	}
	return bytes.TrimRight(line, "\r\n"), tooLong, head, err
}

// maxHead bounds the start of an over-long line searched for its ID.
const maxHead = 64 << 10

// lineHead is what the start of an over-long line tells of its message.
type lineHead struct {
	ID     jsonrpc.ID // its "id" (the zero ID when none was found)
	Method string     // its "method": set for a request ("" for an answer)
}

// request reports whether the line is a call (a request with an ID),
// which its sender awaits an answer to.
func (h lineHead) request() bool { return h.Method != "" && h.ID.IsValid() }

// headOf returns the "id" and "method" members of the JSON-RPC message
// that b is the start of, those that come before b ends or before the
// first member that does not (go-sdk writes "jsonrpc", "id", "method",
// then "params", "result" or "error").
func headOf(b []byte) lineHead {
	var h lineHead
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return h
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return h
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return h
		}
		switch key {
		case "id":
			h.ID, _ = jsonrpc.MakeID(v)
		case "method":
			h.Method, _ = v.(string)
		}
	}
	return h
}
