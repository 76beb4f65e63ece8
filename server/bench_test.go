package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
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

// benchRig is an HTTP rig whose MAS has run the scripted task to its end
// (so the agents and the task resource have realistic sizes), and
// benchClients sessions over streamable HTTP, each its own (2025-11-25 is
// served by the stateful handler).
func benchRig(b *testing.B) (*httpRig, string, []*mcp.ClientSession) {
	// All the clients act as the one default operator: room for them all.
	r := newHTTPRig(b, rigOptions{Configure: func(_ *teststack.Stack, c *server.Config) {
		c.Limits.SessionsPerOperator = 2 * benchClients
	}})
	id, err := r.stack.Sys.AddTask(r.stack.Sys.OperatorID(), engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
	if err != nil {
		b.Fatal(err)
	}
	r.stack.WaitFor("the task to finish", func() bool { return r.stack.Task(id).ExecutionState == engine.StateFinished })

	// One pool for every client (closed after them: cleanups run last
	// registered first), large enough to keep a connection per session.
	transport := &http.Transport{MaxIdleConns: 4 * benchClients, MaxIdleConnsPerHost: 4 * benchClients}
	b.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport}
	sessions := make([]*mcp.ClientSession, benchClients)
	for i := range sessions {
		sessions[i] = r.connect("2025-11-25", hc, nil)
	}
	seen := map[string]bool{}
	for _, cs := range sessions {
		seen[cs.ID()] = true
	}
	if len(seen) != benchClients || seen[""] {
		b.Fatalf("%d distinct sessions for %d clients", len(seen), benchClients)
	}
	return r, id, sessions
}

// runConcurrent has every session make benchCallsPerClient calls of call
// (given the session and the call's index) at once, and returns each
// call's latency and the wall time of the whole.
func runConcurrent(b *testing.B, sessions []*mcp.ClientSession, call func(cs *mcp.ClientSession, i int) error) ([]time.Duration, time.Duration) {
	lat := make([][]time.Duration, len(sessions))
	errs := make(chan error, len(sessions))
	var wg sync.WaitGroup
	start := time.Now()
	for s, cs := range sessions {
		wg.Go(func() {
			for i := range benchCallsPerClient {
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

func (s *latencyStats) report(b *testing.B, throughput bool) {
	if len(s.lat) == 0 {
		return
	}
	slices.Sort(s.lat)
	ms := func(q float64) float64 {
		return float64(s.lat[min(len(s.lat)-1, int(q*float64(len(s.lat))))].Microseconds()) / 1000
	}
	if throughput {
		b.ReportMetric(float64(len(s.lat))/s.wall.Seconds(), "calls/s")
	}
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(float64(s.lat[len(s.lat)-1].Microseconds())/1000, "max-ms")
}

// BenchmarkAskInfoHTTP: 50 sessions each calling ask_info (all_agents)
// 40 times, concurrently, per iteration.
func BenchmarkAskInfoHTTP(b *testing.B) {
	_, _, sessions := benchRig(b)
	args := map[string]any{"type": "all_agents"}
	var stats latencyStats
	for b.Loop() {
		stats.add(runConcurrent(b, sessions, func(cs *mcp.ClientSession, _ int) error {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ask_info", Arguments: args})
			if err == nil && res.IsError {
				err = fmt.Errorf("ask_info: %s", rigText(res))
			}
			return err
		}))
	}
	stats.report(b, true)
}

// BenchmarkReadResourceHTTP: 50 sessions each reading 40 resources,
// alternately mas://agents and the finished task's resource, concurrently,
// per iteration.
func BenchmarkReadResourceHTTP(b *testing.B) {
	_, task, sessions := benchRig(b)
	uris := []string{"mas://agents", "mas://tasks/" + task}
	var stats latencyStats
	for b.Loop() {
		stats.add(runConcurrent(b, sessions, func(cs *mcp.ClientSession, i int) error {
			res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uris[i%2]})
			if err == nil && (len(res.Contents) != 1 || len(res.Contents[0].Text) < 100) {
				err = fmt.Errorf("read %s: %d contents", uris[i%2], len(res.Contents))
			}
			return err
		}))
	}
	stats.report(b, true)
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
