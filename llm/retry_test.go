package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// span is an accepted range for one backoff wait.
type span struct{ lo, hi time.Duration }

func exactly(d time.Duration) span { return span{d, d} }

// backoffSpan is the range Backoff(n, baseBackoff, limit) may return.
func backoffSpan(n int, limit time.Duration) span {
	d := min(baseBackoff<<(n-1), limit)
	return span{d / 2, d}
}

func TestRetry(t *testing.T) {
	const limit = 5 * time.Second
	soon := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name       string
		replies    []reply
		maxRetries int
		wantSent   int
		wantWaits  []span
		wantErr    error    // sentinel; nil with wantIn empty means success
		wantIn     []string // substrings of the error
	}{
		{
			name:      "429 with Retry-After seconds, then success",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After": "2"}, body: errorBody("slow down")}, {}},
			wantSent:  2,
			wantWaits: []span{exactly(2 * time.Second)},
		},
		{
			name:      "503 twice, then success",
			replies:   []reply{{status: 503}, {status: 503}, {}},
			wantSent:  3,
			wantWaits: []span{backoffSpan(1, limit), backoffSpan(2, limit)},
		},
		{
			name:      "Retry-After capped at MaxRetryWait",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After": "3600"}}, {}},
			wantSent:  2,
			wantWaits: []span{exactly(limit)},
		},
		{
			name:      "Retry-After as HTTP-date",
			replies:   []reply{{status: 503, header: map[string]string{"Retry-After": soon}}, {}},
			wantSent:  2,
			wantWaits: []span{{lo: 1 * time.Second, hi: limit}}, // capped: 30s away
		},
		{
			name:      "retry-after-ms wins",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After": "9", "Retry-After-Ms": "1500"}}, {}},
			wantSent:  2,
			wantWaits: []span{exactly(1500 * time.Millisecond)},
		},
		{
			name:      "unparsable Retry-After falls back to backoff",
			replies:   []reply{{status: 429, header: map[string]string{"Retry-After": "soon"}}, {}},
			wantSent:  2,
			wantWaits: []span{backoffSpan(1, limit)},
		},
		{
			name:      "connection dropped, then success",
			replies:   []reply{{hijack: true}, {}},
			wantSent:  2,
			wantWaits: []span{backoffSpan(1, limit)},
		},
		{
			name:     "400 not retried",
			replies:  []reply{{status: 400, body: errorBody("Invalid value for messages")}},
			wantSent: 1,
			wantIn:   []string{"llm: chat completion: status 400: Invalid value for messages", "1 attempt)"},
		},
		{
			name:     "404 not retried, plain body",
			replies:  []reply{{status: 404, body: "model not found"}},
			wantSent: 1,
			wantIn:   []string{"status 404: model not found"},
		},
		{
			name:       "429 until retries are exhausted",
			replies:    []reply{{status: 429, body: errorBody("Rate limit reached")}},
			maxRetries: 2,
			wantSent:   3,
			wantWaits:  []span{backoffSpan(1, limit), backoffSpan(2, limit)},
			wantErr:    ErrRateLimited,
			wantIn:     []string{"llm: chat completion: rate limited: status 429: Rate limit reached", "3 attempts)"},
		},
		{
			name:       "5xx until retries are exhausted",
			replies:    []reply{{status: 502}},
			maxRetries: 1,
			wantSent:   2,
			wantWaits:  []span{backoffSpan(1, limit)},
			wantErr:    ErrServer,
			wantIn:     []string{"server error: status 502", "2 attempts)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.replies...)
			o, sleeps := newTestClient(t, api, OpenAIConfig{MaxRetries: tt.maxRetries, MaxRetryWait: limit})
			resp, err := o.Complete(t.Context(), userRequest("hi"))
			switch {
			case tt.wantErr == nil && tt.wantIn == nil:
				if err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if resp.Content != "hello" {
					t.Errorf("Content = %q, want %q", resp.Content, "hello")
				}
			case err == nil:
				t.Fatal("Complete succeeded, want an error")
			default:
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error %q is not %v", err, tt.wantErr)
				}
				for _, sentinel := range []error{ErrRateLimited, ErrServer, ErrTimeout} {
					if sentinel != tt.wantErr && errors.Is(err, sentinel) {
						t.Errorf("error %q is also %v", err, sentinel)
					}
				}
				for _, s := range tt.wantIn {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
			}
			if resp == nil || resp.Usage.Calls != 1 || resp.Usage.PromptChars != 2 {
				t.Errorf("Response = %+v, want non-nil with Calls 1 and PromptChars 2", resp)
			}
			if n := len(api.received()); n != tt.wantSent {
				t.Errorf("server got %d requests, want %d", n, tt.wantSent)
			}
			if resp != nil && resp.Attempts != tt.wantSent {
				t.Errorf("Response.Attempts = %d, want the %d requests sent", resp.Attempts, tt.wantSent)
			}
			checkWaits(t, tt.wantWaits, sleeps.got())
		})
	}
}

func checkWaits(t *testing.T, want []span, got []time.Duration) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("waits = %v, want %d of them in %v", got, len(want), want)
		return
	}
	for i, d := range got {
		if d < want[i].lo || d > want[i].hi {
			t.Errorf("wait %d = %v, want within [%v, %v]", i+1, d, want[i].lo, want[i].hi)
		}
	}
}

func TestConnectionRefused(t *testing.T) {
	api := newFakeAPI(t)
	api.Close() // nothing listens at api.URL any more
	o, sleeps := newTestClient(t, api, OpenAIConfig{MaxRetries: 2})
	resp, err := o.Complete(t.Context(), userRequest("hi"))
	if err == nil {
		t.Fatal("Complete succeeded against a closed server")
	}
	if !strings.Contains(err.Error(), "3 attempts)") {
		t.Errorf("error %q does not report 3 attempts", err)
	}
	if resp == nil || resp.Usage.Calls != 1 {
		t.Errorf("Response = %+v, want non-nil with Calls 1", resp)
	}
	if n := len(sleeps.got()); n != 2 {
		t.Errorf("backed off %d times, want 2", n)
	}
}

func TestPerAttemptTimeout(t *testing.T) {
	api := newFakeAPI(t, reply{hold: true})
	o, sleeps := newTestClient(t, api, OpenAIConfig{Timeout: 20 * time.Millisecond, MaxRetries: 2})
	start := time.Now()
	_, err := o.Complete(t.Context(), userRequest("hi"))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want ErrTimeout", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q passes for the caller's deadline", err)
	}
	for _, s := range []string{"timeout: no answer within 20ms", "3 attempts)"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	if n := len(sleeps.got()); n != 2 {
		t.Errorf("backed off %d times, want 2", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Complete took %v", d)
	}
}

// TestCallerDeadlineNotRetried: when the caller's own deadline expires the
// call ends with the caller's error, not ErrTimeout, and is not retried.
func TestCallerDeadlineNotRetried(t *testing.T) {
	api := newFakeAPI(t, reply{hold: true})
	o, sleeps := newTestClient(t, api, OpenAIConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	resp, err := o.Complete(ctx, userRequest("hi"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Errorf("error %v, want context.DeadlineExceeded and not ErrTimeout", err)
	}
	if resp == nil {
		t.Error("nil *Response")
	}
	if w := sleeps.got(); len(w) != 0 {
		t.Errorf("slept %v, want no retry", w)
	}
}

func TestCancelledBeforeSending(t *testing.T) {
	api := newFakeAPI(t)
	o, _ := newTestClient(t, api, OpenAIConfig{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	resp, err := o.Complete(ctx, userRequest("hi"))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if resp == nil || resp.Usage.Calls != 1 {
		t.Errorf("Response = %+v, want non-nil with Calls 1", resp)
	}
	if n := len(api.received()); n != 0 {
		t.Errorf("server got %d requests, want none", n)
	}
}

// TestCancelWhileBackingOff uses the real sleep with a 30s Retry-After and
// cancels the caller's context once the client starts waiting.
func TestCancelWhileBackingOff(t *testing.T) {
	api := newFakeAPI(t, reply{status: 429, header: map[string]string{"Retry-After": "30"}})
	o, _ := newTestClient(t, api, OpenAIConfig{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var asked time.Duration
	o.sleep = func(ctx context.Context, d time.Duration) error {
		asked = d
		time.AfterFunc(time.Millisecond, cancel)
		return Sleep(ctx, d)
	}
	start := time.Now()
	resp, err := o.Complete(ctx, userRequest("hi"))
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Complete returned after %v, want promptly", elapsed)
	}
	if asked != 30*time.Second {
		t.Errorf("asked to wait %v, want 30s", asked)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	for _, s := range []string{"context canceled", "1 attempt)", "status 429"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	if resp == nil || resp.Usage.Calls != 1 {
		t.Errorf("Response = %+v, want non-nil with Calls 1", resp)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	const limit, calls = 2, 6
	api := newFakeAPI(t)
	api.hold = 3 * time.Millisecond
	o, _ := newTestClient(t, api, OpenAIConfig{Concurrency: limit})
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			_, errs[i] = o.Complete(t.Context(), userRequest("hi"))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if got := api.maxInFlight(); got < 1 || got > limit {
		t.Errorf("max requests in flight = %d, want 1..%d", got, limit)
	}
}

// TestLimitReleasedWhileBackingOff: with Concurrency 1, a call that backs off
// must let another call through; holding the slot would deadlock here.
func TestLimitReleasedWhileBackingOff(t *testing.T) {
	api := newFakeAPI(t, reply{status: 429, header: map[string]string{"Retry-After": "1"}}, reply{})
	o, _ := newTestClient(t, api, OpenAIConfig{Concurrency: 1})
	backingOff, otherDone := make(chan struct{}), make(chan struct{})
	o.sleep = func(ctx context.Context, d time.Duration) error {
		close(backingOff)
		select {
		case <-otherDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := o.Complete(ctx, userRequest("first"))
		first <- err
	}()
	<-backingOff
	if _, err := o.Complete(ctx, userRequest("second")); err != nil {
		t.Fatalf("second call while the first backs off: %v", err)
	}
	close(otherDone)
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
}

// TestLimitAcquireHonoursContext: a call waiting for a slot gives up with its
// context.
func TestLimitAcquireHonoursContext(t *testing.T) {
	api := newFakeAPI(t, reply{hold: true})
	o, _ := newTestClient(t, api, OpenAIConfig{Concurrency: 1, Timeout: time.Minute})
	holder, release := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = o.Complete(holder, userRequest("holds the slot"))
	}()
	defer func() { release(); <-done }()
	<-api.arrived // the slot is taken
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	_, err := o.Complete(ctx, userRequest("waits"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want context.DeadlineExceeded", err)
	}
	if n := len(api.received()); n != 1 {
		t.Errorf("server got %d requests, want 1", n)
	}
}

// TestLogRecords checks the debug record per attempt and the info record per
// retry.
func TestLogRecords(t *testing.T) {
	api := newFakeAPI(t, reply{status: 429, header: map[string]string{"Retry-After": "2"}}, reply{})
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o, _ := newTestClient(t, api, OpenAIConfig{Logger: logger})
	req := userRequest("hi")
	req.Tag = "agent=a1 step=3"
	if _, err := o.Complete(t.Context(), req); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	type record struct {
		Level, Msg, Tag, Model string
		Attempt, Status        int
		Wait                   time.Duration
	}
	var got []record
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var r record
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []record{
		{Level: "DEBUG", Msg: "llm attempt", Tag: "agent=a1 step=3", Model: "test-model", Attempt: 1, Status: 429},
		{Level: "INFO", Msg: "llm retry", Tag: "agent=a1 step=3", Model: "test-model", Attempt: 1, Status: 429, Wait: 2 * time.Second},
		{Level: "DEBUG", Msg: "llm attempt", Tag: "agent=a1 step=3", Model: "test-model", Attempt: 2, Status: 200},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log records mismatch (-want +got):\n%s", diff)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
		wantOK bool
	}{
		{name: "absent"},
		{name: "seconds", header: map[string]string{"Retry-After": "7"}, want: 7 * time.Second, wantOK: true},
		{name: "zero", header: map[string]string{"Retry-After": "0"}, want: 0, wantOK: true},
		{name: "negative", header: map[string]string{"Retry-After": "-3"}},
		{name: "garbage", header: map[string]string{"Retry-After": "later"}},
		{name: "huge", header: map[string]string{"Retry-After": "99999999999999"}, want: time.Duration(1<<63 - 1), wantOK: true},
		{name: "date ahead", header: map[string]string{"Retry-After": "Sat, 01 Mar 2025 12:00:45 GMT"}, want: 45 * time.Second, wantOK: true},
		{name: "date past", header: map[string]string{"Retry-After": "Sat, 01 Mar 2025 11:00:00 GMT"}, want: 0, wantOK: true},
		{name: "milliseconds", header: map[string]string{"Retry-After-Ms": "250"}, want: 250 * time.Millisecond, wantOK: true},
		{name: "bad milliseconds fall back", header: map[string]string{"Retry-After-Ms": "x", "Retry-After": "1"}, want: time.Second, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got, ok := retryAfter(h, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("retryAfter = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	const limit = 3 * time.Second
	tests := []struct {
		n    int
		want span
	}{
		{1, span{250 * time.Millisecond, 500 * time.Millisecond}},
		{2, span{500 * time.Millisecond, time.Second}},
		{3, span{time.Second, 2 * time.Second}},
		{4, span{limit / 2, limit}},
		{200, span{limit / 2, limit}},
	}
	for _, tt := range tests {
		for range 50 {
			if d := Backoff(tt.n, baseBackoff, limit); d < tt.want.lo || d > tt.want.hi {
				t.Fatalf("Backoff(%d) = %v, want within [%v, %v]", tt.n, d, tt.want.lo, tt.want.hi)
			}
		}
	}
}

func TestSleepCtx(t *testing.T) {
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Errorf("Sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled context = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Sleep on a cancelled context took %v", d)
	}
}
