package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// Benchmarks of the HTTP surface. `make bench` runs them with
// -benchtime=1x, so one iteration does a fixed, meaningful amount of work
// and the figures that matter are the custom metrics (calls/s, latency
// percentiles), computed over every iteration run.

const (
	benchClients        = 50 // concurrent sessions
	benchCallsPerClient = 40 // calls each, per iteration
)

// benchMAS is an HTTP rig whose MAS has run the scripted task to its end
// (so the agents and the task resource have realistic sizes); it returns
// the task's ID too.
func benchMAS(b *testing.B) (*httpRig, string) {
	// Outputs are validated by the tests, not the benchmarks (toolcall.go).
	b.Cleanup(server.CheckToolOutputs(false))
	// All the clients act as the one default operator: room for them all.
	r := newHTTPRig(b, rigOptions{Configure: func(_ *teststack.Stack, c *server.Config) {
		c.Limits.SessionsPerOperator = 2 * benchClients
	}})
	id, err := r.stack.Sys.AddTask(r.stack.Sys.OperatorID(), engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
	if err != nil {
		b.Fatal(err)
	}
	r.stack.WaitFor("the task to finish", func() bool { return r.stack.Task(id).ExecutionState == engine.StateFinished })
	return r, id
}

// benchRig is benchMAS with benchClients sessions over streamable HTTP at
// the protocol version, each its own (for versions before 2026-07-28,
// served by the stateful handler, each has its own session ID).
func benchRig(b *testing.B, version string) (*httpRig, string, []*mcp.ClientSession) {
	r, id := benchMAS(b)
	sessions := dialSessions(b, r.url, version)
	if version < "2026-07-28" {
		seen := map[string]bool{}
		for _, cs := range sessions {
			seen[cs.ID()] = true
		}
		if len(seen) != benchClients || seen[""] {
			b.Fatalf("%d distinct sessions for %d clients", len(seen), benchClients)
		}
	}
	return r, id, sessions
}

// runConcurrent has every session make benchCallsPerClient calls of call
// (given the session and the call's index) at once, and returns each
// call's latency and the wall time of the whole.
func runConcurrent(b *testing.B, sessions []*mcp.ClientSession, call func(cs *mcp.ClientSession, i int) error) ([]time.Duration, time.Duration) {
	return runConcurrentN(b, sessions, benchCallsPerClient, call)
}

// runConcurrentN is runConcurrent with n calls per session.
func runConcurrentN(b *testing.B, sessions []*mcp.ClientSession, n int, call func(cs *mcp.ClientSession, i int) error) ([]time.Duration, time.Duration) {
	lat := make([][]time.Duration, len(sessions))
	errs := make(chan error, len(sessions))
	var wg sync.WaitGroup
	start := time.Now()
	for s, cs := range sessions {
		wg.Go(func() {
			lat[s] = make([]time.Duration, 0, n)
			for i := range n {
				t0 := time.Now()
				if err := call(cs, i); err != nil {
					errs <- err
					return
				}
				lat[s] = append(lat[s], time.Since(t0))
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return slices.Concat(lat...), wall
}

// latencyStats reports throughput and latency percentiles.
type latencyStats struct {
	lat  []time.Duration
	wall time.Duration
}

func (s *latencyStats) add(lat []time.Duration, wall time.Duration) {
	s.lat = append(s.lat, lat...)
	s.wall += wall
}

func (s *latencyStats) callsPerSecond() float64 { return float64(len(s.lat)) / s.wall.Seconds() }

// percentile is the q-quantile of the latencies in ms (s.lat sorted).
func (s *latencyStats) percentile(q float64) float64 {
	return float64(s.lat[min(len(s.lat)-1, int(q*float64(len(s.lat))))].Microseconds()) / 1000
}

// allocStats counts the process's heap allocations over measured phases:
// per call, they are the server's and the client's together (the
// side-by-side benchmark subtracts the client's, measured against the
// out-of-process reference server).
type allocStats struct {
	mallocs, bytes uint64
	calls          int
}

// measure runs f (which makes calls calls) and counts what the process
// allocated meanwhile.
func (a *allocStats) measure(calls int, f func()) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	a.mallocs += after.Mallocs - before.Mallocs
	a.bytes += after.TotalAlloc - before.TotalAlloc
	a.calls += calls
}

func (a *allocStats) perCall() (allocs, bytes float64) {
	if a.calls == 0 {
		return 0, 0
	}
	return float64(a.mallocs) / float64(a.calls), float64(a.bytes) / float64(a.calls)
}

func (a *allocStats) report(b *testing.B, prefix string) {
	allocs, bytes := a.perCall()
	b.ReportMetric(allocs, prefix+"allocs/call")
	b.ReportMetric(bytes, prefix+"B/call")
}

func (s *latencyStats) report(b *testing.B, throughput bool) {
	if len(s.lat) == 0 {
		return
	}
	slices.Sort(s.lat)
	if throughput {
		b.ReportMetric(s.callsPerSecond(), "calls/s")
	}
	b.ReportMetric(s.percentile(0.50), "p50-ms")
	b.ReportMetric(s.percentile(0.99), "p99-ms")
	b.ReportMetric(float64(s.lat[len(s.lat)-1].Microseconds())/1000, "max-ms")
}

// benchVersions are the protocol versions the read benchmarks run at:
// 2025-11-25 (the newest before 2026-07-28, served by the stateful handler
// over SSE responses) and 2026-07-28 (go-sdk's client default and newest,
// served statelessly with JSON responses and the standard Mcp-* headers).
var benchVersions = []string{"2025-11-25", "2026-07-28"}

// BenchmarkAskInfoHTTP: 50 sessions each calling ask_info (all_agents)
// 40 times, concurrently, per iteration. allocs/call and B/call are the
// whole process's (server and clients) per call.
func BenchmarkAskInfoHTTP(b *testing.B) {
	for _, version := range benchVersions {
		b.Run("proto="+version, func(b *testing.B) {
			_, _, sessions := benchRig(b, version)
			var stats latencyStats
			var allocs allocStats
			for b.Loop() {
				allocs.measure(len(sessions)*benchCallsPerClient, func() {
					stats.add(runConcurrent(b, sessions, callAskInfo))
				})
			}
			stats.report(b, true)
			allocs.report(b, "")
		})
	}
}

// askInfoArgs are the arguments of the benchmarks' ask_info calls.
var askInfoArgs = map[string]any{"type": "all_agents"}

func callAskInfo(cs *mcp.ClientSession, _ int) error {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_info", Arguments: askInfoArgs})
	if err == nil && (res.IsError || res.StructuredContent == nil) {
		err = fmt.Errorf("ask_info: %s", rigText(res))
	}
	return err
}

// BenchmarkReadResourceHTTP: 50 sessions each reading 40 resources,
// alternately mas://agents and the finished task's resource, concurrently,
// per iteration.
func BenchmarkReadResourceHTTP(b *testing.B) {
	for _, version := range benchVersions {
		b.Run("proto="+version, func(b *testing.B) {
			_, task, sessions := benchRig(b, version)
			uris := []string{"mas://agents", "mas://tasks/" + task}
			var stats latencyStats
			var allocs allocStats
			for b.Loop() {
				allocs.measure(len(sessions)*benchCallsPerClient, func() {
					stats.add(runConcurrent(b, sessions, func(cs *mcp.ClientSession, i int) error {
						res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uris[i%2]})
						if err == nil && (len(res.Contents) != 1 || len(res.Contents[0].Text) < 100) {
							err = fmt.Errorf("read %s: %d contents", uris[i%2], len(res.Contents))
						}
						return err
					}))
				})
			}
			stats.report(b, true)
			allocs.report(b, "")
		})
	}
}

// BenchmarkAskInfoVsReference measures, side by side in one run, 50
// concurrent go-sdk client sessions calling
//   - askinfo: mas-mcp's ask_info (all_agents), as in BenchmarkAskInfoHTTP;
//   - everything: the reference TypeScript server, server-everything's echo
//     (streamable HTTP, its own process on the pinned Node 22; it speaks up
//     to 2025-11-25, so a 2026-07-28 client falls back to that);
//   - minimal: a go-sdk server with one echo tool (mcp.AddTool, an inferred
//     schema), routed by protocol version as mas-mcp routes (stateless
//     with JSON responses from 2026-07-28, stateful before).
//
// Each iteration runs the three in turn (the first one rotating), each
// session making benchCallsPerClient calls. Reported: calls/s, p50 and p99
// of each; the ratios askinfo/everything and askinfo/minimal (calls/s);
// cpu-ms/call, the CPU time of this process (clients and Go servers) and
// of server-everything's per call, which depends less on the machine's
// other load than calls/s do; and the allocations per call of each Go
// server (this process's, less the clients' as measured against
// server-everything: approximate, as a client decoding ask_info's larger
// answer allocates a little more than one decoding an echo). The machine
// may be loaded by other work: judge the ratios, which share it.
func BenchmarkAskInfoVsReference(b *testing.B) {
	everything, node := startEverything(b)
	r, _ := benchMAS(b)
	minimal := httptest.NewServer(minimalHandler())
	b.Cleanup(minimal.Close)
	for _, version := range benchVersions {
		b.Run("proto="+version, func(b *testing.B) {
			targets := []*refTarget{
				{name: "askinfo", url: r.url, call: callAskInfo},
				{name: "everything", url: everything.String(), call: callEcho("Echo: ")},
				{name: "minimal", url: minimal.URL, call: callEcho("echo: ")},
			}
			for _, t := range targets {
				t.sessions = dialSessions(b, t.url, version)
				b.Logf("%s: protocol %s", t.name, t.sessions[0].InitializeResult().ProtocolVersion)
				// Warm up (connections, Node's JIT) outside the timing.
				runConcurrentN(b, t.sessions, 5, t.call)
			}
			round := 0
			for b.Loop() {
				for k := range targets {
					t := targets[(round+k)%len(targets)]
					cpu0 := cpuTime(b, "self") + cpuTime(b, node)
					t.allocs.measure(len(t.sessions)*benchCallsPerClient, func() {
						t.stats.add(runConcurrent(b, t.sessions, t.call))
					})
					t.cpu += cpuTime(b, "self") + cpuTime(b, node) - cpu0
				}
				round++
			}
			_, clientB := targets[1].allocs.perCall()
			clientAllocs, _ := targets[1].allocs.perCall()
			for _, t := range targets {
				slices.Sort(t.stats.lat)
				b.ReportMetric(t.stats.callsPerSecond(), t.name+"-calls/s")
				b.ReportMetric(t.stats.percentile(0.50), t.name+"-p50-ms")
				b.ReportMetric(t.stats.percentile(0.99), t.name+"-p99-ms")
				b.ReportMetric(float64(t.cpu.Microseconds())/1000/float64(len(t.stats.lat)), t.name+"-cpu-ms/call")
				if t.name != "everything" {
					allocs, bytes := t.allocs.perCall()
					b.ReportMetric(allocs-clientAllocs, t.name+"-server-allocs/call")
					b.ReportMetric(bytes-clientB, t.name+"-server-B/call")
				}
			}
			b.ReportMetric(targets[0].stats.callsPerSecond()/targets[1].stats.callsPerSecond(), "askinfo/everything")
			b.ReportMetric(targets[0].stats.callsPerSecond()/targets[2].stats.callsPerSecond(), "askinfo/minimal")
		})
	}
}

// refTarget is one server of BenchmarkAskInfoVsReference.
type refTarget struct {
	name     string
	url      string
	call     func(*mcp.ClientSession, int) error
	sessions []*mcp.ClientSession
	stats    latencyStats
	allocs   allocStats
	cpu      time.Duration // of this process and server-everything's
}

// callEcho calls a server's echo tool, whose answer is prefix and the
// message.
func callEcho(prefix string) func(*mcp.ClientSession, int) error {
	args := map[string]any{"message": "hello"}
	return func(cs *mcp.ClientSession, _ int) error {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: args})
		if err == nil && (res.IsError || rigText(res) != prefix+"hello") {
			err = fmt.Errorf("echo: %q", rigText(res))
		}
		return err
	}
}

// dialSessions connects benchClients go-sdk sessions to url at version,
// over one connection pool; they are closed at b's cleanup.
func dialSessions(b *testing.B, url, version string) []*mcp.ClientSession {
	transport := &http.Transport{MaxIdleConns: 4 * benchClients, MaxIdleConnsPerHost: 4 * benchClients}
	b.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport}
	sessions := make([]*mcp.ClientSession, benchClients)
	for i := range sessions {
		c := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		cancel()
		if err != nil {
			b.Fatalf("connect %s (protocol %s): %v", url, version, err)
		}
		b.Cleanup(func() { _ = cs.Close() })
		sessions[i] = cs
	}
	return sessions
}

// minimalHandler serves a go-sdk server with one tool, echo, as the SDK's
// documentation writes one, routed by protocol version as mas-mcp's
// Handler routes.
func minimalHandler() http.Handler {
	type echoIn struct {
		Message string `json:"message" jsonschema:"the message to echo"`
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "minimal", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echoes back the input string"},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Message}}}, nil, nil
		})
	get := func(*http.Request) *mcp.Server { return srv }
	stateful := mcp.NewStreamableHTTPHandler(get, nil)
	stateless := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Protocol-Version") >= "2026-07-28" {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	})
}

// cpuTime is the CPU time (user and system) a process has used so far, from
// /proc/<pid>/stat (pid "self": this process).
func cpuTime(b *testing.B, pid string) time.Duration {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command (in parentheses, which may hold
	// spaces): state is the 3rd field of the line, utime and stime the
	// 14th and 15th, in clock ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%s/stat: %q", pid, stat)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// everythingBin is server-everything as downstream/testdata/servers
// installs it (`make deps`).
const everythingBin = "../downstream/testdata/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

// startEverything runs server-everything over streamable HTTP on the
// pinned Node 22, on a free port, and returns its MCP endpoint; the process
// (group) is killed at b's cleanup. The benchmark is skipped when Node 22
// or the package is not installed.
func startEverything(b *testing.B) (*url.URL, string) {
	const hint = "run `make deps` (it installs Node 22 in server/testdata/node22 and server-everything in downstream/testdata/servers)"
	node, err := filepath.Abs(node22)
	if err == nil {
		_, err = os.Stat(node)
	}
	if err != nil {
		b.Skipf("Node 22 is not installed (%v): %s", err, hint)
	}
	script, err := filepath.Abs(everythingBin)
	if err == nil {
		_, err = os.Stat(script)
	}
	if err != nil {
		b.Skipf("server-everything is not installed (%v): %s", err, hint)
	}
	var lastErr error
	for range 3 { // a free port can be taken between picking and listening
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(node, script, "streamableHttp")
		cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		stderr, err := cmd.StderrPipe() // its stdout (a line per request) goes to /dev/null
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		stop := func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
		// It says on stderr when it listens (or that it cannot); the rest
		// of its stderr is drained until it exits.
		ready := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			var lines []string
			for sc.Scan() {
				switch line := sc.Text(); {
				case strings.Contains(line, "listening on port"):
					ready <- nil
				case len(lines) < 20:
					lines = append(lines, line)
				}
			}
			ready <- fmt.Errorf("exited before listening:\n%s", strings.Join(lines, "\n"))
		}()
		if err := <-ready; err != nil {
			stop()
			lastErr = fmt.Errorf("server-everything on port %d: %w", port, err)
			continue
		}
		b.Cleanup(stop)
		return &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port), Path: "/mcp"}, strconv.Itoa(cmd.Process.Pid)
	}
	b.Fatal(lastErr)
	return nil, ""
}

// BenchmarkResourceUpdatedLatency measures, per change, the time from an
// engine change of a subscribed resource to the subscriber's receipt of
// notifications/resources/updated over streamable HTTP (the session's
// standalone stream). The change is the cheapest one that touches the
// resource and starts no LLM work: the operator messages a second operator
// in the base task, which changes mas://tasks/{base}/conversation.
//
// The server coalesces notifications of one URI to one per Coalesce; a
// change inside the window is held back until the window ends, which
// would measure the window, not the relay. So the window is set to 10 ms
// and changes are spaced 20 ms apart (and each waits for its notification).
func BenchmarkResourceUpdatedLatency(b *testing.B) {
	const (
		window  = 10 * time.Millisecond
		spacing = 2 * window
		changes = 100 // per iteration
	)
	r := newHTTPRig(b, rigOptions{Coalesce: window})
	sys := r.stack.Sys
	peer, err := sys.AddOperator("bench-peer")
	if err != nil {
		b.Fatal(err)
	}
	uri := "mas://tasks/" + sys.BaseTaskID() + "/conversation"
	type receipt struct {
		uri string
		at  time.Time
	}
	got := make(chan receipt, 1024)
	cs := r.connect("2025-11-25", nil, &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, q *mcp.ResourceUpdatedNotificationRequest) {
		got <- receipt{q.Params.URI, time.Now()}
	}})
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}); err != nil {
		b.Fatal(err)
	}
	var stats latencyStats
	var last time.Time
	for b.Loop() {
		for i := range changes {
			time.Sleep(time.Until(last.Add(spacing)))
			last = time.Now()
			if _, err := sys.HumanSend(sys.OperatorID(), engine.HumanMessage{TaskID: sys.BaseTaskID(), Receiver: []string{peer}, Content: fmt.Sprintf("change %d", i)}); err != nil {
				b.Fatal(err)
			}
			timeout := time.After(5 * time.Second)
			for waiting := true; waiting; {
				select {
				case rc := <-got:
					if rc.uri == uri && !rc.at.Before(last) {
						stats.lat = append(stats.lat, rc.at.Sub(last))
						waiting = false
					}
				case <-timeout:
					b.Fatalf("change %d: no resources/updated for %s within 5 s", i, uri)
				}
			}
		}
	}
	stats.report(b, false)
}
