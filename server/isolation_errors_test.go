package server_test

import (
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/server"
)

// TestPauseAgentRefusalHidesOtherOperatorsTask: a refused pause_agent must
// not tell bea the ID of ann's task (she could not find it anywhere else).
func TestPauseAgentRefusalHidesOtherOperatorsTask(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	e, ann, bea := o.env, o.annPeer, o.beaPC
	sys := e.stack.Sys
	var added server.AddTaskOut
	ann.call("add_task", map[string]any{"task_name": "ann's", "task_intention": "Research a topic and write a report."}, &added)
	e.stack.WaitFor("ann's task staffed", func() bool { return len(e.stack.Task(added.TaskID).StageList) > 0 && atRest(sys) })
	for _, agent := range []string{sys.ManagerID(), e.stack.AgentByName("alice")} {
		txt := bea.callErr("manage_agent", map[string]any{"action": "pause_agent", "agents": []string{agent}})
		if strings.Contains(txt, added.TaskID) {
			t.Errorf("bea's refused pause_agent of %s names ann's task: %s", agent, txt)
		}
	}
}
