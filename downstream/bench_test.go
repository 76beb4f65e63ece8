package downstream_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// The benchmarks give every iteration a fixed amount of work (make bench
// runs them once, -benchtime=1x) and report latencies as custom metrics.

const (
	benchCalls  = 300 // calls per path per iteration (overhead benchmark)
	benchAgents = 10  // concurrent callers (concurrency benchmark)
	benchEach   = 60  // calls per caller per iteration
)

// benchExecutor is a tool executor with its pool, reaching server-everything
// over stdio, and the tool step input of one echo call (what
// instruction_generation would have written).
func benchExecutor(b *testing.B) (*downstream.Executor, *engine.ExecInput) {
	b.Helper()
	set, err := prompts.Load("en", "")
	if err != nil {
		b.Fatal(err)
	}
	pool := downstream.NewPool(&downstream.Config{Servers: map[string]downstream.ServerConfig{"everything": everythingStdio(b)}}, nil)
	st := teststack.New(b, teststack.Options{Tools: pool})
	b.Cleanup(func() { _ = pool.Close() })
	e, err := downstream.NewExecutor(downstream.ExecutorConfig{Pool: pool, Texts: set})
	if err != nil {
		b.Fatal(err)
	}
	in := &engine.ExecInput{
		Operator: st.Sys,
		Agent:    engine.AgentState{AgentID: "bench-agent", Name: "bench"},
		Step: engine.StepState{TaskID: "bench-task", StageID: "bench-stage", StepID: "bench-step", Type: engine.StepTool,
			Executor: "everything", ExecutionState: engine.StateRunning,
			InstructionContent: &engine.ToolCall{ToolName: "echo", Arguments: map[string]any{"message": "ping"}}},
	}
	return e, in
}

// execOnce runs the tool step once and checks its result.
func execOnce(e *downstream.Executor, in *engine.ExecInput) (time.Duration, error) {
	start := time.Now()
	out := e.Execute(context.Background(), in)
	d := time.Since(start)
	if out.Err != nil {
		return d, fmt.Errorf("execute: %w", out.Err)
	}
	if got := jsonString(out.Result["mcp_server_result"]); !strings.Contains(got, "Echo: ping") {
		return d, fmt.Errorf("execute: result %s", got)
	}
	return d, nil
}

func mustExec(b *testing.B, e *downstream.Executor, in *engine.ExecInput) time.Duration {
	d, err := execOnce(e, in)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// directSession is a plain go-sdk client session to its own
// server-everything over stdio.
func directSession(b *testing.B) *mcp.ClientSession {
	b.Helper()
	cmd := exec.Command(serverBin(b, "mcp-server-everything"), "stdio")
	cmd.Env = os.Environ()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "dev"}, nil)
	s, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func directOnce(b *testing.B, s *mcp.ClientSession) time.Duration {
	start := time.Now()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "ping"}})
	d := time.Since(start)
	if err != nil || res.IsError {
		b.Fatalf("CallTool: %v %v", err, res)
	}
	return d
}

// BenchmarkToolCallOverhead compares the executor's path for one tool call
// (Execute on a prepared tool step: instruction parsing, cached
// capabilities, argument validation, risk check, the call, the bounded
// result) with a direct CallTool of the go-sdk to the same server. Calls
// alternate between the two so both see the same machine. Target: the
// executor's p50 at most 1.2× the direct one.
func BenchmarkToolCallOverhead(b *testing.B) {
	e, in := benchExecutor(b)
	direct := directSession(b)
	for range 30 { // connect, cache the capabilities, warm both servers up
		mustExec(b, e, in)
		directOnce(b, direct)
	}
	var viaExec, viaSDK []time.Duration
	b.ResetTimer()
	for range b.N {
		for range benchCalls {
			viaExec = append(viaExec, mustExec(b, e, in))
			viaSDK = append(viaSDK, directOnce(b, direct))
		}
	}
	b.StopTimer()
	pe, pd := percentile(viaExec, 50), percentile(viaSDK, 50)
	b.ReportMetric(us(pe), "exec-p50-µs")
	b.ReportMetric(us(pd), "direct-p50-µs")
	b.ReportMetric(float64(pe)/float64(pd), "p50-ratio")
	b.ReportMetric(us(percentile(viaExec, 99)), "exec-p99-µs")
	b.ReportMetric(us(percentile(viaSDK, 99)), "direct-p99-µs")
}

// BenchmarkToolCallConcurrent has benchAgents callers (agents) make tool
// calls at once through one Executor and its Pool to one server.
func BenchmarkToolCallConcurrent(b *testing.B) {
	e, in := benchExecutor(b)
	for range 30 {
		mustExec(b, e, in)
	}
	var (
		mu   sync.Mutex
		all  []time.Duration
		busy time.Duration
	)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		var wg sync.WaitGroup
		for range benchAgents {
			wg.Go(func() {
				mine := make([]time.Duration, 0, benchEach)
				for range benchEach {
					d, err := execOnce(e, in)
					if err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, d)
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		busy += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(len(all))/busy.Seconds(), "calls/s")
	b.ReportMetric(us(percentile(all, 50)), "p50-µs")
	b.ReportMetric(us(percentile(all, 99)), "p99-µs")
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
