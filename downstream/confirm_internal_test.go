package downstream

import (
	"context"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// operatorFunc answers the risk gate's question as a test says.
type operatorFunc func(context.Context, engine.OperatorQuestion) (engine.Answer, error)

func (f operatorFunc) Ask(ctx context.Context, q engine.OperatorQuestion) (engine.Answer, error) {
	return f(ctx, q)
}

// TestConfirmAsksThroughTheInput: the risk gate asks the operator through
// the step's ExecInput.Operator (no *engine.System needed): the question
// names the tool and goes to the step's task, stage and agent; the answer
// decides; without an Operator the call is refused with the reason.
func TestConfirmAsksThroughTheInput(t *testing.T) {
	set, err := prompts.Load("en", "")
	if err != nil {
		t.Fatal(err)
	}
	pool := NewPool(&Config{}, nil)
	defer pool.Close()
	e, err := NewExecutor(ExecutorConfig{Pool: pool, Texts: set})
	if err != nil {
		t.Fatal(err)
	}
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
		})
	}
}
