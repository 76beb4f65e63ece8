package fakellm

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/mas-mcp/mas-mcp/llm"
)

// newCall recognises a request: which skill of which agent on which step,
// and whether it is a repair round. N is assigned when it is recorded.
func newCall(model string, msgs []llm.Message, temperature *float32, maxTokens int) Call {
	c := Call{Model: model, Messages: msgs, Temperature: temperature, MaxTokens: maxTokens}
	firstUser, sawAssistant := -1, false
	for i, m := range msgs {
		switch m.Role {
		case llm.RoleUser:
			if firstUser < 0 {
				firstUser = i
			}
			if sawAssistant {
				c.Repair = true
			}
		case llm.RoleAssistant:
			sawAssistant = true
		}
	}
	if firstUser < 0 {
		return c
	}
	c.Prompt = msgs[firstUser].Content
	// The role section comes first: its agent_id and name lines are the
	// first ones. The step's lines are read under the current-step heading
	// (a "# …" line ending in the identifier current_step), since the
	// skill's rules before it may quote "- executor: …" as an example; a
	// prompt without that heading is read from its beginning.
	step := c.Prompt
	for line := range strings.Lines(c.Prompt) {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "# ") && strings.HasSuffix(t, " current_step") {
			step = c.Prompt[strings.Index(c.Prompt, line):]
			break
		}
	}
	fields := []struct {
		text, prefix string
		dst          *string
	}{
		{c.Prompt, "- agent_id:", &c.AgentID},
		{c.Prompt, "- name:", &c.AgentName},
		{step, "- step_id:", &c.StepID},
		{step, "- executor:", &c.Skill},
	}
	for _, f := range fields {
		for line := range strings.Lines(f.text) {
			line = strings.TrimLeft(line, " \t")
			if strings.HasPrefix(line, f.prefix) {
				*f.dst = strings.TrimSpace(line[len(f.prefix):])
				break
			}
		}
	}
	return c
}

// playbook is the script and the call log shared by Server and Instant.
// Its methods are safe for concurrent use.
type playbook struct {
	// invalid reports a rule Script cannot accept (fixed at creation).
	invalid func(msg string)

	mu        sync.Mutex
	rules     []*scripted       // guarded by mu; exhausted rules stay, so order is kept
	fallback  func(*Call) Reply // guarded by mu
	calls     []Call            // guarded by mu
	unmatched []Call            // guarded by mu
	cache     prefixCache       // guarded by mu
	caching   bool              // guarded by mu: CachePrefixes was called
}

// CachePrefixes makes the fake report cached prompt tokens the way OpenAI
// does (see prefixCache). Off by default: comparing every prompt with the
// last ones costs more than the rest of the fake, and only the tests of
// caching need it.
func (p *playbook) CachePrefixes() {
	p.mu.Lock()
	p.caching = true
	p.mu.Unlock()
}

// scripted is a rule with its remaining uses (-1: unlimited).
type scripted struct {
	rule Rule
	left int // guarded by playbook.mu
}

// Script appends rules to the script. For each request, the first rule in
// order that matches it and has uses left answers it.
// A rule with Times below -1 is rejected: a Server reports it as a test
// error, an Instant panics.
func (p *playbook) Script(rules ...Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range rules {
		left := r.Times
		switch {
		case left == 0:
			left = 1
		case left < -1:
			p.invalid(fmt.Sprintf("fakellm: Script: %v: Times %d: want -1 (unlimited), 0 (once) or a positive count", r, r.Times))
			continue
		}
		p.rules = append(p.rules, &scripted{rule: r, left: left})
	}
}

// Handle sets the fallback that answers requests no rule matches
// (nil: none, such requests fail). Like Rule.Func, h is called without any
// lock held, possibly concurrently, with a copy of the call.
func (p *playbook) Handle(h func(*Call) Reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fallback = h
}

// Calls returns every request received so far, in arrival order.
func (p *playbook) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return cloneCalls(p.calls)
}

// CallsFor returns the requests of one skill by one agent (id or name), in
// arrival order; an empty skill or agent matches any.
func (p *playbook) CallsFor(skill, agent string) []Call {
	r := Rule{Skill: skill, Agent: agent}
	var out []Call
	for _, c := range p.Calls() {
		if r.matches(&c) {
			out = append(out, c)
		}
	}
	return out
}

// Unmatched returns the requests that neither a rule nor the fallback
// answered; each was answered with status 500.
func (p *playbook) Unmatched() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return cloneCalls(p.unmatched)
}

// Pending returns the rules that still have uses left, in script order, with
// Times set to the uses left (-1 for unlimited rules, which are therefore
// always pending). An empty result means the script was consumed.
func (p *playbook) Pending() []Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Rule
	for _, s := range p.rules {
		if s.left != 0 {
			r := s.rule
			r.Times = s.left
			out = append(out, r)
		}
	}
	return out
}

// answer records c (assigning c.N) and returns the reply the script gives
// it. Rule and fallback functions run after the lock is released, so they
// may call the playbook's methods and may block.
func (p *playbook) answer(c *Call) Reply {
	p.mu.Lock()
	c.N = len(p.calls) + 1
	if p.caching {
		c.CachedTokens = p.cache.lookup(serialize(c.Messages))
	}
	p.calls = append(p.calls, c.clone())
	var (
		reply   Reply
		fn      func(*Call) Reply
		matched bool
	)
	for _, s := range p.rules {
		if s.left != 0 && s.rule.matches(c) {
			if s.left > 0 {
				s.left--
			}
			reply, fn, matched = s.rule.Reply, s.rule.Func, true
			break
		}
	}
	if !matched && p.fallback != nil {
		fn, matched = p.fallback, true
	}
	if !matched {
		p.unmatched = append(p.unmatched, c.clone())
	}
	p.mu.Unlock()

	switch {
	case !matched:
		return Reply{Status: http.StatusInternalServerError, Content: noScript(c)}
	case fn != nil:
		cc := c.clone()
		return fn(&cc)
	}
	return reply
}

func noScript(c *Call) string {
	return fmt.Sprintf("fakellm: no script for skill=%s agent=%s (%s) step=%s repair=%t",
		c.Skill, c.AgentID, c.AgentName, c.StepID, c.Repair)
}

func cloneCalls(calls []Call) []Call {
	if len(calls) == 0 {
		return nil
	}
	out := make([]Call, len(calls))
	for i, c := range calls {
		out[i] = c.clone()
	}
	return out
}
