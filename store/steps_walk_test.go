package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestWritesInARowReadAsPut changes an agent's steps at random, the way
// the engine does (steps queued and run, steps ended, cleaned up from
// anywhere in the list, an ended step shortened), and writes it after
// each change without a Load in between: each write finds the steps by
// what the last write knew of them (agentSteps.seen), by position while
// they stay where they were, by ID once steps before them are gone. What
// is read back after every write, and loaded at the end, is what was put.
func TestWritesInARowReadAsPut(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	defer func() { s.Close() }()
	rng := rand.New(rand.NewPCG(18, 2026))
	at := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	a := engine.AgentState{AgentID: "a1", Name: "manager", AgentStep: engine.AgentStep{AgentID: "a1"}}
	next := 0
	queue := func(k int) {
		for range k {
			id := fmt.Sprint("s", next)
			next++
			a.AgentStep.StepList = append(a.AgentStep.StepList, engine.StepState{
				AgentID: "a1", TaskID: fmt.Sprint("t", rng.IntN(5)), StepID: id, Type: engine.StepSkill,
				Executor: "process_message", ExecutionState: engine.StateInit, CreatedAt: at,
				// Some notices are long: the waiting ones go to chunks too.
				TextContent: fmt.Sprintf("notice %s %s", id, strings.Repeat("n", rng.IntN(3)*900)),
			})
			a.AgentStep.TodoList = append(a.AgentStep.TodoList, id)
		}
	}
	// end ends the i-th waiting step, as a step's run does: its result is
	// a new map, or none (steps that end alike differ then only by ID).
	end := func(i int) {
		for j := range a.AgentStep.StepList {
			st := &a.AgentStep.StepList[j]
			if st.ExecutionState != engine.StateInit {
				continue
			}
			if i--; i >= 0 {
				continue
			}
			st.ExecutionState = engine.StateFinished
			st.FinishedAt = at.Add(time.Duration(next) * time.Second)
			if rng.IntN(3) > 0 {
				st.ExecuteResult = map[string]any{"summary": fmt.Sprint("done ", st.StepID)}
			}
			a.AgentStep.TodoList = slices.DeleteFunc(a.AgentStep.TodoList, func(id string) bool { return id == st.StepID })
			return
		}
	}
	put := func(round int) {
		t.Helper()
		// The engine hands each write a copy whose list is its own.
		c := a
		c.AgentStep.StepList = slices.Clone(a.AgentStep.StepList)
		c.AgentStep.TodoList = slices.Clone(a.AgentStep.TodoList)
		if err := s.PutAgent(ctx, &c); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		read, err := s.ReadAgent(ctx, "a1")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		same(t, fmt.Sprint("read back in round ", round), read, a)
	}

	queue(40)
	for round := range 300 {
		switch r := rng.IntN(10); {
		case r < 3:
			queue(1 + rng.IntN(6))
		case r < 7:
			for range 1 + rng.IntN(8) {
				end(rng.IntN(4))
			}
		case r < 8:
			// A task's steps are cleaned up: wherever they are.
			task := fmt.Sprint("t", rng.IntN(5))
			a.AgentStep.StepList = slices.DeleteFunc(slices.Clone(a.AgentStep.StepList), func(st engine.StepState) bool {
				return st.TaskID == task && st.ExecutionState == engine.StateFinished
			})
		case r < 9:
			// An old ended step is shortened: its maps replaced.
			for j := range a.AgentStep.StepList {
				if st := &a.AgentStep.StepList[j]; st.ExecutionState == engine.StateFinished {
					st.ExecuteResult = map[string]any{"summary": "short"}
					break
				}
			}
		default:
			// A few steps from the middle are gone (one stage of a task).
			if n := len(a.AgentStep.StepList); n > 10 {
				from := rng.IntN(n - 3)
				a.AgentStep.StepList = slices.Delete(slices.Clone(a.AgentStep.StepList), from, from+3)
				a.AgentStep.TodoList = slices.DeleteFunc(a.AgentStep.TodoList, func(id string) bool {
					return !slices.ContainsFunc(a.AgentStep.StepList, func(st engine.StepState) bool { return st.StepID == id })
				})
			}
		}
		put(round)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	_, chunks, loaded, _ := stored(t, s)
	same(t, "loaded at the end", loaded, a)
	if len(chunks) == 0 {
		t.Error("no chunk was written: the test did not reach what it tests")
	}
}
