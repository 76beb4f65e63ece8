package llm

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// baseBackoff is the first exponential backoff step; retry n waits about
// baseBackoff·2ⁿ⁻¹ (500ms, 1s, 2s …) with jitter, capped by MaxRetryWait.
const baseBackoff = 500 * time.Millisecond

// exchange records the last HTTP response of one attempt. go-openai turns a
// failed response into an error and drops its headers, so recordingTransport
// fills this holder, carried in the attempt's request context, to keep the
// status and Retry-After hint for the retry decision.
//
// The fields are written by RoundTrip, which returns before
// CreateChatCompletion does, and read only after it returned: one goroutine
// at a time, no lock needed.
type exchange struct {
	transportErr bool // the last RoundTrip failed without a response
	status       int  // status of the last response, 0 when none
	retryAfter   time.Duration
	hasRetry     bool // retryAfter holds a parsed server hint
	// cut is set when the last response's body passed the limit and its
	// reading was stopped there.
	cut   bool
	limit int64
}

type exchangeKey struct{}

// recordingTransport wraps the caller's transport, records each response
// into the exchange found in the request context, if any, and stops
// reading a response body at limit bytes.
type recordingTransport struct {
	base  http.RoundTripper
	limit int64
}

func (t *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	ex, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if err == nil {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: t.limit, ex: ex}
	}
	if ex == nil {
		return resp, err
	}
	ex.transportErr = err != nil
	ex.status, ex.retryAfter, ex.hasRetry, ex.cut, ex.limit = 0, 0, false, false, t.limit
	if err == nil {
		ex.status = resp.StatusCode
		ex.retryAfter, ex.hasRetry = retryAfter(resp.Header, time.Now())
	}
	return resp, err
}

// errAnswerTooLarge ends the reading of a body past its limit.
var errAnswerTooLarge = errors.New("the answer passed its size limit")

// cappedBody reads at most left bytes of a body, then fails with
// errAnswerTooLarge and marks its exchange cut.
type cappedBody struct {
	io.ReadCloser
	left int64
	ex   *exchange
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.ex != nil {
			b.ex.cut = true
		}
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// retryAfter reads the server's wait hint: "retry-after-ms" (sent by OpenAI
// and Azure, more precise) wins over the standard "Retry-After", which is
// either delta-seconds or an HTTP-date. A date in the past means no wait.
// Unparsable or negative values are ignored (ok=false).
func retryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return durationOf(ms, time.Millisecond), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return durationOf(float64(secs), time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// durationOf converts n units to a Duration, saturating instead of
// overflowing on absurd server hints (they are capped by MaxRetryWait later).
func durationOf(n float64, unit time.Duration) time.Duration {
	const limit = float64(1<<63 - 1)
	if v := n * float64(unit); v < limit {
		return time.Duration(v)
	}
	return time.Duration(1<<63 - 1)
}

// Backoff returns the wait before retry n (1-based): exponential from
// base, capped at limit, with "equal jitter" (a uniform draw from the upper
// half) so that callers failing together (agents throttled at once, calls
// waiting for one tool server) do not retry in lockstep.
func Backoff(n int, base, limit time.Duration) time.Duration {
	d := limit
	if n >= 1 {
		d = base
		for i := 1; i < n && d < limit; i++ {
			d *= 2
		}
		d = min(d, limit)
	}
	if d <= 0 {
		return 0
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep waits for d or until ctx is done, whichever comes first.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
