package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// EventKind says what changed.
type EventKind string

// Event kinds.
const (
	EventTaskAdded        EventKind = "task_added"
	EventTaskChanged      EventKind = "task_changed"
	EventStageChanged     EventKind = "stage_changed"
	EventAgentAdded       EventKind = "agent_added"
	EventAgentChanged     EventKind = "agent_changed"
	EventStepChanged      EventKind = "step_changed"
	EventMessageDelivered EventKind = "message_delivered"
	EventLLMCall          EventKind = "llm_call"
)

// Event is one change. It names what changed; readers take a snapshot for
// the details.
type Event struct {
	// Seq increases by one per published event, across all kinds.
	Seq       uint64    `json:"seq"`
	Kind      EventKind `json:"kind"`
	Time      time.Time `json:"time"`
	TaskID    string    `json:"task_id,omitempty"`
	StageID   string    `json:"stage_id,omitempty"`
	AgentID   string    `json:"agent_id,omitempty"`
	StepID    string    `json:"step_id,omitempty"`
	MessageID string    `json:"message_id,omitempty"`
	// Detail is a short human-readable note (a state, a skill name).
	Detail string `json:"detail,omitempty"`
}

// Bus fans events out to subscribers without ever blocking the publisher:
// a subscriber whose buffer is full loses the event (and can count its
// losses and re-read a snapshot).
type Bus struct {
	mu   sync.Mutex
	seq  uint64
	subs map[*Subscription]struct{}
}

// Subscription receives events on C until Close.
type Subscription struct {
	// C delivers events in Seq order (with gaps when events were dropped).
	C       <-chan Event
	c       chan Event
	bus     *Bus
	dropped atomic.Uint64
	once    sync.Once
}

// Subscribe returns a subscription with a buffer of size buf (minimum 1).
func (b *Bus) Subscribe(buf int) *Subscription {
	if buf < 1 {
		buf = 1
	}
	c := make(chan Event, buf)
	s := &Subscription{C: c, c: c, bus: b}
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[*Subscription]struct{}{}
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s
}

// Dropped counts the events this subscriber lost because its buffer was full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close stops delivery and closes C. It is safe to call more than once.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.bus.mu.Lock()
		delete(s.bus.subs, s)
		close(s.c)
		s.bus.mu.Unlock()
	})
}

// Seq returns the sequence number of the last published event.
func (b *Bus) Seq() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq
}

// publish stamps e and offers it to every subscriber without blocking.
func (b *Bus) publish(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	e.Seq = b.seq
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	for s := range b.subs {
		select {
		case s.c <- e:
		default:
			s.dropped.Add(1)
		}
	}
}
