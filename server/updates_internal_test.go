package server

import (
	"fmt"
	"testing"
	"time"
)

// TestUpdatesForgetPassedWindows: the last notification times of targets
// (a URI for an operator) are bounded: those whose coalescing window has
// passed are forgotten, not those still pending or within their window.
func TestUpdatesForgetPassedWindows(t *testing.T) {
	u := &updates{s: &Server{cfg: Config{Coalesce: time.Second}}, last: map[target]time.Time{}, pending: map[target]bool{}}
	now := time.Now()
	for i := range 2 * lastKept {
		u.last[target{uri: "mas://tasks/old", op: fmt.Sprint("op", i)}] = now.Add(-time.Minute)
	}
	waiting, recent := target{uri: "mas://tasks/waiting"}, target{uri: "mas://tasks/recent"}
	u.last[waiting], u.pending[waiting] = now.Add(-time.Minute), true
	u.last[recent] = now.Add(-time.Millisecond)
	u.forget(now)
	if len(u.last) != 2 {
		t.Errorf("%d notification times kept, want the pending one and the one within its window", len(u.last))
	}
	if _, ok := u.last[waiting]; !ok {
		t.Error("a pending target's time was forgotten")
	}
	if _, ok := u.last[recent]; !ok {
		t.Error("a target within its window was forgotten")
	}
}
