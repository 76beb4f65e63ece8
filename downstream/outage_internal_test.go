package downstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
)

// Outages pause, not destroy: a tool call that cannot reach its server
// (nothing listens, a gateway answers 502/503/504, a stdio server's
// process cannot start or exits at once) waits it out inside the step,
// within the server's outage window, telling the step's ServerOutage; a
// call that was sent and broke is still not made again. These tests run
// the pool's waits on a fake clock (fakeClock): the attempts to reach the
// server are real.

// flakyServer is a remote MCP server (streamable HTTP) at a fixed address
// that can be down and up again, each time as a new process as it were
// (newIncarnation: no session of before is known). Down, nothing listens
// there (connecting is refused) — or, with a gateway status, a gateway
// listening there answers every request with it, as a proxy whose
// backend is gone does. Besides echo and append, it has "hang": a call of
// it signals entered and then waits for the request to end.
type flakyServer struct {
	t       *testing.T
	addr    string
	url     string
	gateway int // the gateway's status while down; 0: no gateway

	mu      sync.Mutex
	hs      *http.Server  // serving the current incarnation, or the gateway
	current *incarnation  // nil while down
	gone    chan struct{} // closed when the current incarnation stops
	entered chan struct{}

	gatewayRequests atomic.Int32 // requests the gateway answered itself
}

// newFlaky returns a server that is down; gateway is the status a gateway
// answers with meanwhile (0: none, connecting is refused).
func newFlaky(t *testing.T, gateway int) *flakyServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyServer{t: t, addr: ln.Addr().String(), gateway: gateway, entered: make(chan struct{}, 8)}
	f.url = "http://" + f.addr + "/mcp"
	if gateway == 0 {
		_ = ln.Close()
	} else {
		f.hs = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			inc := f.current
			f.mu.Unlock()
			if inc == nil {
				f.gatewayRequests.Add(1)
				http.Error(w, "backend unavailable", f.gateway)
				return
			}
			inc.handler.ServeHTTP(w, r)
		})}
		hs := f.hs
		go func() { _ = hs.Serve(ln) }()
	}
	t.Cleanup(f.close)
	return f
}

// close stops the server and its gateway for good.
func (f *flakyServer) close() {
	f.shut(true)
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

// up starts a new incarnation of the server.
func (f *flakyServer) up() *incarnation {
	f.t.Helper()
	inc := newIncarnation(f.t)
	gone := make(chan struct{})
	mcp.AddTool(inc.srv, &mcp.Tool{Name: "hang", Description: "Waits until the server stops."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
			inc.calls.Add(1)
			f.entered <- struct{}{}
			select {
			case <-ctx.Done():
			case <-gone:
			}
			return nil, nil, errors.New("stopped")
		})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stop()
	f.current, f.gone = inc, gone
	if f.gateway != 0 {
		return inc
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		f.t.Fatalf("listening again at %s: %v", f.addr, err)
	}
	hs := &http.Server{Handler: inc.handler}
	f.hs = hs
	go func() { _ = hs.Serve(ln) }()
	return inc
}

// stop ends the calls of "hang" of the current incarnation. f.mu is held.
func (f *flakyServer) stop() {
	if f.gone != nil {
		close(f.gone)
		f.gone = nil
	}
}

// down stops the server: its connections drop, and (without a gateway)
// nothing listens at its address any more.
func (f *flakyServer) down() { f.shut(false) }

// shut stops the current incarnation and closes what serves it: the
// gateway too when gatewayToo, else only a server listening without one.
func (f *flakyServer) shut(gatewayToo bool) {
	f.mu.Lock()
	f.current = nil
	var hs *http.Server
	if gatewayToo || f.gateway == 0 {
		hs, f.hs = f.hs, nil
	}
	f.mu.Unlock()
	if hs != nil {
		_ = hs.Close()
	}
	f.mu.Lock()
	f.stop()
	f.mu.Unlock()
}

// fakeClock is the pool's clock in these tests: a sleep moves it on at
// once, then runs onSleep with the number of sleeps so far (the test's
// move: bring the server back, say).
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waits   []time.Duration
	onSleep func(n int)
}

func useFakeClock(p *Pool, onSleep func(n int)) *fakeClock {
	c := &fakeClock{now: time.Date(2026, 7, 28, 9, 0, 0, 0, time.UTC), onSleep: onSleep}
	p.now = func() time.Time {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.now
	}
	p.sleep = func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.mu.Lock()
		c.now = c.now.Add(d)
		c.waits = append(c.waits, d)
		n, f := len(c.waits), c.onSleep
		c.mu.Unlock()
		if f != nil {
			f(n)
		}
		return ctx.Err()
	}
	return c
}

func (c *fakeClock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// outageLog is a step's ServerOutage: it records what it is told.
type outageLog struct {
	mu      sync.Mutex
	reasons []string
	ends    []llm.OutageEnd
	began   chan struct{} // closed at the first OutageBegan
}

func newOutageLog() *outageLog { return &outageLog{began: make(chan struct{})} }

func (o *outageLog) OutageBegan(_ time.Time, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.reasons) == 0 {
		close(o.began)
	}
	o.reasons = append(o.reasons, reason)
}

func (o *outageLog) OutageEnded(end llm.OutageEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ends = append(o.ends, end)
}

func (o *outageLog) told() ([]string, []llm.OutageEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.reasons...), append([]llm.OutageEnd(nil), o.ends...)
}

// callWith makes one tool step's call of server, its outage told to obs.
func callWith(ctx context.Context, e *Executor, obs llm.OutageObserver, server, tool string) *engine.Output {
	in := rigInput(server, &engine.ToolCall{ToolName: tool, Arguments: map[string]any{}})
	in.ServerOutage = obs
	return e.Execute(ctx, in)
}

// checkBackoff checks that the waits double from a second (each drawn
// from the upper half of its step), capped at 30 s.
func checkBackoff(t *testing.T, waits []time.Duration) {
	t.Helper()
	for i, d := range waits[:len(waits)-1] { // the last one may be cut by the window
		step := min(time.Second<<min(i, 10), 30*time.Second)
		if d < step/2 || d > step {
			t.Errorf("wait %d is %s; want between %s and %s (waits %v)", i+1, d, step/2, step, waits)
		}
	}
}

// TestUnreachableServerIsWaitedOut: nothing listens at the server's
// address when a step calls it (a tool that may change something). The
// call waits with backoff, its step's ServerOutage told once with the
// reason, and is made once the server is back: the step succeeds.
func TestUnreachableServerIsWaitedOut(t *testing.T) {
	f := newFlaky(t, 0)
	e, pool := rigExecutor(t, map[string]ServerConfig{"srv": {URL: f.url, AutoApprove: []string{"append"}}}, nil, nil)
	var inc atomic.Pointer[incarnation]
	clock := useFakeClock(pool, func(n int) {
		if n == 3 {
			inc.Store(f.up())
		}
	})
	obs := newOutageLog()
	if out := callWith(context.Background(), e, obs, "srv", "append"); out.Err != nil {
		t.Fatalf("the call: %v; want it made once the server is back", out.Err)
	}
	waits := clock.slept()
	if len(waits) != 3 {
		t.Errorf("the call waited %d times (%v); want 3, the server being back after the third", len(waits), waits)
	}
	checkBackoff(t, append(waits, 0))
	if n := inc.Load().calls.Load(); n != 1 {
		t.Errorf("the server got %d calls, want 1", n)
	}
	reasons, ends := obs.told()
	if len(reasons) != 1 || !strings.Contains(reasons[0], `mcp server "srv"`) || !strings.Contains(reasons[0], "connection refused") {
		t.Errorf("the step was told the outage began %d times, reasons %q; want once, naming the server and the cause", len(reasons), reasons)
	}
	if len(ends) != 1 || ends[0] != llm.OutageRecovered {
		t.Errorf("the step was told the outage ended %v; want once, recovered", ends)
	}
}

// TestServerDownBetweenCallsIsWaitedOut: the server stops between two
// calls (its connections drop, nothing listens any more): the second call,
// which may change something, was not sent, so it waits for the server
// and is made on a new session once it is back.
func TestServerDownBetweenCallsIsWaitedOut(t *testing.T) {
	f := newFlaky(t, 0)
	first := f.up()
	e, pool := rigExecutor(t, map[string]ServerConfig{"srv": {URL: f.url, AutoApprove: []string{"append"}}}, nil, nil)
	var second atomic.Pointer[incarnation]
	clock := useFakeClock(pool, func(n int) {
		if n == 2 {
			second.Store(f.up())
		}
	})
	if out := callWith(context.Background(), e, nil, "srv", "append"); out.Err != nil {
		t.Fatalf("the first call: %v", out.Err)
	}
	f.down()
	// As the client's transport would notice soon: a connection the
	// server closed is not used again (a call sent on it may have reached
	// the server before it stopped).
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	obs := newOutageLog()
	if out := callWith(context.Background(), e, obs, "srv", "append"); out.Err != nil {
		t.Fatalf("the call after the server stopped: %v; want it made once the server is back", out.Err)
	}
	if n := len(clock.slept()); n != 2 {
		t.Errorf("the call waited %d times; want 2", n)
	}
	if a, b := first.calls.Load(), second.Load().calls.Load(); a != 1 || b != 1 {
		t.Errorf("the servers got %d and %d calls; want one each", a, b)
	}
	if _, ends := obs.told(); len(ends) != 1 || ends[0] != llm.OutageRecovered {
		t.Errorf("the step was told the outage ended %v; want once, recovered", ends)
	}
}

// TestGatewayUnavailableIsWaitedOut: a gateway in front of the server
// answers 503 while its backend is down; the call waits until the server
// answers. A gateway's 401 is an answer refusing the connection: the call
// fails at once.
func TestGatewayUnavailableIsWaitedOut(t *testing.T) {
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			f := newFlaky(t, status)
			e, pool := rigExecutor(t, map[string]ServerConfig{"srv": {URL: f.url}}, nil, nil)
			useFakeClock(pool, func(n int) {
				if n == 2 {
					f.up()
				}
			})
			obs := newOutageLog()
			if out := callWith(context.Background(), e, obs, "srv", "echo"); out.Err != nil {
				t.Fatalf("the call: %v; want it made once the gateway's backend is back", out.Err)
			}
			if reasons, ends := obs.told(); len(reasons) != 1 || len(ends) != 1 || ends[0] != llm.OutageRecovered {
				t.Errorf("the step was told %q, then %v; want one outage, recovered", reasons, ends)
			}
		})
	}
	t.Run("Unauthorized", func(t *testing.T) {
		f := newFlaky(t, http.StatusUnauthorized)
		e, pool := rigExecutor(t, map[string]ServerConfig{"srv": {URL: f.url}}, nil, nil)
		clock := useFakeClock(pool, nil)
		obs := newOutageLog()
		out := callWith(context.Background(), e, obs, "srv", "echo")
		if out.Err == nil || !strings.Contains(out.Err.Error(), "Unauthorized") {
			t.Errorf("the call refused with 401: %v; want it failed with the refusal", out.Err)
		}
		if waits := clock.slept(); len(waits) > 0 {
			t.Errorf("the call waited %v for a server that answered 401", waits)
		}
		if reasons, _ := obs.told(); len(reasons) > 0 {
			t.Errorf("the step was told of an outage: %q", reasons)
		}
	})
}

// TestUnreachableServerGivesUp: a server that does not come back within
// its outage window (set, or the default 10 minutes): the call waits with
// backoff capped at 30 s, exactly the window in all, and then fails
// naming the server, how long it waited and the knob; its ServerOutage is
// told it gave up. A stdio server whose command cannot start is waited
// for the same way.
func TestUnreachableServerGivesUp(t *testing.T) {
	down := newFlaky(t, 0)
	for _, tc := range []struct {
		name   string
		sc     ServerConfig
		window time.Duration
		cause  string
	}{
		{name: "remote, its window", sc: ServerConfig{URL: down.url, OutageWindow: Duration(time.Minute)}, window: time.Minute, cause: "connection refused"},
		{name: "remote, the default window", sc: ServerConfig{URL: down.url}, window: DefaultOutageWindow, cause: "connection refused"},
		{name: "stdio, no such command", sc: ServerConfig{Command: "/nonexistent/mcp-server", OutageWindow: Duration(5 * time.Second)},
			window: 5 * time.Second, cause: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, pool := rigExecutor(t, map[string]ServerConfig{"srv": tc.sc}, nil, nil)
			clock := useFakeClock(pool, nil)
			obs := newOutageLog()
			out := callWith(context.Background(), e, obs, "srv", "echo")
			waited := tc.window.String()
			for _, want := range []string{`mcp server "srv" could not be reached for ` + waited, `"outageWindow"`, tc.cause} {
				if out.Err == nil || !strings.Contains(out.Err.Error(), want) {
					t.Errorf("the call's error: %v; want it to say %q", out.Err, want)
				}
			}
			waits := clock.slept()
			var sum time.Duration
			for _, d := range waits {
				sum += d
				if d > 30*time.Second {
					t.Errorf("a wait of %s: want at most 30s", d)
				}
			}
			if sum != tc.window {
				t.Errorf("the call waited %s in all (%d waits); want its window, %s", sum, len(waits), tc.window)
			}
			checkBackoff(t, waits)
			if reasons, ends := obs.told(); len(reasons) != 1 || len(ends) != 1 || ends[0] != llm.OutageGaveUp {
				t.Errorf("the step was told %q, then %v; want one outage, given up", reasons, ends)
			}
		})
	}
}

// TestNoOutageWaiting: a server whose outageWindow is negative is not
// waited for; nor is one reached without a step's context (SafeToRerun's
// description at a restart, say): the call fails at once, as before.
func TestNoOutageWaiting(t *testing.T) {
	down := newFlaky(t, 0)
	e, pool := rigExecutor(t, map[string]ServerConfig{
		"never": {URL: down.url, OutageWindow: Duration(-1)},
		"srv":   {URL: down.url},
	}, nil, nil)
	clock := useFakeClock(pool, nil)
	obs := newOutageLog()
	if out := callWith(context.Background(), e, obs, "never", "echo"); out.Err == nil || !strings.Contains(out.Err.Error(), "connection refused") {
		t.Errorf("a call of a server with a negative outageWindow: %v; want it failed at once", out.Err)
	}
	if _, err := pool.Describe(context.Background(), "srv"); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a description outside any step: %v; want it failed at once", err)
	}
	if waits := clock.slept(); len(waits) > 0 {
		t.Errorf("the calls waited %v", waits)
	}
	if reasons, _ := obs.told(); len(reasons) > 0 {
		t.Errorf("the step was told of an outage: %q", reasons)
	}
}

// TestOutageWaitEndsWithTheContext: the step's context ends (its task
// cancelled, its agent stopped) while its call waits for the server, on
// the pool's real clock: the call returns at once with the context's
// error, no further attempt is made, and its ServerOutage is told it left.
func TestOutageWaitEndsWithTheContext(t *testing.T) {
	f := newFlaky(t, http.StatusServiceUnavailable)
	e, _ := rigExecutor(t, map[string]ServerConfig{"srv": {URL: f.url, OutageWindow: Duration(time.Hour)}}, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := newOutageLog()
	done := make(chan *engine.Output, 1)
	go func() { done <- callWith(ctx, e, obs, "srv", "echo") }()
	select {
	case <-obs.began:
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not begin waiting for the server")
	}
	attempts := f.gatewayRequests.Load()
	cancel()
	var out *engine.Output
	select {
	case out = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not return after its context ended")
	}
	if !errors.Is(out.Err, context.Canceled) {
		t.Errorf("the call's error: %v; want the context's", out.Err)
	}
	if n := f.gatewayRequests.Load(); n != attempts {
		t.Errorf("the server was tried %d more times after the context ended", n-attempts)
	}
	if _, ends := obs.told(); len(ends) != 1 || ends[0] != llm.OutageLeft {
		t.Errorf("the step was told the outage ended %v; want once, left", ends)
	}
}

// TestCallBrokenMidFlightIsNotRepeated: the server stops during a call
// that may change something. The call may have taken effect: it is not
// made again, and not waited for either, whether the server comes back at
// once or not.
func TestCallBrokenMidFlightIsNotRepeated(t *testing.T) {
	for _, back := range []bool{true, false} {
		name := "the server stays down"
		if back {
			name = "the server comes back at once"
		}
		t.Run(name, func(t *testing.T) {
			f := newFlaky(t, 0)
			first := f.up()
			e, pool := rigExecutor(t, map[string]ServerConfig{"srv": {URL: f.url, AutoApprove: []string{"hang"}}}, nil, nil)
			clock := useFakeClock(pool, nil)
			obs := newOutageLog()
			done := make(chan *engine.Output, 1)
			go func() { done <- callWith(context.Background(), e, obs, "srv", "hang") }()
			select {
			case <-f.entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the call did not reach the server")
			}
			f.down()
			var again *incarnation
			if back {
				again = f.up()
			}
			var out *engine.Output
			select {
			case out = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the call did not return after the server stopped")
			}
			for _, want := range []string{`the connection to mcp server "srv" broke during the call, which may have taken effect; it was not repeated`} {
				if out.Err == nil || !strings.Contains(out.Err.Error(), want) {
					t.Errorf("the call's error: %v; want it to say %q", out.Err, want)
				}
			}
			if !back && (out.Err == nil || !strings.Contains(out.Err.Error(), "reconnecting failed")) {
				t.Errorf("the call's error: %v; want it to say reconnecting failed", out.Err)
			}
			if n := first.calls.Load(); n != 1 {
				t.Errorf("the server got %d calls, want 1", n)
			}
			if again != nil && again.calls.Load() != 0 {
				t.Errorf("the call was made again on the server that came back")
			}
			if waits := clock.slept(); len(waits) > 0 {
				t.Errorf("the call waited %v", waits)
			}
			if reasons, _ := obs.told(); len(reasons) > 0 {
				t.Errorf("the step was told of an outage: %q", reasons)
			}
		})
	}
}

// TestStdioServerThatCannotStartIsWaitedOut: a stdio server's command
// exits at once (its wrapper finds nothing to run yet) until the test
// lets it start the real server: the call waits, and is made then.
func TestStdioServerThatCannotStartIsWaitedOut(t *testing.T) {
	bin, err := filepath.Abs(filepath.Join("testdata", "servers", "node_modules", ".bin", "mcp-server-filesystem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("mcp-server-filesystem is not installed: run `make test` (it runs npm ci in downstream/testdata/servers): %v", err)
	}
	dir := t.TempDir()
	flag := filepath.Join(dir, "may-start")
	sc := ServerConfig{Command: "sh", Args: []string{"-c", `test -e "$1" || exit 3; exec "$2" "$3"`, "wrapper", flag, bin, dir},
		Timeout: Duration(30 * time.Second)}
	e, pool := rigExecutor(t, map[string]ServerConfig{"fs": sc}, nil, nil)
	useFakeClock(pool, func(n int) {
		if n == 2 {
			if err := os.WriteFile(flag, nil, 0o600); err != nil {
				t.Error(err)
			}
		}
	})
	obs := newOutageLog()
	in := rigInput("fs", &engine.ToolCall{ToolName: "list_allowed_directories", Arguments: map[string]any{}})
	in.ServerOutage = obs
	if out := e.Execute(context.Background(), in); out.Err != nil {
		t.Fatalf("the call: %v; want it made once the server starts", out.Err)
	}
	reasons, ends := obs.told()
	if len(reasons) != 1 || !strings.Contains(reasons[0], `mcp server "fs"`) {
		t.Errorf("the step was told the outage began %q; want once, naming the server", reasons)
	}
	if len(ends) != 1 || ends[0] != llm.OutageRecovered {
		t.Errorf("the step was told the outage ended %v; want once, recovered", ends)
	}
}

// TestConnectEndsWithTheContext: a server that takes the connection but
// never answers the handshake (its timeout an hour): the step's context
// ending stops the attempt at once, not after the timeout.
func TestConnectEndsWithTheContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for {
			select {
			case c := <-accepted:
				_ = c.Close()
			default:
				http.DefaultTransport.(*http.Transport).CloseIdleConnections()
				return
			}
		}
	})
	e, _ := rigExecutor(t, map[string]ServerConfig{"srv": {URL: "http://" + ln.Addr().String() + "/mcp", Timeout: Duration(time.Hour)}}, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *engine.Output, 1)
	go func() { done <- callWith(ctx, e, newOutageLog(), "srv", "echo") }()
	select {
	case c := <-accepted:
		accepted <- c // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not connect to the server")
	}
	cancel()
	select {
	case out := <-done:
		if !errors.Is(out.Err, context.Canceled) {
			t.Errorf("the call's error: %v; want the context's", out.Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not return after its context ended")
	}
}
