package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// pauseGateStore refuses the first write of a task document marked paused
// and holds the second one (in flight) until released, then refuses it.
type pauseGateStore struct {
	*MemoryStore
	mu      sync.Mutex
	target  string
	n       int
	atPut   func()        // called as the second paused write starts
	inside  chan struct{} // closed when the second paused write starts
	release chan struct{} // the second paused write is answered once closed
}

func (s *pauseGateStore) PutTask(ctx context.Context, t *TaskState) error {
	s.mu.Lock()
	hit := t.TaskID == s.target && s.target != "" && t.Paused
	n := 0
	if hit {
		s.n++
		n = s.n
	}
	atPut, inside, release := s.atPut, s.inside, s.release
	s.mu.Unlock()
	switch {
	case hit && n == 1:
		return errStoreDown
	case hit && n == 2:
		if atPut != nil {
			atPut()
		}
		close(inside)
		<-release
		return errStoreDown
	}
	return s.MemoryStore.PutTask(ctx, t)
}

// TestTaskRetryWaitsForAFailingPause: a pause of a task is refused by the
// store and withdrawn (the caller is told). The task's retry timer is then
// armed, and until it fires the task's memory and the store agree
// (lockDurable has nothing to write first). The operator pauses again; the
// store refuses that write too, and the pause_task call fails. The retry
// timer fires while that write is in flight: had its change (the write
// itself) been recorded then, the refused pause would look grouped with it
// and be kept in memory instead of withdrawn, and the retry would store and
// announce it once the store is back. The caller was told its pause
// failed; the store must not hold the task as paused (a restart would hold
// it, nobody having been told, while meanwhile its agents run in a task
// that reads as paused).
func TestTaskRetryWaitsForAFailingPause(t *testing.T) {
	st := &pauseGateStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	// storeIsBack ends the refusals and waits for the task's retries to
	// end.
	storeIsBack := func(tk *task) {
		st.mu.Lock()
		st.target = ""
		st.mu.Unlock()
		b.waitFor("the task's retries to end", func() bool {
			tk.mu.lockToRead()
			defer tk.mu.unlockRead()
			return !tk.mu.failing
		})
	}
	for attempt := 0; attempt < 20; attempt++ {
		id := b.newTask("pause me")
		b.settle()
		tk, _ := b.sys.task(id)
		if !tk.mu.ops.retry {
			t.Fatal("tasks do not retry refused commits: the scenario cannot arise")
		}
		var failingAtPut atomic.Bool
		inside, release := make(chan struct{}), make(chan struct{})
		st.mu.Lock()
		st.target, st.n, st.inside, st.release = id, 0, inside, release
		st.atPut = func() {
			tk.mu.lockToRead()
			// The retry timer is still armed: nothing was written since
			// the first refusal (lockDurable found the store up to date).
			failingAtPut.Store(tk.mu.failing && tk.mu.retryTimer != nil)
			tk.mu.unlockRead()
		}
		st.mu.Unlock()

		pause := func() error {
			_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: id})
			return err
		}
		if err := pause(); err == nil {
			t.Fatal("the first pause was not refused: the scenario did not arise")
		}
		second := make(chan error, 1)
		go func() { second <- pause() }()
		<-inside
		if !failingAtPut.Load() {
			// The retry fired before the second pause was made (its
			// write went first): try again with a new task.
			close(release)
			<-second
			storeIsBack(tk)
			continue
		}
		// The retry timer fires now, while the second pause's write is
		// in flight. Its retry must wait for the write's answer (the
		// fence); without one it runs and changes the task (a write of
		// its own, which clears the timer).
		tk.mu.lockToRead()
		if tk.mu.retryTimer.Stop() {
			tk.mu.retryTimer.Reset(0)
		}
		tk.mu.unlockRead()
		b.waitFor("the retry to wait for the pause's write, or to change the task during it", func() bool {
			tk.mu.lockToRead()
			defer tk.mu.unlockRead()
			return tk.mu.retryTimer == nil || tk.mu.fenced.Load() > 0
		})
		close(release)
		err := <-second
		if err == nil {
			t.Fatal("the second pause was not refused: the scenario did not arise")
		}
		storeIsBack(tk)
		stored, _ := st.Task(id)
		live := b.task(id)
		_, heldHere := b.sys.paused.Load(id)
		if stored.Paused || live.Paused {
			t.Errorf("pause_task failed (%v), yet the store holds the task paused=%v (readers see paused=%v; the MAS holds it: %v): a change whose caller was told it failed was kept and stored by the task's retry",
				err, stored.Paused, live.Paused, heldHere)
		}
		return
	}
	t.Fatal(errors.New("the retry fired before the second pause in every attempt: the scenario did not arise"))
}

// holdPauseStore holds the first write of the target task marked paused
// (in flight) until release is closed, then refuses it.
type holdPauseStore struct {
	*MemoryStore
	target  atomic.Value
	once    atomic.Bool
	inside  chan struct{}
	release chan struct{}
}

func (s *holdPauseStore) PutTask(ctx context.Context, t *TaskState) error {
	if id, _ := s.target.Load().(string); id != "" && t.TaskID == id && t.Paused && s.once.CompareAndSwap(false, true) {
		close(s.inside)
		<-s.release
		return errStoreDown
	}
	return s.MemoryStore.PutTask(ctx, t)
}

// TestMeterWaitsForAFailingPause: the operator's pause_task is refused by
// the store and the call fails. While its write is in flight, a step's
// usage is metered (the meter's change, kept). The refused pause must still
// be withdrawn, not written with the meter's count: the caller was told it
// failed. A commit withdraws a refused change only when nothing was
// recorded since its write began (m.made == upto), so the meter must wait
// for the write's answer (the fence) before it changes the task.
func TestMeterWaitsForAFailingPause(t *testing.T) {
	st := &holdPauseStore{MemoryStore: NewMemoryStore(), inside: make(chan struct{}), release: make(chan struct{})}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.Budgets.AgentTokens = 1_000_000 })
	w := b.newAgent("w")
	id := b.newTask("pause me", w)
	settleHeld(b)
	tk, _ := b.sys.task(id)
	st.target.Store(id)
	paused := make(chan error, 1)
	go func() {
		_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: id})
		paused <- err
	}()
	<-st.inside
	tk.mu.lockToRead()
	upto := tk.mu.made
	tk.mu.unlockRead()
	metered := make(chan struct{})
	go func() {
		defer close(metered)
		step := &StepState{TaskID: id, StepID: "s1", AgentID: w}
		b.sys.meter(w, step, &AgentState{}, &Output{Usage: Usage{Calls: 1, PromptTokens: 80, CompletionTokens: 20, TotalTokens: 100}})
	}()
	b.waitFor("the meter to wait for the pause's write, or to change the task during it", func() bool {
		tk.mu.lockToRead()
		defer tk.mu.unlockRead()
		return tk.mu.made > upto || tk.mu.fenced.Load() > 0
	})
	close(st.release)
	err := <-paused
	<-metered
	if err == nil {
		t.Fatal("the pause was not refused: the scenario did not arise")
	}
	b.waitFor("the usage to be stored", func() bool {
		stored, _ := st.Task(id)
		return stored.Budget.AgentUsed[w] == 100
	})
	if stored, _ := st.Task(id); stored.Paused {
		_, held := b.sys.paused.Load(id)
		t.Errorf("pause_task failed (%v), yet the store holds the task paused (the MAS holds it: %v): the refused pause was kept and written with the meter's change", err, held)
	}
}

// panicPauseStore panics (a store client's bug) at the first write of the
// target task marked paused, once armed.
type panicPauseStore struct {
	*MemoryStore
	target atomic.Value
	armed  atomic.Bool
}

func (s *panicPauseStore) PutTask(ctx context.Context, t *TaskState) error {
	if id, _ := s.target.Load().(string); id != "" && t.TaskID == id && t.Paused && s.armed.CompareAndSwap(true, false) {
		panic("store client: nil pointer dereference")
	}
	return s.MemoryStore.PutTask(ctx, t)
}

// TestStorePanicInAFencedWriteLeavesTheTaskUsable: the monitor's pause
// button (server/monitor_controls.go) calls TaskInstruction on the
// net/http handler's goroutine, and net/http recovers a handler's panic
// and serves on. The pause is written fenced (lockDurable, syncLocked): a
// panic in the store's PutTask (or ReadTask) during that write must still
// lift the fence, or every later Lock of the task waits for ever (each
// message delivered into it, each agent loop touching it, supervision,
// then Close). Without the fence the same panic left the owner usable (no
// lock is held during the write).
func TestStorePanicInAFencedWriteLeavesTheTaskUsable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &panicPauseStore{MemoryStore: NewMemoryStore()}
		b := bubbleBed(t, func(c *Config) { c.Store = st })
		id := b.newTask("panic in a fenced write")
		synctest.Wait()
		tk, _ := b.sys.task(id)
		st.target.Store(id)
		st.armed.Store(true)
		// The pause, recovered as net/http recovers a handler's panic.
		recovered := make(chan any, 1)
		go func() {
			defer func() { recovered <- recover() }()
			_, _ = b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: id})
		}()
		if r := <-recovered; r == nil {
			t.Fatal("the store did not panic: the scenario did not arise")
		}
		// A message into the task afterwards (the hot path: deliver,
		// hand, task.record).
		delivered := make(chan struct{})
		go func() {
			defer close(delivered)
			b.sys.deliver(b.sys.newMessage("", id, SystemSender, []string{b.op()}, "after the panic", NoRelative))
		}()
		synctest.Wait()
		done := false
		select {
		case <-delivered:
			done = true
		default:
		}
		tk.mu.Mutex.Lock()
		stuck := tk.mu.fence != nil
		f := tk.mu.fence
		tk.mu.fence = nil // let the bubble end
		tk.mu.Mutex.Unlock()
		if f != nil {
			close(f)
		}
		<-delivered
		if !done || stuck {
			t.Errorf("after a panic in the store during the pause's fenced write (recovered, as net/http does), the task's fence stayed set "+
				"(fence set: %v) and a message delivered into the task never returned (delivered: %v): every later Lock of the task waits for ever",
				stuck, done)
		}
	})
}
