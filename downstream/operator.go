package downstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// ElicitFunc puts a form to the operator of a task through their own MCP
// client (elicitation); it fails at once when none of their clients can
// take one.
type ElicitFunc func(ctx context.Context, taskID string, p *mcp.ElicitParams) (*mcp.ElicitResult, error)

// SetOperatorElicit sets how the executor reaches operators' own MCP
// clients, for executors whose config sets no OperatorElicit (the MCP
// server is built after them).
func (p *Pool) SetOperatorElicit(f ElicitFunc) { p.elicit.Store(&f) }

// operatorElicit is the way to operators' clients, or nil.
func (e *Executor) operatorElicit() ElicitFunc {
	if e.cfg.OperatorElicit != nil {
		return e.cfg.OperatorElicit
	}
	if f := e.cfg.Pool.elicit.Load(); f != nil {
		return *f
	}
	return nil
}

// ask puts a question to the task's operator and waits for the answer:
// the one place the executor reaches the operator's inbox.
func (e *Executor) ask(ctx context.Context, in *engine.ExecInput, q engine.OperatorQuestion) (engine.Answer, error) {
	if in.Operator == nil {
		// The engine always sets it; a caller of its own may not.
		return engine.Answer{}, errors.New("the step's input has no Operator to ask")
	}
	return in.Operator.Ask(ctx, q)
}

// askForm asks the task's operator to fill in a form: in their inbox (the
// question's text says how to answer) and, when OperatorElicit is set, as
// an elicitation to their own MCP client. The first answer from either
// wins and the other is withdrawn. The wait is bounded by ConfirmTimeout
// (engine.ErrNoAnswer) and ends with ctx. beforeCall says that the step's
// call is made only after the answer (missing arguments; a server's
// elicitation is asked during the call).
func (e *Executor) askForm(ctx context.Context, in *engine.ExecInput, question, message string, f form, beforeCall bool) (formAnswer, error) {
	// Clients that take no server requests get the form with the question.
	ctx = engine.WithQuestionForm(ctx, engine.QuestionForm{Message: message, Schema: f.schema(), Arguments: true})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		a      formAnswer
		err    error
		client bool
	}
	// Buffered for both; the loser is waited for once ctx is cancelled.
	ch := make(chan result, 2)
	go func() {
		a, err := e.ask(ctx, in, engine.OperatorQuestion{
			TaskID: in.Step.TaskID, StageID: in.Step.StageID, AgentID: in.Agent.AgentID,
			Question: question, Timeout: e.cfg.ConfirmTimeout,
			StepID: in.Step.StepID, BeforeCall: beforeCall,
		})
		if err != nil {
			ch <- result{err: err}
			return
		}
		fa, err := f.parse(a)
		ch <- result{a: fa, err: err}
	}()
	waiting := 1
	if elicit := e.operatorElicit(); elicit != nil {
		waiting++
		go func() {
			res, err := elicit(ctx, in.Step.TaskID, &mcp.ElicitParams{Message: message, RequestedSchema: f.schema()})
			switch {
			case err != nil || res.Action == "cancel":
				// No client of the operator's took it, or it was dismissed:
				// the inbox still may answer.
				ch <- result{err: err, client: true}
			case res.Action == "accept":
				fa, err := f.parse(engine.Answer{Decision: &engine.Decision{Approve: true, Arguments: res.Content}})
				ch <- result{a: fa, err: err, client: true}
			default:
				ch <- result{a: formAnswer{Action: "decline"}, client: true}
			}
		}()
	}
	for ; waiting > 0; waiting-- {
		r := <-ch
		if r.client && r.a.Action == "" && waiting > 1 {
			continue
		}
		// The other channel is withdrawn before the answer is used: the
		// inbox's question no longer awaits a reply, the client's form
		// is cancelled. A step the engine could not clear of its wait
		// makes no call, whoever answered.
		cancel()
		for ; waiting > 1; waiting-- {
			if l := <-ch; errors.Is(l.err, engine.ErrCallNotCleared) {
				r = l
			}
		}
		return r.a, r.err
	}
	return formAnswer{}, ctx.Err() // not reached: the inbox always answers
}

// completeArguments asks the task's operator for the missing or invalid
// arguments of a call (spec 001) and merges the answer into them; bad is
// the schema's complaint. It returns what the operator was asked and
// answered (nil when they were not asked), and an error that fails the
// step when the operator declined, did not answer in time, or the
// arguments still do not fit.
func (e *Executor) completeArguments(ctx context.Context, in *engine.ExecInput, server string, ins *engine.ToolCall, tool ToolDesc, bad error) (map[string]any, error) {
	f := argumentForm(tool.InputSchema, ins.Arguments)
	if len(f.fields) == 0 {
		return nil, bad
	}
	question := e.cfg.Texts.Text("tool_missing_arguments", map[string]any{
		"AgentID": in.Agent.AgentID, "AgentName": in.Agent.Name, "Server": server, "ToolName": ins.ToolName,
		"Problem": bad.Error(), "Fields": f.describe(), "Arguments": argumentsText(ins.Arguments),
	})
	names := make([]string, len(f.fields))
	for i, fd := range f.fields {
		names[i] = fd.Name
	}
	asked := map[string]any{"fields": names}
	message := fmt.Sprintf("The call of %s.%s needs these arguments: %s", server, ins.ToolName, strings.Join(names, ", "))
	a, err := e.askForm(ctx, in, question, message, f, true)
	switch {
	case errors.Is(err, engine.ErrNoAnswer):
		asked["timed_out"] = true
		return asked, fmt.Errorf("%v; the operator did not give the missing arguments within %s, so the call was not made", bad, e.cfg.ConfirmTimeout)
	case err != nil:
		return asked, fmt.Errorf("%v; asking the operator for the arguments: %w", bad, err)
	case a.Action != "accept":
		asked["declined"] = true
		return asked, fmt.Errorf("%v; the operator declined to give the missing arguments, so the call was not made", bad)
	}
	asked["answer"] = a.Content
	for k, v := range a.Content {
		ins.Arguments[k] = v
	}
	if err := checkArguments(tool.schema, ins.Arguments); err != nil {
		return asked, fmt.Errorf("arguments of %s.%s, completed by the operator: %v", server, ins.ToolName, err)
	}
	return asked, nil
}

// approvalSchema is the elicitation form of an approval question.
var approvalSchema = map[string]any{"type": "object", "required": []string{"approve"}, "properties": map[string]any{
	"approve": map[string]any{"type": "boolean", "title": "Approve", "description": "allow this call"},
	"note":    map[string]any{"type": "string", "title": "Note", "description": "shown to the agent (optional)"},
}}

// askApproval asks the risk gate's question in the inbox and, when
// operators' clients can be reached, as an elicitation form (approve,
// note) to the task operator's own MCP client: the first answer wins and
// the other is withdrawn. A form declined is a denial; one dismissed, or
// a client that cannot take it, leaves the inbox to answer.
func (e *Executor) askApproval(ctx context.Context, in *engine.ExecInput, q engine.OperatorQuestion) (engine.Answer, error) {
	// Clients that take no server requests get the form with the question.
	ctx = engine.WithQuestionForm(ctx, engine.QuestionForm{Message: q.Question, Schema: approvalSchema})
	elicit := e.operatorElicit()
	if elicit == nil {
		return e.ask(ctx, in, q)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		a    engine.Answer
		err  error
		none bool // the client gave no answer
	}
	ch := make(chan result, 2)
	go func() {
		a, err := e.ask(ctx, in, q)
		ch <- result{a: a, err: err}
	}()
	go func() {
		res, err := elicit(ctx, q.TaskID, &mcp.ElicitParams{Message: q.Question, RequestedSchema: approvalSchema})
		if err != nil || res.Action == "cancel" {
			ch <- result{none: true}
			return
		}
		approve, _ := res.Content["approve"].(bool)
		approve = approve && res.Action == "accept"
		note, _ := res.Content["note"].(string)
		text := map[bool]string{true: "yes", false: "no"}[approve]
		if note != "" {
			text += ": " + note
		}
		ch <- result{a: engine.Answer{Text: text, Decision: &engine.Decision{Approve: approve, Note: note}}}
	}()
	for waiting := 2; ; waiting-- {
		r := <-ch
		if r.none && waiting > 1 {
			continue
		}
		cancel() // withdraw the other channel's question, and wait for it
		for ; waiting > 1; waiting-- {
			// A step the engine could not clear of its wait makes no
			// call, whoever answered.
			if l := <-ch; errors.Is(l.err, engine.ErrCallNotCleared) {
				r = l
			}
		}
		return r.a, r.err
	}
}
