package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestExitsZeroOnSignal: Ctrl-C (SIGINT, what `make run` gets) and SIGTERM
// (a service manager's stop) shut mas-mcp down cleanly with status 0,
// serving HTTP or stdio (its host still connected), within the shutdown
// deadline.
func TestExitsZeroOnSignal(t *testing.T) {
	bin := teststack.Binary(t, teststack.MasPlain)
	llm := fakellm.New(t)
	for _, tc := range []struct {
		name string
		args []string
		sig  syscall.Signal
	}{
		{"http/SIGINT", []string{"--http", "127.0.0.1:0"}, syscall.SIGINT},
		{"http/SIGTERM", []string{"--http", "127.0.0.1:0"}, syscall.SIGTERM},
		{"stdio/SIGINT", []string{"--stdio"}, syscall.SIGINT},
		{"stdio/SIGTERM", []string{"--stdio"}, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The host's end of stdin stays open until the process is gone
			// (a pipe of the OS: exec.Cmd.Wait would wait for the copier
			// of any other reader).
			stdin, host, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer host.Close()
			defer stdin.Close()
			p := teststack.StartProcess(t, bin, teststack.ProcessOptions{
				Args: append(tc.args, "--log-format", "text"), Env: relayEnv(llm, t.TempDir()), Stdin: stdin, AnyExit: true})
			if !p.WaitStderr(readyTimeout, func(s string) bool { return strings.Contains(s, "mas-mcp ready") }) {
				t.Fatalf("no ready line:\n%s", p.Stderr.String())
			}
			code, took := p.Stop(tc.sig, shutdownDeadline)
			if code != 0 {
				t.Errorf("exit status %d after %v (%v), want 0", code, tc.sig, p.Err)
			}
			if !strings.Contains(p.Stderr.String(), "shutting down") {
				t.Errorf("no \"shutting down\" line:\n%s", p.Stderr.String())
			}
			t.Logf("exited in %s", took.Round(time.Millisecond))
		})
	}
}
