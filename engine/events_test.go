package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func drain(s *Subscription) []Event {
	var out []Event
	for len(s.C) > 0 {
		out = append(out, <-s.C)
	}
	return out
}

func seqs(es []Event) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func TestBusDeliversInSeqOrder(t *testing.T) {
	var b Bus
	if b.Seq() != 0 {
		t.Fatalf("a new bus has seq %d", b.Seq())
	}
	s := b.Subscribe(16)
	defer s.Close()
	kinds := []EventKind{EventTaskAdded, EventAgentChanged, EventStepChanged, EventMessageDelivered, EventLLMCall}
	stamped := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, k := range kinds {
		e := Event{Kind: k, AgentID: "a"}
		if i == 0 {
			e.Time = stamped
		}
		b.publish(e)
	}
	got := drain(s)
	if diff := cmp.Diff([]uint64{1, 2, 3, 4, 5}, seqs(got)); diff != "" {
		t.Errorf("seq mismatch (-want +got):\n%s", diff)
	}
	for i, e := range got {
		if e.Kind != kinds[i] || e.AgentID != "a" || e.Time.IsZero() {
			t.Errorf("event %d = %+v, want kind %s, stamped", i, e, kinds[i])
		}
	}
	if !got[0].Time.Equal(stamped) {
		t.Errorf("a set time was overwritten: %v", got[0].Time)
	}
	if b.Seq() != 5 || s.Dropped() != 0 {
		t.Errorf("seq %d dropped %d, want 5 and 0", b.Seq(), s.Dropped())
	}
}

func TestBusFullSubscriberDropsWithoutBlocking(t *testing.T) {
	var b Bus
	slow := b.Subscribe(2)
	fast := b.Subscribe(100)
	tiny := b.Subscribe(0) // minimum buffer 1
	defer slow.Close()
	defer fast.Close()
	defer tiny.Close()
	// publish runs on this goroutine: were it to block on a full
	// subscriber, the test would hang here.
	for range 10 {
		b.publish(Event{Kind: EventTaskChanged})
	}
	if diff := cmp.Diff([]uint64{1, 2}, seqs(drain(slow))); diff != "" {
		t.Errorf("slow subscriber mismatch (-want +got):\n%s", diff)
	}
	if got := slow.Dropped(); got != 8 {
		t.Errorf("slow subscriber dropped %d, want 8", got)
	}
	if got := len(drain(fast)); got != 10 || fast.Dropped() != 0 {
		t.Errorf("fast subscriber got %d, dropped %d; want 10, 0", got, fast.Dropped())
	}
	if got := seqs(drain(tiny)); len(got) != 1 || tiny.Dropped() != 9 {
		t.Errorf("tiny subscriber got %v, dropped %d; want one event, 9 dropped", got, tiny.Dropped())
	}
	// After draining, delivery resumes with gaps in Seq.
	b.publish(Event{Kind: EventTaskChanged})
	if diff := cmp.Diff([]uint64{11}, seqs(drain(slow))); diff != "" {
		t.Errorf("after draining mismatch (-want +got):\n%s", diff)
	}
}

func TestBusClose(t *testing.T) {
	var b Bus
	s := b.Subscribe(4)
	other := b.Subscribe(4)
	defer other.Close()
	b.publish(Event{Kind: EventTaskChanged})
	s.Close()
	s.Close() // safe twice
	// Publishing after Close neither panics nor delivers to s.
	b.publish(Event{Kind: EventTaskChanged})
	var got []uint64
	for e := range s.C { // C is closed: the loop ends after the buffered event
		got = append(got, e.Seq)
	}
	if diff := cmp.Diff([]uint64{1}, got); diff != "" {
		t.Errorf("closed subscriber mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{1, 2}, seqs(drain(other))); diff != "" {
		t.Errorf("other subscriber mismatch (-want +got):\n%s", diff)
	}
	if b.Seq() != 2 {
		t.Errorf("seq %d, want 2", b.Seq())
	}
}

func TestSystemEventsIncrease(t *testing.T) {
	b := newTestbed(t, nil)
	sub := b.sys.Subscribe(1 << 12)
	defer sub.Close()
	start := b.sys.EventSeq()
	w := b.newAgent("w")
	b.newTask("events", w)
	b.settle()
	got := drain(sub)
	if len(got) == 0 {
		t.Fatal("no events")
	}
	if got[0].Seq != start+1 {
		t.Errorf("first event seq %d, want %d", got[0].Seq, start+1)
	}
	kinds := map[EventKind]bool{}
	for i, e := range got {
		if i > 0 && e.Seq != got[i-1].Seq+1 {
			t.Errorf("seq %d after %d, want consecutive", e.Seq, got[i-1].Seq)
		}
		kinds[e.Kind] = true
	}
	for _, k := range []EventKind{EventAgentAdded, EventTaskAdded, EventTaskChanged, EventAgentChanged, EventMessageDelivered, EventStepChanged} {
		if !kinds[k] {
			t.Errorf("no %s event", k)
		}
	}
	if got[len(got)-1].Seq != b.sys.EventSeq() {
		t.Errorf("last event seq %d, EventSeq %d", got[len(got)-1].Seq, b.sys.EventSeq())
	}
}
