package relay

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mas-mcp/mas-mcp/store"
)

// TestRelayEndsWhenHostLeavesWhileWaiting: a relay whose data directory is
// held by an owner that does not answer on its socket (still starting,
// wedged, or without a socket: a data directory path too long for one)
// waits for it; when the host leaves meanwhile (stdin ends: the user quit
// the host), the relay ends at once, and the process with it. (In fake
// time: a relay that kept waiting would give up on the owner only after
// OwnerWait, with an error, and show as late.)
func TestRelayEndsWhenHostLeavesWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		tried := make(chan struct{}, 1)
		cfg := Config{
			Socket: filepath.Join(dir, "mas.sock"), // nobody listens
			TakeOver: func(context.Context) (Owner, error) {
				select {
				case tried <- struct{}{}:
				default:
				}
				return nil, &store.InUseError{Dir: dir, Owner: "12345"}
			},
		}
		hostIn, hostW := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- Serve(context.Background(), cfg, hostIn, io.Discard) }()
		<-tried // the relay is waiting for the owner
		left := time.Now()
		hostW.Close() // the host leaves
		if err := <-done; err != nil {
			t.Errorf("Serve after the host left while it waited for the owner: %v, want nil", err)
		}
		if d := time.Since(left); d != 0 {
			t.Errorf("Serve returned %s after the host left while it waited for the owner, want at once", d)
		}
	})
}

// TestRelayGivesUpOnASilentOwner: an owner that holds the data directory
// but never answers on its socket is waited for OwnerWait (by default
// DefaultOwnerWait), then Serve fails saying so (the host sees the process
// end, its log says why), instead of waiting for ever. (In fake time; a
// guard stops a relay that waits ten times OwnerWait.)
func TestRelayGivesUpOnASilentOwner(t *testing.T) {
	for _, c := range []struct {
		ownerWait, want time.Duration
	}{{0, DefaultOwnerWait}, {3 * time.Second, 3 * time.Second}} {
		t.Run(fmt.Sprint(c.ownerWait), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				start := time.Now()
				var guarded bool
				cfg := Config{
					Socket:    filepath.Join(dir, "mas.sock"), // nobody listens
					OwnerWait: c.ownerWait,
					TakeOver: func(context.Context) (Owner, error) {
						if time.Since(start) > 10*c.want {
							guarded = true
							cancel()
						}
						return nil, &store.InUseError{Dir: dir, Owner: "12345"}
					},
				}
				hostIn, hostW := io.Pipe()
				defer hostW.Close()
				err := Serve(ctx, cfg, hostIn, io.Discard)
				waited := time.Since(start)
				if guarded {
					t.Fatalf("Serve still waited for a silent owner %s on, with OwnerWait %s", waited, c.want)
				}
				if err == nil || !strings.Contains(err.Error(), "has not answered on its socket") || !strings.Contains(err.Error(), cfg.Socket) ||
					!strings.Contains(err.Error(), c.want.String()) {
					t.Errorf("Serve with a silent owner: %v; want an error naming the socket and the wait %s", err, c.want)
				}
				// The relay tries again at most a second apart.
				if waited < c.want || waited > c.want+time.Second {
					t.Errorf("Serve gave up on a silent owner after %s, want %s (and at most a second more)", waited, c.want)
				}
			})
		})
	}
}
