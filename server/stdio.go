package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Newline-delimited JSON-RPC (stdio, and the local socket a second mas-mcp
// on the data directory joins through) must survive bad input: go-sdk's
// IOTransport ends the session at the first line it cannot decode, and a
// host bug or a stray byte would take the whole MAS down with it. So every
// line is checked before the SDK sees it; one it would fail on is answered
// with a JSON-RPC error and skipped. Only the end of input ends a session.

// MaxLineBytes bounds one line of newline-delimited JSON-RPC (go-sdk's own
// default). A longer line is answered with an error and skipped.
const MaxLineBytes = mcp.DefaultMaxLineLength

// batchesUntil is the first protocol version without JSON-RPC batches:
// go-sdk ends a session of that version or later that sends one.
const batchesUntil = "2025-06-18"

// LineReader reads newline-delimited JSON-RPC and hands on only the lines
// an MCP session can take: one JSON-RPC message, or a batch of them where
// the protocol version still has batches. Any other line is answered
// through the answer function given to NewLineReader (a parse error,
// -32700, for a line that is not JSON; an invalid request, -32600, for JSON
// that is not a JSON-RPC message, an empty or refused batch, or a line
// longer than MaxLineBytes) and skipped; blank lines are skipped.
//
// It is not safe for concurrent use: one goroutine reads.
type LineReader struct {
	br     *bufio.Reader
	answer func(line []byte) error
	// version is the protocol version the peer's initialize asked for:
	// batches are refused from batchesUntil on, as go-sdk would, but
	// without ending the session.
	version string
}

// NewLineReader reads from r. answer writes one line (a JSON-RPC error
// response) to the peer; an error from it ends Next.
func NewLineReader(r io.Reader, answer func(line []byte) error) *LineReader {
	return &LineReader{br: bufio.NewReaderSize(r, 64<<10), answer: answer}
}

// Next returns the next line an MCP session can take, without its line
// ending; the slice is valid until the next call. It returns io.EOF at the
// end of input, or the error of reading or of answering a bad line.
func (l *LineReader) Next() ([]byte, error) {
	for {
		line, tooLong, err := l.readLine()
		if tooLong {
			if aerr := l.answer(errorLine(nil, jsonrpc.CodeInvalidRequest,
				fmt.Sprintf("invalid request: a line is longer than %d bytes; it was skipped", MaxLineBytes))); aerr != nil {
				return nil, aerr
			}
		} else if line = bytes.TrimSpace(line); len(line) > 0 {
			if reply := l.check(line); reply != nil {
				if aerr := l.answer(reply); aerr != nil {
					return nil, aerr
				}
			} else {
				return line, nil
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLine reads up to and excluding the next newline (or the end of
// input). A line beyond MaxLineBytes is read to its end and dropped.
func (l *LineReader) readLine() (line []byte, tooLong bool, err error) {
	return ReadLine(l.br, MaxLineBytes, 0)
}

// ReadLine reads br's next line, its newline included (none at the end of
// input). A line longer than limit bytes is read to its end but not kept:
// tooLong is set, and line holds only its first head bytes.
func ReadLine(br *bufio.Reader, limit, head int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > limit+1 { // +1: the newline
				keep := min(len(line), head)
				tooLong, line = true, append(line[:keep], chunk[:min(len(chunk), head-keep)]...)
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, tooLong, err
	}
}

// check returns nil for a line the session can take, else the answer.
func (l *LineReader) check(line []byte) []byte {
	if !json.Valid(line) {
		return errorLine(nil, jsonrpc.CodeParseError, "parse error: the line is not valid JSON")
	}
	if line[0] != '[' {
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			return errorLine(line, jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
		}
		if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "initialize" {
			var p struct {
				ProtocolVersion string `json:"protocolVersion"`
			}
			_ = json.Unmarshal(req.Params, &p)
			l.version = p.ProtocolVersion
		}
		return nil
	}
	// A batch: what go-sdk's reader would end the session for.
	var raws []json.RawMessage
	if err := json.Unmarshal(line, &raws); err != nil || len(raws) == 0 {
		return errorLine(nil, jsonrpc.CodeInvalidRequest, "invalid request: an empty batch")
	}
	if l.version >= batchesUntil {
		return errorLine(nil, jsonrpc.CodeInvalidRequest,
			fmt.Sprintf("invalid request: JSON-RPC batches are not supported in protocol version %s and later (this session: %s)", batchesUntil, l.version))
	}
	ids := map[any]bool{}
	for _, raw := range raws {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return errorLine(nil, jsonrpc.CodeInvalidRequest, "invalid request: in a batch: "+err.Error())
		}
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
			if ids[req.ID.Raw()] {
				return errorLine(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: the batch has ID %v twice", req.ID.Raw()))
			}
			ids[req.ID.Raw()] = true
		}
	}
	return nil
}

// errorLine renders a JSON-RPC error response. Its ID is the request's when
// line is a JSON object with a string or number "id", else null (JSON-RPC
// 2.0 §5: null when the ID cannot be detected). go-sdk's encoder would
// leave a missing ID out, which the specification does not allow.
func errorLine(line []byte, code int64, msg string) []byte {
	var id any
	var probe struct {
		ID any `json:"id"`
	}
	if line != nil && json.Unmarshal(line, &probe) == nil {
		switch probe.ID.(type) {
		case string, float64:
			id = probe.ID
		}
	}
	b, err := json.Marshal(struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", id, &jsonrpc.Error{Code: code, Message: msg}})
	if err != nil {
		panic(err) // strings, numbers and nil always marshal
	}
	return b
}

// lineTransport is an mcp.Transport over a byte stream of newline-delimited
// JSON-RPC that answers bad lines instead of ending the session (see
// LineReader). It reuses go-sdk's IOTransport for everything else.
type lineTransport struct {
	in  io.ReadCloser
	out io.WriteCloser
}

func (t *lineTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	w := &syncWriter{w: t.out}
	r := &checkedReader{closer: t.in}
	r.lines = NewLineReader(t.in, w.line)
	// The LineReader bounds lines: the SDK's own cap would end the session.
	return (&mcp.IOTransport{Reader: r, Writer: w, MaxLineLength: -1}).Connect(ctx)
}

// syncWriter writes whole lines: go-sdk writes each message with one Write
// (under its own lock), and the answers to bad lines must not land inside
// one of them.
type syncWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) line(b []byte) error {
	_, err := s.Write(append(bytes.Clone(b), '\n'))
	return err
}

func (s *syncWriter) Close() error { return s.w.Close() }

// checkedReader serves the lines of a LineReader, each ending in a newline,
// as a byte stream for go-sdk's decoder. Only the SDK's read goroutine
// reads it.
type checkedReader struct {
	lines   *LineReader
	closer  io.Closer
	pending []byte // the rest of the current line
}

func (c *checkedReader) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		line, err := c.lines.Next()
		if err != nil {
			return 0, err
		}
		c.pending = append(append(c.pending[:0], line...), '\n')
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func (c *checkedReader) Close() error { return c.closer.Close() }

// nopCloser keeps stdout open when a session ends (logs may follow).
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// ServeStdio serves one client over stdin/stdout until it disconnects or
// ctx is done. Nothing but protocol may be written to stdout meanwhile.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.mcp.Run(ctx, &lineTransport{in: os.Stdin, out: nopCloser{os.Stdout}})
}

// ServeConn serves one client over a stream of newline-delimited JSON-RPC
// messages (as stdio does) until it disconnects or ctx is done. The session
// acts as the default operator, like a stdio session.
func (s *Server) ServeConn(ctx context.Context, conn io.ReadWriteCloser) error {
	ss, err := s.mcp.Connect(ctx, &lineTransport{in: conn, out: conn}, nil)
	if err != nil {
		conn.Close()
		return fmt.Errorf("server: local session: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = ss.Close() })
	defer stop()
	return ss.Wait()
}

// ServeListener serves every connection of ln with ServeConn until ctx is
// done, then closes ln. It is how a second mas-mcp on the same data
// directory reaches this one: over a unix socket only its user can open.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("server: local listener: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.ServeConn(ctx, conn); err != nil && ctx.Err() == nil {
				s.log.Debug("local session ended", "err", err)
			}
		}()
	}
}
