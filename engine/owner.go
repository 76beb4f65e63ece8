package engine

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// How an owner's changes reach the store, the readers and the bus
// (ARCHITECTURE.md "One owner per state"; docs/engine.md "Owners").
//
// Each task and each agent is an owner with a single writer's lock,
// ownerMu. A change is made in memory under the lock and recorded there
// (change); nothing under the lock does I/O. Releasing the lock commits:
// the goroutine that made the change writes the owner's document as it is
// now, without the lock, and only once the store holds it publishes the
// document as the readers' snapshot and announces the changes' events, in
// the order they were made. The commits of one owner are ordered by
// commitMu, so writes of one document never overtake each other, and
// changes made by others while a write is in flight are grouped into the
// next write (group commit: one write for all of them).
//
// The goroutine that made a change returns from Unlock only when the change
// is stored and announced (or refused), so what it does next — run a tool
// call after marking the step running, tell another owner — happens after
// the store holds it. A write the store refuses is reported by syncLocked
// to callers that must fail visibly. When the refused write held only the
// changes of one holder of the lock (the usual case), the owner takes back
// the document the store holds: those changes are withdrawn, never
// announced. When it held changes of several holders (grouped while
// another write was in flight), taking the document back would silently
// undo changes whose makers are not told (a released wait, a queued
// step): they stay in memory, unannounced, and the next commit writes and
// announces them; each maker is told of the refusal. A holder whose change
// nobody could fail visibly (a message taken, a wait timed out, a step the
// progress guard queued) marks it kept (keepLocked): it is never
// withdrawn but kept the same way, since withdrawing it would lose it
// until a restart, and an outage must pause the work, not destroy it
// (the liveness promise). An owner that opts in (ops.retry: agents, tasks)
// then retries the commit with a bounded backoff until the store takes
// one, and reports meanwhile that its last commit was refused
// (refusedLocked), so its agent starts no step the store does not know of.
// A write refused as too large (ErrTooLarge: past what the store takes in
// one write, which the bound's estimate of the document fell short of) is
// never retried as it is: the owner bounds the document harder, from then
// on (ops.bound), and writes it again at once (tighter); refused again,
// its changes are withdrawn, kept or not, one holder's or several's, and
// logged with the document's size and the limit (ops.withdrawn). Written
// again they would be refused for ever, every later change of the owner
// waiting behind them.
//
// Readers take the snapshot (read): they never wait for a write. Without a
// store nothing is written; the snapshot is then made lazily, by the first
// reader after a change, under the lock (held only for in-memory work).

// ownerOps is what ownerMu needs from its owner. Each func but put and
// readBack is called with the lock held.
type ownerOps[T any] struct {
	// copy returns a deep copy of the state, for the store and the readers.
	// reuse, when not nil, is a snapshot no reader can see any more, whose
	// storage the copy may take over (a manager's step list of a thousand
	// steps, copied at each of its commits, was most of what the engine
	// allocated in a burst of tasks).
	copy func(reuse *T) T
	// reuses says that copy takes over a reuse it is given: only then
	// does the owner keep the snapshot a commit replaces.
	reuses bool
	// clone deep-copies a snapshot (to take it back after a refused write
	// when the store cannot be read either).
	clone func(*T) T
	// bound, when set, keeps the state within its bounds before a commit
	// copies it to be written (what it shortens goes with that write);
	// harder once the store refused one of the owner's documents as too
	// large (ErrTooLarge): the estimate the bound works from fell short.
	bound func(harder bool)
	// put writes a document; nil means there is no store.
	put func(*T) error
	// readBack reads the document the store holds (nil: none can be read).
	readBack func() (T, error)
	// restore takes back a document read after a refused write.
	restore func(T)
	// refused logs a refused write.
	refused func(error)
	// tightened logs a document the store refused as too large, to be
	// bounded harder and written again (tighter).
	tightened func(error)
	// withdrawn logs the changes of a document the store refused as too
	// large even bounded harder: they are withdrawn, whoever made them,
	// since written again they would be refused for ever.
	withdrawn func(err error, changes int)
	// announce publishes one event.
	announce func(Event)
	// wake, when set, is called after Unlock has committed, if a holder
	// asked for it (wakeLocked), and after a commit succeeds that ends a
	// run of refused ones.
	wake func()
	// retry has a refused commit retried with a bounded backoff until the
	// store takes one (or the owner is closed).
	retry bool
}

// The backoff of a refused commit's retries: from retryFirst, doubled up
// to retryMax. A store outage is waited out at a few writes a minute at
// most, and its end is noticed within retryMax.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = 5 * time.Second
)

// lostSpan is a range of changes (after, upto] a refused write withdrew.
type lostSpan struct {
	after, upto uint64
	err         error
}

// maxSessions bounds the holdings an owner remembers while its changes are
// not durable; past it the oldest are forgotten (more than one is all a
// refused write needs to know).
const maxSessions = 16

// durableLocked records that the store holds every change up to upto: the
// holdings whose changes it holds are forgotten. The lock is held.
func (m *ownerMu[T]) durableLocked(upto uint64) {
	m.durable = upto
	m.sessions = slices.DeleteFunc(m.sessions, func(start uint64) bool { return start < upto })
}

// soloLocked reports whether the changes up to upto that the store lacks
// are one holding's. The lock is held.
func (m *ownerMu[T]) soloLocked(upto uint64) bool {
	n := 0
	for _, start := range m.sessions {
		if start < upto {
			n++
		}
	}
	return n == 1
}

// maxLostSpans bounds the refusals remembered for callers still to learn
// of them (each is learnt by its callers right after it happens).
const maxLostSpans = 16

type ownerMu[T any] struct {
	sync.Mutex
	commitMu sync.Mutex
	ops      ownerOps[T]

	// guarded by Mutex
	made    uint64 // changes recorded
	settled uint64 // changes stored and announced, or refused
	held    uint64 // made when the current holder took the lock
	durable uint64 // made when the store last held the state in memory
	// sessions holds, for each holding of the lock that changed something
	// the store does not hold yet, made before its first change (at most
	// maxSessions, the newest): a refused write is withdrawn only when it
	// holds one holder's changes, whoever commits it (a reader releasing
	// the lock commits what is pending too).
	sessions []uint64
	write    bool // a change recorded since the last commit must be stored
	keep     bool // a change recorded since the last commit is never withdrawn
	wakeup   bool // call ops.wake after the lock is released
	events   []Event
	lost     []lostSpan
	// failing is set while the last commit was refused; backoff is the
	// wait before the next retry, retryTimer the retry scheduled, closed
	// set once the owner stops (no retry is scheduled after that).
	failing    bool
	backoff    time.Duration
	retryTimer *time.Timer
	closed     bool
	// tight is set once the store refused a document of the owner's as
	// too large: from then on it is bounded harder (ops.bound).
	tight bool
	// strict is set while the holder's change must fail visibly if
	// refused (lockDurable); fence, while such a change is being written:
	// other holders wait for it to be stored or refused before they
	// change anything (Lock), so that a refusal withdraws it alone. Kept
	// with changes made meanwhile, it would be stored later while its
	// caller was told it failed (a pause stored with a step's tokens,
	// nobody held). Readers do not wait.
	strict bool
	fence  chan struct{}
	// fenced counts the holders that waited at a fence (tests watch it).
	fenced atomic.Int32
	// retrying counts the retries scheduled or under way, for Close to
	// wait out (waitRetries).
	retrying sync.WaitGroup

	// snap is the state as the store holds it and the bus announced it;
	// nil when the next reader must make it (no store, or nothing
	// committed yet).
	snap atomic.Pointer[T]
	// readers counts the readers using a snapshot (read, peek). retired,
	// guarded by commitMu, is the snapshot the last commit replaced: the
	// next commit's copy reuses it when no reader is at work, since a
	// reader that comes later finds a newer one (ops.copy).
	readers atomic.Int32
	retired *T
}

// publishLocked makes doc the readers' snapshot; commitMu is held.
func (m *ownerMu[T]) publishLocked(doc *T) {
	old := m.snap.Swap(doc)
	if m.ops.reuses {
		m.retired = old
	}
}

// reusable returns the retired snapshot if no reader can be using it (nil
// otherwise), and forgets it; commitMu is held. A reader counted after
// this check finds the retired snapshot already replaced: it was swapped
// out before the check, and the count and the snapshot are atomics (what
// one goroutine did first, the others see first).
func (m *ownerMu[T]) reusable() *T {
	r := m.retired
	m.retired = nil
	if r == nil || m.readers.Load() != 0 {
		return nil
	}
	return r
}

// change records one change; the lock must be held. persist says whether
// the store must hold the change before it is announced (a message's
// delivery, stored as the message itself, need not be).
func (m *ownerMu[T]) change(ev Event, persist bool) {
	if m.made == m.held {
		// The holder's first change.
		m.sessions = append(m.sessions, m.made)
		if len(m.sessions) > maxSessions {
			m.sessions = slices.Delete(m.sessions, 0, len(m.sessions)-maxSessions)
		}
	}
	m.made++
	m.write = m.write || persist
	m.events = append(m.events, ev)
}

// keepLocked marks the changes recorded since the last commit as ones the
// owner must not withdraw if the store refuses them: nobody could be told
// of the refusal, so withdrawing would lose them (a message taken, a wait
// released). They stay in memory, unannounced, until a commit succeeds.
// The lock must be held.
func (m *ownerMu[T]) keepLocked() { m.keep = true }

// tightLocked reports whether the owner's documents are bounded harder
// (a document of its was refused as too large). The lock must be held.
func (m *ownerMu[T]) tightLocked() bool { return m.tight }

// refusedLocked reports whether the owner's last commit was refused: its
// memory may hold changes the store lacks. The lock must be held.
func (m *ownerMu[T]) refusedLocked() bool { return m.failing }

// closeLocked stops the retries of refused commits (the owner stops).
// The lock must be held.
func (m *ownerMu[T]) closeLocked() {
	m.closed = true
	if m.retryTimer != nil {
		if m.retryTimer.Stop() {
			m.retrying.Done() // it will not run
		}
		m.retryTimer = nil
	}
}

// waitRetries waits for a retry under way to end (after closeLocked).
func (m *ownerMu[T]) waitRetries() { m.retrying.Wait() }

// refusedCommitLocked records a refused commit and, when the owner retries,
// schedules the next try. The lock must be held.
func (m *ownerMu[T]) refusedCommitLocked() {
	m.failing = true
	if !m.ops.retry || m.closed || m.retryTimer != nil {
		return
	}
	m.backoff = min(max(2*m.backoff, retryFirst), retryMax)
	m.retrying.Add(1)
	m.retryTimer = time.AfterFunc(m.backoff, m.retryCommit)
}

// retryCommit commits again after a refused commit: what the store lacks
// (changes kept in memory) is written, or, when the refused changes were
// withdrawn, the document as it is, to learn whether the store is back.
func (m *ownerMu[T]) retryCommit() {
	defer m.retrying.Done()
	m.Lock()
	m.retryTimer = nil
	if m.closed || !m.failing {
		m.Mutex.Unlock()
		return
	}
	m.writeAgainLocked()
	m.Unlock()
}

// writeAgainLocked records a change that is the write itself (nothing to
// announce), kept: the next commit writes the document even when nothing
// changed since a refused one, whose changes, kept in memory, are written
// again with it. The lock must be held.
func (m *ownerMu[T]) writeAgainLocked() {
	m.change(Event{}, true)
	m.keepLocked()
}

// Lock takes the owner's lock; the changes made until Unlock are one
// holder's.
func (m *ownerMu[T]) Lock() {
	m.Mutex.Lock()
	for m.fence != nil {
		// A change that must fail visibly is being written.
		f := m.fence
		m.fenced.Add(1)
		m.Mutex.Unlock()
		<-f
		m.Mutex.Lock()
	}
	m.held = m.made
}

// TryLock is Lock when the lock is free and no write is fenced.
func (m *ownerMu[T]) TryLock() bool {
	if !m.Mutex.TryLock() {
		return false
	}
	if m.fence != nil {
		m.Mutex.Unlock()
		return false
	}
	m.held = m.made
	return true
}

// wakeLocked asks for ops.wake once the lock is released and the changes
// are committed. Waking the owner's goroutine while the lock is held would
// have it block on the lock (and the commit) at once: with several cores
// that costs a park and a wake-up per hand-over, the message hop's tail.
func (m *ownerMu[T]) wakeLocked() { m.wakeup = true }

// Unlock releases the lock and commits what was changed under it, or is
// still on its way: what the holder read and acts on next is stored.
func (m *ownerMu[T]) Unlock() {
	v, pending, wake := m.made, m.made > m.settled, m.wakeup
	m.wakeup, m.strict = false, false
	if !pending {
		m.keep = false // nothing was changed: nothing to keep
	}
	m.Mutex.Unlock()
	if pending {
		_ = m.commit(v)
	}
	if wake && m.ops.wake != nil {
		m.ops.wake()
	}
}

// lockDurable is Lock for a holder whose change must fail visibly if the
// store refuses it: what is not stored yet (a step report on its way, a
// change kept after a refusal) is committed first, so that the holder's
// own change, refused, is withdrawn alone and not kept with the others, to
// be stored later after its caller was told it failed. A refusal of those
// is returned, with the lock released, before the holder changes anything.
// Until Unlock, each syncLocked fences the owner while it writes: other
// holders wait to change it, so the write holds this holder's change alone.
func (m *ownerMu[T]) lockDurable() error {
	m.Lock()
	m.strict = true
	// A few rounds: changes others make meanwhile are committed too (none
	// once strict fences the writes).
	for range 16 {
		if m.durable == m.made {
			return nil
		}
		if m.made == m.settled {
			m.writeAgainLocked() // kept after a refusal
		}
		if err := m.syncLocked(); err != nil {
			m.Unlock()
			return err
		}
	}
	return nil
}

// lockToRead and unlockRead take the lock for a read of the live state
// that no client sees (the progress guard's look at a stage, the meter's
// at the budgets): they do not wait for the commits of others in flight
// (a step report's, storeReport), as Unlock does. Nothing may be changed
// in between.
func (m *ownerMu[T]) lockToRead() { m.Mutex.Lock() }

func (m *ownerMu[T]) unlockRead() { m.Mutex.Unlock() }

// unlockUncommitted releases the lock without committing the changes made
// under it: the holder commits them later (syncLocked after Lock), so that
// what it does in between, another owner's write, runs at the same time as
// this owner's. Another holder's commit meanwhile takes them along.
func (m *ownerMu[T]) unlockUncommitted() {
	m.strict = false
	m.Mutex.Unlock()
}

// syncLocked commits the changes recorded so far and returns the store's
// refusal of them, if any. The lock is released during the write and held
// again on return: the caller must not rely on what it read before.
func (m *ownerMu[T]) syncLocked() error {
	v := m.made
	if v == m.settled {
		m.keep = false // nothing was changed: nothing to keep
		return m.outcomeLocked(v)
	}
	var fence chan struct{}
	if m.strict {
		fence = make(chan struct{})
		m.fence = fence
	}
	m.Mutex.Unlock()
	if fence == nil {
		err := m.commit(v)
		m.Lock()
		return err
	}
	relocked := false
	defer func() {
		if !relocked {
			// The store panicked: the holder's lock is not taken
			// back, but the fence must go, or every later holder
			// would wait for ever.
			m.Mutex.Lock()
			m.unfenceLocked(fence)
			m.strict = false
			m.Mutex.Unlock()
		}
	}()
	err := m.commit(v)
	m.Mutex.Lock()
	relocked = true
	m.unfenceLocked(fence)
	m.held = m.made
	return err
}

// unfenceLocked lifts fence and lets the holders waiting at it go on.
func (m *ownerMu[T]) unfenceLocked(fence chan struct{}) {
	m.fence = nil
	close(fence)
}

// outcomeLocked is the refusal that withdrew change v, or nil.
func (m *ownerMu[T]) outcomeLocked(v uint64) error {
	for _, l := range m.lost {
		if v > l.after && v <= l.upto {
			return l.err
		}
	}
	return nil
}

// commit stores and announces every change up to v (and those recorded
// since, grouped into the same write), whoever made them: a refused write
// is withdrawn when it held one holding's changes (soloLocked).
func (m *ownerMu[T]) commit(v uint64) error {
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	m.Mutex.Lock()
	if m.settled >= v {
		err := m.outcomeLocked(v)
		m.Mutex.Unlock()
		return err
	}
	from, upto, write, keep, events := m.settled, m.made, m.write, m.keep, m.events
	m.write, m.keep, m.events = false, false, nil
	if m.ops.put == nil {
		// No store: the next reader makes the snapshot.
		m.settled = upto
		m.durableLocked(upto)
		m.snap.Store(nil)
		m.retired = nil
		m.Mutex.Unlock()
		m.announce(events)
		return nil
	}
	if write && m.ops.bound != nil {
		m.ops.bound(m.tight)
	}
	doc := m.ops.copy(m.reusable())
	if !write {
		// Nothing to write (a refused change left m.write set): the
		// store holds all it needs.
		m.settled = upto
		m.durableLocked(upto)
		m.publishLocked(&doc)
		m.Mutex.Unlock()
		m.announce(events)
		return nil
	}
	m.Mutex.Unlock()

	err := m.ops.put(&doc)
	if errors.Is(err, ErrTooLarge) && m.ops.bound != nil {
		if m.ops.tightened != nil {
			m.ops.tightened(err)
		}
		doc, upto, keep, events, err = m.tighter(upto, keep, events)
	}
	// A document too large for the store even bounded harder cannot be
	// stored by writing it again: its changes are withdrawn, kept or
	// not, one holder's or several's (each maker that can fail visibly
	// is told, through lost), rather than retried for ever while every
	// later change of the owner waits behind them.
	tooLarge := errors.Is(err, ErrTooLarge)
	if err != nil {
		m.ops.refused(err)
		// Every change the store lacks is this holder's, and nothing
		// was recorded since: they can be withdrawn alone, unless the
		// holder asked to keep them.
		m.Mutex.Lock()
		solo := tooLarge || (!keep && m.soloLocked(upto))
		m.Mutex.Unlock()
		var back *T
		if solo && m.ops.readBack != nil {
			if got, rerr := m.ops.readBack(); rerr == nil {
				back = &got
			}
		}
		if solo && back == nil && m.ops.clone != nil {
			// The store cannot be read either (an outage): what it holds
			// is the snapshot of the last commit it took (or the state as
			// created or restored). Withdrawn from there, the change is
			// gone as its maker is told, not kept to be written later
			// without it (a stage stored as started that nobody was told
			// to start).
			if p := m.snap.Load(); p != nil {
				c := m.ops.clone(p)
				back = &c
			}
		}
		m.Mutex.Lock()
		if solo && back != nil && m.made == upto {
			m.ops.restore(*back)
			m.durableLocked(upto)
			if tooLarge && m.ops.withdrawn != nil {
				m.ops.withdrawn(err, int(upto-from))
			}
		} else {
			// Kept in memory, unannounced: the next commit writes and
			// announces them.
			m.write = true
			m.events = append(events, m.events...)
		}
		m.settled = upto
		m.lost = append(m.lost, lostSpan{after: from, upto: upto, err: err})
		if len(m.lost) > maxLostSpans {
			m.lost = m.lost[len(m.lost)-maxLostSpans:]
		}
		m.refusedCommitLocked()
		m.Mutex.Unlock()
		return err
	}
	m.Mutex.Lock()
	m.settled = upto
	m.durableLocked(upto)
	recovered := m.failing
	m.failing, m.backoff = false, 0
	m.publishLocked(&doc)
	m.Mutex.Unlock()
	m.announce(events)
	if recovered && m.ops.wake != nil {
		// The owner's work was held while its commits were refused.
		m.ops.wake()
	}
	return nil
}

// tighter answers a document the store refused as too large (ErrTooLarge):
// written again as it is, it would be refused again. The owner bounds its
// documents harder from now on (ops.bound), and writes the document so
// bounded once more, with the changes recorded since the refused write
// (their makers wait for this commit, as for any write in flight). It
// returns the document written, what it held and the store's answer.
// commitMu is held.
func (m *ownerMu[T]) tighter(upto uint64, keep bool, events []Event) (T, uint64, bool, []Event, error) {
	m.Mutex.Lock()
	m.tight = true
	m.ops.bound(true)
	upto, keep = m.made, keep || m.keep
	events = append(events, m.events...)
	m.write, m.keep, m.events = false, false, nil
	doc := m.ops.copy(nil)
	m.Mutex.Unlock()
	return doc, upto, keep, events, m.ops.put(&doc)
}

func (m *ownerMu[T]) announce(events []Event) {
	for _, ev := range events {
		if ev.Kind != "" { // a change announced by its caller
			m.ops.announce(ev)
		}
	}
}

// read returns a copy of the owner's state as the store holds it, for a
// reader. It waits for no write.
func (m *ownerMu[T]) read(clone func(*T) T) T {
	m.readers.Add(1)
	defer m.readers.Add(-1)
	if p := m.snap.Load(); p != nil {
		return clone(p)
	}
	p := m.readSlow()
	return clone(p)
}

// peek calls f with the readers' snapshot (f must not keep or change it).
func (m *ownerMu[T]) peek(f func(*T)) {
	m.readers.Add(1)
	defer m.readers.Add(-1)
	p := m.snap.Load()
	if p == nil {
		p = m.readSlow()
	}
	f(p)
}

// readSlow makes the snapshot under the lock: without a store (nothing is
// ever written, so the state is as durable as it gets), or before the
// first commit (the state is as restored or created).
func (m *ownerMu[T]) readSlow() *T {
	m.Mutex.Lock()
	c := m.ops.copy(nil)
	if m.made == m.settled {
		m.snap.Store(&c)
	}
	m.Mutex.Unlock()
	return &c
}

// read is the agent's state for a reader (System.Agent, Agents, Inbox,
// ask_info): the stored snapshot, never waiting for a write.
func (a *agent) read() AgentState { return a.mu.read((*AgentState).clone) }

// readBrief is brief for a reader.
func (a *agent) readBrief() AgentBrief {
	var b AgentBrief
	a.mu.peek(func(st *AgentState) { b = briefOf(st) })
	return b
}

// read is the task's state for a reader (System.Task, Tasks, ask_info).
func (t *task) read() TaskState { return t.mu.read((*TaskState).clone) }
