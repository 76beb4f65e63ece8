package engine

import (
	"fmt"
	"slices"
	"testing"
)

// operatorsByWalk is System.operators as it was before the registry kept
// the operators apart: every agent of the MAS looked at, in the order of
// their enrolment. It is the oracle of the list.
func operatorsByWalk(s *System) []string {
	var out []string
	for _, a := range s.allAgents() {
		if a.kind == KindHuman {
			out = append(out, a.id)
		}
	}
	return out
}

// readersByWalk is System.readers over operatorsByWalk.
func readersByWalk(s *System, taskID string) []string {
	var out []string
	for _, op := range operatorsByWalk(s) {
		if s.Visible(op, taskID) {
			out = append(out, op)
		}
	}
	if len(out) == 0 {
		return []string{""}
	}
	return out
}

// checkOperators compares operators and readers with the walks over every
// agent, for each task of the MAS and a task that does not exist.
func checkOperators(t *testing.T, b *testbed, when string, want int) {
	t.Helper()
	got := b.sys.operators()
	if oracle := operatorsByWalk(b.sys); !slices.Equal(got, oracle) {
		t.Fatalf("%s: operators() = %v, the walk over the agents = %v", when, got, oracle)
	}
	if len(got) != want {
		t.Fatalf("%s: %d operators %v, want %d", when, len(got), got, want)
	}
	ids := []string{"no-such-task"}
	for _, tk := range b.sys.allTasks() {
		ids = append(ids, tk.st.TaskID)
	}
	for _, id := range ids {
		if got, oracle := b.sys.readers(id), readersByWalk(b.sys, id); !slices.Equal(got, oracle) {
			t.Fatalf("%s: readers(%s) = %v, the walk over the agents = %v", when, id, got, oracle)
		}
	}
}

// TestOperatorsKeptWithTheRegistry follows the list of operators the
// registry keeps through start-up, operators and LLM agents added, tasks
// owned by one operator and shared with another, an admin, and a restart
// from the store: it is always the operators among all the agents, in
// their order, and the readers of every task are those the walk over every
// agent finds. Agents are never deleted from a MAS (there is no such
// action), so the list is only appended to.
func TestOperatorsKeptWithTheRegistry(t *testing.T) {
	st := NewMemoryStore()
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; cfg = *c })
	checkOperators(t, b, "after start-up", 1)

	alice := b.newAgent("alice")
	ann := b.operator("ann")
	b.newAgent("bob")
	bea := b.operator("bea")
	checkOperators(t, b, "after agents and operators were added", 3)

	// A task of ann's, shared with bea; one of the default operator's;
	// bea an admin: each task's readers differ.
	owned, err := b.sys.AddTask(ann, AddTaskRequest{TaskName: "ann's", TaskIntention: "of ann"})
	if err != nil {
		t.Fatalf("AddTask: %v", err)
	}
	b.newTask("the default operator's", alice)
	checkOperators(t, b, "with ann's task", 3)
	if _, err := b.sys.ShareTask(ann, owned, bea); err != nil {
		t.Fatalf("ShareTask: %v", err)
	}
	checkOperators(t, b, "with ann's task shared with bea", 3)
	if err := b.sys.SetAdmins([]string{bea}); err != nil {
		t.Fatalf("SetAdmins: %v", err)
	}
	checkOperators(t, b, "with bea an admin", 3)
	b.settle()

	r := restartFrom(t, cfg, b.crashImage(st), b.sc)
	if got, want := r.sys.operators(), []string{b.op(), ann, bea}; !slices.Equal(got, want) {
		t.Fatalf("restored: operators() = %v, want %v", got, want)
	}
	checkOperators(t, r, "restored", 3)
	cara := r.operator("cara")
	r.newAgent("carl")
	checkOperators(t, r, "restored, then an operator added", 4)
	if got := r.sys.operators(); got[len(got)-1] != cara {
		t.Fatalf("operators() = %v: the operator added last is not last", got)
	}
}

// BenchmarkReaders is the list of a task's readers made at the start of
// every step of an agent with persistent memory (stepMemory) and at every
// ask_info: with the registry's list of operators, it costs the
// operators, the same with 10 LLM agents in the MAS as with 1000; a walk
// over every agent grew with the MAS.
func BenchmarkReaders(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			tb := newTestbed(b, nil)
			for i := range n {
				tb.newAgent(fmt.Sprintf("agent%d", i))
			}
			tb.operator("ann")
			base := tb.sys.BaseTaskID()
			if got := len(tb.sys.readers(base)); got != 2 {
				b.Fatalf("the base task has %d readers, want its 2 operators", got)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				tb.sys.readers(base)
			}
		})
	}
}

// TestOperatorNamedFindsTheEarliest: a configured operator is found again
// by its name after a restart (internal/app binds its token to it rather
// than adding it again); of several of one name — which older builds made,
// one per restart — the earliest created is the one, and the others are
// named, whatever order the store restores them in.
func TestOperatorNamedFindsTheEarliest(t *testing.T) {
	st := NewMemoryStore()
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; cfg = *c })
	ann, err := b.sys.AddOperator("ann")
	if err != nil {
		t.Fatal(err)
	}
	dup, err := b.sys.AddOperator("ann")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := b.sys.AddOperator(" bob ")
	if err != nil {
		t.Fatal(err)
	}
	check := func(b *testbed, when string) {
		t.Helper()
		if id, others := b.sys.OperatorNamed("ann"); id != ann || !slices.Equal(others, []string{dup}) {
			t.Errorf("%s: OperatorNamed(ann) = %s, others %v; want %s (the earliest), others [%s]", when, id, others, ann, dup)
		}
		if id, others := b.sys.OperatorNamed("bob "); id != bob || len(others) != 0 {
			t.Errorf("%s: OperatorNamed(bob) = %s, others %v; want %s", when, id, others, bob)
		}
		if id, _ := b.sys.OperatorNamed("carol"); id != "" {
			t.Errorf("%s: OperatorNamed(carol) = %s, want none", when, id)
		}
	}
	check(b, "before a restart")
	check(restartFrom(t, cfg, b.crashImage(st), b.sc), "after a restart")
}
