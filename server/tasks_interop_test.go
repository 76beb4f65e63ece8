package server_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// TestInteropTasks: the TypeScript SDK's tasks client calls add_task
// task-augmented: the answer is a task at once, tasks/get polls it
// (working) to completed and tasks/result holds the summary; tasks/cancel
// on another cancels the MAS task. After a restart the task is still there.
func TestInteropTasks(t *testing.T) {
	in := needInterop(t)
	team := scripted.NewTeam()
	llm := fakellm.New(t)
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		r := team.Handle(c)
		r.Delay = 20 * time.Millisecond // long enough to cancel a task while it works
		return r
	})
	env := cleanEnv(append(llmEnv(llm.BaseURL()), "MAS_DATA_DIR="+t.TempDir())...)
	srv := in.startHTTP(t, env)

	run := in.runNode(t, in.node, env, "tasks.mjs", "run", srv.base+"/mcp")
	if run.err != nil {
		t.Fatalf("tasks.mjs run: %v\n%s", run.err, lastLines(run.stderr, 30))
	}
	var got struct {
		Completed, Result, Cancelled string
		CancelAnswer                 string `json:"cancel_answer"`
		CancelError                  string `json:"cancel_error"`
		CancelledStatus              string `json:"cancelled_status"`
		Statuses, Listed             []string
	}
	line := strings.TrimSpace(lastLines(run.stdout, 1))
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("tasks.mjs output %q: %v", run.stdout, err)
	}
	t.Logf("tasks.mjs run in %s: %s", run.took.Round(time.Millisecond), line)
	if len(got.Statuses) < 2 || got.Statuses[0] != "created:working" || got.Statuses[len(got.Statuses)-1] != "completed" {
		t.Errorf("statuses %v: want created:working … completed", got.Statuses)
	}
	if !strings.Contains(got.Result, scripted.TaskSummary) {
		t.Errorf("tasks/result %q lacks the summary %q", got.Result, scripted.TaskSummary)
	}
	if got.CancelAnswer != "cancelled" || got.CancelledStatus != "cancelled" || !strings.Contains(got.CancelError, "cancelled") {
		t.Errorf("cancel: answer %q, then %q, stream error %q; want cancelled", got.CancelAnswer, got.CancelledStatus, got.CancelError)
	}
	for _, want := range []string{got.Completed + ":completed", got.Cancelled + ":cancelled"} {
		if !strings.Contains(strings.Join(got.Listed, " "), want) {
			t.Errorf("tasks/list %v lacks %s", got.Listed, want)
		}
	}

	// The MCP tasks are the MAS's durable tasks: a restarted server has them.
	srv.stop(t)
	srv = in.startHTTP(t, env)
	again := in.runNode(t, in.node, env, "tasks.mjs", "get", srv.base+"/mcp", got.Completed)
	if again.err != nil {
		t.Fatalf("tasks.mjs get after the restart: %v\n%s", again.err, lastLines(again.stderr, 30))
	}
	var after struct {
		Status, Result string
		Related        map[string]string
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(again.stdout)), &after); err != nil {
		t.Fatalf("tasks.mjs get output %q: %v", again.stdout, err)
	}
	if after.Status != "completed" || !strings.Contains(after.Result, scripted.TaskSummary) || after.Related["taskId"] != got.Completed {
		t.Errorf("after the restart: %+v; want completed with the summary, related to %s", after, got.Completed)
	}
}

// TestInteropTasksInputRequired: the TypeScript SDK's tasks client follows
// a task-augmented add_task to input_required (alice asks the operator)
// and then, as SEP-1686 asks, calls tasks/result: mas-mcp sends alice's
// question on that call as an elicitation request tagged with the task,
// the client's elicitation handler answers it, alice reads the answer and
// the task runs to its end, which tasks/result answers.
func TestInteropTasksInputRequired(t *testing.T) {
	in := needInterop(t)
	team, llm := fakeTeam(t)
	env := cleanEnv(append(llmEnv(llm.BaseURL()), "MAS_DATA_DIR="+t.TempDir())...)
	srv := in.startHTTP(t, env)

	run := in.runNode(t, in.node, env, "tasks.mjs", "ask", srv.base+"/mcp", interopAnswer)
	if run.err != nil {
		t.Fatalf("tasks.mjs ask: %v\n%s", run.err, lastLines(run.stderr, 30))
	}
	var got struct {
		Task, Result string
		IsError      bool `json:"is_error"`
		Statuses     []string
		Asked        []struct{ Message, Related string }
	}
	line := strings.TrimSpace(lastLines(run.stdout, 1))
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("tasks.mjs output %q: %v", run.stdout, err)
	}
	t.Logf("tasks.mjs ask in %s: %s", run.took.Round(time.Millisecond), line)
	if len(got.Statuses) == 0 || got.Statuses[len(got.Statuses)-1] != "input_required" {
		t.Errorf("statuses %v: want the stream to reach input_required (then tasks/result)", got.Statuses)
	}
	if len(got.Asked) != 1 || got.Asked[0].Message != scripted.OperatorQuestion || got.Asked[0].Related != got.Task {
		t.Errorf("elicitations %+v: want alice's question once, related to task %s", got.Asked, got.Task)
	}
	if got.IsError || !strings.Contains(got.Result, scripted.TaskSummary) {
		t.Errorf("tasks/result %q (isError %v): want the completed task's summary %q", got.Result, got.IsError, scripted.TaskSummary)
	}
	if answers := team.OperatorAnswers(); !slices.ContainsFunc(answers, func(s string) bool { return strings.Contains(s, interopAnswer) }) {
		t.Errorf("alice read %q, want the answer given by elicitation %q", answers, interopAnswer)
	}
}
