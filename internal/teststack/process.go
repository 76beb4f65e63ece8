package teststack

// The process-start helper of every test that runs the real binaries:
// cmd/mas-mcp (with and without the race detector) and nats-server, built
// once per test binary run; processes started with a clean environment,
// their stderr kept, their exit observed, stopped at the test's end.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binaries of the module a test can run.
const (
	// MasRace is cmd/mas-mcp built with the race detector: a data race in
	// the process under test is reported on its stderr (Process.Stop fails
	// the test on it).
	MasRace = "mas-mcp-race"
	// MasPlain is cmd/mas-mcp without the race detector (about four times
	// faster to run), for tests of many short runs.
	MasPlain = "mas-mcp"
	// NATSServer is nats-server, from the version go.mod requires.
	NATSServer = "nats-server"
)

// builds says how each binary is built: its package and go build flags.
var builds = map[string]struct {
	pkg   string
	flags []string
}{
	MasRace:    {"./cmd/mas-mcp", []string{"-race"}},
	MasPlain:   {"./cmd/mas-mcp", nil},
	NATSServer: {"github.com/nats-io/nats-server/v2", nil},
}

var (
	buildMu  sync.Mutex
	buildDir string                // guarded by buildMu; created by the first build
	built    = map[string]*build{} // guarded by buildMu
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Binary builds the named binary (MasRace, MasPlain, NATSServer) once per
// test binary run and returns its path; a failed build fails t (and every
// later caller). The package's TestMain must call RemoveBinaries after the
// tests (see VerifyTestMain).
func Binary(t testing.TB, name string) string {
	t.Helper()
	spec, ok := builds[name]
	if !ok {
		t.Fatalf("teststack: no binary named %q", name)
	}
	buildMu.Lock()
	b := built[name]
	if b == nil {
		b = &build{}
		built[name] = b
	}
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "mas-test-bin-")
		if err != nil {
			buildMu.Unlock()
			t.Fatal(err)
		}
		buildDir = dir
	}
	dir := buildDir
	buildMu.Unlock()
	b.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			b.err = err
			return
		}
		goCmd, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		out := filepath.Join(dir, name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		args := append(append([]string{"build"}, spec.flags...), "-o", out, spec.pkg)
		cmd := exec.CommandContext(ctx, goCmd, args...)
		cmd.Dir = root
		start := time.Now()
		if o, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, o)
			return
		}
		t.Logf("built %s in %s", name, time.Since(start).Round(time.Millisecond))
		b.path = out
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// RemoveBinaries deletes what Binary built (from TestMain, after the tests).
func RemoveBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
		buildDir = ""
	}
}

// moduleRoot finds the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("teststack: no go.mod above the working directory")
		}
		dir = parent
	}
}

// CleanEnv is the test's environment without the variables that configure
// mas-mcp or an LLM (OPENAI_*, MAS_*: a developer's real key must never
// reach a test), plus extra.
func CleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OPENAI_") || strings.HasPrefix(kv, "MAS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// ProcessOptions say how to start a process.
type ProcessOptions struct {
	// Args are its arguments, Env its whole environment (nil: CleanEnv()).
	Args []string
	Env  []string
	// Stdin and Stdout, when set, are connected as with exec.Cmd.
	Stdin  io.Reader
	Stdout io.Writer
	// StopSignal stops it at the test's end (0: SIGTERM, as a service
	// manager would); StopTimeout bounds the wait for it (0: 15s), after
	// which it is killed and the test fails.
	StopSignal  syscall.Signal
	StopTimeout time.Duration
	// AnyExit accepts any exit status at the test's end (a test that
	// checks the status itself); otherwise a process that exits with an
	// error once stopped fails the test.
	AnyExit bool
}

// Process is a running program.
type Process struct {
	Cmd *exec.Cmd
	// Stderr holds everything it wrote on stderr.
	Stderr *SyncBuffer
	// Exited is closed once it has exited and Err holds Wait's result.
	Exited chan struct{}
	Err    error

	t    testing.TB
	opts ProcessOptions
}

// StartProcess starts bin; at the test's end it is stopped (StopSignal),
// must exit in time, and must not have reported a data race; its stderr's
// tail is logged if the test failed.
func StartProcess(t testing.TB, bin string, o ProcessOptions) *Process {
	t.Helper()
	if o.Env == nil {
		o.Env = CleanEnv()
	}
	if o.StopSignal == 0 {
		o.StopSignal = syscall.SIGTERM
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 15 * time.Second
	}
	p := &Process{Stderr: &SyncBuffer{}, Exited: make(chan struct{}), t: t, opts: o}
	p.Cmd = exec.Command(bin, o.Args...)
	p.Cmd.Env = o.Env
	p.Cmd.Stdin, p.Cmd.Stdout, p.Cmd.Stderr = o.Stdin, o.Stdout, p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", filepath.Base(bin), err)
	}
	go func() {
		p.Err = p.Cmd.Wait()
		close(p.Exited)
	}()
	t.Cleanup(p.cleanup)
	return p
}

func (p *Process) cleanup() {
	t := p.t
	select {
	case <-p.Exited:
	default:
		_ = p.Cmd.Process.Signal(p.opts.StopSignal)
		select {
		case <-p.Exited:
			if p.Err != nil && !p.opts.AnyExit {
				t.Errorf("%s did not exit cleanly on %v: %v", p.name(), p.opts.StopSignal, p.Err)
			}
		case <-time.After(p.opts.StopTimeout):
			t.Errorf("%s still running %s after %v: killed", p.name(), p.opts.StopTimeout, p.opts.StopSignal)
			p.Kill()
		}
	}
	if strings.Contains(p.Stderr.String(), "WARNING: DATA RACE") {
		t.Errorf("%s reported a data race", p.name())
	}
	if t.Failed() {
		t.Logf("%s stderr:\n%s", p.name(), LastLines(p.Stderr.String(), 150))
	}
}

func (p *Process) name() string {
	return filepath.Base(p.Cmd.Path) + " " + strings.Join(p.opts.Args, " ")
}

// Kill kills it (SIGKILL, as a crash would) and waits until it is gone.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.Exited
}

// Stop sends sig and waits at most d for it to exit. It returns the exit
// code (-1 when it did not exit in time: it is then killed, or when a
// signal ended it) and how long it took.
func (p *Process) Stop(sig syscall.Signal, d time.Duration) (code int, took time.Duration) {
	start := time.Now()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%v: %v", sig, err)
	}
	select {
	case <-p.Exited:
		return p.Cmd.ProcessState.ExitCode(), time.Since(start)
	case <-time.After(d):
		took := time.Since(start)
		p.Kill()
		return -1, took
	}
}

// WaitStderr waits until cond holds of its stderr, re-checking on every
// write; it reports false when the process exited or d passed first.
func (p *Process) WaitStderr(d time.Duration, cond func(stderr string) bool) bool {
	return p.Stderr.WaitFor(d, p.Exited, cond)
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return s
	}
	return fmt.Sprintf("[… %d lines]\n%s", len(lines)-n, strings.Join(lines[len(lines)-n:], "\n"))
}
