package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// rawStdio is a mas-mcp --stdio process driven with raw lines, as a buggy
// host would.
type rawStdio struct {
	*teststack.Process
	stdin   io.WriteCloser
	replies chan rawReply // responses (messages with an ID), in order
	exited  chan error    // Wait's result, once stdout is drained
}

// rawReply is a JSON-RPC response as read from stdout; ID stays raw so
// that null shows as null.
type rawReply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code int64 `json:"code"`
	} `json:"error"`
	line string
}

func startRawStdio(t *testing.T, bin string, env []string) *rawStdio {
	t.Helper()
	// Pipes of the OS, handed to the process as they are (exec.Cmd copies
	// nothing), so that its exit and EOF on stdin are what the test does.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &rawStdio{stdin: stdinW, replies: make(chan rawReply, 64), exited: make(chan error, 1)}
	p.Process = teststack.StartProcess(t, bin, teststack.ProcessOptions{Args: []string{"--stdio", "--log-level", "debug"}, Env: env,
		Stdin: stdinR, Stdout: stdoutW})
	// The process holds its own copies now.
	stdinR.Close()
	stdoutW.Close()
	go func() {
		defer stdoutR.Close()
		sc := bufio.NewScanner(stdoutR)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var r rawReply
			if json.Unmarshal(sc.Bytes(), &r) == nil && len(r.ID) > 0 {
				r.line = sc.Text()
				p.replies <- r
			}
		}
		close(p.replies)
		<-p.Exited
		p.exited <- p.Err
	}()
	// Before the process's own cleanup (which stops it): its host goes.
	t.Cleanup(func() {
		_ = p.stdin.Close()
		for range p.replies {
		}
	})
	return p
}

func (p *rawStdio) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("write %s: %v", line, err)
	}
}

// next is the next response; the process ending first fails the test.
func (p *rawStdio) next(t *testing.T) rawReply {
	t.Helper()
	r, ok := <-p.replies
	if !ok {
		t.Fatalf("mas-mcp ended (%v) instead of answering", <-p.exited)
	}
	return r
}

// checkSurvivesMalformedLine: initialize, a truncated message, then a
// ping: the truncated line gets a parse error with a null ID, the ping its
// answer; closing stdin then ends the process with status 0.
func checkSurvivesMalformedLine(t *testing.T, p *rawStdio) {
	t.Helper()
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if r := p.next(t); string(r.ID) != "1" || r.Error != nil {
		t.Fatalf("initialize answered %s", r.line)
	}
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	p.send(t, `{"jsonrpc":"2.0","id":3,"method":`)
	if r := p.next(t); string(r.ID) != "null" || r.Error == nil || r.Error.Code != -32700 {
		t.Errorf("the malformed line answered %s, want a parse error (-32700) with id null", r.line)
	}
	p.send(t, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	if r := p.next(t); string(r.ID) != "4" || r.Error != nil || string(r.Result) != "{}" {
		t.Errorf("ping after the malformed line answered %s", r.line)
	}
	p.stdin.Close()
	for r := range p.replies {
		t.Errorf("unexpected answer after EOF: %s", r.line)
	}
	if err := <-p.exited; err != nil {
		t.Errorf("mas-mcp exited with %v after EOF, want status 0", err)
	}
}

// TestStdioSurvivesMalformedLine: the --stdio server itself.
func TestStdioSurvivesMalformedLine(t *testing.T) {
	bin := teststack.Binary(t, teststack.MasRace)
	llm := fakellm.New(t)
	checkSurvivesMalformedLine(t, startRawStdio(t, bin, relayEnv(llm, t.TempDir())))
}

// TestRelaySurvivesMalformedLine: a second --stdio process on an owned
// data directory relays to the owner; a malformed line from its host is
// answered as the owner would, and neither process loses its session.
func TestRelaySurvivesMalformedLine(t *testing.T) {
	bin := teststack.Binary(t, teststack.MasRace)
	llm := fakellm.New(t)
	env := relayEnv(llm, t.TempDir())
	owner := startStdio(t, bin, env)
	joined := startRawStdio(t, bin, env)
	checkSurvivesMalformedLine(t, joined)
	if !strings.Contains(joined.Stderr.String(), "took_over=false") {
		t.Errorf("the second process did not relay to the first:\n%s", lastLines(joined.Stderr.String(), 20))
	}
	// The owner still serves its own host.
	var inbox struct {
		OperatorID string `json:"operator_id"`
	}
	owner.call(t, "get_inbox", map[string]any{}, &inbox)
	if inbox.OperatorID == "" {
		t.Error("the owner's get_inbox has no operator_id")
	}
}
