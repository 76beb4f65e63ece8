package downstream

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
)

// MaxMessageBytes bounds one message a remote server sends, as go-sdk
// bounds a stdio server's lines and the events of an event stream: 16 MiB.
// A streamable HTTP server may answer a call with one application/json
// body, which go-sdk reads whole; mas-mcp stops reading it at this size,
// fails the call and reconnects (the session cannot go on without the
// answer). A result is then cut to ExecutorConfig.MaxResultBytes anyway.
const MaxMessageBytes = 16 << 20

// errTooLargeText is in the error of an answer over MaxMessageBytes. The
// SDK passes that error on flattened into text ("failed to read body:
// %v"), so tooLarge recognises it by this text too.
const errTooLargeText = "the most mas-mcp reads of one message"

// tooLargeError is the error of reading an answer over MaxMessageBytes.
type tooLargeError struct{ server string }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("mcp server %q: its answer is larger than %d MiB, %s (MaxMessageBytes); it was not read further",
		e.server, MaxMessageBytes>>20, errTooLargeText)
}

// sdkLineTooLarge is go-sdk's error text for a stdio server's line over
// MaxMessageBytes (its errFrameTooLarge, which it does not export). It
// names neither the limit nor the server.
const sdkLineTooLarge = "inbound JSON-RPC frame exceeded the configured maximum line length"

// tooLarge reports whether err says a server's answer was over MaxMessageBytes.
func tooLarge(err error) bool {
	var tl *tooLargeError
	return err != nil && (errors.As(err, &tl) || strings.Contains(err.Error(), errTooLargeText) ||
		strings.Contains(err.Error(), sdkLineTooLarge))
}

// namedTooLarge is err, an answer over MaxMessageBytes, naming the server
// and the limit as mas-mcp's own error of an HTTP answer does (go-sdk's of
// a stdio line says neither).
func namedTooLarge(server string, err error) error {
	if strings.Contains(err.Error(), errTooLargeText) {
		return err
	}
	return fmt.Errorf("%w: %w", &tooLargeError{server: server}, err)
}

// serverTransport is the HTTP transport of one connection to a remote
// server (a new one for each): it adds the configured headers, bounds
// the answers, marks a call whose request the server refused for an
// unknown session or that could not even be dialled (nothing of it
// reached the server), and records a gateway's word that the server is
// unavailable.
func (c *conn) serverTransport() *serverTransport {
	return &serverTransport{server: c.name, headers: c.sc.Headers, next: http.DefaultTransport}
}

type serverTransport struct {
	server  string
	headers map[string]string
	next    http.RoundTripper
	// unavailable: a request of the connection was answered 502, 503 or
	// 504 (a gateway in front of the server, or the server itself, says
	// it cannot serve now): a handshake that fails so is an outage.
	unavailable atomic.Bool
}

func (t *serverTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		// No connection could be made for the request: it was not sent.
		if r.Method == http.MethodPost && undialled(err) {
			if f, ok := r.Context().Value(inflightKey{}).(*inflight); ok {
				f.undialled.Store(true)
			}
		}
		return resp, err
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		t.unavailable.Store(true)
	}
	// MCP §2.5.3: a server answers a request with a session ID it does
	// not know (it restarted, or ended the session) with 404, without
	// processing it. The call this POST belongs to can be made again on a
	// new session whatever it does.
	if r.Method == http.MethodPost && resp.StatusCode == http.StatusNotFound && r.Header.Get("Mcp-Session-Id") != "" {
		if f, ok := r.Context().Value(inflightKey{}).(*inflight); ok {
			f.sessionRefused.Store(true)
		}
	}
	// An event stream is bounded per event by go-sdk (MaxEventSize, set to
	// MaxMessageBytes): the stream itself may last as long as the session.
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: MaxMessageBytes, server: t.server}
	}
	return resp, nil
}

// cappedBody fails reading past MaxMessageBytes.
type cappedBody struct {
	io.ReadCloser
	left   int64
	server string
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte more than allowed tells a body over the limit
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n + int(b.left), &tooLargeError{server: b.server}
	}
	return n, err
}

// undialled reports whether a request's error says no connection could be
// made for it (the address refused it, did not resolve, could not be
// dialled, or a proxy could not be reached): nothing of it was sent.
func undialled(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}
