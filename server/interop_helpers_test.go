package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// interopDir holds the Node test clients (package.json pins their versions,
// package-lock.json their whole tree; `make deps` installs them).
const interopDir = "testdata/interop"

// Deadlines of the interop runs: the operator script's own, and the hard
// one after which the test kills it.
const (
	operatorTimeout = 60 * time.Second
	nodeTimeout     = operatorTimeout + 30*time.Second
)

// interop is what every interop subtest shares: the tools found on the
// machine and the mas-mcp binary built once.
type interop struct {
	node, npx string
	dir       string // absolute path of interopDir
	bin       string // the mas-mcp binary
}

// needInterop finds node, npx and the installed npm packages, and builds
// the binary into a temporary directory. What is missing fails the test:
// CI must never pass because the clients were not there.
func needInterop(t *testing.T) *interop {
	t.Helper()
	const hint = "run `make test` (it installs the Node test clients with `make deps`)"
	var in interop
	var err error
	if in.node, err = nodeBinary(); err != nil {
		t.Fatalf("interop tests need Node.js (20 or later) on PATH: %v; install it, then %s", err, hint)
	}
	if in.npx, err = exec.LookPath("npx"); err != nil {
		t.Fatalf("interop tests need npx (comes with npm) on PATH: %v; %s", err, hint)
	}
	if in.dir, err = filepath.Abs(interopDir); err != nil {
		t.Fatal(err)
	}
	checkPinned(t, in.dir, hint)
	in.bin = buildBinary(t)
	return &in
}

// checkPinned fails t unless every dependency of dir's package.json is
// installed in dir/node_modules at the version it pins.
func checkPinned(t *testing.T, dir, hint string) {
	t.Helper()
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSONFile(t, filepath.Join(dir, "package.json"), &pkg)
	for name, want := range pkg.Dependencies {
		var got struct {
			Version string `json:"version"`
		}
		path := filepath.Join(dir, "node_modules", filepath.FromSlash(name), "package.json")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("npm package %s is not installed in %s (%v): %s", name, dir, err, hint)
		}
		if err := json.Unmarshal(b, &got); err != nil || got.Version != want {
			t.Fatalf("npm package %s in %s is version %q, package.json pins %s: %s", name, dir, got.Version, want, hint)
		}
	}
}

// nodeBinary is the pinned Node 22 of testdata/node22 when `make deps`
// installed it (the packages were installed for it), else node on PATH.
func nodeBinary() (string, error) {
	if p, err := filepath.Abs(node22); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("node")
}

// withNode22 puts the Node 22 of testdata/node22 first on env's PATH (if
// installed), so that npx and the programs it starts run on the Node the
// packages were installed for, whatever the machine's Node is.
func withNode22(env []string) []string {
	bin, err := filepath.Abs(filepath.Dir(node22))
	if err != nil {
		return env
	}
	if _, err := os.Stat(filepath.Join(bin, "node")); err != nil {
		return env
	}
	out := slices.Clone(env)
	for i, kv := range out {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			out[i] = "PATH=" + bin + string(os.PathListSeparator) + p
			return out
		}
	}
	return append(out, "PATH="+bin)
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// buildBinary builds cmd/mas-mcp from the module root (the parent of the
// test's working directory) into t's temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mas-mcp")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/mas-mcp")
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/mas-mcp: %v\n%s", err, out)
	}
	t.Logf("built mas-mcp in %s", time.Since(start).Round(time.Millisecond))
	return bin
}

// llmEnv is what the binary needs to talk to the fake LLM: its URL, the
// sentinel key (which must never show up in any output) and a model name.
func llmEnv(baseURL string) []string {
	return []string{"OPENAI_BASE_URL=" + baseURL, "OPENAI_API_KEY=" + teststack.SentinelKey, "MAS_MODEL=fake"}
}

// cleanEnv is the test's environment without variables that configure
// mas-mcp or an LLM, so a developer's real key never reaches a test, plus
// extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OPENAI_") || strings.HasPrefix(kv, "MAS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// fakeTeam starts a fake LLM driven by a fresh scripted team whose alice
// asks the operator (the brain keeps state per task: one per subtest).
func fakeTeam(t *testing.T) (*scripted.Team, *fakellm.Server) {
	team := scripted.NewTeam()
	team.AskOperator = true
	llm := fakellm.New(t)
	llm.Handle(team.Handle)
	return team, llm
}

// nodeRun is a finished run of a Node program.
type nodeRun struct {
	stdout, stderr string
	err            error
	took           time.Duration
}

// runNode runs name (node or npx) with args in the interop directory, the
// environment env, and the hard deadline nodeTimeout. Should a child it
// spawned outlive it holding its output pipes, WaitDelay bounds the wait.
func (in *interop) runNode(t *testing.T, name string, env []string, args ...string) nodeRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = in.dir
	cmd.Env = withNode22(env)
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %s: %w", nodeTimeout, err)
	}
	return nodeRun{stdout: stdout.String(), stderr: stderr.String(), err: err, took: time.Since(start)}
}

// checkNoKey fails t if the sentinel API key shows up in any of outputs.
func checkNoKey(t *testing.T, outputs map[string]string) {
	t.Helper()
	for name, out := range outputs {
		if strings.Contains(out, teststack.SentinelKey) {
			t.Errorf("the API key appears in %s", name)
		}
	}
}

// httpBinary is a mas-mcp binary serving HTTP, stopped at t's cleanup.
type httpBinary struct {
	cmd    *exec.Cmd
	stderr *teststack.SyncBuffer
	base   string // http://127.0.0.1:PORT
	exited chan struct{}
	err    error // Wait's result, set before exited is closed
}

// startHTTP starts the binary on a free loopback port and waits until it
// answers HTTP. A port taken between choosing and binding (the process
// exits early) is retried with another.
func (in *interop) startHTTP(t *testing.T, env []string) *httpBinary {
	t.Helper()
	var last string
	for range 3 {
		addr := freeLoopbackAddr(t)
		p := &httpBinary{stderr: &teststack.SyncBuffer{}, base: "http://" + addr, exited: make(chan struct{})}
		p.cmd = exec.Command(in.bin, "--http", addr, "--log-level", "debug")
		p.cmd.Env = env
		p.cmd.Stderr = p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start mas-mcp: %v", err)
		}
		go func() {
			p.err = p.cmd.Wait()
			close(p.exited)
		}()
		if p.waitReady(15 * time.Second) {
			t.Cleanup(func() { p.stop(t) })
			return p
		}
		p.kill()
		last = p.stderr.String()
	}
	t.Fatalf("mas-mcp --http never answered; its stderr:\n%s", last)
	return nil
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady polls until the server answers any HTTP status at /mcp, or the
// process exits, or d passes.
func (p *httpBinary) waitReady(d time.Duration) bool {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return false
		default:
		}
		if resp, err := client.Get(p.base + "/mcp"); err == nil {
			resp.Body.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func (p *httpBinary) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop interrupts the server as Ctrl-C would and expects a clean exit in
// time; it is killed otherwise. Its stderr goes to the log if t failed.
func (p *httpBinary) stop(t *testing.T) {
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		p.kill() // no interrupt on this platform, or it is gone
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("mas-mcp did not exit cleanly on interrupt: %v", p.err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("mas-mcp still running 15s after interrupt: killed")
		p.kill()
	}
	checkNoKey(t, map[string]string{"mas-mcp's stderr": p.stderr.String()})
	if t.Failed() {
		t.Logf("mas-mcp stderr:\n%s", lastLines(p.stderr.String(), 200))
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return s
	}
	return fmt.Sprintf("[… %d lines]\n%s", len(lines)-n, strings.Join(lines[len(lines)-n:], "\n"))
}

// waitGone waits until the process pid (a server a Node client spawned)
// has exited, killing it if it outlives d. It reports whether it exited
// on its own.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		p, err := os.FindProcess(pid)
		if err != nil {
			return true
		}
		if err := p.Signal(syscall.Signal(0)); err != nil {
			return true // os.ErrProcessDone, or no such process
		}
		if time.Now().After(deadline) {
			_ = p.Kill()
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
