package relay

import (
	"bufio"
	"context"
	"encoding/json"
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

// answersFirstThenDrops is an owner that answers the first request it
// is sent (the host's initialize, or the relay's replay of it), then drops
// the connection.
var answersFirstThenDrops = scriptedOwner{func(c net.Conn) {
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if req := request(line); err == nil && req != nil {
		id, _ := json.Marshal(req.ID.Raw())
		fmt.Fprintf(c, `{"jsonrpc":"2.0","id":%s,"result":{}}`+"\n", id)
	}
}}

// takeOverEach runs Serve, in a synctest bubble, for a host that sends
// initialize first when initialize is set, on a data directory nobody
// listens on: every connect takes over, to the owner newOwner makes (n
// counts them from 0; when it makes none, nil, TakeOver fails, and so
// does Serve). It returns when each owner was taken over, and Serve's
// error. A relay that takes more than 20 owners over fails the test (a
// guard stops it at 100).
func takeOverEach(t *testing.T, initialize bool, newOwner func(n int) Owner) ([]time.Time, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var taken []time.Time
	cfg := Config{
		Socket: filepath.Join(t.TempDir(), "mas.sock"), // nobody listens: every connect takes over
		TakeOver: func(context.Context) (Owner, error) {
			if len(taken) == 100 {
				cancel() // a guard: the relay retries without end
				return nil, errors.New("guard: 100 owners")
			}
			o := newOwner(len(taken))
			if o == nil {
				return nil, errors.New("no more owners")
			}
			taken = append(taken, time.Now())
			return o, nil
		},
	}
	hostIn, hostW := io.Pipe()
	defer hostW.Close()
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, hostIn, io.Discard) }()
	if initialize {
		fmt.Fprintf(hostW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`+"\n")
	}
	err := <-done
	if len(taken) > 20 {
		t.Fatalf("the relay took %d owners over (the guard stopped it), want a bounded number of attempts", len(taken))
	}
	return taken, err
}

// checkBackOff checks that the waits between attempts (at the times
// given) grow from above zero, doubling, to a cap of at most 10s.
func checkBackOff(t *testing.T, attempts []time.Time) {
	t.Helper()
	var gaps []time.Duration
	for i := 1; i < len(attempts); i++ {
		gaps = append(gaps, attempts[i].Sub(attempts[i-1]))
	}
	for i, g := range gaps {
		if g <= 0 || (i > 0 && g < gaps[i-1]) || g > 10*time.Second {
			t.Fatalf("waits between the attempts %v: want them growing, from above zero to a cap of at most 10s", gaps)
		}
	}
	if len(gaps) < 2 || gaps[len(gaps)-1] < 2*gaps[0] {
		t.Errorf("waits between the attempts %v: want them doubling", gaps)
	}
}

// TestRelayBacksOffAResumeThatKeepsFailing: when reopening the host's
// session on a new owner keeps failing (each new owner drops the
// connection at once), the relay tries again after a wait that doubles up
// to a cap, not in a tight loop, and after a bounded number of attempts
// Serve fails with an error naming that limit.
func TestRelayBacksOffAResumeThatKeepsFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		taken, err := takeOverEach(t, true, func(n int) Owner {
			if n == 0 {
				return answersFirstThenDrops // the host's owner, which stops
			}
			return scriptedOwner{func(net.Conn) {}} // the resume fails
		})
		attempts := taken[1:]
		n := len(attempts)
		if err == nil || !strings.Contains(err.Error(), strconv.Itoa(n)) || !strings.Contains(err.Error(), "resum") {
			t.Errorf("Serve after %d failed resumes: %v; want an error naming the limit of %d attempts", n, err, n)
		}
		checkBackOff(t, attempts)
	})
}

// TestRelayBacksOffAnOwnerThatDropsTheSession: an owner that takes the
// relay's connection, and the resumed session, and then drops it at once
// (each new owner does) is a failed resume too: the relay tries again
// after a wait that doubles, and after a bounded number of attempts in a
// row Serve fails with an error naming that limit. It used to count the
// resume as a success, so it reconnected at once, for ever. Whether the
// host initialized its session (each owner answers the replayed
// initialize first) or not (nothing to replay).
func TestRelayBacksOffAnOwnerThatDropsTheSession(t *testing.T) {
	for _, initialized := range []bool{false, true} {
		t.Run(fmt.Sprint("initialized=", initialized), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				taken, err := takeOverEach(t, initialized, func(int) Owner {
					if initialized {
						return answersFirstThenDrops
					}
					return scriptedOwner{func(net.Conn) {}}
				})
				if err == nil || !strings.Contains(err.Error(), strconv.Itoa(maxResumeAttempts)) || !strings.Contains(err.Error(), "dropped") {
					t.Errorf("Serve after %d owners dropped its session: %v; want an error saying so and naming the limit of %d attempts",
						len(taken), err, maxResumeAttempts)
				}
				// The first owner's drop is a takeover, tried at once.
				checkBackOff(t, taken[1:])
			})
		})
	}
}

// TestRelayTakesOverAtOnceAfterASessionThatLasted: an owner that served
// the resumed session for healthySession before it stopped is no failed
// resume: the relay takes over at once, each time, past the limit of
// failed attempts in a row.
func TestRelayTakesOverAtOnceAfterASessionThatLasted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const owners = maxResumeAttempts + 5
		taken, err := takeOverEach(t, true, func(n int) Owner {
			if n == owners {
				return nil
			}
			return scriptedOwner{func(c net.Conn) {
				answersFirstThenDrops.serve(c)
				time.Sleep(healthySession) // it serves, then stops
			}}
		})
		if err == nil || !strings.Contains(err.Error(), "no more owners") {
			t.Errorf("Serve after %d owners stopped: %v; want it to have taken all over, and failed on the next", len(taken), err)
		}
		for i := 1; i < len(taken); i++ {
			if d := taken[i].Sub(taken[i-1]); d != healthySession {
				t.Fatalf("owner %d taken over %s after the one before, want at once once its session had lasted %s", i, d, healthySession)
			}
		}
	})
}
