package engine_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/llm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/skills"
)

// sentinelKey is the API key the stack is configured with: it must never
// show up in a state, a message or an error.
const sentinelKey = "sk-SENTINEL-do-not-leak-4242"

// stack is the whole MAS wired as cmd/mas-mcp wires it, against the fake
// OpenAI-compatible server.
type stack struct {
	t     *testing.T
	logs  *syncBuffer
	sys   *engine.System
	llm   *fakellm.Server
	store *engine.MemoryStore
	sub   *engine.Subscription
}

type stackOpts struct {
	waitTimeout time.Duration
	llmTimeout  time.Duration
	stepBudget  int
	reflBudget  int
	handler     func(*fakellm.Call) fakellm.Reply
}

func newStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	// Registered first, so it runs last: after the MAS, the fake server and
	// the HTTP connections are closed, no goroutine may remain.
	leakOpt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leakOpt) })
	srv := fakellm.New(t)
	if o.handler != nil {
		srv.Handle(o.handler)
	}
	if o.llmTimeout == 0 {
		o.llmTimeout = 10 * time.Second
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	client, err := llm.NewOpenAI(llm.OpenAIConfig{
		BaseURL: srv.BaseURL(), APIKey: sentinelKey, Model: "fake-model",
		Timeout: o.llmTimeout, MaxRetries: 2, Concurrency: 16, MaxRetryWait: 50 * time.Millisecond,
		HTTPClient: &http.Client{Transport: transport}, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	set, err := prompts.Load("en", "")
	if err != nil {
		t.Fatal(err)
	}
	execs, err := skills.Executors(skills.Config{LLM: client, Prompts: set, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	store := engine.NewMemoryStore()
	sys, err := engine.New(engine.Config{
		Texts:                 set,
		Skills:                execs,
		SkillGuides:           set.SkillGuides(),
		Templates:             skills.Templates(set),
		WaitTimeout:           o.waitTimeout,
		StageStepBudget:       o.stepBudget,
		StageReflectionBudget: o.reflBudget,
		Store:                 store,
		Logger:                log,
	})
	if err != nil {
		t.Fatal(err)
	}
	st := &stack{t: t, logs: logs, sys: sys, llm: srv, store: store, sub: sys.Subscribe(1 << 14)}
	if err := sys.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.sub.Close()
		_ = sys.Close()
	})
	return st
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// waitFor waits until cond holds, re-checking on every engine event (and
// every 50 ms, in case events were dropped). It fails the test after 30 s:
// a generous bound for a hang, not a performance assertion.
func (s *stack) waitFor(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-s.sub.C:
		case <-tick.C:
		case <-deadline:
			s.t.Fatalf("timed out waiting for %s\n%s", what, s.dump())
		}
	}
}

// dump describes every agent's steps, for failure messages.
func (s *stack) dump() string {
	var b strings.Builder
	for _, a := range s.sys.Agents() {
		fmt.Fprintf(&b, "agent %s (%s) %s lock=%v todo=%d\n", a.Name, a.AgentID[:8], a.WorkingState, a.StepLock, len(a.AgentStep.TodoList))
		for _, st := range a.AgentStep.StepList {
			fmt.Fprintf(&b, "  %s %-22s %-8s %s %v\n", st.StepID[:8], st.Executor, st.ExecutionState, oneLine(st.StepIntention, 50), st.ExecuteResult["error"])
		}
	}
	for _, c := range s.llm.Unmatched() {
		fmt.Fprintf(&b, "unmatched LLM call: skill=%s agent=%s\n", c.Skill, c.AgentName)
	}
	return b.String()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n]
	}
	return s
}

// agentByName finds an agent's ID by name ("" if none).
func (s *stack) agentByName(name string) string {
	for _, b := range s.sys.AgentBriefs() {
		if b.Name == name {
			return b.AgentID
		}
	}
	return ""
}

func (s *stack) task(id string) engine.TaskState {
	s.t.Helper()
	t, ok := s.sys.Task(id)
	if !ok {
		s.t.Fatalf("no task %s", id)
	}
	return t
}

// stepText is the current step's text_content in a prompt (its first line).
func stepText(prompt string) string {
	_, after, ok := strings.Cut(prompt, "- text_content:\n\n")
	if !ok {
		return ""
	}
	line, _, _ := strings.Cut(after, "\n")
	return line
}

// field extracts "- name: value" from a prompt.
func field(prompt, name string) string {
	for _, l := range strings.Split(prompt, "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "- "+name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// steps renders a step list for an answer block.
func steps(specs ...engine.StepSpec) string { return fakellm.JSON(specs) }

func skill(exec, intention, text string) engine.StepSpec {
	return engine.StepSpec{StepIntention: intention, Type: "skill", Executor: exec, TextContent: text}
}

func text(tag, body string) fakellm.Reply { return fakellm.Reply{Content: fakellm.Block(tag, body)} }

func jsonReply(tag string, v any) fakellm.Reply {
	return fakellm.Reply{Content: "Here is my answer.\n" + fakellm.Block(tag, fakellm.JSON(v))}
}
