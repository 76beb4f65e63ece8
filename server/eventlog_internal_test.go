package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestEventLogsNumberEachOperator: each operator's events are numbered
// one after another from the process's base, whatever the others see; a
// log is bounded on its own, and a cursor older than what it keeps
// reports lost; a cursor outside the operator's numbers is refused
// without naming the newest; a loss before the logs (the run loop's
// subscription dropped events) makes a hole that older cursors report.
func TestEventLogsNumberEachOperator(t *testing.T) {
	l := newEventLogs(3, 0)
	if l.base < cursorBaseMin || l.base >= cursorBaseMax {
		t.Fatalf("base %d outside [2^32, 2^52)", l.base)
	}
	annStart, beaStart := l.now("ann"), l.now("bea")
	if annStart != l.base || beaStart != l.base {
		t.Fatalf("new logs start at %d and %d, want the base %d", annStart, beaStart, l.base)
	}
	var seq uint64
	add := func(task string, dropped uint64, visible ...string) {
		seq++
		l.add(engine.Event{Seq: seq, Kind: engine.EventTaskChanged, TaskID: task}, dropped, func(op string) bool {
			for _, v := range visible {
				if v == op {
					return true
				}
			}
			return false
		})
	}
	for range 50 {
		add("bea's", 0, "bea")
	}
	add("ann's", 0, "ann")
	add("both", 0, "ann", "bea")

	evs, latest, lost, _, err := l.since("ann", annStart, "", "", 0)
	if err != nil || lost || len(evs) != 2 || evs[0].Seq != annStart+1 || evs[1].Seq != annStart+2 || latest != annStart+2 || evs[0].TaskID != "ann's" {
		t.Errorf("ann's events = %+v, latest %d, lost %v, %v; want her 2 events numbered %d, %d", evs, latest, lost, err, annStart+1, annStart+2)
	}
	// Bea's log keeps her newest (up to twice its bound): from her start,
	// lost.
	evs, latest, lost, _, err = l.since("bea", beaStart, "", "", 0)
	if err != nil || !lost || latest != beaStart+51 || len(evs) == 0 || len(evs) > 6 || evs[len(evs)-1].TaskID != "both" {
		t.Errorf("bea's events from her start: %d, latest %d, lost %v, %v; want lost, her last ≤ 6, latest %d", len(evs), latest, lost, err, beaStart+51)
	}
	if _, _, lost, _, _ := l.since("bea", latest-1, "", "", 0); lost {
		t.Errorf("a recent cursor of bea's reports lost")
	}
	evs, _, _, _, _ = l.since("bea", latest-2, "both", "", 0)
	if len(evs) != 1 || evs[0].Seq != latest {
		t.Errorf("bea's events of task both after %d: %+v", latest-2, evs)
	}

	for _, c := range []uint64{l.base - 1, 51, latest + 1, annStart + 3} {
		for _, op := range []string{"ann", "bea"} {
			_, _, _, _, err := l.since(op, c, "", "", 0)
			if op == "bea" && c <= latest && c >= l.base {
				continue
			}
			if err == nil || !strings.Contains(err.Error(), fmt.Sprint(c)) || !strings.Contains(err.Error(), "restart") {
				t.Errorf("%s's cursor %d: %v, want refused naming the cursor and restarts", op, c, err)
			} else if strings.Contains(err.Error(), fmt.Sprint(latest)) || strings.Contains(err.Error(), fmt.Sprint(annStart+2)) {
				t.Errorf("the refusal %q names a newest number", err)
			}
		}
	}

	// Events lost before the logs: a hole in each, reported once.
	annNow := l.now("ann")
	_, _, _, changed, _ := l.since("ann", annNow, "", "", 0)
	add("ann's", 7, "ann")
	select {
	case <-changed:
	default:
		t.Error("ann's log gained an event: her wait was not woken")
	}
	evs, latest, lost, _, _ = l.since("ann", annNow, "", "", 0)
	if !lost || len(evs) != 1 || evs[0].Seq != annNow+2 || latest != annNow+2 {
		t.Errorf("after a loss: %+v, latest %d, lost %v; want lost, her event numbered after a hole (%d)", evs, latest, lost, annNow+2)
	}
	if _, _, lost, _, _ := l.since("ann", latest, "", "", 0); lost {
		t.Errorf("a cursor after the hole reports lost")
	}
	if n, _ := l.handledUpTo(); n != seq {
		t.Errorf("handled up to %d, want %d", n, seq)
	}
}
