package server

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
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

// TestNameBytesFitsTheServersURIs: limits.name_bytes bounds the URIs
// clients send back, so it may not be set below the longest URI the
// server gives out: a trail page's next_uri with every filter, at the
// longest IDs, kind, page size and cursor. Below MinNameBytes the start
// fails naming the key, the value and the minimum.
func TestNameBytesFitsTheServersURIs(t *testing.T) {
	id := "00000000-0000-0000-0000-000000000000" // every ID the engine makes is a UUID
	kind := slices.MaxFunc(engine.TrailKinds, func(a, b string) int { return cmp.Compare(len(a), len(b)) })
	tc, err := newTrailCursors()
	if err != nil {
		t.Fatal(err)
	}
	cursor := tc.seal(math.MaxUint64, id, id) // the cursors the server gives out (trail_cursors.go)
	longest := trailNextURI(engine.TrailQuery{TaskID: id, AgentID: id, StepID: id, Kind: kind, Limit: math.MaxInt}, cursor)
	if len(longest) != MinNameBytes {
		t.Errorf("the longest URI the server gives out, %s, is %d bytes; MinNameBytes is %d", longest, len(longest), MinNameBytes)
	}
	for _, n := range []int{0, MinNameBytes, 1 << 10} {
		if err := (&Limits{NameBytes: n}).check(); err != nil {
			t.Errorf("limits.name_bytes %d: %v", n, err)
		}
	}
	for _, n := range []int{1, 36, MinNameBytes - 1} {
		err := (&Limits{NameBytes: n}).check()
		want := fmt.Sprintf("limits.name_bytes %d: must be at least %d", n, MinNameBytes)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("limits.name_bytes %d: %v, want an error saying %q", n, err, want)
		}
	}
}
