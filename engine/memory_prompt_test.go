package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestPromptsHoldOnlyTheTaskOperatorsMemory: an LLM agent shared by two
// operators notes something in its persistent memory while working in
// operator ann's task, then works in operator bea's. The prompt of its step
// in bea's task holds only the memory bea may see: not ann's note, which
// the model working for bea is not given, and which bea's trail of her task
// (mas://tasks/{id}/trail, get_trail) therefore cannot show. Its next step
// in ann's task still has the note.
func TestPromptsHoldOnlyTheTaskOperatorsMemory(t *testing.T) {
	const noteA, msgA, msgB, msgA2 = "NOTE-of-ann's-task-7741", "ann says hello", "bea says hello", "ann says hello again"
	var mu sync.Mutex
	prompts := map[string]string{} // the prompt of w's process_message step on each message
	s := teststack.New(t, teststack.Options{Handler: func(c *fakellm.Call) fakellm.Reply {
		var r fakellm.Reply
		switch c.Skill {
		case "planning":
			r.Content = fakellm.Block("planned_step", "[]")
		case "reflection":
			r.Content = fakellm.Block("reflection_step", "[]")
		case "summary":
			r.Content = fakellm.Block("summary", "done")
		default:
			r.Content = fakellm.Block(c.Skill, "ok")
		}
		if c.AgentName != "w" || c.Skill != "process_message" {
			return r
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range []string{msgA2, msgB, msgA} { // msgA is a prefix of msgA2
			if strings.Contains(c.Prompt, m) {
				if _, ok := prompts[m]; !ok {
					prompts[m] = c.Prompt
				}
				break
			}
		}
		if strings.Contains(c.Prompt, msgA) && !strings.Contains(c.Prompt, msgA2) && !strings.Contains(c.Prompt, noteA) {
			r.Content += "\n" + fakellm.Block("persistent_memory", fakellm.JSON([]map[string]string{{"add": noteA}}))
		}
		return r
	}})
	sys := s.Sys
	ann := sys.OperatorID()
	bea, err := sys.AddOperator("bea")
	if err != nil {
		t.Fatal(err)
	}
	w, err := sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	taskOf := func(op, name string) string {
		id, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: name, TaskIntention: "intention of " + name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: engine.ActionAddTaskParticipant, TaskID: id, Agents: engine.StringList{w}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	taskA, taskB := taskOf(ann, "ann's"), taskOf(bea, "bea's")
	if _, err := sys.HumanSend(ann, engine.HumanMessage{TaskID: taskA, Receiver: []string{w}, Content: msgA}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor("w's memory written in ann's task", func() bool {
		st, _ := sys.Agent(w)
		for _, v := range st.PersistentMemory {
			if strings.Contains(v, noteA) {
				return true
			}
		}
		return false
	})
	if st, _ := sys.AgentFor(bea, w); len(st.PersistentMemory) != 0 {
		t.Fatalf("bea sees w's memory %v: the state's filter is not what this test is about", st.PersistentMemory)
	}
	if _, err := sys.HumanSend(bea, engine.HumanMessage{TaskID: taskB, Receiver: []string{w}, Content: msgB}); err != nil {
		t.Fatal(err)
	}
	trailOf := func(task string) []engine.TrailEntry {
		var all []engine.TrailEntry
		if err := engine.ReadAllTrail(context.Background(), s.Trail, engine.TrailQuery{TaskID: task}, func(e engine.TrailEntry) error {
			all = append(all, e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return all
	}
	holds := func(es []engine.TrailEntry, text string) bool {
		for i := range es {
			if es[i].LLM == nil || es[i].AgentID != w {
				continue
			}
			for _, b := range es[i].Bodies() {
				if strings.Contains(b.Text, text) {
					return true
				}
			}
		}
		return false
	}
	s.WaitFor("w's LLM call in bea's task, on bea's message", func() bool { return holds(trailOf(taskB), msgB) })
	if seen := sys.TrailEntriesFor(bea, trailOf(taskB)); holds(seen, noteA) {
		t.Errorf("bea reads, in the trail of her own task, w's prompt holding the memory w wrote in ann's task (%q)", noteA)
	}
	mu.Lock()
	inB := prompts[msgB]
	mu.Unlock()
	if strings.Contains(inB, noteA) {
		t.Errorf("w's prompt in bea's task holds the memory it wrote in ann's task (%q)", noteA)
	}

	// The note is not lost: w's prompts in ann's task still hold it.
	if _, err := sys.HumanSend(ann, engine.HumanMessage{TaskID: taskA, Receiver: []string{w}, Content: msgA2}); err != nil {
		t.Fatal(err)
	}
	s.WaitFor("w's LLM call in ann's task, on ann's second message", func() bool { return holds(trailOf(taskA), msgA2) })
	mu.Lock()
	inA := prompts[msgA2]
	mu.Unlock()
	if !strings.Contains(inA, noteA) {
		t.Errorf("w's prompt in ann's task lacks the memory it wrote there (%q)", noteA)
	}
}
