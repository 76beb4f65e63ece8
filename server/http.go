package server

import (
	"context"
	"errors"
	"fmt"

	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultAddr is where --http listens by default (and make run serves).
const DefaultAddr = "127.0.0.1:7777"

// statelessFrom is the first protocol version served by the stateless
// handler: go-sdk accepts it only there, and the stateful handler keeps older
// clients' subscriptions (FACTS.md).
const statelessFrom = "2026-07-28"

// HTTPConfig configures the HTTP transports. Zero values mean defaults.
type HTTPConfig struct {
	// Addr is the listen address. Default DefaultAddr.
	Addr string
	// Tokens maps bearer tokens to the operator HumanAgent each one acts as
	// (spec §7.4.1's binding). Empty: no authentication, allowed only on a
	// loopback address, every client acts as the default operator.
	Tokens map[string]string
	// AllowedOrigins lists the Origins browsers may call from (scheme://host:port).
	// Requests from the server's own origin are always allowed, requests
	// without Origin (non-browser clients) too.
	AllowedOrigins []string
	// AllowedHosts lists the Host header values accepted. Default on a
	// loopback address: localhost, 127.0.0.1 and [::1] (any port); on other
	// addresses every host is accepted unless this is set.
	AllowedHosts []string
	// MaxBodyBytes bounds request bodies (413 beyond). Default 4 MiB.
	MaxBodyBytes int64
	// SessionTimeout closes sessions idle that long. Default 10 minutes.
	SessionTimeout time.Duration
	// Admins lists operator HumanAgent IDs who may manage and see every
	// task (engine.System.SetAdmins); the other operators act only on their
	// own tasks and those shared with them.
	Admins []string
	// Metrics, when set, is served at /metrics (Prometheus text format,
	// telemetry.Telemetry.MetricsHandler) behind the same perimeter and
	// authentication as /api.
	Metrics http.Handler
}

func (h *HTTPConfig) check() error {
	if h.Addr == "" {
		h.Addr = DefaultAddr
	}
	if h.MaxBodyBytes < 0 {
		return fmt.Errorf("server: http: max body bytes %d: must not be negative", h.MaxBodyBytes)
	}
	if h.MaxBodyBytes == 0 {
		h.MaxBodyBytes = mcp.DefaultMaxRequestBodyBytes
	}
	if h.SessionTimeout < 0 {
		return fmt.Errorf("server: http: session timeout %s: must not be negative", h.SessionTimeout)
	}
	if h.SessionTimeout == 0 {
		h.SessionTimeout = 10 * time.Minute
	}
	host, _, err := net.SplitHostPort(h.Addr)
	if err != nil {
		return fmt.Errorf("server: http: address %q: %w", h.Addr, err)
	}
	if len(h.Tokens) == 0 && !isLoopback(host) {
		return fmt.Errorf("server: http: address %q is not loopback: configure bearer tokens (http.tokens) before serving beyond this machine", h.Addr)
	}
	for tok, op := range h.Tokens {
		if len(tok) < 16 {
			return fmt.Errorf("server: http: the token of operator %s is too short: use at least 16 characters", op)
		}
	}
	for _, o := range h.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("server: http: allowed origin %q: want scheme://host[:port]", o)
		}
	}
	return nil
}

// httpError answers a plain-text error (http.Error) with the MAS's secrets
// scrubbed from msg, which may quote what the request gave (a header); the
// monitor API's JSON errors are apiError's.
func (s *Server) httpError(w http.ResponseWriter, msg string, status int) {
	http.Error(w, s.sys.Scrub(msg), status)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handler serves the MCP transports: streamable HTTP at /mcp (requests of
// protocol version 2026-07-28 and later go to a stateless handler, older
// ones to a stateful one, both on the one *mcp.Server) and legacy SSE at
// /sse, behind the Host, Origin, body-size and token checks.
func (s *Server) Handler() http.Handler {
	cfg := s.cfg.HTTP
	get := func(*http.Request) *mcp.Server { return s.mcp }
	// guard checks Host itself (with the configured allowlist), so the
	// SDK's own localhost-only check is off: it would refuse a configured
	// proxy Host on a loopback listener.
	stateful := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{
		SessionTimeout: cfg.SessionTimeout, MaxRequestBodyBytes: cfg.MaxBodyBytes, DisableLocalhostProtection: true,
		EventStore: s.eventStore(),
	})
	stateless := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{
		Stateless: true, JSONResponse: true, MaxRequestBodyBytes: cfg.MaxBodyBytes, DisableLocalhostProtection: true,
	})
	// The long-lived requests of 2026-07-28 (longRequest) go to a stateless
	// handler that ends them when their client goes away (the SDK does so
	// for subscriptions/listen in any case; here wait_for_updates and
	// tasks/result too), so that their place under the long-request caps
	// is free again at once (limitLongRequests). Only they: other calls
	// run to their end whether or not the client waits for the answer.
	longPolls := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{
		Stateless: true, JSONResponse: true, MaxRequestBodyBytes: cfg.MaxBodyBytes, DisableLocalhostProtection: true,
		PropagateRequestCancellation: true,
	})
	sse := newSSEHandler(s.mcp, cfg.MaxBodyBytes)

	streamable := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("Mcp-Protocol-Version"); v >= statelessFrom {
			if longRequest(r) != "" {
				longPolls.ServeHTTP(w, r)
				return
			}
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.guard(s.ownSessions(s.limitSessions(s.limitLongRequests(s.taskAugmented(s.streams.track(streamable)))))))
	mux.Handle("/sse", s.guard(s.limitStreams(s.sseCaps, false, s.streams.track(sse))))
	// The web monitor: its API checks tokens or bound sessions itself.
	mux.Handle("/api/", s.perimeter(s.apiHandler()))
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.perimeter(s.metricsHandler(cfg.Metrics)))
	}
	mux.Handle("/", s.perimeter(s.pageHandler()))
	return s.limitBodyTime(mux)
}

// guard is the MCP endpoints' perimeter plus the protocol version header
// (400) and the bearer token (401). A wrong token counts against its
// source address in bind_human_agent's throttle (bearerKeys); while the
// address backs off, its requests with a token are refused (429 with
// Retry-After) without the token being checked, as the monitor API's are.
func (s *Server) guard(next http.Handler) http.Handler {
	cfg := s.cfg.HTTP
	inner := next
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && !slices.Contains(mcp.SupportedProtocolVersions(), v) {
			s.httpError(w, fmt.Sprintf("unsupported MCP protocol version %q (supported: %s)", v,
				strings.Join(mcp.SupportedProtocolVersions(), ", ")), http.StatusBadRequest)
			return
		}
		inner.ServeHTTP(w, r)
	})
	if len(cfg.Tokens) > 0 {
		authed := auth.RequireBearerToken(s.verifyToken, &auth.RequireBearerTokenOptions{})(h)
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// RFC 6750 §3: a 401 says how to authenticate. The SDK adds
			// the header only with OAuth metadata, which we do not use, so
			// it is added here, to the requests the SDK will refuse only
			// (it reads the token as bearerToken does).
			if tok, ok := bearerToken(r); !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="mas-mcp"`)
			} else if s.bearerBackingOff(w, r, false) {
				return
			} else if _, ok := s.tokenOperator(tok); !ok {
				s.throttle.failed(bearerKeys(r)...)
				w.Header().Set("WWW-Authenticate", `Bearer realm="mas-mcp", error="invalid_token"`)
			}
			authed.ServeHTTP(w, r)
		})
	}
	return s.perimeter(h)
}

// perimeter applies, in order: the Host and Origin allowlists (403) and the
// body limit (413).
func (s *Server) perimeter(next http.Handler) http.Handler {
	cfg := s.cfg.HTTP
	listenHost, _, _ := net.SplitHostPort(cfg.Addr)
	hosts := cfg.AllowedHosts
	if len(hosts) == 0 && isLoopback(listenHost) {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(hosts) > 0 && !slices.Contains(hosts, hostOnly(r.Host)) {
			s.httpError(w, fmt.Sprintf("host %q is not allowed", r.Host), http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o, r) {
			s.httpError(w, fmt.Sprintf("origin %q is not allowed", o), http.StatusForbidden)
			return
		}
		if r.ContentLength > cfg.MaxBodyBytes {
			http.Error(w, fmt.Sprintf("request body of %d bytes exceeds the limit of %d", r.ContentLength, cfg.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// originAllowed: the server's own origin (scheme, host and port as r
// came in), or one on the allowlist. Behind a proxy that terminates TLS
// the page's https origin is not the server's own: list it in
// AllowedOrigins.
func (s *Server) originAllowed(origin string, r *http.Request) bool {
	if slices.Contains(s.cfg.HTTP.AllowedOrigins, origin) {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u, err := url.Parse(origin)
	return err == nil && u.Scheme == scheme && u.Host == r.Host
}

// bearerToken is the token of an "Authorization: Bearer <token>" header,
// read as go-sdk's auth.RequireBearerToken reads it.
func bearerToken(r *http.Request) (string, bool) {
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
		return "", false
	}
	return f[1], true
}

// hostOnly strips the port (and IPv6 brackets) from a Host header.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.Trim(h, "[]")
}

// verifyToken maps a bearer token to its operator (constant-time compare).
func (s *Server) verifyToken(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	if op, ok := s.tokenOperator(token); ok {
		return &auth.TokenInfo{UserID: op, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	return nil, fmt.Errorf("%w: unknown bearer token", auth.ErrInvalidToken)
}

// ServeHTTP listens on the configured address and serves until ctx is done,
// then shuts down gracefully: sessions are closed, in-flight requests get a
// few seconds to finish. ready, if non-nil, receives the bound address.
func (s *Server) ServeHTTP(ctx context.Context, ready func(addr string)) error {
	ln, err := net.Listen("tcp", s.cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("server: http: %w", err)
	}
	// IdleTimeout closes keep-alive connections no request came on for
	// limits.idle_timeout: without it (and without ReadTimeout, which would
	// cut the streams) anyone reaching the port could hold any number.
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: s.cfg.Limits.IdleTimeout}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("server: http: %w", err)
	case <-ctx.Done():
	}
	// Long polls return first; then the sessions close (ending their
	// streams) and in-flight requests get a few seconds.
	s.drain()
	closed := make(chan struct{})
	go func() {
		for ss := range s.mcp.Sessions() {
			_ = ss.Close()
		}
		close(closed)
	}()
	shutdown, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	select {
	case <-closed:
	case <-shutdown.Done():
	}
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: http: %w", err)
	}
	return nil
}
