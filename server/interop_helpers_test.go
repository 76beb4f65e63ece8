package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	in.bin = teststack.Binary(t, teststack.MasPlain)
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

// llmEnv is what the binary needs to talk to the fake LLM: its URL, the
// sentinel key (which must never show up in any output) and a model name.
func llmEnv(baseURL string) []string {
	return []string{"OPENAI_BASE_URL=" + baseURL, "OPENAI_API_KEY=" + teststack.SentinelKey, "MAS_MODEL=fake"}
}

// cleanEnv is the test's environment without variables that configure
// mas-mcp or an LLM, so a developer's real key never reaches a test, plus
// extra.
func cleanEnv(extra ...string) []string { return teststack.CleanEnv(extra...) }

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

// httpBinary is a mas-mcp binary serving HTTP, started by
// teststack.StartProcess: interrupted at t's cleanup (as Ctrl-C would),
// it must exit cleanly in time, and the API key must be in none of its
// output.
type httpBinary struct {
	*teststack.Process
	base string // http://127.0.0.1:PORT
}

// readyMCP finds the MCP address in the ready line (text log format).
var readyMCP = regexp.MustCompile(`mas-mcp ready .*mcp="?http://([^/"\s]+)/mcp`)

// startHTTP starts the binary on a loopback port it picks itself and
// waits until its ready line says where it serves.
func (in *interop) startHTTP(t *testing.T, env []string) *httpBinary {
	t.Helper()
	return startBinaryHTTP(t, in.bin, "127.0.0.1:0", env)
}

// startBinaryHTTP starts bin serving HTTP on addr and waits for its ready
// line.
func startBinaryHTTP(t *testing.T, bin, addr string, env []string) *httpBinary {
	t.Helper()
	p := &httpBinary{}
	// Registered first, so it runs once the process is gone.
	t.Cleanup(func() {
		if p.Process != nil {
			checkNoKey(t, map[string]string{"mas-mcp's stderr": p.Stderr.String()})
		}
	})
	p.Process = teststack.StartProcess(t, bin, teststack.ProcessOptions{Args: []string{"--http", addr, "--log-level", "debug"}, Env: env,
		StopSignal: syscall.SIGINT})
	if !p.WaitStderr(15*time.Second, readyMCP.MatchString) {
		p.Kill()
		t.Fatalf("mas-mcp --http %s never became ready; its stderr:\n%s", addr, lastLines(p.Stderr.String(), 50))
	}
	p.base = "http://" + readyMCP.FindStringSubmatch(p.Stderr.String())[1]
	return p
}

// stop interrupts the server as Ctrl-C would and expects a clean exit
// (status 0) in time.
func (p *httpBinary) stop(t *testing.T) {
	t.Helper()
	if code, _ := p.Stop(syscall.SIGINT, 15*time.Second); code != 0 {
		t.Errorf("mas-mcp did not exit cleanly on interrupt: status %d (%v)", code, p.Err)
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string { return teststack.LastLines(s, n) }

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
