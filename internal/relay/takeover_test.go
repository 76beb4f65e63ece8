package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
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

// cancelAtOnce cancels a Serve in a synctest bubble whose result done
// gets, and checks that it returns nil at the same (fake) instant.
func cancelAtOnce(t *testing.T, cancel context.CancelFunc, done <-chan error, while string) {
	t.Helper()
	cancelled := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve cancelled %s: %v", while, err)
	}
	if d := time.Since(cancelled); d != 0 {
		t.Errorf("Serve returned %s after its context was cancelled %s, want at once", d, while)
	}
}

// takeOverOnce configures a relay whose socket nobody listens on, so that
// it takes the data directory over, to an owner that serves with serve; a
// second take-over fails.
func takeOverOnce(t *testing.T, serve func(c net.Conn)) Config {
	taken := false
	return Config{
		Socket: filepath.Join(t.TempDir(), "mas.sock"),
		TakeOver: func(context.Context) (Owner, error) {
			if taken {
				return nil, errors.New("taken over already")
			}
			taken = true
			return scriptedOwner{serve}, nil
		},
	}
}

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
		cancelAtOnce(t, cancel, done, "during a resume")
	})
}

// TestRelayBacksOffAResumeThatKeepsFailing: when reopening the host's
// session on a new owner keeps failing (each new owner drops the
// connection at once), the relay tries again after a wait that doubles up
// to a cap, not in a tight loop, and after a bounded number of attempts
// Serve fails with an error naming that limit.
func TestRelayBacksOffAResumeThatKeepsFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var attempts []time.Time // when each owner after the first was taken over
		cfg := Config{
			Socket: filepath.Join(t.TempDir(), "mas.sock"), // nobody listens: every connect takes over
			TakeOver: func(context.Context) (Owner, error) {
				if attempts == nil {
					attempts = []time.Time{}
					// The first owner answers initialize, then stops.
					return scriptedOwner{func(c net.Conn) {
						if _, err := bufio.NewReader(c).ReadBytes('\n'); err == nil {
							fmt.Fprintf(c, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
						}
					}}, nil
				}
				attempts = append(attempts, time.Now())
				if len(attempts) > 100 {
					cancel() // a guard: the relay retries without end
					return nil, errors.New("guard: 100 attempts")
				}
				// The next ones drop the connection at once: the resume fails.
				return scriptedOwner{func(net.Conn) {}}, nil
			},
		}
		hostIn, hostW := io.Pipe()
		defer hostW.Close()
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, cfg, hostIn, io.Discard) }()
		fmt.Fprintf(hostW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`+"\n")
		err := <-done
		n := len(attempts)
		if n > 20 {
			t.Fatalf("the relay tried to resume %d times (the guard stopped it), want a bounded number of attempts", n)
		}
		if err == nil || !strings.Contains(err.Error(), strconv.Itoa(n)) || !strings.Contains(err.Error(), "resum") {
			t.Errorf("Serve after %d failed resumes: %v; want an error naming the limit of %d attempts", n, err, n)
		}
		var gaps []time.Duration
		for i := 1; i < n; i++ {
			gaps = append(gaps, attempts[i].Sub(attempts[i-1]))
		}
		for i, g := range gaps {
			if g <= 0 || (i > 0 && g < gaps[i-1]) || g > 10*time.Second {
				t.Fatalf("waits between the attempts %v: want them growing, from above zero to a cap of at most 10s", gaps)
			}
		}
		if n < 2 || gaps[len(gaps)-1] < 2*gaps[0] {
			t.Errorf("waits between the attempts %v: want them doubling", gaps)
		}
	})
}
