package main

// Helpers of the process-level tests (crash_test.go): the real mas-mcp
// binary and nats-server built once, a MAS that lives across several
// processes on one data directory, an MCP client per process, an external
// nats-server, a stdio proxy in front of a downstream MCP server, and the
// check that nothing the binary started outlives the test.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// Generous bounds for things that should take well under a second: they
// catch hangs, they do not measure speed.
const (
	readyTimeout = 30 * time.Second // a process answers HTTP
	waitTimeout  = 60 * time.Second // a condition of the MAS holds
	goneTimeout  = 20 * time.Second // processes the binary started are gone
)

// markerEnv is set, with a value unique to each MAS under test, in the
// binary's environment; every process it starts inherits it, which is how
// the orphan check finds them.
const markerEnv = "CRASHTEST_MARKER"

func TestMain(m *testing.M) {
	if os.Getenv(proxyServerEnv) != "" {
		// Started by mas-mcp as a downstream MCP server (see runProxy).
		os.Exit(runProxy())
	}
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// --- the binaries, built once per test binary run

var (
	buildOnce   sync.Once
	buildDir    string
	buildErr    error
	masRaceBin  string // cmd/mas-mcp with the race detector
	masPlainBin string // cmd/mas-mcp without
	natsBin     string // nats-server, from the module go.mod requires
)

// binaries builds mas-mcp (with and without the race detector) and
// nats-server, once, and returns their paths.
func binaries(t *testing.T) (masRace, masPlain, nats string) {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			buildErr = err
			return
		}
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
			buildErr = fmt.Errorf("module root not found at %s: %w", root, err)
			return
		}
		goCmd, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		if buildDir, err = os.MkdirTemp("", "mas-crashtest-bin-"); err != nil {
			buildErr = err
			return
		}
		build := func(out, pkg string, flags ...string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, goCmd, append(append([]string{"build"}, flags...), "-o", out, pkg)...)
			cmd.Dir = root
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
			}
			return nil
		}
		masRaceBin = filepath.Join(buildDir, "mas-mcp-race")
		masPlainBin = filepath.Join(buildDir, "mas-mcp")
		natsBin = filepath.Join(buildDir, "nats-server")
		// With the race detector, a data race in the process under test
		// is reported on its stderr (and fails the test).
		if buildErr = build(masRaceBin, "./cmd/mas-mcp", "-race"); buildErr != nil {
			return
		}
		if buildErr = build(masPlainBin, "./cmd/mas-mcp"); buildErr != nil {
			return
		}
		buildErr = build(natsBin, "github.com/nats-io/nats-server/v2")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return masRaceBin, masPlainBin, natsBin
}

// --- one MAS across processes

// masOptions configure a MAS under test.
type masOptions struct {
	// LLMURL is the fake LLM's base URL.
	LLMURL string
	// NATSURL, when set, is given as --nats-url (external NATS).
	NATSURL string
	// MCPConfig is a downstream MCP servers file (--mcp-config).
	MCPConfig string
	// Args are further flags.
	Args []string
	// NoRace runs the binary built without the race detector (about four
	// times faster to run), for tests of many short runs.
	NoRace bool
}

// masInstance is one MAS (one data directory) run by successive processes
// of the binary. Only the test's goroutine uses it.
type masInstance struct {
	t       *testing.T
	bin     string
	opts    masOptions
	dataDir string
	marker  string
	addr    string // host:port, kept across restarts when free

	runs    []*masProc // every process, in order
	started int        // processes that came up
	cur     *masProc   // the running one, nil between processes
	cs      *mcp.ClientSession
	http    *http.Transport
}

// masProc is one process of the binary.
type masProc struct {
	cmd    *exec.Cmd
	stderr *teststack.SyncBuffer
	exited chan struct{}
	err    error // Wait's result, set before exited is closed
}

// newMAS prepares a MAS on a fresh data directory; start runs it. At the
// test's end the running process (if any) is stopped, every process it
// started must be gone, and on failure the processes' logs are shown.
func newMAS(t *testing.T, o masOptions) *masInstance {
	t.Helper()
	race, plain, _ := binaries(t)
	bin := race
	if o.NoRace {
		bin = plain
	}
	m := &masInstance{t: t, bin: bin, opts: o, dataDir: t.TempDir(), marker: fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid(), time.Now().UnixNano())}
	t.Cleanup(m.cleanup)
	return m
}

// start runs a new process on the data directory, waits until it serves
// HTTP and connects an MCP client to it.
func (m *masInstance) start() {
	t := m.t
	t.Helper()
	if m.cur != nil {
		t.Fatal("start: a process is running already")
	}
	var last string
	for attempt := range 3 {
		if m.addr == "" || attempt > 0 {
			m.addr = freeAddr(t)
		}
		p := &masProc{stderr: &teststack.SyncBuffer{}, exited: make(chan struct{})}
		args := []string{"--http", m.addr, "--data-dir", m.dataDir, "--log-format", "json", "--log-level", "debug"}
		if m.opts.NATSURL != "" {
			args = append(args, "--nats-url", m.opts.NATSURL)
		}
		if m.opts.MCPConfig != "" {
			args = append(args, "--mcp-config", m.opts.MCPConfig)
		}
		args = append(args, m.opts.Args...)
		p.cmd = exec.Command(m.bin, args...)
		p.cmd.Env = cleanEnv("OPENAI_BASE_URL="+m.opts.LLMURL, "OPENAI_API_KEY="+teststack.SentinelKey, "MAS_MODEL="+runModel(m.started+1),
			"MAS_DATA_DIR="+m.dataDir, markerEnv+"="+m.marker)
		p.cmd.Stderr = p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start mas-mcp: %v", err)
		}
		m.runs = append(m.runs, p)
		go func() {
			p.err = p.cmd.Wait()
			close(p.exited)
		}()
		if p.waitReady(m.addr, readyTimeout) {
			m.cur = p
			m.started++
			m.connect()
			return
		}
		p.kill()
		last = p.stderr.String()
		if !strings.Contains(last, "address already in use") {
			break
		}
	}
	t.Fatalf("mas-mcp (run %d) never served HTTP; its stderr:\n%s", len(m.runs), lastLines(last, 80))
}

// runModel is the model name the n-th process (from 1) asks the LLM for:
// the fake LLM's calls tell which process made them.
func runModel(n int) string { return "fake-run-" + strconv.Itoa(n) }

// waitReady polls until the process answers HTTP at /mcp, exits, or d
// passes.
func (p *masProc) waitReady(addr string, d time.Duration) bool {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return false
		default:
		}
		if resp, err := client.Get("http://" + addr + "/mcp"); err == nil {
			resp.Body.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func (p *masProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// connect opens an MCP client session (streamable HTTP) to the running
// process.
func (m *masInstance) connect() {
	m.t.Helper()
	m.http = &http.Transport{}
	cs, err := dial(m.addr, m.http)
	if err != nil {
		m.t.Fatalf("connect an MCP client to mas-mcp: %v\n%s", err, lastLines(m.cur.stderr.String(), 50))
	}
	m.cs = cs
}

// dial opens an MCP client session (streamable HTTP) to addr.
func dial(addr string, transport *http.Transport) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return mcp.NewClient(&mcp.Implementation{Name: "crash-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: transport}, MaxRetries: -1}, nil)
}

// disconnect drops the MCP client of a process that is gone or going.
func (m *masInstance) disconnect() {
	if m.cs != nil {
		_ = m.cs.Close()
		m.cs = nil
	}
	if m.http != nil {
		m.http.CloseIdleConnections()
		m.http = nil
	}
}

// kill kills the running process with SIGKILL (as a crash would) and
// waits until it is gone.
func (m *masInstance) kill() {
	m.t.Helper()
	p := m.cur
	if p == nil {
		m.t.Fatal("kill: no process is running")
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		m.t.Fatalf("SIGKILL: %v", err)
	}
	<-p.exited
	m.cur = nil
	m.disconnect()
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		m.t.Fatalf("mas-mcp was not killed by SIGKILL: %v", p.err)
	}
}

// terminate sends SIGTERM to the running process and waits at most d for
// it to exit. It returns the exit code (-1 when it did not exit in time:
// it is then killed) and how long it took.
func (m *masInstance) terminate(d time.Duration) (code int, took time.Duration) {
	m.t.Helper()
	p := m.cur
	if p == nil {
		m.t.Fatal("terminate: no process is running")
	}
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		m.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.exited:
		took = time.Since(start)
		code = p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		took = time.Since(start)
		code = -1
		p.kill()
	}
	m.cur = nil
	m.disconnect()
	return code, took
}

// cleanup stops the running process (SIGTERM, as an operator would),
// checks that nothing the MAS started is left, and shows the logs of
// every process when the test failed.
func (m *masInstance) cleanup() {
	t := m.t
	if p := m.cur; p != nil {
		m.disconnect()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			if p.err != nil {
				t.Errorf("mas-mcp did not exit cleanly on SIGTERM: %v", p.err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("mas-mcp still running 15s after SIGTERM: killed")
			p.kill()
		}
		m.cur = nil
	}
	if left := waitNoMarked(m.marker, goneTimeout); len(left) > 0 {
		t.Errorf("processes started by mas-mcp outlived it (killed now): %s", strings.Join(left, "; "))
	}
	for i, p := range m.runs {
		if strings.Contains(p.stderr.String(), teststack.SentinelKey) {
			t.Errorf("the API key appears in the stderr of mas-mcp run %d", i+1)
		}
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("mas-mcp run %d reported a data race", i+1)
		}
		if t.Failed() {
			t.Logf("mas-mcp run %d stderr:\n%s", i+1, lastLines(p.stderr.String(), 150))
		}
	}
}

// logs is the stderr of every process so far.
func (m *masInstance) logs() string {
	var b strings.Builder
	for _, p := range m.runs {
		b.WriteString(p.stderr.String())
	}
	return b.String()
}

// callTool calls a tool of the running process and decodes its structured
// output into out.
func (m *masInstance) callTool(name string, args, out any) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := m.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		m.t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		m.t.Fatalf("%s: tool error: %s", name, b.String())
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			m.t.Fatalf("%s: structured output %s: %v", name, b, err)
		}
	}
}

// read reads a resource's JSON document into out.
func (m *masInstance) read(uri string, out any) error { return readWith(m.cs, uri, out) }

// readWith reads a resource's JSON document into out over cs.
func readWith(cs *mcp.ClientSession, uri string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		return fmt.Errorf("read %s: %w", uri, err)
	}
	if len(res.Contents) != 1 {
		return fmt.Errorf("read %s: %d contents, want 1", uri, len(res.Contents))
	}
	if err := json.Unmarshal([]byte(res.Contents[0].Text), out); err != nil {
		return fmt.Errorf("read %s: %w", uri, err)
	}
	return nil
}

// mustRead is read that fails the test on error.
func (m *masInstance) mustRead(uri string, out any) {
	m.t.Helper()
	if err := m.read(uri, out); err != nil {
		m.t.Fatal(err)
	}
}

// waitFor polls cond (every 25 ms) until it holds; it fails the test after
// waitTimeout with cond's last description of what it saw.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	if ok, saw := poll(cond); !ok {
		t.Fatalf("timed out after %s waiting for %s; last seen: %s", waitTimeout, what, saw)
	}
}

// poll polls cond (every 25 ms) until it holds or waitTimeout passes, and
// returns its last result.
func poll(cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, saw := cond()
		if ok || time.Now().After(deadline) {
			return ok, saw
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// describeAgents lists every agent's state, step lock and steps, for
// failure messages.
func (m *masInstance) describeAgents() string {
	var agents []engine.AgentBrief
	if err := m.read("mas://agents", &agents); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, a := range agents {
		var doc engine.AgentState
		var steps engine.AgentStep
		if err := m.read("mas://agents/"+a.AgentID, &doc); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", a.Name, err)
			continue
		}
		_ = m.read("mas://agents/"+a.AgentID+"/steps", &steps)
		fmt.Fprintf(&b, "agent %s (%.8s) %s lock=%v todo=%d\n", a.Name, a.AgentID, doc.WorkingState, doc.StepLock, len(steps.TodoList))
		for _, st := range steps.StepList {
			fmt.Fprintf(&b, "  %.8s %-22s %-8s task=%.8s stage=%.8s %q err=%v\n", st.StepID, st.Executor, st.ExecutionState,
				st.TaskID, st.StageID, strings.Join(strings.Fields(st.TextContent), " "), st.ExecuteResult["error"])
		}
	}
	return b.String()
}

// --- environment and addresses

// cleanEnv is the test's environment without variables that configure
// mas-mcp or an LLM (a developer's real key must never reach a test), plus
// extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OPENAI_") || strings.HasPrefix(kv, "MAS_") || strings.HasPrefix(kv, markerEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return s
	}
	return fmt.Sprintf("[… %d lines]\n%s", len(lines)-n, strings.Join(lines[len(lines)-n:], "\n"))
}

// --- an external nats-server

// startNATS runs nats-server with JetStream on a free loopback port and a
// fresh store directory, and stops it at the test's end. It returns its
// client URL.
func startNATS(t *testing.T) string {
	t.Helper()
	_, _, bin := binaries(t)
	var last string
	for range 3 {
		addr := freeAddr(t)
		host, port, _ := net.SplitHostPort(addr)
		out := &teststack.SyncBuffer{}
		cmd := exec.Command(bin, "-js", "-sd", t.TempDir(), "-a", host, "-p", port)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start nats-server: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Errorf("nats-server still running 10s after SIGTERM: killed")
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if waitListening(addr, exited, readyTimeout) && waitJetStream(out, exited, readyTimeout) {
			t.Cleanup(stop)
			return "nats://" + addr
		}
		stop()
		last = out.String()
	}
	t.Fatalf("nats-server never became ready:\n%s", lastLines(last, 40))
	return ""
}

// dropLease deletes the lease by which a mas-mcp process owns the state on
// an external NATS server (store's bucket mas_owner, key owner), as a
// clean shutdown does. Only for a process known to be dead. Should the
// store name them otherwise, nothing is deleted and the next process
// waits the lease out.
func dropLease(t *testing.T, natsURL string) {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "mas_owner")
	if err != nil {
		return
	}
	_ = kv.Delete(ctx, "owner")
}

// waitListening waits until something accepts connections on addr.
func waitListening(addr string, exited <-chan struct{}, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// waitJetStream waits until nats-server logs that it is ready.
func waitJetStream(out *teststack.SyncBuffer, exited <-chan struct{}, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(out.String(), "Server is ready") {
			return true
		}
		select {
		case <-exited:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// --- orphans

// markedProcesses lists the live processes whose environment holds
// CRASHTEST_MARKER=marker, as "pid cmdline".
func markedProcesses(marker string) map[int]string {
	want := []byte(markerEnv + "=" + marker)
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		found := false
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				found = true
				break
			}
		}
		if !found || zombie(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out[pid] = strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return out
}

// zombie reports whether pid has exited and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// waitNoMarked waits until no process carries the marker; what is still
// there after d is killed and described.
func waitNoMarked(marker string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		left := markedProcesses(marker)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var out []string
			for pid, cmd := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				out = append(out, fmt.Sprintf("pid %d: %s", pid, cmd))
			}
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// --- a stdio proxy in front of a downstream MCP server

// Environment of the proxy (set in the mcpServers entry that starts it).
const (
	// proxyServerEnv is the stdio MCP server the proxy runs (its
	// executable; the proxy passes it the argument "stdio").
	proxyServerEnv = "CRASHTEST_PROXY_SERVER"
	// proxyLogEnv is a file the proxy appends one line to per event:
	// "start <proxy pid> <server pid>", "call <tool>", "answered <tool>",
	// "withheld <tool>", "eof".
	proxyLogEnv = "CRASHTEST_PROXY_LOG"
	// proxyHoldEnv is a file naming a tool: while it does, the server's
	// answers to that tool's calls are withheld from mas-mcp (the server
	// did the call; mas-mcp never learns the outcome, as when it crashes
	// during the call).
	proxyHoldEnv = "CRASHTEST_PROXY_HOLD"
)

// runProxy forwards newline-delimited JSON-RPC between its stdin/stdout
// (mas-mcp) and a real stdio MCP server, logging tool calls and withholding
// the answers proxyHoldEnv names. When mas-mcp goes away (stdin ends) it
// closes the server's stdin and exits, leaving the server to end as it
// would had mas-mcp started it directly.
func runProxy() int {
	logPath, holdPath := os.Getenv(proxyLogEnv), os.Getenv(proxyHoldEnv)
	logLine := func(format string, args ...any) {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "proxy:", err)
			return
		}
		fmt.Fprintf(f, format+"\n", args...)
		f.Close()
	}
	cmd := exec.Command(os.Getenv(proxyServerEnv), "stdio")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 1
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 1
	}
	logLine("start %d %d", os.Getpid(), cmd.Process.Pid)

	var mu sync.Mutex
	calls := map[string]string{} // JSON-RPC id -> tool name
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(line, &msg) == nil && msg.Method == "" && len(msg.ID) > 0 {
				mu.Lock()
				tool, ok := calls[string(msg.ID)]
				delete(calls, string(msg.ID))
				mu.Unlock()
				if ok {
					held, _ := os.ReadFile(holdPath)
					if holdPath != "" && strings.TrimSpace(string(held)) == tool {
						logLine("withheld %s", tool)
						continue
					}
					logLine("answered %s", tool)
				}
			}
			_, _ = os.Stdout.Write(append(bytes.Clone(line), '\n'))
		}
		// The server is gone: so is the connection.
		os.Exit(0)
	}()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &msg) == nil && msg.Method == "tools/call" && len(msg.ID) > 0 {
			mu.Lock()
			calls[string(msg.ID)] = msg.Params.Name
			mu.Unlock()
			logLine("call %s", msg.Params.Name)
		}
		if _, err := in.Write(append(bytes.Clone(line), '\n')); err != nil {
			break
		}
	}
	logLine("eof")
	_ = in.Close()
	return 0
}

// proxyLog reads the proxy's log lines.
func proxyLog(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// countLines counts the lines equal to want.
func countLines(lines []string, want string) int {
	n := 0
	for _, l := range lines {
		if l == want {
			n++
		}
	}
	return n
}

// --- a NATS proxy that freezes mas-mcp's writes at a chosen one

// natsFreezer is a TCP proxy between mas-mcp and a nats-server. It reads
// the client's protocol (PUB/HPUB with their payloads, one-line ops) and
// forwards it until a publish matches: that publish and everything the
// client sends after it are dropped, so the process is frozen right
// before that write, as a crash at that instant would leave the store.
type natsFreezer struct {
	url    string
	match  func(subject string, payload []byte) bool
	frozen chan string // the subject of the publish that froze it
	once   sync.Once
}

// startNATSFreezer proxies to the NATS server at natsURL (nats://host:port)
// until the test ends.
func startNATSFreezer(t *testing.T, natsURL string, match func(subject string, payload []byte) bool) *natsFreezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &natsFreezer{url: "nats://" + ln.Addr().String(), match: match, frozen: make(chan string, 1)}
	target := strings.TrimPrefix(natsURL, "nats://")
	var conns sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn // guarded by mu
	closed := false     // guarded by mu
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				client.Close()
				server.Close()
				return
			}
			open = append(open, client, server)
			mu.Unlock()
			conns.Add(2)
			go func() {
				defer conns.Done()
				_, _ = io.Copy(client, server)
				client.Close()
			}()
			go func() {
				defer conns.Done()
				f.forward(client, server)
				server.Close()
			}()
		}
	}()
	return f
}

// forward copies the client's protocol to the server until a publish
// matches; from then on it reads and drops.
func (f *natsFreezer) forward(client io.Reader, server io.Writer) {
	br := bufio.NewReader(client)
	frozen := false
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		msg := line
		fields := strings.Fields(string(line))
		var subject string
		var payload []byte
		if len(fields) >= 3 && (strings.EqualFold(fields[0], "PUB") || strings.EqualFold(fields[0], "HPUB")) {
			total, err := strconv.Atoi(fields[len(fields)-1])
			if err != nil {
				return
			}
			body := make([]byte, total+2) // payload and its \r\n
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
			msg = append(bytes.Clone(line), body...)
			subject, payload = fields[1], body[:total]
			if strings.EqualFold(fields[0], "HPUB") {
				hdr, err := strconv.Atoi(fields[len(fields)-2])
				if err != nil || hdr > total {
					return
				}
				payload = body[hdr:total]
			}
		}
		if !frozen && subject != "" && f.match(subject, payload) {
			frozen = true
			f.once.Do(func() { f.frozen <- subject })
		}
		if frozen {
			continue
		}
		if _, err := server.Write(msg); err != nil {
			return
		}
	}
}

// wait waits until a publish froze the proxy.
func (f *natsFreezer) wait(t *testing.T) string {
	t.Helper()
	select {
	case s := <-f.frozen:
		return s
	case <-time.After(waitTimeout):
		t.Fatal("no write matched: the proxy never froze")
	}
	return ""
}
