package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// sentinelKey is the API key the stack is configured with.
const sentinelKey = teststack.SentinelKey

// stack is the whole MAS on the fake LLM (internal/teststack).
type stack struct {
	*teststack.Stack
	t     *testing.T
	logs  *teststack.SyncBuffer
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
	budgets     engine.BudgetConfig
}

func newStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	ts := teststack.New(t, teststack.Options{
		WaitTimeout: o.waitTimeout, LLMTimeout: o.llmTimeout, StepBudget: o.stepBudget,
		ReflBudget: o.reflBudget, Handler: o.handler, Budgets: o.budgets,
	})
	return &stack{Stack: ts, t: t, logs: ts.Logs, sys: ts.Sys, llm: ts.LLM, store: ts.Store, sub: ts.Sub}
}

func (s *stack) waitFor(what string, cond func() bool) { s.t.Helper(); s.WaitFor(what, cond) }

func (s *stack) dump() string { return s.Dump() }

func (s *stack) agentByName(name string) string { return s.AgentByName(name) }

func (s *stack) task(id string) engine.TaskState { s.t.Helper(); return s.Task(id) }

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
