package server

import (
	"fmt"
	"testing"
	"time"
)

// TestBindThrottleBounded: failures from ever new addresses never grow the
// throttle's table past its bound, and keys are independent: an operator
// throttled from one address is throttled from every other.
func TestBindThrottleBounded(t *testing.T) {
	now := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	l := &Limits{PasswordFailures: 1, Now: func() time.Time { return now }}
	if err := l.check(); err != nil {
		t.Fatal(err)
	}
	b := &bindThrottle{l: l}
	for i := range 3 * maxThrottled {
		b.failed(fmt.Sprintf("ip:10.0.%d.%d", i/256, i%256))
		now = now.Add(time.Millisecond)
	}
	if n := b.size(); n > maxThrottled {
		t.Errorf("throttle table: %d entries, want at most %d", n, maxThrottled)
	}
	b.failed("ip:192.0.2.1", "op:ann")
	if w := b.wait("ip:198.51.100.7", "op:ann"); w != time.Second {
		t.Errorf("ann from another address: wait %s, want 1s", w)
	}
	if w := b.wait("ip:198.51.100.7", "op:bea"); w != 0 {
		t.Errorf("bea from another address: wait %s, want none", w)
	}
}
