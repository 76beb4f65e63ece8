package relay

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// blockedWriter is the write end of a pipe to a host that never reads
// it: a Write blocks until the pipe is closed. writing is closed at the
// first Write, so that a test knows the relay's writer is stuck in one.
type blockedWriter struct {
	*io.PipeWriter
	once    sync.Once
	writing chan struct{}
}

func (w *blockedWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.writing) })
	return w.PipeWriter.Write(b)
}

// TestRelayLeavesNoGoroutineBehind: whichever way Serve ends while its
// host does not read its stdout (and, but in one case, keeps its stdin
// open), every goroutine Serve started has ended when it returns: the
// read of the host's stdin, the write to the host that blocks, and the
// session of the owner it took over. Before, the read and the write
// stayed blocked until the process exited.
func TestRelayLeavesNoGoroutineBehind(t *testing.T) {
	for _, c := range []struct {
		name string
		// end makes the relay end once a write to the host blocks;
		// cancel cancels its context.
		end   func(cancel context.CancelFunc, hostStdin io.Closer)
		limit int  // the host queue's limit (0: the default)
		flood bool // the owner sends until the relay hangs up
	}{
		{name: "cancelled", end: func(cancel context.CancelFunc, _ io.Closer) { cancel() }},
		{name: "host stuck", end: func(context.CancelFunc, io.Closer) {}, limit: 1 << 10, flood: true},
		// The host closes stdin: the relay waits flushWait (fake time) for
		// the host to read what is queued, then gives up on it.
		{name: "stdin closed", end: func(_ context.CancelFunc, hostStdin io.Closer) { hostStdin.Close() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				before := goleak.IgnoreCurrent()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				ownerEnded := make(chan struct{})
				cfg := takeOverOnce(t, func(c2 net.Conn) {
					defer close(ownerEnded)
					// A session takes a moment to wind down once its
					// connection closes (in fake time).
					defer time.Sleep(time.Millisecond)
					for i := 0; c.flood || i < 5; i++ {
						if _, err := io.WriteString(c2, noteLine); err != nil {
							return
						}
					}
					_, _ = io.Copy(io.Discard, c2)
				})
				hostIn, hostStdin := io.Pipe() // the host keeps it open
				defer hostStdin.Close()
				unread, hostOut := io.Pipe() // the host never reads it
				defer unread.Close()
				out := &blockedWriter{PipeWriter: hostOut, writing: make(chan struct{})}
				r := newRelay(nil, out)
				if c.limit > 0 {
					r.out.limit = c.limit
				}
				done := make(chan error, 1)
				go func() { done <- r.run(ctx, cfg, hostIn) }()
				<-out.writing   // a write to the host blocks
				synctest.Wait() // and the relay waits on it
				c.end(cancel, hostStdin)
				<-done
				select {
				case <-ownerEnded:
				default:
					t.Error("Serve returned while the session of the owner it took over still ran")
				}
				// Checked before the test's deferred calls close the host's
				// pipes, which would end a blocked read or write.
				goleak.VerifyNone(t, before)
			})
		})
	}
}
