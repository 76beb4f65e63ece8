package downstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// operatorFunc answers the risk gate's question as a test says.
type operatorFunc func(context.Context, engine.OperatorQuestion) (engine.Answer, error)

func (f operatorFunc) Ask(ctx context.Context, q engine.OperatorQuestion) (engine.Answer, error) {
	return f(ctx, q)
}

// serverlessExecutor is an Executor on cfg with the English texts and a
// pool of no servers: enough to ask the operator.
func serverlessExecutor(t *testing.T, cfg ExecutorConfig) *Executor {
	t.Helper()
	set, err := prompts.Load("en", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pool = NewPool(&Config{}, nil)
	t.Cleanup(func() { _ = cfg.Pool.Close() })
	cfg.Texts = set
	e, err := NewExecutor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestConfirmAsksThroughTheInput: the risk gate asks the operator through
// the step's ExecInput.Operator (no *engine.System needed): the question
// names the tool and goes to the step's task, stage and agent; the answer
// decides; without an Operator the call is refused with the reason.
func TestConfirmAsksThroughTheInput(t *testing.T) {
	e := serverlessExecutor(t, ExecutorConfig{})
	in := func(op engine.Operator) *engine.ExecInput {
		return &engine.ExecInput{Operator: op, Agent: engine.AgentState{AgentID: "a1", Name: "alice"},
			Step: engine.StepState{TaskID: "t1", StageID: "s1", StepID: "x1", Executor: "fs"}}
	}
	var asked []engine.OperatorQuestion
	answer := func(text string, err error) engine.Operator {
		return operatorFunc(func(_ context.Context, q engine.OperatorQuestion) (engine.Answer, error) {
			asked = append(asked, q)
			return engine.Answer{Text: text}, err
		})
	}
	for _, tc := range []struct {
		name    string
		op      engine.Operator
		wantErr string // "" : approved
	}{
		{"approved", answer("yes", nil), ""},
		{"refused", answer("no", nil), "refused the call of fs.write_file"},
		{"not answered", answer("", engine.ErrNoAnswer), "did not approve the call of fs.write_file"},
		{"no operator", nil, "no Operator to ask"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked = nil
			out, err := e.confirm(t.Context(), in(tc.op), "fs", &engine.ToolCall{ToolName: "write_file", Arguments: map[string]any{"path": "/x"}})
			switch {
			case tc.wantErr == "" && (err != nil || out["approved"] != true):
				t.Errorf("confirm = %v, %v; want approved", out, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || out["approved"] != false):
				t.Errorf("confirm = %v, %v; want refused with %q", out, err, tc.wantErr)
			}
			if tc.op == nil {
				return
			}
			if len(asked) != 1 {
				t.Fatalf("the operator was asked %d times, want once", len(asked))
			}
			q := asked[0]
			if q.TaskID != "t1" || q.StageID != "s1" || q.AgentID != "a1" || !strings.Contains(q.Question, "write_file") || q.Timeout <= 0 {
				t.Errorf("question %+v: want task t1, stage s1, agent a1, the tool named and a timeout", q)
			}
			// The call is made only after the answer: a restart that
			// finds the question unanswered runs the step again.
			if q.StepID != "x1" || !q.BeforeCall {
				t.Errorf("question of step %q, before the call %v; want step x1, before the call", q.StepID, q.BeforeCall)
			}
		})
	}
}

// TestUnclearedWaitBarsTheCall: the operator approves through their own
// MCP client (elicitation), and the inbox question is withdrawn; when the
// engine could not clear the step's record that its call waits
// (engine.ErrCallNotCleared), the call is not made: a restart would take
// it as never made and make it again. The same for a form (missing
// arguments); a server's elicitation, asked during the call, is not
// recorded as before the call.
func TestUnclearedWaitBarsTheCall(t *testing.T) {
	e := serverlessExecutor(t, ExecutorConfig{
		OperatorElicit: func(context.Context, string, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true, "path": "/y"}}, nil
		}})
	var asked []engine.OperatorQuestion
	// The inbox's question waits until withdrawn, and its step's wait
	// cannot be cleared.
	op := operatorFunc(func(ctx context.Context, q engine.OperatorQuestion) (engine.Answer, error) {
		asked = append(asked, q)
		<-ctx.Done()
		return engine.Answer{}, fmt.Errorf("%w: %w", engine.ErrCallNotCleared, errors.New("nats: timeout"))
	})
	in := &engine.ExecInput{Operator: op, Agent: engine.AgentState{AgentID: "a1", Name: "alice"},
		Step: engine.StepState{TaskID: "t1", StageID: "s1", StepID: "x1", Executor: "fs"}}

	out, err := e.confirm(t.Context(), in, "fs", &engine.ToolCall{ToolName: "write_file", Arguments: map[string]any{"path": "/x"}})
	if !errors.Is(err, engine.ErrCallNotCleared) || out["approved"] != false {
		t.Errorf("approved through the client with the step's wait not cleared: confirm = %v, %v; want not approved, %v", out, err, engine.ErrCallNotCleared)
	}
	f := formFromSchema(map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}, nil)
	if a, err := e.askForm(t.Context(), in, "which path?", "which path?", f, true); !errors.Is(err, engine.ErrCallNotCleared) {
		t.Errorf("form answered through the client with the step's wait not cleared: %+v, %v; want %v", a, err, engine.ErrCallNotCleared)
	}
	if len(asked) != 2 || !asked[1].BeforeCall || asked[1].StepID != "x1" {
		t.Fatalf("questions %+v; want the approval and the form, both before the call of step x1", asked)
	}
}
