package relay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mas-mcp/mas-mcp/server"
)

// lineWriter writes whole lines to the host. Writes that keep failing
// must not log a warning per message: the first failure is logged, the
// lines lost until a write succeeds again are counted, and the count is
// logged then (or by report, when the relay ends). (In the mas-mcp
// process a host that closes its end of a stdout pipe ends the process by
// SIGPIPE at the first write; this covers the other write errors.)
type lineWriter struct {
	log *slog.Logger // fixed at creation

	mu   sync.Mutex
	w    io.Writer // guarded by mu: one line is one Write
	lost int       // lines not written since the last one that was; guarded by mu
}

func (w *lineWriter) line(b []byte) error {
	w.mu.Lock()
	_, err := w.w.Write(append(bytes.TrimRight(b, "\r\n"), '\n'))
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
	return err
}

// send encodes msg and writes it to the host.
func (w *lineWriter) send(msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return w.line(b)
}

// report logs how many messages the host missed since writing to it last
// failed, if it did.
func (w *lineWriter) report() {
	w.mu.Lock()
	n := w.lost
	w.mu.Unlock()
	if n > 0 {
		w.log.Warn("the host never got the last messages: writing to it failed", "dropped", n)
	}
}

// readOwnerLine reads the owner's next line, without its newline. A line
// longer than limit bytes is read to its end but not kept: line is nil,
// tooLong is set, and id is the ID the line's start names (the zero ID
// when none).
func readOwnerLine(br *bufio.Reader, limit int) (line []byte, tooLong bool, id jsonrpc.ID, err error) {
	line, tooLong, err = server.ReadLine(br, limit, maxHead)
	if tooLong {
		id, line = headID(line), nil
	}
	return bytes.TrimRight(line, "\r\n"), tooLong, id, err
}

// maxHead bounds the start of an over-long line searched for its ID.
const maxHead = 64 << 10

// headID returns the "id" member of the JSON-RPC message that b is the
// start of, when the member comes before b ends (go-sdk writes it second,
// after "jsonrpc"); else the zero ID.
func headID(b []byte) jsonrpc.ID {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return jsonrpc.ID{}
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return jsonrpc.ID{}
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return jsonrpc.ID{}
		}
		if key == "id" {
			id, _ := jsonrpc.MakeID(v)
			return id
		}
	}
	return jsonrpc.ID{}
}
