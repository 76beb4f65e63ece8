package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// apiSessions maps the web monitor's session cookies to the operators they
// are bound to (bind_human_agent, spec §7.4.1). A session ends
// Limits.MonitorSessionTTL after it was bound; an operator holds at most
// Limits.MonitorSessionsPerOperator, binding one more ends its oldest. So
// the table stays bounded even where binding needs nothing (loopback
// without tokens).
type apiSessions struct {
	l *Limits // set by New before any request

	mu sync.Mutex
	m  map[string]apiSession // cookie → session; guarded by mu
}

type apiSession struct {
	op      string
	expires time.Time
}

func (a *apiSessions) bind(op string) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	now := a.l.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]apiSession{}
	}
	n, oldest := 0, ""
	for k, s := range a.m {
		switch {
		case !now.Before(s.expires):
			delete(a.m, k)
		case s.op == op:
			n++
			if oldest == "" || s.expires.Before(a.m[oldest].expires) {
				oldest = k
			}
		}
	}
	if n >= a.l.MonitorSessionsPerOperator {
		delete(a.m, oldest)
	}
	a.m[id] = apiSession{op: op, expires: now.Add(a.l.MonitorSessionTTL)}
	return id
}

func (a *apiSessions) lookup(id string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.m[id]
	if ok && !a.l.Now().Before(s.expires) {
		delete(a.m, id)
		return "", false
	}
	return s.op, ok
}

// count is how many sessions the table holds (expired ones not yet
// dropped included).
func (a *apiSessions) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// bindThrottle slows password (and token) guessing on bind_human_agent,
// and token guessing with "Authorization: Bearer" on /api, /mcp and /sse
// (bearerKeys: the same source-address key, so the doors share a count):
// each operator ID and each source address has Limits.PasswordFailures
// free failures; after that every attempt waits a backoff that doubles
// with each failure, up to Limits.PasswordBackoffMax. Attempts that come
// too early are answered 429 with Retry-After, without checking the
// password. Entries are forgotten PasswordBackoffMax after their last
// failure, and the table is bounded.
type bindThrottle struct {
	l *Limits // set by New before any request

	mu sync.Mutex
	m  map[string]failures // "op:ID" or "ip:address" → failures; guarded by mu
}

type failures struct {
	n    int
	last time.Time
}

// maxThrottled bounds the throttle's table; beyond it, forgotten entries
// are dropped first, then the quietest.
const maxThrottled = 4096

// wait is how long the attempt on these keys must still wait (0: go ahead).
func (b *bindThrottle) wait(keys ...string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.l.Now()
	var w time.Duration
	for _, k := range keys {
		f, ok := b.m[k]
		if !ok {
			continue
		}
		if until := f.last.Add(b.backoff(f.n)); until.After(now) {
			w = max(w, until.Sub(now))
		}
	}
	return w
}

// backoff after n failures.
func (b *bindThrottle) backoff(n int) time.Duration {
	if n < b.l.PasswordFailures {
		return 0
	}
	d := b.l.PasswordBackoff
	for i := b.l.PasswordFailures; i < n && d < b.l.PasswordBackoffMax; i++ {
		d *= 2
	}
	return min(d, b.l.PasswordBackoffMax)
}

// failed records a failed attempt on keys.
func (b *bindThrottle) failed(keys ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.l.Now()
	if b.m == nil {
		b.m = map[string]failures{}
	}
	if len(b.m) >= maxThrottled {
		b.pruneLocked(now)
	}
	for _, k := range keys {
		f := b.m[k]
		if !f.last.IsZero() && now.Sub(f.last) >= b.l.PasswordBackoffMax {
			f.n = 0 // quiet long enough: a fresh start
		}
		f.n++
		f.last = now
		b.m[k] = f
	}
}

// succeeded clears the failures of keys.
func (b *bindThrottle) succeeded(keys ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		delete(b.m, k)
	}
}

// pruneLocked drops forgotten entries, then, if still full, the quietest
// half.
func (b *bindThrottle) pruneLocked(now time.Time) {
	var oldest time.Time
	for k, f := range b.m {
		if now.Sub(f.last) >= b.l.PasswordBackoffMax {
			delete(b.m, k)
		} else if oldest.IsZero() || f.last.Before(oldest) {
			oldest = f.last
		}
	}
	if len(b.m) < maxThrottled {
		return
	}
	cut := oldest.Add(now.Sub(oldest) / 2)
	for k, f := range b.m {
		if f.last.Before(cut) || len(b.m) >= maxThrottled {
			delete(b.m, k)
		}
	}
}

// size is how many keys the throttle holds.
func (b *bindThrottle) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// bindKeys are the throttle's keys of a bind attempt: its source address
// and, for a password, the operator ID it names.
func bindKeys(r *http.Request, humanAgentID string) []string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	keys := []string{"ip:" + host}
	if humanAgentID != "" {
		keys = append(keys, "op:"+humanAgentID)
	}
	return keys
}

// bearerKeys are the throttle's keys of a request's bearer token: its
// source address only (a token names no operator until it is right).
// Only wrong tokens are counted (failed); a right one clears nothing,
// or an operator holding one token could clear its address's count
// between guesses at another's.
func bearerKeys(r *http.Request) []string { return bindKeys(r, "") }

// bearerBackingOff refuses (429, as JSON for the API) a request with a
// bearer token whose source address backs off after wrong tokens, and
// reports whether it did: the token is not checked then.
func (s *Server) bearerBackingOff(w http.ResponseWriter, r *http.Request, asJSON bool) bool {
	wait := s.throttle.wait(bearerKeys(r)...)
	if wait > 0 {
		s.refuse(w, s.tooEarly(wait), asJSON)
	}
	return wait > 0
}

// refuseTooEarly answers 429 to a bind attempt that must still wait.
func (s *Server) refuseTooEarly(w http.ResponseWriter, wait time.Duration) {
	s.refuse(w, s.tooEarly(wait), true)
}

// tooEarly is the 429 of an attempt (a bind, a bearer token) that must
// still wait.
func (s *Server) tooEarly(wait time.Duration) *capError {
	return &capError{status: http.StatusTooManyRequests, retryAfter: wait, msg: fmt.Sprintf(
		"too many failed attempts from this address or for this operator: try again in %ds (limits.password_failures, limits.password_backoff)",
		int((wait+time.Second-1)/time.Second))}
}
