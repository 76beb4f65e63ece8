package relay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// scriptedOwner is an Owner whose session is served by serve; the
// connection closes when serve returns.
type scriptedOwner struct{ serve func(c net.Conn) }

func (o scriptedOwner) ServeConn(_ context.Context, c net.Conn) error {
	defer c.Close()
	o.serve(c)
	return nil
}
func (o scriptedOwner) Close() {}

// TestRelayResumeEndsWhenCancelled: a SIGTERM (ctx cancelled) while the
// relay reopens its host's session on a new owner that does not answer
// ends Serve at once, not after the resume's wait for an answer.
func TestRelayResumeEndsWhenCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		heard := make(chan string, 1) // what the silent owner was sent first
		owners := []Owner{
			// The first owner answers initialize, then stops.
			scriptedOwner{func(c net.Conn) {
				if _, err := bufio.NewReader(c).ReadBytes('\n'); err == nil {
					fmt.Fprintf(c, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
				}
			}},
			// The second reads and never answers.
			scriptedOwner{func(c net.Conn) {
				br := bufio.NewReader(c)
				line, err := br.ReadBytes('\n')
				if err != nil {
					return
				}
				heard <- string(line)
				_, _ = io.Copy(io.Discard, br)
			}},
		}
		cfg := Config{
			Socket: filepath.Join(t.TempDir(), "mas.sock"), // nobody listens: every connect takes over
			TakeOver: func(ctx context.Context) (Owner, error) {
				if ctx.Err() != nil || len(owners) == 0 {
					return nil, fmt.Errorf("no owner to take over (ctx: %v)", ctx.Err())
				}
				o := owners[0]
				owners = owners[1:]
				return o, nil
			},
		}
		hostIn, hostW := io.Pipe()
		defer hostW.Close()
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, cfg, hostIn, io.Discard) }()
		fmt.Fprintf(hostW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`+"\n")
		<-heard // the relay resumes on the second owner, which stays silent
		cancelled := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve cancelled during a resume: %v", err)
		}
		if d := time.Since(cancelled); d != 0 {
			t.Errorf("Serve returned %s after its context was cancelled during a resume, want at once", d)
		}
	})
}
