// Package fakellm is the scripted LLM that mas-mcp's tests run against.
//
// A [Server] is a small OpenAI-compatible chat-completions endpoint: production
// code talks to it exactly as to OpenAI (POST {BaseURL}/chat/completions), and
// the test decides, per request, what the "model" answers: a well-formed
// tagged block, garbage, a slow reply, or an HTTP error. [Instant] gives the
// same scripting as an in-process [llm.Client] without HTTP, for benchmarks.
//
// Each request is recognised from the prompt mas-mcp builds: the first user
// message holds the lines "- agent_id: …", "- name: …" (role section) and
// "- step_id: …", "- executor: …" (current-step section). A request that
// carries an earlier assistant answer followed by a further user message is a
// repair round (LLM_CONTRACT.md: one repair round per unparsable answer).
//
// A script is an ordered list of [Rule]s; the first rule that matches the
// request and still has uses left answers it, else the fallback handler set
// with Handle, else the request is unmatched and fails with HTTP 500.
// Every request is recorded as a [Call], so tests can assert what was asked.
//
//	s := fakellm.New(t)
//	s.Script(
//		fakellm.Rule{Skill: "planning", Agent: "Alice",
//			Reply: fakellm.Reply{Content: fakellm.Block("planned_step", fakellm.JSON(steps))}},
//		fakellm.Rule{Skill: "reflection", Reply: fakellm.Reply{Content: fakellm.Garbage}},
//		fakellm.Rule{Skill: "reflection", Repair: new(true),
//			Reply: fakellm.Reply{Content: fakellm.Block("reflection_step", "[]")}},
//	)
//	// point the llm client at s.BaseURL(), run the engine, then:
//	if p := s.Pending(); len(p) > 0 { t.Errorf("script not consumed: %v", p) }
package fakellm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// Garbage is a malformed answer: prose without any tagged block, so every
// skill's parser rejects it (and asks for a repair round).
const Garbage = "Sure! I have thought about this carefully and I will do my best to help with the task."

// Block returns body wrapped in the tagged block a skill parses:
// "<tag>\n" + body + "\n</tag>".
func Block(tag, body string) string {
	return "<" + tag + ">\n" + body + "\n</" + tag + ">"
}

// JSON returns v marshalled as compact JSON, without HTML escaping (a model
// writes "<" and "&" as they are). It panics when v cannot be marshalled:
// scripts are literals written by the test author, and a channel or function
// value inside one is a bug in the test, like a bad pattern for
// regexp.MustCompile.
func JSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("fakellm.JSON: %v", err))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Call is one request as the fake saw it.
type Call struct {
	// N is the 1-based sequence number of the request over the fake's life.
	N int
	// Skill, AgentID, AgentName and StepID are read from the first user
	// message ("- executor:", "- agent_id:", "- name:", "- step_id:");
	// empty when the line is missing.
	Skill, AgentID, AgentName, StepID string
	// Model is the requested model, as sent.
	Model string
	// Messages are the request's messages, in order.
	Messages []llm.Message
	// Prompt is the content of the first user message.
	Prompt string
	// Repair reports a repair round: an assistant message followed by a
	// further user message.
	Repair bool
	// Temperature is nil when the request did not set it.
	Temperature *float32
	// MaxTokens is 0 when the request did not set it.
	MaxTokens int
	// CachedTokens is the prompt prefix, in tokens, that a provider's prompt
	// cache would have served: the longest byte-identical beginning shared
	// with one of the last 64 requests, counted from 1024 tokens on in steps
	// of 128 at four bytes a token (as OpenAI reports
	// usage.prompt_tokens_details.cached_tokens). Reported in the usage of
	// a successful reply, at most its prompt tokens.
	CachedTokens int
}

// clone returns a copy of c that shares no memory with it, so recorded calls
// stay intact whatever the test or a Func does with the copies it gets.
func (c Call) clone() Call {
	c.Messages = slices.Clone(c.Messages)
	if c.Temperature != nil {
		t := *c.Temperature
		c.Temperature = &t
	}
	return c
}

// Reply is what the fake answers to one request.
type Reply struct {
	// Content is the assistant's answer; for an error reply it is the error
	// message (a default message is used when empty).
	Content string
	// Status 0 or 200 is a success. Any other value must be an HTTP error
	// status (400–599) and is answered as an OpenAI-style error.
	Status int
	// RetryAfter is sent as the Retry-After header when non-empty.
	RetryAfter string
	// Delay is waited before answering. The wait ends early when the client
	// gives up (request context), and the reply is then never sent.
	Delay time.Duration
	// PromptTokens and CompletionTokens are reported as usage; 0 means an
	// estimate of one token per four characters, at least 1.
	PromptTokens, CompletionTokens int
}

// failed reports whether r is an error reply.
func (r Reply) failed() bool { return r.Status != 0 && r.Status != http.StatusOK }

// check reports a reply the fake cannot send.
func (r Reply) check() error {
	switch {
	case r.failed() && (r.Status < 400 || r.Status > 599):
		return fmt.Errorf("fakellm: reply status %d: want 0, 200 or an error status 400-599", r.Status)
	case r.PromptTokens < 0 || r.CompletionTokens < 0:
		return fmt.Errorf("fakellm: reply tokens %d/%d: must not be negative", r.PromptTokens, r.CompletionTokens)
	}
	return nil
}

// usage returns the token counts reported for a successful answer to c.
func (r Reply) usage(c *Call) (prompt, completion, cached int) {
	prompt, completion = r.PromptTokens, r.CompletionTokens
	if prompt == 0 {
		prompt = estimateTokens(promptChars(c.Messages))
	}
	if completion == 0 {
		completion = estimateTokens(len(r.Content))
	}
	return prompt, completion, min(c.CachedTokens, prompt)
}

// errorMessage is the message of an error reply.
func (r Reply) errorMessage() string {
	if r.Content != "" {
		return r.Content
	}
	return "fakellm: scripted error " + strconv.Itoa(r.Status) + " " + http.StatusText(r.Status)
}

func estimateTokens(chars int) int { return max(chars/4, 1) }

func promptChars(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	return n
}

// Rule answers the requests it matches, Times times. Empty criteria match
// anything.
type Rule struct {
	// Skill is the skill name ("- executor:"); "" matches any.
	Skill string
	// Agent is an agent id or name; "" matches any.
	Agent string
	// Contains is a substring of the prompt (the first user message);
	// "" matches any.
	Contains string
	// Repair, when non-nil, matches only repair rounds (new(true)) or only
	// first attempts (new(false)).
	Repair *bool
	// Times is how many requests the rule answers: 0 means 1, -1 means
	// unlimited. Other negative values are rejected by Script.
	Times int
	// Reply is the answer, unless Func is set.
	Reply Reply
	// Func, when non-nil, computes the answer instead of Reply. It is called
	// without any lock held, possibly from several goroutines at once, with a
	// copy of the call it may keep.
	Func func(*Call) Reply
}

func (r *Rule) matches(c *Call) bool {
	return (r.Skill == "" || r.Skill == c.Skill) &&
		(r.Agent == "" || r.Agent == c.AgentID || r.Agent == c.AgentName) &&
		(r.Contains == "" || strings.Contains(c.Prompt, r.Contains)) &&
		(r.Repair == nil || *r.Repair == c.Repair)
}

// String describes the rule's criteria and remaining uses, for test failure
// messages (e.g. printing Pending()).
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString("rule{")
	field := func(name, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%s=%q ", name, v)
		}
	}
	field("skill", r.Skill)
	field("agent", r.Agent)
	field("contains", r.Contains)
	if r.Repair != nil {
		fmt.Fprintf(&b, "repair=%t ", *r.Repair)
	}
	switch r.Times {
	case -1:
		b.WriteString("times=unlimited}")
	case 0:
		b.WriteString("times=1}")
	default:
		fmt.Fprintf(&b, "times=%d}", r.Times)
	}
	return b.String()
}

// StatusError is the error [Instant] returns for an error reply (and for a
// request no rule answered). Like the llm package's OpenAI client, it
// matches llm.ErrRateLimited (429) or llm.ErrServer (5xx) with errors.Is.
type StatusError struct {
	Status     int
	RetryAfter string
	Message    string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("fakellm: status %d: %s", e.Status, e.Message)
}

// Unwrap returns the llm sentinel for the status, if any.
func (e *StatusError) Unwrap() error {
	switch {
	case e.Status == http.StatusTooManyRequests:
		return llm.ErrRateLimited
	case e.Status >= 500:
		return llm.ErrServer
	}
	return nil
}
