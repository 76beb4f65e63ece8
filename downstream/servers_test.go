package downstream_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/downstream"
)

// The real MCP servers of the tests, and what the tests need to watch their
// processes.

// everythingStdio is @modelcontextprotocol/server-everything over stdio.
func everythingStdio(t testing.TB) downstream.ServerConfig {
	return downstream.ServerConfig{Command: serverBin(t, "mcp-server-everything"), Args: []string{"stdio"},
		Description: "Exercises every MCP feature: echo, sums, images, resources, prompts."}
}

// everythingPath is where each remote mode of server-everything serves MCP.
var everythingPath = map[string]string{"streamableHttp": "/mcp", "sse": "/sse"}

// startEverything runs server-everything in a remote mode ("streamableHttp"
// or "sse") as a subprocess on a free port, waits until it accepts
// connections and stops it (its whole process group) at cleanup. It returns
// the configuration that reaches it.
//
// Call it before the test's teststack: the helper's goroutines (the
// subprocess's output copiers) then predate the stack's leak check.
func startEverything(t testing.TB, mode string) downstream.ServerConfig {
	t.Helper()
	bin := serverBin(t, "mcp-server-everything")
	var lastErr error
	for range 3 { // a free port can be taken between picking and listening
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		out := &syncBuffer{}
		cmd := exec.Command(bin, mode)
		cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if err := waitListening(port, done, 20*time.Second); err != nil {
			stop()
			lastErr = fmt.Errorf("server-everything %s on port %d: %v\n%s", mode, port, err, out.String())
			continue
		}
		t.Cleanup(stop)
		sc := downstream.ServerConfig{URL: fmt.Sprintf("http://127.0.0.1:%d%s", port, everythingPath[mode]),
			Description: "Exercises every MCP feature: echo, sums, images, resources, prompts."}
		if mode == "sse" {
			sc.Transport = "sse"
		}
		return sc
	}
	t.Fatal(lastErr)
	return downstream.ServerConfig{}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits until something accepts TCP connections on the port,
// the process ends (done is closed) or the timeout passes.
func waitListening(port int, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return errors.New("the server exited")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening after %s", timeout)
		}
	}
}

// wrappedEverything runs server-everything over stdio behind a shell
// wrapper that, like npx, stays the parent of the real server instead of
// exec'ing it, and appends its own PID to pidFile (the process group of the
// server, which the pool starts with Setpgid). While stopFile exists the
// wrapper refuses to start the server (exit 1), so a reconnect fails.
func wrappedEverything(t testing.TB, pidFile, stopFile string) downstream.ServerConfig {
	return downstream.ServerConfig{
		Command: "/bin/sh",
		Args: []string{"-c", `echo $$ >> "$PID_FILE"
if [ -e "$STOP_FILE" ]; then echo "wrapper: refusing to start" >&2; exit 1; fi
"$0" stdio
exit $?`, serverBin(t, "mcp-server-everything")},
		Env: map[string]string{"PID_FILE": pidFile, "STOP_FILE": stopFile},
	}
}

// readPIDs reads the PIDs a wrapper wrote.
func readPIDs(t testing.TB, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %q is not a PID", file, f)
		}
		pids = append(pids, n)
	}
	return pids
}

// procStat is what /proc/<pid>/stat says about a process.
type procStat struct {
	pid, ppid, pgrp int
	state           byte // R, S, D, Z (zombie), …
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	// "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]}, true
}

// running reports whether a process exists and is not a zombie.
func running(pid int) bool {
	st, ok := readStat(pid)
	return ok && st.state != 'Z'
}

// groupMembers returns the running processes of a process group.
func groupMembers(pgrp int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && st.pgrp == pgrp && st.state != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// waitGone waits until none of the processes runs, and returns those that
// still do after the timeout.
func waitGone(pids []int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, p := range pids {
			if running(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer collects a subprocess's output for failure messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
