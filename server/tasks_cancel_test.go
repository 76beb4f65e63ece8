package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// sepTaskParams and sepTask are tasks/cancel's params and result of
// protocol 2025-11-25 (SEP-1686), as a client sees them.
type sepTaskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type sepTask struct {
	mcp.ResultBase
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
}

// TestTasksCancelOfAnEndedTaskIsWellDefined: a tasks/cancel of a task that
// ends on its own (its manager finishes or fails it) before the cancel
// takes effect answers as each protocol asks for a task already in a
// terminal status, whether the task ended before the request came or
// while the server was about to cancel it: 2025-11-25 (SEP-1686) refuses
// it with -32602 naming the status, 2026-07-28's extension (SEP-2663)
// acknowledges it. Either way the task stays as it ended.
func TestTasksCancelOfAnEndedTaskIsWellDefined(t *testing.T) {
	r := newExtRig(t)
	ext := r.client(tokenAnn, true, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "sep-1686", Version: "1"}, nil)
	if err := mcp.AddSendingCustomMethod[*sepTaskParams, *sepTask](c, "tasks/cancel"); err != nil {
		t.Fatal(err)
	}
	sep := r.httpClient(c, tokenAnn)
	sys := r.stack.Sys

	for _, end := range []string{engine.StateFinished, engine.StateFailed} {
		want := map[string]string{engine.StateFinished: "completed", engine.StateFailed: "failed"}[end]
		for _, when := range []string{"before the request", "while the cancel is under way"} {
			for _, proto := range []string{"2025-11-25", "2026-07-28"} {
				name := end + " " + when + " " + proto
				id, err := sys.AddTask(r.ann, engine.AddTaskRequest{TaskName: "race", TaskIntention: "end on its own"})
				if err != nil {
					t.Fatal(err)
				}
				// The task's manager ends it, as its finish_task step would.
				endIt := func() {
					if _, err := sys.TaskInstruction(r.stack.Task(id).TaskManager, engine.TaskInstruction{Action: engine.ActionFinishTask,
						TaskID: id, ExecutionState: end, Summary: "ended on its own"}); err != nil {
						t.Errorf("%s: ending the task: %v", name, err)
					}
				}
				if when == "before the request" {
					endIt()
				} else {
					r.srv.BeforeTaskCancel(func(taskID string) {
						if taskID == id {
							endIt()
						}
					})
				}
				if proto == "2025-11-25" {
					res, err := mcp.CallCustomMethod[*sepTaskParams, *sepTask](context.Background(), sep, "tasks/cancel", &sepTaskParams{TaskID: id})
					if rpcCode(err) != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), "already "+want) {
						t.Errorf("%s: tasks/cancel answered %+v, %v: want -32602 saying the task is already %s", name, res, err, want)
					}
				} else if ack, err := call(t, ext, "tasks/cancel", &extTaskParams{TaskID: id}); err != nil || ack.ResultType != "complete" {
					t.Errorf("%s: tasks/cancel answered %+v, %v: want the acknowledgement", name, ack, err)
				}
				r.srv.BeforeTaskCancel(nil)
				if got := r.stack.Task(id); got.ExecutionState != end || got.TaskSummary != "ended on its own" {
					t.Errorf("%s: the task is %s (%q) after tasks/cancel, want it as it ended: %s", name, got.ExecutionState, got.TaskSummary, end)
				}
			}
		}
	}
}
