package main

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

func TestCrashKillAfterHugeSummary(t *testing.T) { onBothStores(t, killAfterHugeSummary) }

// killAfterHugeSummary: alice's model answers her summary with 2 MB, more
// than NATS takes in one message (1 MiB). The summary is bounded as it is
// taken in, so the store holds what clients see; after SIGKILL and a
// restart, clients read back exactly what they read before.
func killAfterHugeSummary(t *testing.T, natsURL string) {
	team := scripted.NewTeam()
	huge := strings.Repeat("fact ", 400_000)
	// The first call after alice's summary was answered is held until the
	// kill, so the kill finds a step in flight. (Holding bob's summary
	// instead could hold the reply alice waits for, if her question came
	// after his reflection: she would never summarise.)
	var aliceSummarised atomic.Bool
	h := holdFirst(func(*fakellm.Call) bool { return aliceSummarised.Load() })
	llm := fakellm.New(t)
	llm.Handle(h.wrap(func(c *fakellm.Call) fakellm.Reply {
		if c.AgentName == "alice" && c.Skill == "summary" {
			defer aliceSummarised.Store(true)
			return fakellm.Reply{Content: fakellm.Block("summary", huge)}
		}
		return team.Handle(c)
	}))
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL(), NATSURL: natsURL})
	m.start()
	taskID := addTask(m)
	h.wait(t)

	var summary string
	ok, saw := poll(func() (bool, string) {
		var task engine.TaskState
		if err := m.read("mas://tasks/"+taskID, &task); err != nil {
			return false, err.Error()
		}
		for _, st := range task.StageList {
			for id, s := range st.CompletionSummary {
				if strings.HasPrefix(s, "fact fact") {
					summary = s
					return true, id
				}
			}
		}
		return false, "no long summary yet"
	})
	if !ok {
		t.Fatalf("alice's summary never showed: %s\n%s", saw, m.describeAgents())
	}
	if len(summary) > 200_000 || !strings.Contains(summary, "characters dropped") {
		t.Fatalf("alice's summary is %d bytes, want it bounded with a note", len(summary))
	}
	before := m.snapshot(taskID)
	m.kill()

	m.start()
	after := m.snapshot(taskID)
	m.checkKept(before, after)
	stage := func(s snapshot) engine.StageState { return s.task.StageList[0] }
	// (the held call runs again after the restart; bob may add his summary.)
	b, a := stage(before), stage(after)
	for id, s := range b.CompletionSummary {
		if a.CompletionSummary[id] != s {
			t.Errorf("agent %s's summary changed across the restart (%d vs %d bytes)", id, len(s), len(a.CompletionSummary[id]))
		}
	}
	m.waitTaskEnded(taskID)
}
