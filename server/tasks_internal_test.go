package server

import (
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
)

// A paused task's status message says who holds it and what ends the
// pause: a task an operator paused while its budget held it (or that its
// budget held once paused) stays paused after the raise, and its status
// must say so, not promise that the raise lets it go on.
func TestPausedMessageSaysWhoHoldsTheTask(t *testing.T) {
	held := engine.TaskBudget{Held: "task_tokens 1000 reached"}
	for _, tc := range []struct {
		name      string
		task      engine.TaskState
		want, not []string
	}{
		{"running", engine.TaskState{}, nil, nil},
		{"budget", engine.TaskState{Paused: true, PausedFor: engine.PausedBudget, Budget: held},
			[]string{"budget", "task_tokens 1000 reached", "goes on once the budget is raised"}, []string{"pause_task"}},
		{"operator and budget", engine.TaskState{Paused: true, Budget: held},
			[]string{"budget", "task_tokens 1000 reached", "pause_task", "stays paused", "resume_task"}, []string{"goes on once"}},
		{"outage", engine.TaskState{Paused: true, PausedFor: engine.PausedOutage},
			[]string{"LLM endpoint", "resumes by itself"}, nil},
		{"operator", engine.TaskState{Paused: true},
			[]string{"pause_task", "resume_task"}, []string{"budget"}},
	} {
		got := pausedMessage(tc.task)
		if tc.want == nil && got != "" {
			t.Errorf("%s: %q, want none", tc.name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q, want it to say %q", tc.name, got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("%s: %q, must not say %q", tc.name, got, n)
			}
		}
	}
}
