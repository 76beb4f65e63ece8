package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// stallingStore is a MemoryStore whose PutAgent for one agent stops until
// the test lets it go, as a durable store does when its server is slow.
type stallingStore struct {
	*MemoryStore
	mu      sync.Mutex
	agent   string        // whose writes stall ("" = none)
	entered chan struct{} // receives once per stalled write
	release chan struct{} // closed to let the stalled writes go
	puts    map[string]int
	refuse  func(*AgentState) bool // refuses writes it matches
}

func newStallingStore() *stallingStore {
	return &stallingStore{MemoryStore: NewMemoryStore(), puts: map[string]int{}}
}

func (s *stallingStore) stall(agent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agent, s.entered, s.release = agent, make(chan struct{}, 16), make(chan struct{})
}

func (s *stallingStore) PutAgent(ctx context.Context, a *AgentState) error {
	s.mu.Lock()
	s.puts[a.AgentID]++
	stall := a.AgentID == s.agent
	entered, release := s.entered, s.release
	refuse := s.refuse != nil && s.refuse(a)
	s.mu.Unlock()
	if stall {
		entered <- struct{}{}
		<-release
	}
	if refuse {
		return errStoreDown
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

func (s *stallingStore) putsOf(agent string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts[agent]
}

// TestStalledWriteHoldsNoLockAndShowsNothingEarly: while an agent's store
// write hangs, its mutex is free (other changes are made and grouped into
// one next write), readers get the state the store holds at once, and the
// change appears, with its event, only once the store has it.
func TestStalledWriteHoldsNoLockAndShowsNothingEarly(t *testing.T) {
	store := newStallingStore()
	b := newTestbed(t, func(c *Config) { c.Store = store })
	w := b.newAgent("w")
	task := b.newTask("stall", w)
	b.settle()
	a, _ := b.sys.agent(w)

	sub := b.sys.Subscribe(1024)
	defer sub.Close()
	store.stall(w)
	// A memory note is an agent-local change written at once.
	a.mu.Lock()
	a.st.PersistentMemory = map[string]string{"k1": "first"}
	a.changedLocked(Event{Detail: "note one"})
	done := make(chan struct{})
	go func() {
		a.mu.Unlock() // commits: the write stalls
		close(done)
	}()
	waitChan(t, store.entered, "the stalled write")

	// The lock is free during the write.
	if !a.mu.TryLock() {
		t.Fatal("the agent's mutex is held while its store write is in flight")
	}
	a.st.PersistentMemory = map[string]string{"k1": "first", "k2": "second"}
	a.changedLocked(Event{Detail: "note two"})
	second := make(chan struct{})
	go func() {
		a.mu.Unlock() // waits for the first commit, then writes both
		close(second)
	}()

	// Readers see what the store holds: neither note yet.
	for range 3 {
		got, ok := b.sys.Agent(w)
		if !ok {
			t.Fatal("agent not found")
		}
		if len(got.PersistentMemory) != 0 {
			t.Fatalf("a reader sees %v before the store holds it", got.PersistentMemory)
		}
		if _, err := b.sys.Query(w, AskInfoQuery{Type: QueryTaskInfo, TaskID: task}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ev := range drain(sub) {
		if ev.AgentID == w && (ev.Detail == "note one" || ev.Detail == "note two") {
			t.Fatalf("event %+v announced before the store holds the change", ev)
		}
	}

	before := store.putsOf(w)
	close(store.release)
	waitChan(t, done, "the first commit")
	waitChan(t, second, "the second commit")
	got, _ := b.sys.Agent(w)
	if got.PersistentMemory["k2"] != "second" {
		t.Fatalf("after the writes, memory = %v, want both notes", got.PersistentMemory)
	}
	stored, _ := store.Agent(w)
	if stored.PersistentMemory["k2"] != "second" {
		t.Fatalf("stored memory = %v, want both notes", stored.PersistentMemory)
	}
	// The second change waited for the first write and was stored by at
	// most one more write (grouped with anything recorded meanwhile).
	if n := store.putsOf(w) - before; n > 1 {
		t.Errorf("%d writes after the stalled one, want at most 1", n)
	}
	var details []string
	for _, ev := range drain(sub) {
		if ev.AgentID == w && ev.Detail != "" {
			details = append(details, ev.Detail)
		}
	}
	if i, j := slices.Index(details, "note one"), slices.Index(details, "note two"); i < 0 || j < i {
		t.Errorf("events %v: want note one, then note two", details)
	}
}

// TestReadsDoNotWaitOnAStalledWrite: while an agent's change is being
// written to a stalled store (its owner's mutex free), readers get the
// agent as last stored and announced, without the change in progress, and
// do not wait; once the write is through they see the change.
func TestReadsDoNotWaitOnAStalledWrite(t *testing.T) {
	st := newStallingStore()
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	b.join(b.sys.BaseTaskID(), alice)
	b.settle()
	before, _ := b.sys.Agent(alice) // a reader's copy of the current version

	st.stall(alice)
	b.sc.onText("held", func(ctx context.Context, _ *ExecInput) *Output { <-ctx.Done(); return &Output{} })
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		b.inject(alice, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillThink, "held"))
	}()
	<-st.entered

	type result struct {
		agent  AgentState
		agents int
		briefs int
		tasks  int
	}
	got := make(chan result, 1)
	go func() {
		a, _ := b.sys.Agent(alice)
		got <- result{a, len(b.sys.Agents()), len(b.sys.AgentBriefs()), len(b.sys.Tasks())}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second): // a hang bound, not a timing assertion
		close(st.release)
		t.Fatal("reads waited for a stalled store write")
	}
	if len(r.agent.AgentStep.StepList) != len(before.AgentStep.StepList) {
		t.Errorf("a read during the stalled write shows %d steps, want the %d stored before it",
			len(r.agent.AgentStep.StepList), len(before.AgentStep.StepList))
	}
	if r.agents == 0 || r.briefs == 0 || r.tasks == 0 {
		t.Errorf("reads during the stalled write: %d agents, %d briefs, %d tasks", r.agents, r.briefs, r.tasks)
	}
	close(st.release)
	<-injected
	after, _ := b.sys.Agent(alice)
	if len(after.AgentStep.StepList) != len(before.AgentStep.StepList)+1 {
		t.Errorf("after the write: %d steps, want %d", len(after.AgentStep.StepList), len(before.AgentStep.StepList)+1)
	}
}

// TestRefusedGroupedWriteLosesNobodysChange: a write that held the change
// of another holder of the lock (made while the refused write was in
// flight) does not undo it: the refused maker is told and repairs its own
// change, and the other change is stored and announced by the next
// commit. A refused write that held only its maker's change is withdrawn.
func TestRefusedGroupedWriteLosesNobodysChange(t *testing.T) {
	store := newStallingStore()
	b := newTestbed(t, func(c *Config) { c.Store = store })
	w := b.newAgent("w")
	b.settle()
	a, _ := b.sys.agent(w)
	store.mu.Lock()
	store.refuse = func(st *AgentState) bool { _, bad := st.PersistentMemory["poison"]; return bad }
	store.mu.Unlock()

	// Alone: withdrawn, the store's document taken back.
	a.mu.Lock()
	a.st.PersistentMemory = map[string]string{"poison": "x"}
	a.changedLocked(Event{Detail: "poisoned"})
	if err := a.mu.syncLocked(); err == nil {
		t.Fatal("a refused write reported no error")
	}
	if _, ok := a.st.PersistentMemory["poison"]; ok {
		t.Fatal("a refused change of one holder stayed in memory")
	}
	a.mu.Unlock()

	// Grouped: another holder's change made during the refused write.
	store.stall(w)
	a.mu.Lock()
	a.st.PersistentMemory = map[string]string{"poison": "x"}
	a.changedLocked(Event{Detail: "poisoned"})
	refused := make(chan error, 1)
	go func() { refused <- a.mu.syncLocked(); a.mu.Unlock() }()
	waitChan(t, store.entered, "the stalled write")
	if !a.mu.TryLock() {
		t.Fatal("the lock is held during the write")
	}
	a.st.PersistentMemory["kept"] = "y"
	a.changedLocked(Event{Detail: "kept"})
	other := make(chan struct{})
	go func() { a.mu.Unlock(); close(other) }()
	store.mu.Lock()
	store.agent = "" // later writes do not stall
	store.mu.Unlock()
	close(store.release)
	if err := <-refused; err == nil {
		t.Fatal("the refused maker was not told")
	}
	waitChan(t, other, "the other holder's commit")
	// The refused maker repairs its own change (as a step whose outcome
	// was refused does); the other change is then stored with it.
	a.mu.Lock()
	delete(a.st.PersistentMemory, "poison")
	a.changedLocked(Event{Detail: "repaired"})
	if err := a.mu.syncLocked(); err != nil {
		t.Fatalf("repaired write: %v", err)
	}
	a.mu.Unlock()
	stored, _ := store.Agent(w)
	if stored.PersistentMemory["kept"] != "y" {
		t.Fatalf("stored memory %v: the other holder's change was lost", stored.PersistentMemory)
	}
	if got, _ := b.sys.Agent(w); got.PersistentMemory["kept"] != "y" {
		t.Fatalf("readers see %v: the other holder's change was lost", got.PersistentMemory)
	}
}
