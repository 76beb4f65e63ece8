package server_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCompletions: completion/complete offers the IDs of tasks, stages and
// agents for the resource templates' arguments, matching what was typed (an
// ID's start or a name), a stage within its chosen task, only the caller's
// own inbox; arguments without completions get an empty list.
func TestCompletions(t *testing.T) {
	e := newEnv(t)
	if e.client.InitializeResult().Capabilities.Completions == nil {
		t.Fatal("the completions capability is not advertised")
	}
	f := e.startTask()
	base := e.stack.Sys.BaseTaskID()
	var baseStages []string
	for _, st := range e.stack.Task(base).StageList {
		baseStages = append(baseStages, st.StageID)
	}
	complete := func(ref *mcp.CompleteReference, arg, typed string, chosen map[string]string) *mcp.CompletionResultDetails {
		t.Helper()
		p := &mcp.CompleteParams{Ref: ref, Argument: mcp.CompleteParamsArgument{Name: arg, Value: typed}}
		if chosen != nil {
			p.Context = &mcp.CompleteContext{Arguments: chosen}
		}
		res, err := e.client.Complete(context.Background(), p)
		if err != nil {
			t.Fatalf("complete %s %s %q: %v", ref.URI+ref.Name, arg, typed, err)
		}
		return &res.Completion
	}
	res := func(uri string) *mcp.CompleteReference { return &mcp.CompleteReference{Type: "ref/resource", URI: uri} }
	sorted := func(v []string) []string { return slices.Sorted(slices.Values(v)) }
	for _, tc := range []struct {
		name       string
		ref        *mcp.CompleteReference
		arg, typed string
		chosen     map[string]string
		want       []string
	}{
		{"every task", res("mas://tasks/{task_id}"), "task_id", "", nil, []string{base, f.TaskID}},
		{"a task by its ID's start", res("mas://tasks/{task_id}/conversation"), "task_id", f.TaskID[:8], nil, []string{f.TaskID}},
		{"a task by its name", res("mas://tasks/{task_id}"), "task_id", "REPO", nil, []string{f.TaskID}},
		{"the stages of the chosen task", res("mas://tasks/{task_id}/stages/{stage_id}"), "stage_id", "", map[string]string{"task_id": f.TaskID}, f.Stages},
		{"only the stages of the chosen task", res("mas://tasks/{task_id}/stages/{stage_id}"), "stage_id", "", map[string]string{"task_id": base}, baseStages},
		{"the stages of every task", res("mas://tasks/{task_id}/stages/{stage_id}"), "stage_id", "", nil, append(slices.Clone(baseStages), f.Stages...)},
		{"an agent by its name", res("mas://agents/{agent_id}/steps"), "agent_id", "ali", nil, []string{f.Alice}},
		{"only the caller's inbox", res("mas://operators/{agent_id}/inbox"), "agent_id", "", nil, []string{f.Operator}},
		{"an argument the template does not have", res("mas://tasks/{task_id}"), "agent_id", "", nil, nil},
		{"the prompt's free text", &mcp.CompleteReference{Type: "ref/prompt", Name: "operator_guide"}, "task", "wri", nil, nil},
		{"a prompt the server does not have", &mcp.CompleteReference{Type: "ref/prompt", Name: "test_prompt_with_arguments"}, "arg1", "test", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := complete(tc.ref, tc.arg, tc.typed, tc.chosen)
			if got.Values == nil {
				t.Fatal("values is null, want a list")
			}
			if diff := cmp.Diff(sorted(tc.want), sorted(got.Values)); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
			if got.Total != len(got.Values) || got.HasMore {
				t.Errorf("total %d, hasMore %v for %d values", got.Total, got.HasMore, len(got.Values))
			}
		})
	}
}
