package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// eventLatencyChanges is how many changes one iteration makes (make bench
// runs one iteration: -benchtime=1x).
const eventLatencyChanges = 300

// BenchmarkMonitorEventLatency measures how long a change takes to reach a
// page: from an operator's message to another operator (a change no LLM
// is involved in) to its message_delivered event read off /api/events by a
// Go client over loopback HTTP. Changes are made one at a time, each once
// the previous one's event arrived. (The Python original pushes the
// monitor's states every 2 s.)
//
// It reports two latencies: change-* from the call that makes the change
// (the engine's own work included: it stores the changed states) and
// publish-* from the event's publication (its time stamp) to its arrival,
// which is the monitor's part alone.
func BenchmarkMonitorEventLatency(b *testing.B) {
	st := teststack.New(b, teststack.Options{})
	sys := st.Sys
	peer, err := sys.AddOperator("peer")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Config{System: sys, Logger: st.Log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(ts.Close)
	tr := &http.Transport{}
	b.Cleanup(tr.CloseIdleConnections)
	stream := openEvents(b, &http.Client{Transport: tr}, ts.URL, "")
	if ev := <-stream.events; ev.Event != "hello" {
		b.Fatalf("first event %+v, want hello", ev)
	}

	var change, publish []time.Duration
	b.ResetTimer()
	for i := range b.N {
		for j := range eventLatencyChanges {
			start := time.Now()
			msgs, err := sys.HumanSend(sys.OperatorID(), engine.HumanMessage{
				TaskID: sys.BaseTaskID(), Receiver: []string{peer}, Content: fmt.Sprintf("change %d.%d", i, j),
			})
			if err != nil {
				b.Fatal(err)
			}
			id := msgs[0].MessageID
			for arrived := false; !arrived; {
				select {
				case ev, ok := <-stream.events:
					if !ok {
						b.Fatal("/api/events ended")
					}
					if ev.Event != string(engine.EventMessageDelivered) {
						continue
					}
					var e engine.Event
					if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
						b.Fatal(err)
					}
					if arrived = e.MessageID == id; arrived {
						now := time.Now()
						change = append(change, now.Sub(start))
						publish = append(publish, now.Sub(e.Time))
					}
				case <-time.After(10 * time.Second):
					b.Fatalf("the event of message %s did not arrive in 10s", id)
				}
			}
		}
	}
	b.StopTimer()
	report := func(name string, lat []time.Duration) {
		slices.Sort(lat)
		q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
		b.ReportMetric(q(0.50), name+"-p50-µs")
		b.ReportMetric(q(0.99), name+"-p99-µs")
	}
	report("change", change)
	report("publish", publish)
	b.ReportMetric(0, "ns/op") // the figures above are the result
}
