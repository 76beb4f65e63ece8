package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
)

// storedEnvelope is agent a1's head as the store holds it, and its size.
func storedEnvelope(t *testing.T, s *Store) (envelope, int) {
	t.Helper()
	entry, err := s.kvA.Get(context.Background(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	var e envelope
	if err := json.Unmarshal(entry.Value(), &e); err != nil {
		t.Fatal(err)
	}
	return e, len(entry.Value())
}

// bases lists the chunks that hold a base of lists.
func bases(t *testing.T, s *Store) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := s.kvS.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range keys.Keys() {
		entry, err := s.kvS.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var c chunkEnvelope
		if err := json.Unmarshal(entry.Value(), &c); err != nil {
			t.Fatal(err)
		}
		if c.Lists != nil {
			out = append(out, k)
		}
	}
	return out
}

// managerLike gives agent a a manager's lists: a working memory of tasks
// tasks, the counts of its work in each (sorted, as the engine keeps
// them), received message IDs, and steps (ended ones chunked).
func managerLike(a *engine.AgentState, tasks, received int) {
	a.WorkingMemory = map[string]map[string][]string{}
	a.StageCounts = nil
	for i := range tasks {
		task := fmt.Sprintf("task-%03d", i)
		a.WorkingMemory[task] = map[string][]string{
			fmt.Sprintf("stage-%03d-a", i): {fmt.Sprintf("step-%03d-1", i), fmt.Sprintf("step-%03d-2", i)},
			fmt.Sprintf("stage-%03d-b", i): {},
		}
		a.StageCounts = append(a.StageCounts, engine.StageCount{TaskID: task, StageID: engine.NoRelative, Steps: i % 7, Chain: i % 3},
			engine.StageCount{TaskID: task, StageID: fmt.Sprintf("stage-%03d-a", i), Steps: i % 5, Reflections: i % 2})
	}
	for i := range received {
		a.Received = append(a.Received, fmt.Sprintf("msg-%05d", i))
	}
}

// TestListsInABase: an agent's lists, once large, go to a base; the head
// then holds how they differ, small, and a new base is written when that
// grows; Load and ReadAgent rebuild the agent exactly after every change,
// whether the store goes on from its own writes or from a Load; one base
// is left at a time; lists that shrink come back into the head and the
// base goes.
func TestListsInABase(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer func() { s.Close() }()
	put := func(a engine.AgentState) {
		t.Helper()
		if err := s.PutAgent(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	check := func(a engine.AgentState, when string) engine.AgentState {
		t.Helper()
		_, _, loaded, read := stored(t, s)
		same(t, "loaded "+when, loaded, a)
		same(t, "read back "+when, read, a)
		if b := bases(t, s); len(b) > 1 {
			t.Fatalf("%s: %d bases kept: %v", when, len(b), b)
		}
		return loaded
	}

	a := agentWithSteps(40, 5)
	managerLike(&a, 100, 600)
	put(a)
	a = check(a, "at first")
	e, size := storedEnvelope(t, s)
	lists := listsSize(&headLists{WorkingMemory: a.WorkingMemory, Received: a.Received, TodoList: a.AgentStep.TodoList})
	if e.Base == "" || !slices.Contains(e.Chunks, e.Base) {
		t.Fatalf("lists of ~%d bytes are in the head (base %q, chunks %v)", lists, e.Base, e.Chunks)
	}
	if e.Agent.WorkingMemory != nil || e.Agent.Received != nil || e.Agent.StageCounts != nil {
		t.Fatal("the head holds the lists as well as the base")
	}
	first := e.Base

	// A crash between a new base's write and its head's leaves a base
	// nothing refers to: the next load deletes it.
	as := s.stepsOf("a1")
	as.mu.Lock()
	orphan, err := s.createChunk(ctx, "a1", as, []byte(`{"schema":3,"agent":"a1","steps":null,"lists":{}}`))
	as.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	a = check(a, "after a crash between a base and its head")
	if b := bases(t, s); !slices.Equal(b, []string{first}) {
		t.Fatalf("bases after the load: %v; want only %s (the orphan %s deleted)", b, first, orphan)
	}

	// Changes as the engine makes them: messages received (the oldest
	// forgotten past 1024), tasks added to and dropped from the working
	// memory (their counts with them), a stage's steps changed (and its
	// count), steps queued, run and ended.
	r := rand.New(rand.NewPCG(18, 3))
	next := 0
	rebased := 0
	lastBase := first
	for round := range 120 {
		for range 2 { // two changes between loads: the store goes on from its own writes
			for range 1 + r.IntN(3) {
				a.Received = append(a.Received, fmt.Sprintf("new-msg-%05d", next))
				next++
			}
			if len(a.Received) > 1024 {
				a.Received = slices.Clone(a.Received[len(a.Received)-512:])
			}
			wm := maps.Clone(a.WorkingMemory)
			counts := slices.Clone(a.StageCounts)
			switch r.IntN(3) {
			case 0:
				task := fmt.Sprintf("new-task-%d", next)
				wm[task] = map[string][]string{"s": {fmt.Sprint("x", next)}}
				counts = append(counts, engine.StageCount{TaskID: task, StageID: "s", Steps: 1})
			case 1:
				keys := slices.Sorted(maps.Keys(wm))
				task := keys[r.IntN(len(keys))]
				delete(wm, task)
				counts = slices.DeleteFunc(counts, func(c engine.StageCount) bool { return c.TaskID == task })
			case 2:
				keys := slices.Sorted(maps.Keys(wm))
				// In place, as the engine changes its working memory.
				task := keys[r.IntN(len(keys))]
				wm[task]["extra"] = append(wm[task]["extra"], fmt.Sprint("y", next))
				if i := slices.IndexFunc(counts, func(c engine.StageCount) bool { return c.TaskID == task }); i >= 0 {
					counts[i].Steps++
					counts[i].Chain = next
				}
			}
			slices.SortFunc(counts, engine.CompareStageCounts)
			a.WorkingMemory, a.StageCounts = wm, counts
			// The first pending step runs and ends; a new one is queued.
			steps := slices.Clone(a.AgentStep.StepList)
			for i := range steps {
				if steps[i].ExecutionState == engine.StateInit {
					steps[i].ExecutionState = engine.StateFinished
					steps[i].ExecuteResult = map[string]any{"think": fmt.Sprint("done ", round)}
					steps[i].FinishedAt = steps[i].CreatedAt.Add(time.Minute)
					a.AgentStep.TodoList = slices.DeleteFunc(slices.Clone(a.AgentStep.TodoList), func(id string) bool { return id == steps[i].StepID })
					break
				}
			}
			id := fmt.Sprint("q", next)
			steps = append(steps, engine.StepState{AgentID: "a1", TaskID: "t0", StepID: id, Type: engine.StepSkill,
				Executor: "think", ExecutionState: engine.StateInit, CreatedAt: steps[0].CreatedAt})
			a.AgentStep.StepList = steps
			a.AgentStep.TodoList = append(slices.Clone(a.AgentStep.TodoList), id)
			put(a)
		}
		a = check(a, fmt.Sprint("after round ", round))
		e, size = storedEnvelope(t, s)
		if e.Base != lastBase {
			rebased++
			lastBase = e.Base
		}
		if e.Base == "" {
			t.Fatalf("round %d: the lists left their base", round)
		}
		if size > lists/4 {
			t.Fatalf("round %d: the head takes %d bytes, for lists of ~%d", round, size, lists)
		}
	}
	if rebased == 0 {
		t.Fatal("the lists' difference grew for 240 changes without a new base")
	}
	t.Logf("%d new bases in 240 changes; the head takes %d bytes", rebased, size)

	// The lists shrink (the tasks ended, their steps were cleaned up):
	// back in the head, and the base goes.
	a.WorkingMemory = map[string]map[string][]string{"t0": {"s": {"one"}}}
	a.StageCounts = []engine.StageCount{{TaskID: "t0", StageID: "s", Steps: 2}}
	a.Received = a.Received[len(a.Received)-3:]
	a.AgentStep.StepList = a.AgentStep.StepList[len(a.AgentStep.StepList)-3:]
	a.AgentStep.TodoList = a.AgentStep.TodoList[len(a.AgentStep.TodoList)-1:]
	put(a)
	a = check(a, "shrunk")
	if e, _ := storedEnvelope(t, s); e.Base != "" || e.Lists != nil {
		t.Fatalf("small lists still told against a base (%q)", e.Base)
	}
	if b := bases(t, s); len(b) != 0 {
		t.Fatalf("the base was kept after the head stopped referring to it: %v", b)
	}
	_ = a
}

// TestListsBaseMissing: a head whose base is gone (a damaged store) fails
// to load with the base named, not with lists silently empty.
func TestListsBaseMissing(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	a := agentWithSteps(2, 1)
	managerLike(&a, 100, 100)
	if err := s.PutAgent(ctx, &a); err != nil {
		t.Fatal(err)
	}
	e, _ := storedEnvelope(t, s)
	if e.Base == "" {
		t.Fatal("no base was written")
	}
	if err := s.kvS.Delete(ctx, e.Base); err != nil {
		t.Fatal(err)
	}
	_, err := s.ReadAgent(ctx, "a1")
	if err == nil || !strings.Contains(err.Error(), e.Base) {
		t.Fatalf("ReadAgent with the base gone: %v; want an error naming %s", err, e.Base)
	}
}

// TestIDRuns: a list told against a base and read back is the list, nil
// and empty kept apart; runs outside the base are refused.
func TestIDRuns(t *testing.T) {
	base := []string{"a", "b", "c", "d", "e"}
	index := map[string]int{}
	for i, id := range base {
		index[id] = i
	}
	for _, cur := range [][]string{nil, {}, {"a", "b"}, {"c", "d", "e", "new", "a"}, {"x<&>", "b", "b", "e"}} {
		runs, _ := runsOf(cur, base, index)
		b, err := json.Marshal(runs)
		if err != nil {
			t.Fatal(err)
		}
		var back idRuns
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got, err := back.expand(base)
		if err != nil {
			t.Fatal(err)
		}
		if (got == nil) != (cur == nil) || !slices.Equal(got, cur) {
			t.Errorf("%q: stored as %s, read back as %q", cur, b, got)
		}
	}
	if runs, _ := runsOf([]string{"a", "b", "c", "d"}, base, index); len(runs) != 1 {
		t.Errorf("the base's own order takes %d runs, want 1", len(runs))
	}
	var bad idRuns
	if err := json.Unmarshal([]byte(`[[3,9]]`), &bad); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.expand(base); err == nil {
		t.Error("a run past the base's end was taken")
	}
}
