package engine

import (
	"sync"
	"sync/atomic"
)

// Readers do not wait on an owner that is writing to the store
// (ARCHITECTURE.md "Reads are snapshots"). An owner holds its mutex while
// a change is written through, and a store can stall (an external NATS
// server unreachable until its timeout). Every announced change bumps the
// owner's version after it is stored; a reader that finds the owner busy
// gets the copy a reader made last if that copy is of the current version
// (what the owner is doing now is not stored, so not visible, yet), and
// waits only when the copy it would get is older. Executors and the
// engine's own decisions read under the mutex (snapshot, brief).

// copyAt is a copy of an owner's state and the version it was made at.
type copyAt[T any] struct {
	version uint64
	st      T
}

// busyCopy returns the last copy of an owner's state when the owner is
// busy and that copy is current. Otherwise it returns nil with the
// owner's mutex held, for the caller to read under and unlock.
func busyCopy[T any](mu *sync.Mutex, version *atomic.Uint64, last *atomic.Pointer[copyAt[T]]) *T {
	if mu.TryLock() {
		return nil
	}
	if p := last.Load(); p != nil && p.version == version.Load() {
		return &p.st
	}
	mu.Lock()
	return nil
}

// readOwner copies an owner's state for a reader: under its mutex when it
// is free, else the last copy when it is current. A copy is kept for later
// readers only when the state changed since the last one kept.
func readOwner[T any](mu *sync.Mutex, version *atomic.Uint64, last *atomic.Pointer[copyAt[T]], copyLocked func() T, clone func(*T) T) T {
	if p := busyCopy(mu, version, last); p != nil {
		return clone(p)
	}
	v := copyLocked()
	n := version.Load()
	old := last.Load()
	if old != nil && old.version >= n {
		mu.Unlock()
		return v
	}
	kept := &copyAt[T]{version: n, st: clone(&v)} // shares nothing with v
	mu.Unlock()
	for {
		old := last.Load()
		if (old != nil && old.version >= n) || last.CompareAndSwap(old, kept) {
			return v
		}
	}
}

// read is the agent's state for a reader (System.Agent, Agents, Inbox,
// ask_info).
func (a *agent) read() AgentState {
	return readOwner(&a.mu, &a.version, &a.last, a.st.clone, (*AgentState).clone)
}

// readBrief is brief for a reader.
func (a *agent) readBrief() AgentBrief {
	if p := busyCopy(&a.mu, &a.version, &a.last); p != nil {
		return briefOf(p)
	}
	defer a.mu.Unlock()
	return briefOf(&a.st)
}

// read is the task's state for a reader (System.Task, Tasks, ask_info).
func (t *task) read() TaskState {
	return readOwner(&t.mu, &t.version, &t.last, t.st.clone, (*TaskState).clone)
}
