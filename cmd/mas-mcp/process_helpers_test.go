package main

// Helpers of the process-level tests (crash_test.go): the real mas-mcp
// binary and nats-server (built once by teststack.Binary, started by
// teststack.StartProcess), a MAS that lives across several
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
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

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
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		teststack.RemoveBinaries()
		os.Exit(code)
	}))
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
	// Env is added to each process's environment (a token's variable).
	Env []string
	// Token, when set, is the bearer token the MCP client sends.
	Token string
}

// masInstance is one MAS (one data directory) run by successive processes
// of the binary. Only the test's goroutine uses it.
type masInstance struct {
	t       *testing.T
	bin     string
	opts    masOptions
	dataDir string
	marker  string
	addr    string // host:port the running process serves HTTP on

	runs    []*teststack.Process // every process, in order
	started int                  // processes that came up
	cur     *teststack.Process   // the running one, nil between processes
	cs      *mcp.ClientSession
	http    *http.Transport
}

// newMAS prepares a MAS on a fresh data directory; start runs it. At the
// test's end the running process (if any) is stopped, every process it
// started must be gone, and on failure the processes' logs are shown.
func newMAS(t *testing.T, o masOptions) *masInstance {
	t.Helper()
	bin := teststack.Binary(t, teststack.MasRace)
	if o.NoRace {
		bin = teststack.Binary(t, teststack.MasPlain)
	}
	m := &masInstance{t: t, bin: bin, opts: o, dataDir: t.TempDir(), marker: fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid(), time.Now().UnixNano())}
	t.Cleanup(m.cleanup)
	return m
}

// readyAddr finds the address in the ready line of a process logging JSON.
var readyAddr = regexp.MustCompile(`"msg":"mas-mcp ready".*"mcp":"http://([^/"]+)/mcp`)

// start runs a new process on the data directory (on a port it picks
// itself), waits until its ready line says where it serves HTTP and
// connects an MCP client to it.
func (m *masInstance) start() {
	t := m.t
	t.Helper()
	if m.cur != nil {
		t.Fatal("start: a process is running already")
	}
	args := []string{"--http", "127.0.0.1:0", "--data-dir", m.dataDir, "--log-format", "json", "--log-level", "debug"}
	if m.opts.NATSURL != "" {
		args = append(args, "--nats-url", m.opts.NATSURL)
	}
	if m.opts.MCPConfig != "" {
		args = append(args, "--mcp-config", m.opts.MCPConfig)
	}
	args = append(args, m.opts.Args...)
	p := teststack.StartProcess(t, m.bin, teststack.ProcessOptions{Args: args,
		Env: cleanEnv(append([]string{"OPENAI_BASE_URL=" + m.opts.LLMURL, "OPENAI_API_KEY=" + teststack.SentinelKey, "MAS_MODEL=" + runModel(m.started+1),
			"MAS_DATA_DIR=" + m.dataDir, markerEnv + "=" + m.marker}, m.opts.Env...)...)})
	m.runs = append(m.runs, p)
	if !p.WaitStderr(readyTimeout, readyAddr.MatchString) {
		p.Kill()
		t.Fatalf("mas-mcp (run %d) never served HTTP; its stderr:\n%s", len(m.runs), lastLines(p.Stderr.String(), 80))
	}
	m.addr = readyAddr.FindStringSubmatch(p.Stderr.String())[1]
	m.cur = p
	m.started++
	m.connect()
}

// runModel is the model name the n-th process (from 1) asks the LLM for:
// the fake LLM's calls tell which process made them.
func runModel(n int) string { return "fake-run-" + strconv.Itoa(n) }

// connect opens an MCP client session (streamable HTTP) to the running
// process.
func (m *masInstance) connect() {
	m.t.Helper()
	m.http = &http.Transport{}
	var rt http.RoundTripper = m.http
	if m.opts.Token != "" {
		rt = teststack.Bearer{Token: m.opts.Token, Base: m.http}
	}
	cs, err := dial(m.addr, rt)
	if err != nil {
		m.t.Fatalf("connect an MCP client to mas-mcp: %v\n%s", err, lastLines(m.cur.Stderr.String(), 50))
	}
	m.cs = cs
}

// dial opens an MCP client session (streamable HTTP) to addr.
func dial(addr string, transport http.RoundTripper) (*mcp.ClientSession, error) {
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
	p.Kill()
	m.cur = nil
	m.disconnect()
	if ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		m.t.Fatalf("mas-mcp was not killed by SIGKILL: %v", p.Err)
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
	code, took = p.Stop(syscall.SIGTERM, d)
	m.cur = nil
	m.disconnect()
	return code, took
}

// cleanup runs after the processes' own (teststack.StartProcess stopped
// the running one with SIGTERM, expecting a clean exit, and logged every
// process's stderr should the test have failed): it checks that nothing
// the MAS started is left and that the API key is in no log.
func (m *masInstance) cleanup() {
	t := m.t
	m.disconnect()
	m.cur = nil
	if left := waitNoMarked(m.marker, goneTimeout); len(left) > 0 {
		t.Errorf("processes started by mas-mcp outlived it (killed now): %s", strings.Join(left, "; "))
	}
	for i, p := range m.runs {
		if strings.Contains(p.Stderr.String(), teststack.SentinelKey) {
			t.Errorf("the API key appears in the stderr of mas-mcp run %d", i+1)
		}
	}
}

// logs is the stderr of every process so far.
func (m *masInstance) logs() string {
	var b strings.Builder
	for _, p := range m.runs {
		b.WriteString(p.Stderr.String())
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

// cleanEnv is teststack.CleanEnv without a marker of another test, plus
// extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range teststack.CleanEnv() {
		if !strings.HasPrefix(kv, markerEnv+"=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string { return teststack.LastLines(s, n) }

// --- an external nats-server

// startNATS runs nats-server with JetStream on a free loopback port and a
// fresh store directory, and stops it at the test's end. It returns its
// client URL.
func startNATS(t *testing.T) string {
	t.Helper()
	bin := teststack.Binary(t, teststack.NATSServer)
	// Port 0 has nats-server pick a free one; its log says which.
	listening := regexp.MustCompile(`Listening for client connections on (\S+:\d+)`)
	p := teststack.StartProcess(t, bin, teststack.ProcessOptions{Args: []string{"-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", "-1"}, StopTimeout: 10 * time.Second})
	if !p.WaitStderr(readyTimeout, func(s string) bool { return listening.MatchString(s) && strings.Contains(s, "Server is ready") }) {
		p.Kill()
		t.Fatalf("nats-server never became ready:\n%s", lastLines(p.Stderr.String(), 40))
	}
	return "nats://" + listening.FindStringSubmatch(p.Stderr.String())[1]
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

// --- NATS proxies that hold or freeze mas-mcp's writes at a chosen one

// startNATSProxy is a TCP proxy between mas-mcp and the nats-server at
// natsURL (nats://host:port) until the test ends; it returns its URL. It
// reads the client's protocol (PUB/HPUB with their payloads, one-line ops)
// and forwards it as it is, but hands each publish to pub first, with send,
// which forwards it (from any goroutine, in one piece): pub forwards it
// now, later, or never. Once pub returns false, the publish and everything
// the client sends after it are dropped.
func startNATSProxy(t *testing.T, natsURL string, pub func(subject string, payload []byte, send func()) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
				forwardNATS(client, server, pub)
				server.Close()
			}()
		}
	}()
	return "nats://" + ln.Addr().String()
}

// forwardNATS copies the client's protocol to the server, each publish
// through pub (startNATSProxy).
func forwardNATS(client io.Reader, server io.Writer, pub func(subject string, payload []byte, send func()) bool) {
	var wmu sync.Mutex // one message at a time on the wire
	write := func(msg []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := server.Write(msg)
		return err
	}
	br := bufio.NewReader(client)
	frozen := false
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		msg := line
		fields := strings.Fields(string(line))
		if !frozen && len(fields) >= 3 && (strings.EqualFold(fields[0], "PUB") || strings.EqualFold(fields[0], "HPUB")) {
			total, err := strconv.Atoi(fields[len(fields)-1])
			if err != nil {
				return
			}
			body := make([]byte, total+2) // payload and its \r\n
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
			msg = append(bytes.Clone(line), body...)
			payload := body[:total]
			if strings.EqualFold(fields[0], "HPUB") {
				hdr, err := strconv.Atoi(fields[len(fields)-2])
				if err != nil || hdr > total {
					return
				}
				payload = body[hdr:total]
			}
			frozen = !pub(fields[1], payload, func() { _ = write(msg) })
			continue
		}
		if frozen {
			continue
		}
		if err := write(msg); err != nil {
			return
		}
	}
}

// natsFreezer is a NATS proxy (startNATSProxy) that forwards mas-mcp's
// protocol until a publish matches: that publish and everything the
// client sends after it are dropped, so the process is frozen right
// before that write, as a crash at that instant would leave the store.
type natsFreezer struct {
	url    string
	frozen chan string // the subject of the publish that froze it
	once   sync.Once
}

// startNATSFreezer proxies to the NATS server at natsURL (nats://host:port)
// until the test ends.
func startNATSFreezer(t *testing.T, natsURL string, match func(subject string, payload []byte) bool) *natsFreezer {
	t.Helper()
	f := &natsFreezer{frozen: make(chan string, 1)}
	f.url = startNATSProxy(t, natsURL, func(subject string, payload []byte, send func()) bool {
		if match(subject, payload) {
			f.once.Do(func() { f.frozen <- subject })
			return false
		}
		send()
		return true
	})
	return f
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

// waitLogLine waits until one line of the running process's stderr holds
// every one of parts (it re-checks on every write of the process).
func waitLogLine(t *testing.T, m *masInstance, what string, parts ...string) {
	t.Helper()
	has := func(s string) bool {
		for line := range strings.SplitSeq(s, "\n") {
			all := true
			for _, p := range parts {
				if !strings.Contains(line, p) {
					all = false
					break
				}
			}
			if all {
				return true
			}
		}
		return false
	}
	if !m.cur.WaitStderr(waitTimeout, has) {
		t.Fatalf("timed out after %s waiting for %s (a log line with %q)\n%s", waitTimeout, what, parts, m.describeAgents())
	}
}

// addWorker creates a researcher named "worker" with tools, adds it to
// the task and returns its ID.
func addWorker(m *masInstance, taskID string, tools ...string) string {
	cfg := map[string]any{"template": "researcher", "name": "worker"}
	if len(tools) > 0 {
		cfg["tools"] = tools
	}
	var made struct {
		Result struct {
			AgentID string `json:"agent_id"`
		} `json:"result"`
	}
	m.callTool("manage_agent", map[string]any{"action": "init_new_agent", "agent_config": cfg}, &made)
	w := made.Result.AgentID
	m.callTool("manage_agent", map[string]any{"action": "add_task_participant", "task_id": taskID, "agents": []string{w}}, nil)
	return w
}
