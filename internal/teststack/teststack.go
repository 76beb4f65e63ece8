// Package teststack builds the whole MAS as cmd/mas-mcp wires it (prompts,
// skills, the OpenAI-compatible client, the engine), against the fake LLM
// server, for the tests of several packages.
package teststack

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/llm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/skills"
)

// SentinelKey is the API key every stack is configured with: it must never
// show up in a state, a message, a resource, a notification, an error or a
// log line.
const SentinelKey = "sk-SENTINEL-do-not-leak-4242"

// Trail records and reads the trail (an *engine.MemoryTrail, or the
// durable one of package store).
type Trail interface {
	engine.Trail
	engine.TrailReader
}

// Stack is a running MAS on the fake LLM.
type Stack struct {
	T     testing.TB
	Sys   *engine.System
	LLM   *fakellm.Server
	Store *engine.MemoryStore
	// watched is Store as the MAS writes to it (WatchAgents).
	watched *watchedStore
	// Trail records what the stack's agents were asked, answered and did;
	// it outlives Restart, like Store.
	Trail Trail
	Sub   *engine.Subscription
	// Logs holds every log line of the stack (debug level).
	Logs *SyncBuffer
	// Log is the logger the stack writes to Logs; give it to layers built
	// on top (the MCP server) so their lines land there too.
	Log *slog.Logger

	// newSystem builds a System on the same LLM, prompts and store.
	newSystem func() *engine.System
	opts      Options
}

// Options tune a Stack; zero values mean the engine's defaults.
type Options struct {
	WaitTimeout time.Duration
	LLMTimeout  time.Duration
	StepBudget  int
	ReflBudget  int
	// OutageWindow is how long LLM calls wait out an unavailable endpoint
	// (0: no outage waiting, so scripted 5xx answers fail at once).
	OutageWindow time.Duration
	// ProbeLLM and ProbeInterval are the engine's probe of an unavailable
	// endpoint (engine.Config.ProbeLLM; nil: none).
	ProbeLLM      func(context.Context) error
	ProbeInterval time.Duration
	// StallTimeout and StallNotices tune the engine's supervision
	// (0: the engine's defaults).
	StallTimeout time.Duration
	StallNotices int
	// Budgets sets the engine's budgets (zero: none).
	Budgets engine.BudgetConfig
	// Handler answers the LLM requests no script rule matched.
	Handler func(*fakellm.Call) fakellm.Reply
	// Tools describes downstream MCP servers (nil: none) and ToolExecutor,
	// when set, runs the tool steps (it asks the operator through the
	// step's ExecInput.Operator).
	Tools        engine.ToolCatalog
	ToolExecutor engine.Executor
	// Trail, when set, is the trail the stack records to (give it to the
	// ToolExecutor too); nil: a new MemoryTrail.
	Trail Trail
	// NoLeakCheck skips the goroutine-leak check at cleanup (for tests
	// that leave their own goroutines to their own cleanups).
	NoLeakCheck bool
}

// New starts a stack; everything is closed at the test's cleanup, after
// which no goroutine may remain.
func New(t testing.TB, o Options) *Stack {
	t.Helper()
	if !o.NoLeakCheck {
		// Registered first, so it runs last.
		leakOpt := goleak.IgnoreCurrent()
		t.Cleanup(func() { goleak.VerifyNone(t, leakOpt) })
	}
	srv := fakellm.New(t)
	if o.Handler != nil {
		srv.Handle(o.Handler)
	}
	if o.LLMTimeout == 0 {
		o.LLMTimeout = 10 * time.Second
	}
	if o.OutageWindow == 0 {
		o.OutageWindow = -1
	}
	logs := &SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	client, err := llm.NewOpenAI(llm.OpenAIConfig{
		BaseURL: srv.BaseURL(), APIKey: SentinelKey, Model: "fake-model",
		Timeout: o.LLMTimeout, MaxRetries: 2, Concurrency: 16, MaxRetryWait: 50 * time.Millisecond, OutageWindow: o.OutageWindow,
		HTTPClient: &http.Client{Transport: transport}, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	set, err := prompts.Load("en", "")
	if err != nil {
		t.Fatal(err)
	}
	var trail Trail = engine.NewMemoryTrail()
	if o.Trail != nil {
		trail = o.Trail
	}
	execs, err := skills.Executors(skills.Config{LLM: client, Prompts: set, Tools: o.Tools, Logger: log, Trail: trail})
	if err != nil {
		t.Fatal(err)
	}
	store := &watchedStore{MemoryStore: engine.NewMemoryStore()}
	newSystem := func() *engine.System {
		sys, err := engine.New(engine.Config{
			Texts:                 set,
			Skills:                execs,
			SkillGuides:           set.SkillGuides(),
			Templates:             skills.Templates(set),
			WaitTimeout:           o.WaitTimeout,
			StageStepBudget:       o.StepBudget,
			StageReflectionBudget: o.ReflBudget,
			StallTimeout:          o.StallTimeout,
			StallNotices:          o.StallNotices,
			ProbeLLM:              o.ProbeLLM,
			LLMProbeInterval:      o.ProbeInterval,
			Budgets:               o.Budgets,
			Store:                 store,
			Trail:                 trail,
			Logger:                log,
			Tools:                 o.Tools,
			Tool:                  o.ToolExecutor,
			Secrets:               []string{SentinelKey},
		})
		if err != nil {
			t.Fatal(err)
		}
		return sys
	}
	sys := newSystem()
	s := &Stack{T: t, Logs: logs, Log: log, Sys: sys, LLM: srv, Store: store.MemoryStore, watched: store, Trail: trail, Sub: sys.Subscribe(1 << 14), newSystem: newSystem, opts: o}
	if err := sys.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Sub.Close()
		_ = s.Sys.Close()
	})
	return s
}

// Restart closes the MAS (a step in flight stays "running", as after a
// crash) and starts a new one from what the store holds, on the same fake
// LLM; Sys and Sub then refer to the new one.
func (s *Stack) Restart() {
	s.T.Helper()
	s.Sub.Close()
	_ = s.Sys.Close()
	img, err := s.Store.Image()
	if err != nil {
		s.T.Fatal(err)
	}
	s.Sys = s.newSystem()
	s.Sub = s.Sys.Subscribe(1 << 14)
	if err := s.Sys.StartFrom(img); err != nil {
		s.T.Fatal(err)
	}
}

// SyncBuffer is a log sink safe for concurrent writers; WaitFor waits on
// its writes.
type SyncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed by the next write; guarded by mu
}

func (w *SyncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
	return w.b.Write(p)
}

func (w *SyncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// WaitFor waits until cond holds of what was written, re-checking after
// every write (no polling). It reports false when d passes first, or when
// done (nil: never) is closed and cond does not hold of the final content.
func (w *SyncBuffer) WaitFor(d time.Duration, done <-chan struct{}, cond func(string) bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		w.mu.Lock()
		s := w.b.String()
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		changed := w.changed
		w.mu.Unlock()
		if cond(s) {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return cond(w.String())
		case <-timer.C:
			return false
		}
	}
}

// WaitFor waits until cond holds, re-checking on every engine event (and
// every 50 ms, in case events were dropped). It fails the test after 30 s:
// a generous bound for a hang, not a performance assertion.
func (s *Stack) WaitFor(what string, cond func() bool) {
	s.T.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-s.Sub.C:
		case <-tick.C:
		case <-deadline:
			s.T.Fatalf("timed out waiting for %s\n%s", what, s.Dump())
		}
	}
}

// AtRest reports whether no agent can run a step: none is working (an agent
// stays "working" from a step's start until its effects are applied), and
// every agent with steps to do is blocked on its step lock.
func AtRest(sys *engine.System) (rest bool) {
	if sys.ReportsOnTheirWay() > 0 {
		return false
	}
	// Looked at again after the agents: a step ending meanwhile sends
	// its report before its agent rests.
	defer func() {
		if sys.ReportsOnTheirWay() > 0 {
			rest = false
		}
	}()
	for _, a := range sys.Agents() {
		if a.Kind != engine.KindLLM {
			continue
		}
		if a.WorkingState == engine.WorkingWorking {
			return false
		}
		for _, st := range a.AgentStep.StepList {
			if st.ExecutionState == engine.StateRunning {
				return false
			}
		}
		if len(a.AgentStep.TodoList) > 0 && len(a.StepLock) == 0 {
			return false
		}
	}
	return true
}

// Dump describes every agent's steps, for failure messages.
func (s *Stack) Dump() string {
	var b strings.Builder
	for _, a := range s.Sys.Agents() {
		fmt.Fprintf(&b, "agent %s (%s) %s lock=%v todo=%d\n", a.Name, a.AgentID[:8], a.WorkingState, a.StepLock, len(a.AgentStep.TodoList))
		for _, st := range a.AgentStep.StepList {
			fmt.Fprintf(&b, "  %s %-22s %-8s %s %v\n", st.StepID[:8], st.Executor, st.ExecutionState, short(st.StepIntention, 50), st.ExecuteResult["error"])
		}
	}
	for _, c := range s.LLM.Unmatched() {
		fmt.Fprintf(&b, "unmatched LLM call: skill=%s agent=%s\n", c.Skill, c.AgentName)
	}
	return b.String()
}

func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n]
	}
	return s
}

// AgentByName finds an agent's ID by name ("" if none).
func (s *Stack) AgentByName(name string) string {
	for _, b := range s.Sys.AgentBriefs() {
		if b.Name == name {
			return b.AgentID
		}
	}
	return ""
}

// Task returns a snapshot of a task, failing the test if there is none.
func (s *Stack) Task(id string) engine.TaskState {
	s.T.Helper()
	t, ok := s.Sys.Task(id)
	if !ok {
		s.T.Fatalf("no task %s", id)
	}
	return t
}

// WatchAgents calls f with every agent document the MAS stores, as it
// stores it (before the write returns to the agent's owner): what a test
// must not miss of an agent's steps, which an event read later may find
// cleaned up already. f must not keep a (it is the store's) nor block.
func (s *Stack) WatchAgents(f func(a *engine.AgentState)) { s.watched.watch.Store(&f) }

// watchedStore is a MemoryStore whose agent writes WatchAgents sees.
type watchedStore struct {
	*engine.MemoryStore
	watch atomic.Pointer[func(*engine.AgentState)]
}

func (w *watchedStore) PutAgent(ctx context.Context, a *engine.AgentState) error {
	err := w.MemoryStore.PutAgent(ctx, a)
	if f := w.watch.Load(); f != nil && err == nil {
		(*f)(a)
	}
	return err
}

// Bearer is an http.RoundTripper that sends a bearer token with every
// request, as an MCP host configured with a token does.
type Bearer struct {
	Token string
	Base  http.RoundTripper
}

func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return b.Base.RoundTrip(r)
}
