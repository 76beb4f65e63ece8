package relay

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/store"
)

// TestRelayEndsWhenHostLeavesWhileWaiting: a relay whose data directory is
// held by an owner that does not answer on its socket (still starting,
// wedged, or without a socket: a data directory path too long for one)
// waits for it; when the host leaves meanwhile (stdin ends: the user quit
// the host), the relay ends too, and the process with it.
func TestRelayEndsWhenHostLeavesWhileWaiting(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
	go func() { done <- Serve(ctx, cfg, hostIn, io.Discard) }()
	<-tried       // the relay is waiting for the owner
	hostW.Close() // the host leaves
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Serve after the host left: %v", err)
		}
	case <-time.After(5 * time.Second):
		cancel()
		<-done
		t.Fatal("the host closed stdin while the relay waited for the owner; 5s later Serve still runs (it returned only when ctx was cancelled)")
	}
}

// TestRelayGivesUpOnASilentOwner: an owner that holds the data directory
// but never answers on its socket is waited for OwnerWait, then Serve
// fails saying so (the host sees the process end, its log says why),
// instead of waiting for ever.
func TestRelayGivesUpOnASilentOwner(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{
		Socket:    filepath.Join(dir, "mas.sock"), // nobody listens
		OwnerWait: 200 * time.Millisecond,
		TakeOver: func(context.Context) (Owner, error) {
			return nil, &store.InUseError{Dir: dir, Owner: "12345"}
		},
	}
	hostIn, hostW := io.Pipe()
	defer hostW.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, hostIn, io.Discard) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second): // a bound for a hang
		cancel()
		<-done
		t.Fatal("Serve still waits for a silent owner 30s on, with OwnerWait 200ms")
	}
	if err == nil || !strings.Contains(err.Error(), "has not answered on its socket") || !strings.Contains(err.Error(), cfg.Socket) {
		t.Errorf("Serve with a silent owner: %v; want an error naming the socket and the wait", err)
	}
}
