package downstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// ask puts a question to the task's operator and waits for the answer:
// the one place the executor reaches the operator's inbox.
func (e *Executor) ask(ctx context.Context, in *engine.ExecInput, q engine.OperatorQuestion) (engine.Answer, error) {
	return e.cfg.System.Ask(ctx, q)
}

// askForm asks the task's operator to fill in a form: in their inbox (the
// question's text says how to answer) and, when OperatorElicit is set, as
// an elicitation to their own MCP client. The first answer from either
// wins and the other is withdrawn. The wait is bounded by ConfirmTimeout
// (engine.ErrNoAnswer) and ends with ctx.
func (e *Executor) askForm(ctx context.Context, in *engine.ExecInput, question, message string, f form) (formAnswer, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		a      formAnswer
		err    error
		client bool
	}
	// Buffered for both: the loser finishes on its own once ctx ends.
	ch := make(chan result, 2)
	go func() {
		a, err := e.ask(ctx, in, engine.OperatorQuestion{
			TaskID: in.Step.TaskID, StageID: in.Step.StageID, AgentID: in.Agent.AgentID,
			Question: question, Timeout: e.cfg.ConfirmTimeout,
		})
		if err != nil {
			ch <- result{err: err}
			return
		}
		fa, err := f.parse(a)
		ch <- result{a: fa, err: err}
	}()
	waiting := 1
	if e.cfg.OperatorElicit != nil {
		waiting++
		go func() {
			res, err := e.cfg.OperatorElicit(ctx, in.Step.TaskID, &mcp.ElicitParams{Message: message, RequestedSchema: f.schema()})
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
func (e *Executor) completeArguments(ctx context.Context, in *engine.ExecInput, server string, ins *instruction, tool ToolDesc, bad error) (map[string]any, error) {
	f := argumentForm(tool.InputSchema, ins.Arguments)
	if len(f.fields) == 0 {
		return nil, bad
	}
	given, _ := json.Marshal(ins.Arguments)
	question := e.cfg.Texts.Text("tool_missing_arguments", map[string]any{
		"AgentID": in.Agent.AgentID, "AgentName": in.Agent.Name, "Server": server, "ToolName": ins.ToolName,
		"Problem": bad.Error(), "Fields": f.describe(), "Arguments": string(given),
	})
	names := make([]string, len(f.fields))
	for i, fd := range f.fields {
		names[i] = fd.Name
	}
	asked := map[string]any{"fields": names}
	message := fmt.Sprintf("The call of %s.%s needs these arguments: %s", server, ins.ToolName, strings.Join(names, ", "))
	a, err := e.askForm(ctx, in, question, message, f)
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
