package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mas-mcp/mas-mcp/engine"
)

// faultyKV fails the writes a test arms: fail returns the error to give
// and whether the write is to land first (an outcome reported as failed
// that landed all the same).
type faultyKV struct {
	jetstream.KeyValue
	fail func(op, key string) (error, bool)
}

var errStoreDown = fmt.Errorf("store down: %w", nats.ErrConnectionClosed) // not transient: no retries

func (f *faultyKV) check(op, key string) (error, bool) {
	if f.fail == nil {
		return nil, false
	}
	return f.fail(op, key)
}

func (f *faultyKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	err, land := f.check("put", key)
	if err == nil || land {
		n, perr := f.KeyValue.Put(ctx, key, value)
		if err == nil || perr != nil {
			return n, perr
		}
	}
	return 0, err
}

func (f *faultyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	err, land := f.check("create", key)
	if err == nil || land {
		n, cerr := f.KeyValue.Create(ctx, key, value, opts...)
		if err == nil || cerr != nil {
			return n, cerr
		}
	}
	return 0, err
}

func (f *faultyKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	err, land := f.check("update", key)
	if err == nil || land {
		n, uerr := f.KeyValue.Update(ctx, key, value, rev)
		if err == nil || uerr != nil {
			return n, uerr
		}
	}
	return 0, err
}

func (f *faultyKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err, _ := f.check("delete", key); err != nil {
		return err
	}
	return f.KeyValue.Delete(ctx, key, opts...)
}

// headChunks is the chunk list of agent a1's head as stored.
func headChunks(t *testing.T, s *Store) []string {
	t.Helper()
	e, _ := storedEnvelope(t, s)
	return e.Chunks
}

// chunkKeys lists the keys of the chunk bucket.
func chunkKeys(t *testing.T, s *Store) []string {
	t.Helper()
	keys, err := s.kvS.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range keys.Keys() {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkWalk checks what agentSteps keeps after a successful write of list:
// seen is the list by position, each chunked step's loc is in's, a step
// in the head is not in in, and chunks holds exactly the chunks the head
// refers to.
func checkWalk(t *testing.T, s *Store, what string, list []engine.StepState, head []string) {
	t.Helper()
	as := s.stepsOf("a1")
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.seen == nil && len(list) > 0 {
		t.Fatalf("%s: seen is nil after a successful write", what)
	}
	if len(as.seen) != len(list) {
		t.Fatalf("%s: seen has %d steps, the list %d", what, len(as.seen), len(list))
	}
	for i, sn := range as.seen {
		if sn.id != list[i].StepID {
			t.Fatalf("%s: seen[%d] is %s, the list has %s", what, i, sn.id, list[i].StepID)
		}
		loc, ok := as.in[sn.id]
		if sn.loc.c == nil {
			if ok {
				t.Fatalf("%s: step %s is in the head by seen, in chunk %s by in", what, sn.id, loc.c.key)
			}
			continue
		}
		if !ok || loc.c != sn.loc.c {
			t.Fatalf("%s: step %s is in chunk %s by seen, %v by in", what, sn.id, sn.loc.c.key, ok)
		}
		if as.chunks[sn.loc.c.key] != sn.loc.c {
			t.Fatalf("%s: step %s's chunk %s is not the store's record of that key", what, sn.id, sn.loc.c.key)
		}
	}
	var known []string
	for k := range as.chunks {
		known = append(known, k)
	}
	slices.Sort(known)
	if !slices.Equal(known, head) {
		t.Fatalf("%s: the store knows chunks %v, the head refers to %v", what, known, head)
	}
	for id, loc := range as.in {
		if as.chunks[loc.c.key] != loc.c {
			t.Fatalf("%s: in has step %s in chunk %s, which the store no longer knows", what, id, loc.c.key)
		}
	}
}

// TestWritesWithFaultsReadAsPut changes an agent's steps at random, the
// way the engine does (steps queued at the end or before others, ended
// with or without a result, cleaned up from anywhere in the list, an
// ended step shortened; lists growing past a base and back), and writes
// it after each change. Each write finds the steps by what the last one
// knew of them (agentSteps.seen: by position while a step stays where it
// was, by ID once it moved). Now and then a write fails (a chunk's, the
// head's, a delete; some landing all the same), the engine withdrawing
// the change or keeping it for the next write, and a Load comes in
// between. After every successful write what is read back is what was
// put, the store's walk state agrees with itself, and no chunk is lost
// or (absent failed deletes) left over.
func TestWritesWithFaultsReadAsPut(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer func() { s.Close() }()
	fkS := &faultyKV{KeyValue: s.kvS}
	fkA := &faultyKV{KeyValue: s.kvA}
	s.kvS, s.kvA = fkS, fkA
	rng := rand.New(rand.NewPCG(7, 2027))
	at := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	a := engine.AgentState{AgentID: "a1", Name: "manager", AgentStep: engine.AgentStep{AgentID: "a1"}}
	next := 0
	clone := func(x engine.AgentState) engine.AgentState {
		c := x
		c.AgentStep.StepList = slices.Clone(x.AgentStep.StepList)
		c.AgentStep.TodoList = slices.Clone(x.AgentStep.TodoList)
		c.Received = slices.Clone(x.Received)
		return c
	}
	queue := func(k int) {
		for range k {
			id := fmt.Sprint("s", next)
			next++
			a.AgentStep.StepList = append(a.AgentStep.StepList, engine.StepState{
				AgentID: "a1", TaskID: fmt.Sprint("t", rng.IntN(5)), StepID: id, Type: engine.StepSkill,
				Executor: "process_message", ExecutionState: engine.StateInit, CreatedAt: at,
				TextContent: fmt.Sprintf("notice %s %s", id, strings.Repeat("n", rng.IntN(3)*900)),
			})
			a.AgentStep.TodoList = append(a.AgentStep.TodoList, id)
		}
	}
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
	stored := clone(a) // what the store holds, as the engine knows it
	leaked := false    // a delete failed since the last Load
	chunkWrites := 0
	failures := map[string]int{}
	defer func() { t.Logf("failures %v, chunk writes %d", failures, chunkWrites) }()
	for round := range 600 {
		switch r := rng.IntN(12); {
		case r < 2:
			queue(1 + rng.IntN(6))
		case r < 3:
			// Queued before the next step: the steps after it move on.
			before := len(a.AgentStep.StepList)
			queue(1 + rng.IntN(3))
			if before > 0 {
				at := rng.IntN(before)
				added := slices.Clone(a.AgentStep.StepList[before:])
				a.AgentStep.StepList = slices.Insert(slices.Clone(a.AgentStep.StepList[:before]), at, added...)
			}
		case r < 7:
			for range 1 + rng.IntN(8) {
				end(rng.IntN(4))
			}
		case r < 8:
			task := fmt.Sprint("t", rng.IntN(5))
			a.AgentStep.StepList = slices.DeleteFunc(slices.Clone(a.AgentStep.StepList), func(st engine.StepState) bool {
				return st.TaskID == task && st.ExecutionState == engine.StateFinished
			})
		case r < 9:
			for j := range a.AgentStep.StepList {
				if st := &a.AgentStep.StepList[j]; st.ExecutionState == engine.StateFinished {
					st.ExecuteResult = map[string]any{"summary": "short"}
					break
				}
			}
		case r < 10:
			// The lists grow past a base, or shrink back into the head.
			if len(a.Received) < 100 {
				for i := range 300 {
					a.Received = append(a.Received, fmt.Sprintf("m-%d-%d-%s", round, i, strings.Repeat("x", 20)))
				}
			} else if rng.IntN(2) == 0 {
				a.Received = slices.Clone(a.Received[len(a.Received)-10:])
			} else {
				a.Received = append(slices.Clone(a.Received[20:]), fmt.Sprint("m-", round))
			}
		default:
			if n := len(a.AgentStep.StepList); n > 10 {
				from := rng.IntN(n - 3)
				a.AgentStep.StepList = slices.Delete(slices.Clone(a.AgentStep.StepList), from, from+3)
				a.AgentStep.TodoList = slices.DeleteFunc(a.AgentStep.TodoList, func(id string) bool {
					return !slices.ContainsFunc(a.AgentStep.StepList, func(st engine.StepState) bool { return st.StepID == id })
				})
			}
		}
		// Arm a fault for this write, now and then.
		var failAt, failDel int = -1, -1
		land := false
		failHead := false
		if rng.IntN(6) == 0 {
			switch rng.IntN(3) {
			case 0:
				failAt = rng.IntN(3) // the n-th chunk (or base) written
			case 1:
				failHead = true
				land = rng.IntN(2) == 0
			case 2:
				failDel = rng.IntN(2)
			}
		}
		creates, deletes := 0, 0
		fkS.fail = func(op, key string) (error, bool) {
			switch op {
			case "put", "create":
				chunkWrites++
				n := creates
				creates++
				if n == failAt {
					return errStoreDown, false
				}
			case "delete":
				n := deletes
				deletes++
				if n == failDel {
					leaked = true
					return errStoreDown, false
				}
			}
			return nil, false
		}
		fkA.fail = func(op, key string) (error, bool) {
			if failHead && (op == "update" || op == "create") {
				return errStoreDown, land
			}
			return nil, false
		}
		c := clone(a)
		err := s.PutAgent(ctx, &c)
		fkS.fail, fkA.fail = nil, nil
		if err != nil {
			failures[fmt.Sprint(failAt, failHead, land, strings.Contains(err.Error(), "base"))]++
			if failAt < 0 && !failHead {
				t.Fatalf("round %d: a write failed unarmed: %v", round, err)
			}
			// What the store holds is the last write's, or this one's if
			// it landed.
			read, rerr := s.ReadAgent(ctx, "a1")
			if rerr != nil {
				t.Fatalf("round %d: after a failed write: %v", round, rerr)
			}
			if land {
				same(t, fmt.Sprint("read back after a failed write that landed, round ", round), read, a)
				stored = clone(a)
			} else {
				same(t, fmt.Sprint("read back after a failed write, round ", round), read, stored)
			}
			if rng.IntN(2) == 0 {
				// Withdrawn: the engine takes back what the store holds.
				a = clone(read)
			}
			continue
		}
		stored = clone(a)
		read, err := s.ReadAgent(ctx, "a1")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		same(t, fmt.Sprint("read back in round ", round), read, a)
		head := slices.Clone(headChunks(t, s))
		slices.Sort(head)
		checkWalk(t, s, fmt.Sprint("round ", round), a.AgentStep.StepList, head)
		if keys := chunkKeys(t, s); !leaked && !slices.Equal(keys, head) {
			t.Fatalf("round %d: the bucket holds chunks %v, the head refers to %v", round, keys, head)
		}
		if rng.IntN(25) == 0 {
			img, err := s.Load(ctx)
			if err != nil {
				t.Fatalf("round %d: load: %v", round, err)
			}
			same(t, fmt.Sprint("loaded in round ", round), img.Agents[0], a)
			a = clone(img.Agents[0])
			stored = clone(a)
			leaked = false
		}
	}
	if chunkWrites == 0 {
		t.Fatal("no chunk was written: the test did not reach what it tests")
	}
	img, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "loaded at the end", img.Agents[0], a)
}

// TestLoadForgetsABaseTheHeadLacks: a write that made a new base of
// the agent's lists (lists.go) and whose head was then refused leaves
// as.base set to that base. Load (agentSteps.reset: "forgets all the
// store knows of the agent's chunks") keeps it, though the head it loaded
// has no base and sweepChunks deletes the base nothing refers to: every
// write after it builds on a base the store no longer knows, and is
// refused ("not one of its chunks"; before the commit the head was
// written referring to the swept base, and could not be read back).
func TestLoadForgetsABaseTheHeadLacks(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	fkA := &faultyKV{KeyValue: s.kvA}
	s.kvA = fkA
	a := agentWithSteps(2, 1)
	if err := s.PutAgent(ctx, &a); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		a.Received = append(a.Received, fmt.Sprintf("message-%04d-%s", i, strings.Repeat("x", 30)))
	}
	fkA.fail = func(op, key string) (error, bool) { return errStoreDown, false }
	if err := s.PutAgent(ctx, &a); err == nil {
		t.Fatal("the head's write was not refused")
	}
	fkA.fail = nil
	img, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a = img.Agents[0]
	for i := range 300 {
		a.Received = append(a.Received, fmt.Sprintf("message-%04d-%s", i, strings.Repeat("x", 30)))
	}
	for round := range 3 {
		if err := s.PutAgent(ctx, &a); err != nil {
			t.Fatalf("write %d after Load: %v", round, err)
		}
	}
	read, err := s.ReadAgent(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	same(t, "read back", read, a)
}
