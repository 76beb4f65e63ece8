package server_test

import (
	"context"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/server"
)

// TestCompletionsHideOtherOperatorsTasks: completion/complete does not
// offer bea the ID of ann's task (nor its stages), nor confirm words of its
// name or stage intentions when typed; ann is offered them.
func TestCompletionsHideOtherOperatorsTasks(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	e, ann, bea := o.env, o.annPeer, o.beaPC
	var added server.AddTaskOut
	ann.call("add_task", map[string]any{"task_name": "ann secret merger plan", "task_intention": "Research a topic and write a report."}, &added)
	e.stack.WaitFor("ann's task staffed with stages", func() bool { return len(e.stack.Task(added.TaskID).StageList) > 0 })
	var stages []string
	for _, st := range e.stack.Task(added.TaskID).StageList {
		stages = append(stages, st.StageID)
	}

	complete := func(who *peer, uri, arg, typed string, chosen map[string]string) []string {
		t.Helper()
		p := &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: uri}, Argument: mcp.CompleteParamsArgument{Name: arg, Value: typed}}
		if chosen != nil {
			p.Context = &mcp.CompleteContext{Arguments: chosen}
		}
		res, err := who.client.Complete(context.Background(), p)
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		return res.Completion.Values
	}
	if got := complete(ann, "mas://tasks/{task_id}", "task_id", "merger", nil); !slices.Contains(got, added.TaskID) {
		t.Fatalf("ann is not offered her own task %s for %q: %v; the probe is vacuous", added.TaskID, "merger", got)
	}
	if got := complete(bea, "mas://tasks/{task_id}", "task_id", "", nil); slices.Contains(got, added.TaskID) {
		t.Errorf("bea is offered ann's task ID %s: %v", added.TaskID, got)
	}
	if got := complete(bea, "mas://tasks/{task_id}", "task_id", "merger", nil); slices.Contains(got, added.TaskID) {
		t.Errorf("bea's typed word %q matches ann's task name: %v", "merger", got)
	}
	got := complete(bea, "mas://tasks/{task_id}/stages/{stage_id}", "stage_id", "", map[string]string{"task_id": added.TaskID})
	for _, st := range stages {
		if slices.Contains(got, st) {
			t.Errorf("bea is offered ann's stage ID %s: %v", st, got)
		}
	}
}
