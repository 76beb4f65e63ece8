package server

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/mas-mcp/mas-mcp/engine"
)

// eventLogs numbers the MAS's events for each operator on its own: the
// cursors of wait_for_updates and show_task, the seq of the events they
// return and the seq and ids of /api/events count the events the operator
// may see (engine.System.EventVisible), and nothing else.
//
// The engine's Seq counts every event of every operator. Shown to
// clients, it told an operator how much the others were doing (its cursor
// jumped from 10 to 57 while its own task did one thing), and a cursor
// "ahead of the newest event (%d)" told it the newest. Why per-operator
// numbers rather than opaque cursors (the global Seq through a keyed
// permutation): an opaque cursor hides the amount but not the fact — a
// timed-out wait answers a new cursor whenever anyone's event happened, so
// comparing two cursors still tells "someone worked meanwhile" — and the
// log itself was global, so lost (older events dropped) came sooner the
// more others did. Here each operator has a log of its own, bounded on
// its own (Config.EventLog events), and a wait wakes only for an event of
// its own log: the cursor, the events' numbers, lost and the wake-ups
// depend on what the operator may see only. Admins get the same kind of
// numbering (they happen to see every event).
//
// The numbers of one process start at a random base (between 2^32 and
// 2^52, so a cursor is still a JSON number a JavaScript client holds
// exactly) instead of 0: a cursor of an earlier process — or of a build
// that gave the global Seq — is refused ("not a cursor this server gave
// …"), which is how a client learns that cursors do not survive a restart,
// rather than silently meaning some other event of the new process.
// Cursor 0 still means "from now". The one thing the log cannot keep to
// the operator's view: when the run loop's own intake overflows (the
// server lost events before reading them, whoever's they were), every
// operator's log records a hole (one number, never delivered) and its
// older cursors report lost — a sign of an overloaded server, not of what
// anyone did.
//
// A log exists for an operator from its first use (a cursor asked for,
// show_task, /api/events); events before that are not in it. Who may see
// an event is decided as the event is logged; visibility only grows (a
// task is shared, never unshared), so an operator a task is shared with
// gets the task's events from the share on.
type eventLogs struct {
	max  int    // events kept per operator: Config.EventLog
	base uint64 // the process's first number (of every operator: none yet)

	mu      sync.Mutex
	ops     map[string]*opLog // guarded by mu
	handled uint64            // the newest engine event handled (its global Seq, never shown); guarded by mu
	dropped uint64            // the run loop's subscription's losses so far; guarded by mu
	// changed is closed (and replaced) whenever an event is handled, for
	// tests (AwaitUpdatesHandled); guarded by mu.
	changed chan struct{}

	scratch []string // the run loop's list of operators (add); run loop only
}

// opLog is one operator's numbered events.
type opLog struct {
	head   uint64         // the newest number given (base: none yet)
	events []engine.Event // the newest events, oldest first, Seq their number here
	hole   uint64         // the number of the newest run of events lost before they were logged (0: none)
	// changed is closed (and replaced) when the log gains an event.
	changed chan struct{}
}

// Bounds of the random base: above any count a global Seq reaches, and
// far enough below 2^53 (the exact integers of a JavaScript number) for
// 2^52 events of an operator.
const (
	cursorBaseMin = 1 << 32
	cursorBaseMax = 1 << 52
)

func newEventLogs(keep int, handled uint64) *eventLogs {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	base := cursorBaseMin + binary.LittleEndian.Uint64(b[:])%(cursorBaseMax-cursorBaseMin)
	return &eventLogs{max: keep, base: base, ops: map[string]*opLog{}, handled: handled, changed: make(chan struct{})}
}

// logLocked returns op's log, making it (empty) if op has none. mu must
// be held.
func (l *eventLogs) logLocked(op string) *opLog {
	o := l.ops[op]
	if o == nil {
		o = &opLog{head: l.base, changed: make(chan struct{})}
		l.ops[op] = o
	}
	return o
}

// now is op's cursor for "from now": its newest number.
func (l *eventLogs) now(op string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.logLocked(op).head
}

// add logs ev (the run loop's next event; dropped is its subscription's
// count of lost events) for each operator with a log that visible says
// may see it. Only the run loop calls it; visibility is asked outside the
// lock (an operator whose log appears meanwhile starts after ev).
func (l *eventLogs) add(ev engine.Event, dropped uint64, visible func(op string) bool) {
	l.mu.Lock()
	ops := l.scratch[:0]
	for op := range l.ops {
		ops = append(ops, op)
	}
	l.mu.Unlock()
	see := ops[:0]
	for _, op := range ops {
		if visible(op) {
			see = append(see, op)
		}
	}
	l.scratch = ops

	l.mu.Lock()
	defer l.mu.Unlock()
	if dropped != l.dropped {
		// Events were lost before the loop read them: whose, nobody
		// knows. Each log gets a hole, so that a cursor from before it
		// reports lost (its waits wake to say so).
		l.dropped = dropped
		for _, o := range l.ops {
			o.head++
			o.hole = o.head
			close(o.changed)
			o.changed = make(chan struct{})
		}
	}
	for _, op := range see {
		o := l.ops[op]
		o.head++
		e := ev
		e.Seq = o.head
		o.events = append(o.events, e)
		if len(o.events) > 2*l.max {
			o.events = slices.Clone(o.events[len(o.events)-l.max:])
		}
		close(o.changed)
		o.changed = make(chan struct{})
	}
	l.handled = max(l.handled, ev.Seq)
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *eventLogs) checkLocked(op string, o *opLog, cursor uint64) error {
	if cursor < l.base || cursor > o.head {
		return fmt.Errorf("cursor %d: not a cursor this server gave operator %s (cursors do not survive a restart); pass 0 to start from now", cursor, op)
	}
	return nil
}

// since returns op's events after cursor (0: now) that match the filters,
// at most limit of them (0: all), the number to go on from (its newest, or
// the last event returned when more matched), and whether events after
// cursor were lost (dropped from the log, or before the loop read them);
// changed is closed when the log next gains an event. A cursor this
// process did not give op is refused (checkLocked).
func (l *eventLogs) since(op string, cursor uint64, taskID, agentID string, limit int) (evs []engine.Event, latest uint64, lost bool, changed <-chan struct{}, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.logLocked(op)
	if cursor == 0 {
		cursor = o.head
	}
	if err := l.checkLocked(op, o, cursor); err != nil {
		return nil, 0, false, nil, err
	}
	lost = cursor < o.hole || (len(o.events) > 0 && cursor+1 < o.events[0].Seq)
	i, _ := slices.BinarySearchFunc(o.events, cursor+1, func(e engine.Event, n uint64) int {
		switch {
		case e.Seq < n:
			return -1
		case e.Seq > n:
			return 1
		}
		return 0
	})
	latest = o.head
	for _, ev := range o.events[i:] {
		if (taskID == "" || ev.TaskID == taskID) && (agentID == "" || ev.AgentID == agentID) {
			if limit > 0 && len(evs) == limit {
				latest = evs[limit-1].Seq // more matched: go on after the last one returned
				break
			}
			evs = append(evs, ev)
		}
	}
	return evs, latest, lost, o.changed, nil
}

// handledUpTo returns the newest engine event handled, and a channel
// closed when the next one is.
func (l *eventLogs) handledUpTo() (uint64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handled, l.changed
}
