package store

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// agentWithSteps is an agent with ended steps e0…e(ended-1), then pending
// steps p0…p(pending-1), and the counts of the stages it works in (which
// the head keeps as they are, whatever goes to chunks).
func agentWithSteps(ended, pending int) engine.AgentState {
	at := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	a := engine.AgentState{AgentID: "a1", Name: "alice", AgentStep: engine.AgentStep{AgentID: "a1"},
		StageCounts: []engine.StageCount{{TaskID: "t0", StageID: "s0", Steps: ended, Reflections: 1, SummaryFailures: 1, Chain: 3},
			{TaskID: "t1", StageID: engine.NoRelative, Steps: pending}}}
	for i := range ended {
		a.AgentStep.StepList = append(a.AgentStep.StepList, engine.StepState{
			AgentID: "a1", TaskID: fmt.Sprint("t", i%3), StepID: fmt.Sprint("e", i), StepIntention: "ended step",
			Type: engine.StepSkill, Executor: "think", ExecutionState: engine.StateFinished,
			ExecuteResult: map[string]any{"think": strings.Repeat("x", 100+i), "n": float64(i)},
			CreatedAt:     at, FinishedAt: at.Add(time.Duration(i) * time.Second),
		})
	}
	for i := range pending {
		id := fmt.Sprint("p", i)
		a.AgentStep.StepList = append(a.AgentStep.StepList, engine.StepState{AgentID: "a1", TaskID: "t0", StepID: id,
			Type: engine.StepSkill, Executor: "think", ExecutionState: engine.StateInit, CreatedAt: at})
		a.AgentStep.TodoList = append(a.AgentStep.TodoList, id)
	}
	return a
}

// stored is what the store holds of agent a1: the head's own step list,
// the chunk keys, and the agent as Load and ReadAgent rebuild it.
func stored(t *testing.T, s *Store) (head []engine.StepState, chunks []string, loaded, read engine.AgentState) {
	t.Helper()
	ctx := context.Background()
	img, err := s.Load(ctx) // first: it sweeps chunks no document refers to
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Agents) != 1 {
		t.Fatalf("%d agents loaded", len(img.Agents))
	}
	entry, err := s.kvA.Get(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	var e envelope
	if err := json.Unmarshal(entry.Value(), &e); err != nil {
		t.Fatal(err)
	}
	keys, err := s.kvS.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		chunks = append(chunks, k)
	}
	slices.Sort(chunks)
	if read, err = s.ReadAgent(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	head = e.Agent.AgentStep.StepList
	if e.HeadSteps != nil { // schema 3: the head's steps apart from the agent
		head = e.HeadSteps
	}
	return head, chunks, img.Agents[0], read
}

// same compares two agents as JSON (what the store promises).
func same(t *testing.T, what string, got, want engine.AgentState) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		var gm, wm any
		_ = json.Unmarshal(g, &gm)
		_ = json.Unmarshal(w, &wm)
		t.Fatalf("%s differs from what was put (-put +got):\n%s", what, cmp.Diff(wm, gm))
	}
}

// TestEndedStepsInChunks: an agent's ended steps leave its document for
// chunks written once; the document keeps the steps that may change; Load
// and ReadAgent rebuild the agent exactly; chunks whose steps are gone
// are deleted, sparse ones compacted; a chunked step that changes is
// stored again.
func TestEndedStepsInChunks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	defer func() { s.Close() }()
	put := func(a engine.AgentState) {
		t.Helper()
		if err := s.PutAgent(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}

	// Few ended steps: all in the document, no chunk.
	a := agentWithSteps(chunkSteps-1, 2)
	put(a)
	head, chunks, loaded, read := stored(t, s)
	if len(head) != len(a.AgentStep.StepList) || len(chunks) != 0 {
		t.Fatalf("%d steps in the head, chunks %v; want all %d and none", len(head), chunks, len(a.AgentStep.StepList))
	}
	same(t, "loaded", loaded, a)
	same(t, "read back", read, a)
	a = loaded // as a restart goes on: with what was loaded

	// 30 ended steps: chunked by 8, the head keeps the 2 pending ones.
	a = agentWithSteps(30, 2)
	put(a)
	head, chunks, loaded, read = stored(t, s)
	if len(head) != 2 || len(chunks) != 4 {
		t.Fatalf("%d steps in the head, chunks %v; want 2 and 4 chunks", len(head), chunks)
	}
	same(t, "loaded", loaded, a)
	same(t, "read back", read, a)
	a = loaded

	// A pending step runs and ends: it stays in the head (one write per
	// change) until chunkSteps ended steps are waiting.
	a.AgentStep.StepList[30].ExecutionState = engine.StateFinished
	a.AgentStep.TodoList = a.AgentStep.TodoList[1:]
	put(a)
	head, chunks, loaded, _ = stored(t, s)
	if len(head) != 2 || len(chunks) != 4 {
		t.Fatalf("%d steps in the head, chunks %v; want 2 and 4", len(head), chunks)
	}
	same(t, "loaded", loaded, a)
	a = loaded

	// A chunked step changes after all: a new map, as the engine makes: stored again, as it is now.
	a.AgentStep.StepList[3].ExecuteResult = map[string]any{"think": "changed"}
	put(a)
	_, _, loaded, read = stored(t, s)
	same(t, "loaded after a chunked step changed", loaded, a)
	same(t, "read back after a chunked step changed", read, a)
	a = loaded

	// The first 20 steps are cleaned up (a stage ended): the two chunks
	// that held only them are deleted; the third keeps 4 of its 8 (not
	// sparse).
	a.AgentStep.StepList = slices.Clone(a.AgentStep.StepList[20:])
	put(a)
	_, chunks, loaded, _ = stored(t, s)
	if len(chunks) != 2 {
		t.Fatalf("chunks %v after cleaning up; want 2", chunks)
	}
	same(t, "loaded after cleaning up", loaded, a)
	a = loaded

	// 3 more gone: the third chunk keeps 1 of 8, sparse: its step goes
	// back into the head.
	a.AgentStep.StepList = slices.Clone(a.AgentStep.StepList[3:])
	put(a)
	head, chunks, loaded, _ = stored(t, s)
	if len(chunks) != 1 || len(head) != 3 {
		t.Fatalf("%d steps in the head, chunks %v after compaction; want 3 and 1", len(head), chunks)
	}
	same(t, "loaded after compaction", loaded, a)
	a = loaded

	// A restart reads the same, and a chunk left by a crash between a
	// chunk's write and its document's is deleted.
	orphan := "a1.99"
	if _, err := s.kvS.Create(ctx, orphan, []byte(`{"schema":2,"agent":"a1","steps":[]}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	_, chunks, loaded, _ = stored(t, s)
	if slices.Contains(chunks, orphan) {
		t.Fatalf("chunks %v: the orphan was not swept", chunks)
	}
	same(t, "loaded after a restart", loaded, a)
	a = loaded
	b := agentWithSteps(40, 0)
	b.AgentStep.StepList = append(a.AgentStep.StepList, b.AgentStep.StepList[30:]...)
	for i := range b.AgentStep.StepList[len(a.AgentStep.StepList):] {
		b.AgentStep.StepList[len(a.AgentStep.StepList)+i].StepID = fmt.Sprint("n", i)
	}
	put(b)
	_, chunks, loaded, _ = stored(t, s)
	same(t, "loaded after more steps", loaded, b)
	// The new chunks take the numbers of deleted ones (so an agent leaves
	// no more delete markers than it had chunks at once), never a live one.
	if !slices.Contains(chunks, "a1.3") || len(chunks) != 3 {
		t.Fatalf("chunks %v: want a1.3 and two new ones", chunks)
	}
	for _, k := range chunks {
		var n int
		if _, err := fmt.Sscanf(k, "a1.%d", &n); err != nil || n >= 99 {
			t.Errorf("chunk %s: new chunks must reuse the numbers of deleted ones (chunks %v)", k, chunks)
		}
	}
}

// TestChunkedDocumentFromAnOlderSchema: a document of schema 1 (every
// step inline) still loads, and its next write chunks it.
func TestChunkedDocumentFromAnOlderSchema(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	a := agentWithSteps(20, 1)
	b, err := json.Marshal(envelope{Schema: 1, Agent: &a})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.kvA.Create(ctx, "a1", b); err != nil {
		t.Fatal(err)
	}
	img, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "schema 1 loaded", img.Agents[0], a)
	if err := s.PutAgent(ctx, &a); err != nil {
		t.Fatal(err)
	}
	head, chunks, loaded, _ := stored(t, s)
	if len(chunks) != 3 || len(head) != 1 {
		t.Fatalf("%d steps in the head, chunks %v; want 1 and 3", len(head), chunks)
	}
	same(t, "rewritten", loaded, a)
}

// TestWaitingStepsInChunks: many waiting steps with texts (a manager's
// queued notices) leave the document for chunks; a few small ones (a
// worker's plan) stay; a chunked waiting step that changes in any way —
// it starts, its text changes to one of the same length, it gets a tool
// call — is stored again as it is now.
func TestWaitingStepsInChunks(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	put := func(a engine.AgentState) {
		t.Helper()
		if err := s.PutAgent(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}

	// A plan of 20 small steps: all in the head.
	a := agentWithSteps(0, 20)
	put(a)
	head, chunks, loaded, _ := stored(t, s)
	if len(head) != 20 || len(chunks) != 0 {
		t.Fatalf("%d steps in the head, chunks %v; want all 20 and none", len(head), chunks)
	}
	same(t, "loaded", loaded, a)

	// 100 queued notices of 1 KB each: chunked.
	a = agentWithSteps(3, 100)
	for i := 3; i < len(a.AgentStep.StepList); i++ {
		a.AgentStep.StepList[i].TextContent = fmt.Sprintf("notice %03d %s", i, strings.Repeat("n", 1000))
	}
	put(a)
	head, chunks, loaded, read := stored(t, s)
	if len(head) > chunkSteps || len(chunks) < 100/chunkSteps {
		t.Fatalf("%d steps in the head, %d chunks; want at most %d and at least %d", len(head), len(chunks), chunkSteps, 100/chunkSteps)
	}
	same(t, "loaded", loaded, a)
	same(t, "read back", read, a)
	a = loaded

	// Each kind of change brings a chunked step back, as it is now.
	a.AgentStep.StepList[10].ExecutionState = engine.StateRunning
	a.AgentStep.TodoList = slices.DeleteFunc(a.AgentStep.TodoList, func(id string) bool { return id == a.AgentStep.StepList[10].StepID })
	txt := []byte(a.AgentStep.StepList[20].TextContent)
	txt[len(txt)-1] = 'X'
	a.AgentStep.StepList[20].TextContent = string(txt) // same length
	a.AgentStep.StepList[30].InstructionContent = &engine.ToolCall{ToolName: "echo", Arguments: map[string]any{"a": "b"}}
	a.AgentStep.StepList[40].ReplyTo = "someone"
	put(a)
	head, _, loaded, read = stored(t, s)
	same(t, "loaded after changes", loaded, a)
	same(t, "read back after changes", read, a)
	for _, i := range []int{10, 20, 30, 40} {
		id := a.AgentStep.StepList[i].StepID
		if !slices.ContainsFunc(head, func(st engine.StepState) bool { return st.StepID == id }) {
			t.Errorf("changed step %s is not back in the head", id)
		}
	}
}

// TestSameWaitingKnowsEveryField changes each field of a waiting step in
// turn: sameWaiting must see every change (a field added to StepState and
// not compared would let a changed step stay in its stale chunk).
func TestSameWaitingKnowsEveryField(t *testing.T) {
	base := engine.StepState{TaskID: "t", StageID: "s", AgentID: "a", StepID: "p", Type: engine.StepSkill,
		Executor: "think", ExecutionState: engine.StateInit, CreatedAt: time.Unix(1, 0)}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		changed := base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Map:
			v.Set(reflect.MakeMap(v.Type()))
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
		case reflect.Struct:
			switch x := v.Addr().Interface().(type) {
			case *time.Time:
				*x = x.Add(time.Second)
			case *engine.Usage:
				x.PromptTokens++
			default:
				t.Fatalf("field %s (%s): teach this test (and sameWaiting) how it changes", f.Name, f.Type)
			}
		default:
			t.Fatalf("field %s (%s): teach this test (and sameWaiting) how it changes", f.Name, f.Type)
		}
		if sameWaiting(&base, &changed) {
			t.Errorf("field %s changed, but sameWaiting says the step is the same", f.Name)
		}
	}
	if c := base; !sameWaiting(&base, &c) {
		t.Error("an unchanged step is not the same")
	}
}
