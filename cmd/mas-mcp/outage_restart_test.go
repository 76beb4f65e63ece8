package main

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// outageKilledThenBack: the LLM endpoint is down (HTTP 503) when the
// manager starts on the scripted team's task, so its planning step waits
// out the outage (one quick retry, a 10-minute window): the manager shows
// working_state "waiting" with waiting_for "LLM endpoint unavailable since
// …" and the operator gets the notice "[LLM endpoint unavailable] … You
// will be told when it answers again." The process is killed (-9) during
// the outage; the endpoint comes back; a new process on the same data
// directory runs the task to its end. It returns the running MAS, the
// task and its manager.
func outageKilledThenBack(t *testing.T) (*masInstance, string, string) {
	t.Helper()
	team := scripted.NewTeam()
	var down atomic.Bool
	down.Store(true)
	llm := fakellm.New(t)
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		if down.Load() {
			return fakellm.Reply{Status: 503, Content: "upstream unavailable"}
		}
		return team.Handle(c)
	})
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL(), NoRace: true,
		Args: []string{"--llm-retries", "1", "--llm-outage-window", "10m"}})
	m.start()
	taskID := addTask(m)

	var task engine.TaskState
	m.mustRead("mas://tasks/"+taskID, &task)
	manager := task.TaskManager
	waitFor(t, "the manager to show it waits out the LLM outage, and the operator to be told", func() (bool, string) {
		var a engine.AgentState
		if err := m.read("mas://agents/"+manager, &a); err != nil {
			return false, err.Error()
		}
		began, _ := outageNotices(m)
		return strings.Contains(a.WaitingFor, "unavailable") && began > 0,
			fmt.Sprintf("%s / %q; %d outage notices", a.WorkingState, a.WaitingFor, began)
	})
	m.kill()

	down.Store(false)
	m.start()
	m.waitTaskEnded(taskID)
	// Once the task ended, its agents drop its steps: the manager is then
	// at rest.
	m.checkCleanedUp(taskID)
	return m, taskID, manager
}

// outageNotices counts the operator's inbox notices that the LLM endpoint
// became unavailable and that it answers again.
func outageNotices(m *masInstance) (began, ended int) {
	m.t.Helper()
	var inbox struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	m.callTool("get_inbox", map[string]any{"limit": 500}, &inbox)
	for _, msg := range inbox.Messages {
		switch {
		case strings.HasPrefix(msg.Content, "[LLM endpoint unavailable]"):
			began++
		case strings.HasPrefix(msg.Content, "[LLM endpoint available]"):
			ended++
		}
	}
	return began, ended
}

// TestOutageKilledThenBack: outages pause, not destroy, across a crash.
// After outageKilledThenBack the endpoint answered every call of the new
// process and the task finished: the manager must not keep telling clients
// it waits for an unavailable endpoint (its stored waiting_for was said by
// a call the crash ended), and the operator, told "You will be told when
// it answers again", must have been told.
func TestOutageKilledThenBack(t *testing.T) {
	m, _, manager := outageKilledThenBack(t)
	var a engine.AgentState
	m.mustRead("mas://agents/"+manager, &a)
	if a.WaitingFor != "" {
		t.Errorf("after the restart the endpoint answered every call and the task finished, yet the manager (working_state %q) still shows waiting_for %q",
			a.WorkingState, a.WaitingFor)
	}
	began, ended := outageNotices(m)
	if began != 1 || ended != 1 {
		t.Errorf("the operator's inbox has %d notice(s) that the LLM endpoint is unavailable and %d that it answers again, want one of each", began, ended)
	}
}
