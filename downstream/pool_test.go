package downstream_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// TestStdioServerKilled kills a stdio server (behind an npx-like wrapper
// that stays its parent) in the middle of a task: between two calls, with a
// restart that works or that fails, and during a call. The next call
// succeeds after the one reconnect, or waits for the server to start again
// and, past its outage window, fails with a clear reason; the agent
// reaches its summary, and after pool.Close no process of any generation
// of the server is left.
func TestStdioServerKilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		// refuse makes the wrapper refuse to start again after the kill.
		refuse bool
		// during kills the server while a long call runs, not between calls.
		during bool
		// wantErr, when set, are substrings of the error of the call after
		// the kill; otherwise it must finish.
		wantErr []string
	}{
		{name: "between calls"},
		{name: "between calls, no restart", refuse: true,
			wantErr: []string{`mcp server "everything": call echo`, `mcp server "everything" could not be reached for`, `"outageWindow"`, "connect"}},
		{name: "during a call", during: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile, stopFile := filepath.Join(dir, "pids"), filepath.Join(dir, "stop")
			sc := wrappedEverything(t, pidFile, stopFile)
			sc.Timeout = downstream.Duration(15 * time.Second)
			sc.OutageWindow = downstream.Duration(2 * time.Second)
			cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{"everything": sc}}

			var (
				mu   sync.Mutex
				seen []int // every process of the server's groups ever seen
			)
			note := func(pids ...int) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range pids {
					if !slices.Contains(seen, p) {
						seen = append(seen, p)
					}
				}
			}
			// kill kills the real server of the newest generation (not its
			// wrapper: the wrapper notices and exits, as npx would).
			kill := func() {
				pids := readPIDs(t, pidFile)
				if len(pids) == 0 {
					t.Error("the server never started")
					return
				}
				wrapper := pids[len(pids)-1]
				members := groupMembers(wrapper)
				note(pids...)
				note(members...)
				if tc.refuse {
					if err := os.WriteFile(stopFile, nil, 0o600); err != nil {
						t.Error(err)
					}
				}
				killed := 0
				for _, p := range members {
					if p != wrapper {
						_ = syscall.Kill(p, syscall.SIGKILL)
						killed++
					}
				}
				if killed == 0 {
					t.Errorf("process group %d holds no server besides its wrapper: %v", wrapper, members)
				}
			}

			calls := []scripted.Call{{Server: "everything", Tool: "echo", Args: map[string]any{"message": "before"}}}
			if tc.during {
				calls = append(calls, scripted.Call{Server: "everything", Tool: "trigger-long-running-operation",
					Args: map[string]any{"duration": 1.5, "steps": 3}})
			}
			calls = append(calls, scripted.Call{Server: "everything", Tool: "echo", Args: map[string]any{"message": "after"}})

			var prepared atomic.Int32 // instruction_generation calls of the worker
			o := stackOptions{}
			if !tc.during {
				// Kill while the agent prepares its second call.
				o.handler = func(next func(*fakellm.Call) fakellm.Reply) func(*fakellm.Call) fakellm.Reply {
					return func(c *fakellm.Call) fakellm.Reply {
						if c.Skill == engine.SkillInstructionGeneration && c.AgentName == "worker" && prepared.Add(1) == 2 {
							kill()
						}
						return next(c)
					}
				}
			}
			s := newToolStackWith(t, cfg, calls, o)
			w, task := s.startWorker(t, "everything")
			if tc.during {
				s.WaitFor("the long call to run", func() bool {
					for _, st := range s.toolSteps(w) {
						if st.ExecutionState == engine.StateRunning && st.InstructionContent != nil && st.InstructionContent.ToolName == "trigger-long-running-operation" {
							return true
						}
					}
					return false
				})
				time.Sleep(300 * time.Millisecond) // well inside the call
				kill()
			}
			s.waitSummary(w, task)

			steps := s.toolSteps(w)
			if len(steps) != len(calls) {
				t.Fatalf("tool steps: %d, want %d\n%s", len(steps), len(calls), s.Dump())
			}
			if st := steps[0]; st.ExecutionState != engine.StateFinished {
				t.Errorf("the call before the kill: %s: %v", st.ExecutionState, st.ExecuteResult["error"])
			}
			if tc.during {
				// The interrupted call: made again on the new session, or
				// failed with a reason.
				st := steps[1]
				t.Logf("the interrupted call: %s %v", st.ExecutionState, st.ExecuteResult["error"])
				if st.ExecutionState == engine.StateFailed && !strings.Contains(st.ExecuteResult["error"].(string), "trigger-long-running-operation") {
					t.Errorf("the interrupted call failed without a clear reason: %v", st.ExecuteResult["error"])
				}
			}
			last := steps[len(steps)-1]
			switch msg, _ := last.ExecuteResult["error"].(string); {
			case tc.wantErr == nil && last.ExecutionState != engine.StateFinished:
				t.Errorf("the call after the kill: %s: %v", last.ExecutionState, msg)
			case tc.wantErr == nil:
				if got := jsonString(last.ExecuteResult["mcp_server_result"]); !strings.Contains(got, "Echo: after") {
					t.Errorf("the call after the kill: %s", got)
				}
			case last.ExecutionState != engine.StateFailed:
				t.Errorf("the call after the kill: %s, want failed", last.ExecutionState)
			default:
				for _, w := range tc.wantErr {
					if !strings.Contains(msg, w) {
						t.Errorf("the call after the kill: error %q lacks %q", msg, w)
					}
				}
			}

			// Every generation of the server, and then nothing after Close.
			wrappers := readPIDs(t, pidFile)
			switch {
			case tc.refuse && len(wrappers) < 3:
				t.Errorf("the server was started %d times, want it started again while the call waited for it: %v", len(wrappers), wrappers)
			case !tc.refuse && len(wrappers) != 2:
				t.Errorf("the server was started %d times, want 2 (once, then one reconnect): %v", len(wrappers), wrappers)
			}
			note(wrappers...)
			for _, p := range wrappers {
				note(groupMembers(p)...)
			}
			if err := s.pool.Close(); err != nil {
				t.Errorf("pool.Close: %v", err)
			}
			if left := waitGone(seen, 5*time.Second); len(left) > 0 {
				t.Errorf("after pool.Close these processes of the server still run: %v (seen: %v)", describeProcs(left), seen)
			}
			for _, p := range seen {
				// Not even a zombie: the pool reaps what it started.
				if st, ok := readStat(p); ok && st.state == 'Z' && st.ppid == os.Getpid() {
					t.Errorf("after pool.Close process %d is a zombie child of the test: never waited for", p)
				}
			}
			for _, p := range wrappers {
				if m := groupMembers(p); len(m) > 0 {
					t.Errorf("after pool.Close process group %d still holds %v", p, describeProcs(m))
				}
			}
		})
	}
}

// describeProcs names processes for failure messages.
func describeProcs(pids []int) []string {
	var out []string
	for _, p := range pids {
		cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
		st, _ := readStat(p)
		out = append(out, strconv.Itoa(p)+" ["+string(st.state)+"] "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}

// TestCloseKillsTheProcessGroup: a server that leaves a process of its own
// behind (here a background sleep that holds the server's stderr, as a
// wrapper's helper might) is stopped whole by Close, which returns in
// bounded time; a closed pool refuses further use.
func TestCloseKillsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	sc := downstream.ServerConfig{
		Command: "/bin/sh",
		Args:    []string{"-c", `sleep 300 & echo $! >> "$PID_FILE"; exec "$0" stdio`, serverBin(t, "mcp-server-everything")},
		Env:     map[string]string{"PID_FILE": pidFile},
		Timeout: downstream.Duration(15 * time.Second),
	}
	pool := downstream.NewPool(&downstream.Config{Servers: map[string]downstream.ServerConfig{"everything": sc}}, nil)
	t.Cleanup(func() { _ = pool.Close() })
	if _, err := pool.Describe(t.Context(), "everything"); err != nil {
		t.Fatal(err)
	}
	sleeper := readPIDs(t, pidFile)
	if len(sleeper) != 1 || !running(sleeper[0]) {
		t.Fatalf("the background process is not running: %v", sleeper)
	}
	st, _ := readStat(sleeper[0])
	members := groupMembers(st.pgrp)
	if len(members) < 2 {
		t.Fatalf("process group %d: %v, want the server and the sleeper", st.pgrp, members)
	}

	start := time.Now()
	if err := pool.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Close took %s", took)
	}
	if left := waitGone(members, 5*time.Second); len(left) > 0 {
		t.Errorf("after Close these processes still run: %v", describeProcs(left))
	}
	if err := pool.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := pool.Describe(t.Context(), "everything"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Describe after Close: %v, want a closed-pool error", err)
	}
}
