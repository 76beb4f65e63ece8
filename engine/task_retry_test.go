package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// letFakeTimePass lets d of fake time pass in a synctest bubble, one
// second at a time, each once every goroutine of the bubble is blocked
// (the engine's timers fire as they fall due; no wall clock is waited on).
func letFakeTimePass(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		synctest.Wait()
		<-time.After(time.Second)
	}
	synctest.Wait()
}

// ghostStore refuses every write of the task named "ghost" while down is
// set, and counts them (after Close, when counting is set).
type ghostStore struct {
	*MemoryStore
	down     atomic.Bool
	counting atomic.Bool
	late     atomic.Int32 // writes of the ghost tried while counting
	id       atomic.Value // the ghost's task ID, from its first write
}

func (s *ghostStore) PutTask(ctx context.Context, t *TaskState) error {
	if t.TaskName == "ghost" {
		s.id.CompareAndSwap(nil, t.TaskID)
		if s.counting.Load() {
			s.late.Add(1)
		}
		if s.down.Load() {
			return errStoreDown
		}
	}
	return s.MemoryStore.PutTask(ctx, t)
}

// refusedGhost has the operator add the task "ghost" while the store
// refuses it, in a synctest bubble, and returns add_task's error.
func refusedGhost(t *testing.T) (*testbed, *ghostStore, error) {
	t.Helper()
	st := &ghostStore{MemoryStore: NewMemoryStore()}
	b := bubbleBed(t, func(c *Config) { c.Store = st })
	synctest.Wait()
	st.down.Store(true)
	_, err := b.sys.AddTask(b.op(), AddTaskRequest{TaskName: "ghost", TaskIntention: "must not exist"})
	if err == nil {
		t.Fatal("add_task succeeded while the store refused the task: the scenario did not arise")
	}
	return b, st, err
}

// TestRefusedAddTaskIsNeverStoredLater: the operator's add_task is
// refused by the store, and the call fails ("a task the store refuses does
// not exist", registerTask). Its owner, never registered, must not write
// the task later: once the store is back, the store must not hold a task
// its creator was told was not created (a restart would bring it to life).
func TestRefusedAddTaskIsNeverStoredLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, st, err := refusedGhost(t)
		id, _ := st.id.Load().(string)
		if _, ok := b.sys.task(id); ok {
			t.Fatalf("add_task failed (%v) but the MAS holds task %s", err, id)
		}
		st.down.Store(false) // the outage ends
		letFakeTimePass(10 * time.Second)
		if stored, ok := st.Task(id); ok {
			t.Errorf("add_task failed (%v), yet once the store was back the store holds task %s %q (state %s): a restart would restore a task its creator was told does not exist",
				err, id, stored.TaskName, stored.ExecutionState)
		}
	})
}

// TestRefusedAddTaskRetriesStopAtClose: the owner of a refused add_task is
// not among the MAS's tasks, so Close could not stop its retries: they must
// stop when the task is refused, or it keeps writing to the store after
// Close returned, for ever while the store refuses it.
func TestRefusedAddTaskRetriesStopAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, st, _ := refusedGhost(t)
		if err := b.sys.Close(); err != nil {
			t.Fatal(err)
		}
		st.counting.Store(true)
		letFakeTimePass(time.Minute)
		late := st.late.Load()
		// End the outage so that a retry chain, if any, ends too (the
		// bubble then has nothing left to run).
		st.down.Store(false)
		letFakeTimePass(10 * time.Second)
		if late > 0 {
			t.Errorf("%d writes of the refused task's document were tried in the minute after Close returned: its retries were never stopped", late)
		}
	})
}

// inFlightStore refuses the writes of one task while down is set; while
// hold is set, the next write of it is held in flight until release is
// closed, or, with honoursCtx, until its context ends (byCtx records it).
// afterClose counts the writes that landed once closed was set.
type inFlightStore struct {
	*MemoryStore
	honoursCtx bool
	target     atomic.Value
	down       atomic.Bool
	hold       atomic.Bool
	inside     chan struct{}
	release    chan struct{}
	byCtx      atomic.Bool
	closed     atomic.Bool
	afterClose atomic.Int32
}

func (s *inFlightStore) PutTask(ctx context.Context, t *TaskState) error {
	if id, _ := s.target.Load().(string); id != "" && t.TaskID == id {
		if s.hold.CompareAndSwap(true, false) {
			close(s.inside)
			done := ctx.Done()
			if !s.honoursCtx {
				done = nil
			}
			select {
			case <-done:
				s.byCtx.Store(true)
				return ctx.Err()
			case <-s.release:
			}
		} else if s.down.Load() {
			return errStoreDown
		}
		err := s.MemoryStore.PutTask(ctx, t)
		if s.closed.Load() {
			s.afterClose.Add(1)
		}
		return err
	}
	return s.MemoryStore.PutTask(ctx, t)
}

// TestCloseEndsARetryInFlight: Close stops the tasks' retries (task.stop)
// and waits for one whose write is already on its way: it must not return
// before that write ends, when the caller may have closed the store or
// started another MAS on it. The store's context (storeCtx) is not the
// MAS's, so that the writes of the steps Close interrupts land; Close must
// still cancel it once they have, or a store that bounds a call by its
// context keeps the retry's write, and Close with it, waiting for ever
// during an outage.
func TestCloseEndsARetryInFlight(t *testing.T) {
	for _, honoursCtx := range []bool{true, false} {
		t.Run(fmt.Sprintf("store honours its context: %v", honoursCtx), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := &inFlightStore{MemoryStore: NewMemoryStore(), honoursCtx: honoursCtx, inside: make(chan struct{}), release: make(chan struct{})}
				b := bubbleBed(t, func(c *Config) { c.Store = st })
				id := b.newTask("retry at close")
				synctest.Wait()
				st.target.Store(id)
				st.down.Store(true)
				if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionPauseTask, TaskID: id}); err == nil {
					t.Fatal("the pause was not refused: the scenario did not arise")
				}
				// The task's retry fires (fake time) and its write is held
				// in flight.
				st.hold.Store(true)
				<-time.After(time.Second)
				select {
				case <-st.inside:
				default:
					t.Fatal("no retry of the task's refused commit was written: the scenario did not arise")
				}
				closeDone := make(chan struct{})
				go func() {
					_ = b.sys.Close()
					st.closed.Store(true)
					close(closeDone)
				}()
				// Every goroutine of the bubble is blocked: Close has done
				// all it will do without the store's answer, an hour of
				// fake time later too.
				synctest.Wait()
				<-time.After(time.Hour)
				synctest.Wait()
				returned := false
				select {
				case <-closeDone:
					returned = true
				default:
				}
				byCtx := st.byCtx.Load()
				close(st.release)
				<-closeDone
				synctest.Wait()
				switch {
				case honoursCtx && (!returned || !byCtx):
					t.Errorf("Close is blocked on the task's retry write (Close returned: %v; the write saw its context cancelled: %v): "+
						"a store that honours its context never answers and Close waits for ever", returned, byCtx)
				case !honoursCtx && returned:
					t.Errorf("Close returned while the task's retry write was in flight (%d task write(s) landed after Close returned)", st.afterClose.Load())
				}
			})
		})
	}
}

// TestTaskRegisteredDuringCloseRetriesNothing: a task registered once Close
// has begun (and may have collected the tasks to stop already) must stop
// its own retries: a later refused write of it would otherwise be retried
// after Close returned, unseen by Close.
func TestTaskRegisteredDuringCloseRetriesNothing(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	if err := b.sys.Close(); err != nil {
		t.Fatal(err)
	}
	late := newTaskOwner(b.sys, TaskState{TaskID: newID(), TaskName: "late", ExecutionState: StateInit})
	if err := b.sys.registerTask(late); err != nil {
		t.Fatal(err)
	}
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == late.st.TaskID })
	late.mu.Lock()
	late.changedLocked(Event{Detail: "late change"})
	err := late.mu.syncLocked()
	scheduled := late.mu.retryTimer != nil
	late.mu.Unlock()
	if err == nil {
		t.Fatal("the late task's write was not refused: the scenario did not arise")
	}
	if scheduled {
		t.Error("a task registered after Close began scheduled a retry of its refused write: Close will not stop it")
	}
}

// closingAgentStore closes the System while it writes the first document
// of the agent named "late", then takes the write.
type closingAgentStore struct {
	*MemoryStore
	sys    atomic.Pointer[System]
	closed atomic.Bool
}

func (s *closingAgentStore) PutAgent(ctx context.Context, a *AgentState) error {
	if a.Name == "late" && s.closed.CompareAndSwap(false, true) {
		_ = s.sys.Load().Close()
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

// TestAgentStoredWhileClosingExists: an agent whose first write the store
// takes while Close runs exists: the store holds it and a restart brings it
// back, so its creator must not be told it failed, and it must not run or
// retry anything after Close.
func TestAgentStoredWhileClosingExists(t *testing.T) {
	st := &closingAgentStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	st.sys.Store(b.sys)
	id, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: "late"})
	if !st.closed.Load() {
		t.Fatal("the System was not closed during the agent's write: the scenario did not arise")
	}
	if err != nil {
		t.Fatalf("CreateAgent failed (%v), yet the store took the agent's first write: a restart would bring back an agent its creator was told does not exist", err)
	}
	a, ok := b.sys.agent(id)
	if !ok {
		t.Fatalf("agent %s is stored but unknown to the MAS", id)
	}
	a.mu.lockToRead()
	stopped, closed := a.stopped, a.mu.closed
	a.mu.unlockRead()
	if !stopped || !closed {
		t.Errorf("the agent created while closing is not stopped (stopped %v, retries closed %v)", stopped, closed)
	}
}
