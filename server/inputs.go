package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/secret"
)

// Every free-text input of the tools and the monitor API is bounded here, at
// the boundary, before the engine sees it: a 1 MiB intention would otherwise
// go into every prompt of the task. Names and IDs are one line of printable
// text (a newline in a name would forge lines of the prompts and the
// monitor's lists); free text may hold anything but is bounded in size; so
// are lists. An error names the field, the problem and the limit's config
// key, and the call changes nothing.

// inputCheck checks fields one after another and keeps the first problem.
type inputCheck struct {
	l   *Limits
	err error
}

// name checks a name, ID, URI or keyword: size, and no control or
// bidirectional-override characters.
func (c *inputCheck) name(field, v string) {
	if c.err != nil {
		return
	}
	if len(v) > c.l.NameBytes {
		c.err = fmt.Errorf("%s: %d bytes, more than the limit of %d for names and IDs (%s)", field, len(v), c.l.NameBytes, keyNameBytes)
		return
	}
	for i, r := range v {
		if r == utf8.RuneError || unicode.IsControl(r) || isBidiControl(r) {
			c.err = fmt.Errorf("%s %q: has a control character (%U) at byte %d; names and IDs are one line of printable text", field, clip(v), r, i)
			return
		}
	}
}

// names checks a list of names.
func (c *inputCheck) names(field string, vs []string) {
	c.list(field, len(vs))
	for i, v := range vs {
		c.name(fmt.Sprintf("%s[%d]", field, i), v)
	}
}

// text checks free text: its size only.
func (c *inputCheck) text(field, v string) {
	if c.err == nil && len(v) > c.l.TextBytes {
		c.err = fmt.Errorf("%s: %d bytes, more than the limit of %d (%s)", field, len(v), c.l.TextBytes, keyTextBytes)
	}
}

// jsonValue checks a JSON value given whole (a tool call's arguments): the
// size of its encoding, bounded as free text is (it goes into prompts and
// messages alike).
func (c *inputCheck) jsonValue(field string, v any) {
	if c.err != nil || v == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		c.err = fmt.Errorf("%s: not JSON: %v", field, err)
		return
	}
	if len(b) > c.l.TextBytes {
		c.err = fmt.Errorf("%s: %d bytes of JSON, more than the limit of %d (%s)", field, len(b), c.l.TextBytes, keyTextBytes)
	}
}

func (c *inputCheck) list(field string, n int) {
	if c.err == nil && n > c.l.ListItems {
		c.err = fmt.Errorf("%s: %d items, more than the limit of %d (%s)", field, n, c.l.ListItems, keyListItems)
	}
}

// allocation checks {agent_id: goal}.
func (c *inputCheck) allocation(field string, m map[string]string) {
	c.list(field, len(m))
	for _, id := range slices.Sorted(maps.Keys(m)) {
		c.name(field+" key", id)
		c.text(fmt.Sprintf("%s[%q]", field, id), m[id])
	}
}

// clip is what an error quotes of a value a client sent: its first 64
// bytes (whole characters) and "…" if there was more. An error never
// carries a client's value of any size back (as it would a 4 MiB ID).
func clip(v string) string {
	const most = 64
	if len(v) <= most {
		return v
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + secret.ClipMark // a secret it cuts is still scrubbed
}

// boundRequests refuses (-32602), before the SDK or a handler sees them,
// values of the protocol's own requests over the limits of the tools'
// inputs: a resource URI (resources/read, resources/subscribe and
// unsubscribe, subscriptions/listen) is held to limits.name_bytes, as
// read_resource's uri; so are a completion's reference, argument name and
// context arguments, and its value when it completes a resource template's
// argument (an ID), while a prompt's argument is free text
// (limits.text_bytes). The SDK would otherwise match a URI of megabytes
// against every resource template and quote it whole in its not-found
// error. The tasks/* methods check their taskId themselves (visibleTask).
func (s *Server) boundRequests(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		c := inputCheck{l: &s.cfg.Limits}
		switch p := req.GetParams().(type) {
		case *mcp.ReadResourceParams:
			if p != nil {
				c.name("uri", p.URI)
			}
		case *mcp.SubscribeParams:
			if p != nil {
				c.name("uri", p.URI)
			}
		case *mcp.UnsubscribeParams:
			if p != nil {
				c.name("uri", p.URI)
			}
		case *mcp.SubscriptionsListenParams:
			if p != nil && p.Notifications != nil {
				for i, uri := range p.Notifications.ResourceSubscriptions {
					c.name(fmt.Sprintf("notifications.resourceSubscriptions[%d]", i), uri)
				}
			}
		case *mcp.CompleteParams:
			if p != nil {
				c.completion(p)
			}
		}
		if c.err != nil {
			// Outside scrubAnswers: it quotes what it refuses, scrubbed here.
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: s.sys.Scrub(c.err.Error())}
		}
		return next(ctx, method, req)
	}
}

// completion checks completion/complete's values (boundRequests).
func (c *inputCheck) completion(p *mcp.CompleteParams) {
	prompt := false
	if p.Ref != nil {
		c.name("ref.type", p.Ref.Type)
		c.name("ref.uri", p.Ref.URI)
		c.name("ref.name", p.Ref.Name)
		prompt = p.Ref.Type == "ref/prompt"
	}
	c.name("argument.name", p.Argument.Name)
	if prompt {
		c.text("argument.value", p.Argument.Value)
	} else {
		c.name("argument.value", p.Argument.Value)
	}
	if p.Context != nil {
		c.list("context.arguments", len(p.Context.Arguments))
		for _, k := range slices.Sorted(maps.Keys(p.Context.Arguments)) {
			c.name("context.arguments key", k)
			c.name(fmt.Sprintf("context.arguments[%q]", clip(k)), p.Context.Arguments[k])
		}
	}
}

// isBidiControl: the Unicode bidirectional controls, which make text show
// in another order than it is read (Trojan Source).
func isBidiControl(r rune) bool {
	return r == '\u061C' || r == '\u200E' || r == '\u200F' || (r >= '\u202A' && r <= '\u202E') || (r >= '\u2066' && r <= '\u2069')
}

func (in AddTaskIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("task_name", in.TaskName)
	c.text("task_intention", in.TaskIntention)
	c.name("task_manager", in.TaskManager)
	return c.err
}

func (in SendMessageIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("task_id", in.TaskID)
	c.names("receiver", in.Receiver)
	c.text("content", in.Content)
	c.name("stage_relative", in.StageRelative)
	c.name("reply_to", in.ReplyTo)
	return c.err
}

func (in AnswerApprovalIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("message_id", in.MessageID)
	c.text("note", in.Note)
	c.jsonValue("arguments", in.Arguments)
	return c.err
}

// elicitAnswer checks an answer to an operator's question given as an
// elicitation result (inputResponses of wait_for_updates and tasks/update),
// field naming it: it stands for send_message's content (reply) or
// answer_approval's note and arguments (the form's whole content), and is
// held to their limits.
func (c *inputCheck) elicitAnswer(field string, r *mcp.ElicitResult) {
	if r == nil {
		return
	}
	for _, k := range []string{"reply", "note"} {
		if v, ok := r.Content[k].(string); ok {
			c.text(field+"."+k, v)
		}
	}
	c.jsonValue(field+".content", r.Content)
}

func (in AskInfoIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("type", in.Type)
	c.name("task_id", in.TaskID)
	c.name("stage_id", in.StageID)
	c.name("team_id", in.TeamID)
	c.names("agent_id", in.AgentID)
	c.name("step_id", in.StepID)
	return c.err
}

func (in WaitIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("task_id", in.TaskID)
	c.name("agent_id", in.AgentID)
	return c.err
}

func (in ManageTaskIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("action", in.Action)
	c.name("task_id", in.TaskID)
	c.list("stages", len(in.Stages))
	for i, st := range in.Stages {
		c.text(fmt.Sprintf("stages[%d].stage_intention", i), st.StageIntention)
		c.allocation(fmt.Sprintf("stages[%d].agent_allocation", i), st.AgentAllocation)
	}
	c.name("stage_id", in.StageID)
	c.name("old_stage_id", in.OldStageID)
	c.text("new_stage_intention", in.NewStageIntention)
	c.allocation("new_agent_allocation", in.NewAgentAllocation)
	c.text("summary", in.Summary)
	c.name("operator", in.Operator)
	return c.err
}

func (in ManageAgentIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("action", in.Action)
	c.name("agent_id", in.AgentID)
	c.name("step_id", in.StepID)
	c.text("instruction", in.Instruction)
	c.text("reason", in.Reason)
	if a := in.AgentConfig; a != nil {
		c.name("agent_config.template", a.Template)
		c.name("agent_config.name", a.Name)
		c.name("agent_config.role", a.Role)
		c.text("agent_config.profile", a.Profile)
		c.names("agent_config.skills", a.Skills)
		c.names("agent_config.tools", a.Tools)
		if a.LLMConfig != nil {
			c.name("agent_config.llm_config.model", a.LLMConfig.Model)
		}
	}
	c.name("task_id", in.TaskID)
	c.names("agents", in.Agents)
	return c.err
}

func (in ReadResourceIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("uri", in.URI)
	return c.err
}

// checked runs h only when its input is within the limits (an input type
// with free text or names has a check method).
func checked[In, Out any](l *Limits, h mcp.ToolHandlerFor[In, Out]) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		if c, ok := any(in).(interface{ check(*Limits) error }); ok {
			if err := c.check(l); err != nil {
				var zero Out
				return nil, zero, err
			}
		}
		return h(ctx, req, in)
	}
}
