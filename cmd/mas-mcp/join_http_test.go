package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestJoinRefusesHTTP: a `--stdio --http` process on a data directory that
// another mas-mcp owns cannot serve the web monitor (the owner's MAS is
// the one to show): it exits with status 1 and a message naming the
// owner's HTTP address, or saying the owner serves none.
func TestJoinRefusesHTTP(t *testing.T) {
	bin := teststack.Binary(t, teststack.MasPlain)
	llm := fakellm.New(t)
	monitor := regexp.MustCompile(`mas-mcp ready .*monitor=(http://\S+/)`)
	for _, tc := range []struct {
		name      string
		ownerArgs []string
		want      func(ownerMonitor string) string
	}{
		{"owner serves HTTP", []string{"--stdio", "--http", "127.0.0.1:0"},
			func(m string) string { return "the owner serves the web monitor at " + m }},
		{"owner serves stdio only", []string{"--stdio"},
			func(string) string { return "the owner serves no HTTP" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := relayEnv(llm, t.TempDir())
			owner := startStdio(t, bin, env, append(tc.ownerArgs[1:], "--log-format", "text")...)
			ownerMonitor := ""
			owner.waitStderr(t, "mas-mcp ready", readyTimeout)
			if m := monitor.FindStringSubmatch(owner.stderr.String()); m != nil {
				ownerMonitor = m[1]
			}
			if len(tc.ownerArgs) > 1 && ownerMonitor == "" {
				t.Fatalf("the owner's ready line names no monitor:\n%s", owner.stderr.String())
			}
			p := teststack.StartProcess(t, bin, teststack.ProcessOptions{Args: []string{"--stdio", "--http", "127.0.0.1:0"}, Env: env, AnyExit: true})
			select {
			case <-p.Exited:
			case <-time.After(readyTimeout):
				t.Fatalf("the joining process did not exit:\n%s", p.Stderr.String())
			}
			if code := p.Cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			msg := p.Stderr.String()
			for _, want := range []string{"--http 127.0.0.1:0", "is in use by process", tc.want(ownerMonitor), "leave out --http"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal lacks %q:\n%s", want, msg)
				}
			}
			// The owner still serves its host.
			var inbox struct {
				OperatorID string `json:"operator_id"`
			}
			owner.call(t, "get_inbox", map[string]any{}, &inbox)
			if inbox.OperatorID == "" {
				t.Error("the owner's get_inbox has no operator_id")
			}
		})
	}
}
