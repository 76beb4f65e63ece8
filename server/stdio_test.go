package server_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/server"
)

// wireError is the error member of a JSON-RPC response as the tests read it.
type wireError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// wireReply is a JSON-RPC response as the tests read it; ID is kept raw so
// that null and absent differ.
type wireReply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *wireError      `json:"error"`
}

// TestLineReader: every line an MCP session could not take is answered
// (with the JSON-RPC code, and the ID when it can be read) and skipped;
// the others are handed on as they are; the end of input ends it.
func TestLineReader(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", server.MaxLineBytes) + `"}}`
	type answer struct {
		ID   string // raw JSON
		Code int64
	}
	tests := []struct {
		name    string
		in      string
		want    []string // lines handed on
		answers []answer
	}{
		{
			name: "a message per line, blank lines and CRLF",
			in:   "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n\n   \n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
			want: []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		},
		{
			name:    "a truncated message does not swallow the next line",
			in:      `{"jsonrpc":"2.0","id":3,"method":` + "\n" + `{"jsonrpc":"2.0","id":4,"method":"ping"}` + "\n",
			want:    []string{`{"jsonrpc":"2.0","id":4,"method":"ping"}`},
			answers: []answer{{"null", -32700}},
		},
		{
			name:    "garbage and two values on a line",
			in:      "\x00\xff hello\n{} {}\n",
			answers: []answer{{"null", -32700}, {"null", -32700}},
		},
		{
			name:    "JSON that is not JSON-RPC",
			in:      `42` + "\n" + `{"jsonrpc":"1.0","id":"a","method":"ping"}` + "\n" + `{"jsonrpc":"2.0","id":{},"method":"ping"}` + "\n" + `{"jsonrpc":"2.0","result":{}}` + "\n",
			answers: []answer{{"null", -32600}, {`"a"`, -32600}, {"null", -32600}, {"null", -32600}},
		},
		{
			name: "batches before 2025-06-18",
			in: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}` + "\n" +
				`[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"}]` + "\n" +
				`[]` + "\n" + `[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"ping"}]` + "\n" + `[1]` + "\n",
			want: []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`,
				`[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"}]`},
			answers: []answer{{"null", -32600}, {"null", -32600}, {"null", -32600}},
		},
		{
			name: "no batches from 2025-06-18 on",
			in: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}` + "\n" +
				`[{"jsonrpc":"2.0","id":2,"method":"ping"}]` + "\n",
			want:    []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`},
			answers: []answer{{"null", -32600}},
		},
		{
			name:    "a line beyond the limit",
			in:      long + "\n" + `{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n",
			want:    []string{`{"jsonrpc":"2.0","id":2,"method":"ping"}`},
			answers: []answer{{"null", -32600}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var answers []answer
			lr := server.NewLineReader(strings.NewReader(tt.in), func(b []byte) error {
				var r wireReply
				if err := json.Unmarshal(b, &r); err != nil || r.Error == nil || r.Result != nil {
					t.Errorf("answer %s: want a JSON-RPC error response (%v)", b, err)
					return nil
				}
				if !strings.Contains(string(b), `"jsonrpc":"2.0"`) || r.Error.Message == "" {
					t.Errorf("answer %s: want jsonrpc 2.0 and a message", b)
				}
				answers = append(answers, answer{string(r.ID), r.Error.Code})
				return nil
			})
			var got []string
			for {
				line, err := lr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				got = append(got, string(line))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("lines handed on mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.answers, answers); diff != "" {
				t.Errorf("answers mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLineReaderAnswerFails: when the peer can no longer be answered, the
// reader stops with that error.
func TestLineReaderAnswerFails(t *testing.T) {
	gone := errors.New("stdout closed")
	lr := server.NewLineReader(strings.NewReader("oops\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"),
		func([]byte) error { return gone })
	if _, err := lr.Next(); !errors.Is(err, gone) {
		t.Errorf("Next: %v, want %v", err, gone)
	}
}

// TestStreamSessionSurvivesBadLines drives a session over a byte stream
// (as stdio and the local socket are served) with raw lines: a malformed
// line is answered with a parse error whose ID is null, and the session
// goes on answering; only the end of input ends it.
func TestStreamSessionSurvivesBadLines(t *testing.T) {
	e := newEnv(t)
	client, conn := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- e.srv.ServeConn(t.Context(), conn) }()
	replies := make(chan wireReply, 16)
	go func() {
		defer close(replies)
		sc := bufio.NewScanner(client)
		for sc.Scan() {
			var r wireReply
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Errorf("server wrote %q: %v", sc.Text(), err)
				return
			}
			if len(r.ID) > 0 { // notifications carry no ID
				replies <- r
			}
		}
	}()
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(client, line+"\n"); err != nil {
			t.Fatalf("write %s: %v", line, err)
		}
	}
	next := func() wireReply {
		t.Helper()
		select {
		case r, ok := <-replies:
			if !ok {
				t.Fatal("the session ended")
			}
			return r
		case err := <-served:
			t.Fatalf("the session ended: %v", err)
		}
		return wireReply{}
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if r := next(); string(r.ID) != "1" || r.Error != nil {
		t.Fatalf("initialize answered %+v", r)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, tc := range []struct {
		line string
		want wireReply
	}{
		{`{"jsonrpc":"2.0","id":3,"method":`, wireReply{ID: json.RawMessage("null"), Error: &wireError{Code: -32700}}},
		{`{"jsonrpc":"2.0","id":4,"method":"ping"}`, wireReply{ID: json.RawMessage("4"), Result: json.RawMessage("{}")}},
		{`[{"jsonrpc":"2.0","id":5,"method":"ping"}]`, wireReply{ID: json.RawMessage("null"), Error: &wireError{Code: -32600}}},
		{`{"jsonrpc":"2.0","id":6,"method":"ping"}`, wireReply{ID: json.RawMessage("6"), Result: json.RawMessage("{}")}},
	} {
		send(tc.line)
		got := next()
		if got.Error != nil {
			got.Error.Message = "" // the codes are the contract
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("line %d %s: answer mismatch (-want +got):\n%s", i, tc.line, diff)
		}
	}
	// The end of input ends the session (a hang here is go test's timeout).
	client.Close()
	<-served
}
