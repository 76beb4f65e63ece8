package downstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/telemetry"
	"github.com/mas-mcp/mas-mcp/llm"
)

// Pool holds one client session per configured server, shared by every
// agent (spec §4.1 level 3). Sessions connect lazily on first use and are
// reconnected when their transport breaks; a server that cannot be
// reached is waited for within its outage window (outage.go). Close stops
// every server subprocess.
type Pool struct {
	cfg *Config
	log *slog.Logger

	// sleep waits between a call's attempts to reach a server, and now
	// reads the clock that measures its outage window; both are replaced
	// in tests.
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time

	mu       sync.Mutex // guards conns, closed and requests
	conns    map[string]*conn
	closed   bool
	requests serverRequests // answers the servers' requests; nil: refused

	// elicit reaches operators' own MCP clients (SetOperatorElicit).
	elicit atomic.Pointer[ElicitFunc]
}

// conn is one server's session and its cached description.
type conn struct {
	name  string
	sc    ServerConfig
	log   *slog.Logger
	scrub *scrubber // the server's configured secrets

	mu      sync.Mutex // guards the fields below; held while connecting
	session *mcp.ClientSession
	ended   chan struct{}      // closed once the session has ended (its server gone)
	cancel  context.CancelFunc // ends the session's lifetime context
	cmd     *exec.Cmd          // the stdio server's process, if any
	caps    *Capabilities
	gen     int // connection generation, to reconnect once per break
	pool    *Pool

	callsMu sync.Mutex // guards calls
	calls   map[*inflight]struct{}
}

// NewPool returns a pool for the configuration; nothing connects yet.
func NewPool(cfg *Config, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg == nil {
		cfg = &Config{Servers: map[string]ServerConfig{}}
	}
	p := &Pool{cfg: cfg, log: log, conns: map[string]*conn{}, sleep: llm.Sleep, now: time.Now}
	for name, sc := range cfg.Servers {
		p.conns[name] = &conn{name: name, sc: sc, log: log.With("mcp_server", name), scrub: newScrubber(sc), pool: p}
	}
	return p
}

// scrubber returns the scrubber of a server's configured secrets (nil:
// none, or no such server).
func (p *Pool) scrubber(server string) *scrubber {
	if p == nil {
		return nil
	}
	if c, ok := p.conns[server]; ok {
		return c.scrub
	}
	return nil
}

// ToolGuides maps each server to the description agents see (engine.ToolCatalog).
func (p *Pool) ToolGuides() map[string]string {
	out := make(map[string]string, len(p.cfg.Servers))
	for name, sc := range p.cfg.Servers {
		d := sc.Description
		if d == "" {
			d = "MCP server " + name + " (get its capabilities with a get_description call first)."
		}
		out[name] = d
	}
	return out
}

// Server returns a server's configuration.
func (p *Pool) Server(name string) (ServerConfig, bool) {
	sc, ok := p.cfg.Servers[name]
	return sc, ok
}

// serve makes h answer the servers' elicitation and sampling requests on
// the sessions connected from now on.
func (p *Pool) serve(h serverRequests) {
	p.mu.Lock()
	p.requests = h
	p.mu.Unlock()
}

func (p *Pool) conn(name string) (*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("downstream pool is closed")
	}
	c, ok := p.conns[name]
	if !ok {
		return nil, fmt.Errorf("tool %q: no such MCP server is configured", name)
	}
	return c, nil
}

// Close ends every session and stops every subprocess (no orphans: a stdio
// server's whole process group is killed if it does not exit by itself).
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := make([]*conn, 0, len(p.conns))
	for _, c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			c.mu.Lock()
			c.disconnectLocked()
			c.mu.Unlock()
		})
	}
	wg.Wait()
	return nil
}

// sessionFor returns the server's session, connecting if needed: when
// there is none, or it has ended (a stdio server's process exited, a
// remote server's connection failed), so that no call is sent on a
// session known to be gone. Connecting stops when ctx ends.
func (c *conn) sessionFor(ctx context.Context) (*mcp.ClientSession, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != nil {
		select {
		case <-c.ended:
			c.log.Warn("mcp server session ended, reconnecting")
			c.disconnectLocked()
		default:
			return c.session, c.gen, nil
		}
	}
	if err := c.connectLocked(ctx); err != nil {
		return nil, c.gen, err
	}
	return c.session, c.gen, nil
}

// reconnect replaces a broken session, unless another caller already did
// since generation gen.
func (c *conn) reconnect(ctx context.Context, gen int) (*mcp.ClientSession, int, error) {
	c.drop(gen)
	return c.sessionFor(ctx)
}

// drop closes a broken session, unless another caller already replaced
// it since generation gen: the next sessionFor connects anew.
func (c *conn) drop(gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen && c.session != nil {
		c.log.Warn("mcp server connection broken, reconnecting")
		c.disconnectLocked()
	}
}

// connectLocked connects to the server; the handshake ends when ctx does
// (or after the server's timeout), the session itself lives on.
func (c *conn) connectLocked(ctx context.Context) error {
	c.pool.mu.Lock()
	h := c.pool.requests
	c.pool.mu.Unlock()
	client := mcp.NewClient(&mcp.Implementation{Name: "mas-mcp", Version: "dev"}, c.clientOptions(h))
	if roots := c.sc.roots(); len(roots) > 0 {
		client.AddRoots(roots...)
	}
	client.AddSendingMiddleware(telemetry.ClientMiddleware(c.name))
	var transport mcp.Transport
	var remote *serverTransport
	switch {
	case c.sc.Command != "":
		cmd := exec.Command(c.sc.Command, c.sc.Args...)
		cmd.Env = os.Environ()
		for k, v := range c.sc.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		// Its own process group, so Close can stop the children it spawns
		// (npx starts node, for instance).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stderr = &lineLogger{log: c.log, scrub: c.scrub}
		c.cmd = cmd
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	case c.sc.Transport == "sse":
		remote = c.serverTransport()
		transport = &mcp.SSEClientTransport{Endpoint: c.sc.URL, HTTPClient: &http.Client{Transport: remote}, MaxEventSize: MaxMessageBytes}
	default:
		remote = c.serverTransport()
		transport = &mcp.StreamableClientTransport{Endpoint: c.sc.URL, HTTPClient: &http.Client{Transport: remote}, MaxRetries: 1,
			MaxEventSize: MaxMessageBytes}
	}
	// The session lives as long as the connection, not as the step that
	// first needed it (the SSE transport ties its stream to this context);
	// only the handshake is bounded, by the timeout and by the caller's
	// context (a step that stops waiting for the server stops connecting
	// to it too; the next caller connects anew). It carries none of the
	// step's values: the SDK's handlers of the server's requests run in
	// contexts derived from it, and a sampling request must be gated by
	// the step of the call it belongs to (sample takes the call's), not
	// by whichever step connected. Nothing else needs them: telemetry
	// reads a request's trace from the call's context, so only the
	// handshake's own spans start a trace of their own.
	life, cancel := context.WithCancel(context.Background())
	handshake := time.AfterFunc(c.sc.timeout(), cancel)
	left := context.AfterFunc(ctx, cancel)
	start := time.Now()
	session, err := client.Connect(life, transport, nil)
	timedOut, gone := !handshake.Stop(), !left()
	switch {
	case gone:
		// The caller left: its error, not the server's.
		if err == nil {
			_ = session.Close()
		}
		err = ctx.Err()
		timedOut = false
	case timedOut && err == nil:
		err = fmt.Errorf("no answer within %s", c.sc.timeout())
		_ = session.Close()
	}
	if err != nil {
		cancel()
		started := c.cmd == nil || c.cmd.Process != nil
		c.killLocked()
		// net/http quotes the URL in its errors.
		err = c.scrub.err(fmt.Errorf("mcp server %q (%s): connect: %w", c.name, c.sc.describe(), err))
		if gone {
			return err
		}
		// The server was not there to answer: its process did not start
		// or ended, its connection failed, a gateway said it is
		// unavailable, or no answer came. An answer that refused the
		// handshake (an HTTP status, a JSON-RPC error) is no outage.
		if timedOut || !started || broken(err) || (remote != nil && remote.unavailable.Load()) {
			return &unreachableError{err}
		}
		return err
	}
	ended := make(chan struct{})
	go func() {
		_ = session.Wait()
		close(ended)
	}()
	c.session, c.ended, c.cancel = session, ended, cancel
	c.caps = nil
	c.gen++
	c.log.Info("mcp server connected", "server", c.sc.describe(), "ms", time.Since(start).Milliseconds())
	return nil
}

// disconnectLocked closes the session and makes sure the process is gone.
func (c *conn) disconnectLocked() {
	if c.session != nil {
		_ = c.session.Close()
		c.session, c.ended = nil, nil
	}
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	c.killLocked()
	c.caps = nil
}

// killLocked kills what is left of a stdio server's process group.
func (c *conn) killLocked() {
	if c.cmd == nil || c.cmd.Process == nil {
		c.cmd = nil
		return
	}
	pid := c.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	c.cmd = nil
}

// broken reports whether err means the transport broke (the server died or
// the connection dropped, a remote server forgot the session, an answer
// too large to read), as opposed to an error answer.
func broken(err error) bool {
	if err == nil {
		return false
	}
	// A remote server that restarted (or ended the session) answers the
	// session's requests with 404 from then on: go-sdk fails the session.
	if errors.Is(err, mcp.ErrSessionMissing) {
		return true
	}
	// The HTTP request failed: no answer came (go-sdk wraps this in its
	// "rejected by transport" JSON-RPC error, which is no answer either). A
	// call's own timeout or cancellation is not a broken transport.
	var uerr *url.Error
	if errors.As(err, &uerr) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return false // the server answered: the transport works
	}
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || tooLarge(err) {
		return true
	}
	// go-sdk passes some transport failures on as text only; "failed to
	// read body" ends a streamable HTTP session for good.
	msg := err.Error()
	for _, s := range []string{"connection closed", "broken pipe", "connection reset", "connection refused", "client is closing",
		"failed to read body"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// do runs f on the server's session with the server's timeout. When the
// transport is broken it reconnects; it runs f again, once, only when it
// is safe: nothing of the call reached the server (it answered the call's
// request with 404 for an unknown session, or the request could not even
// be dialled), or retry says so (reads, tools declared read-only or
// idempotent) — a call that may have reached the server is not made
// twice. An answer over MaxMessageBytes is not asked for again. A server
// that cannot be reached is waited for, when ctx lets the call wait
// (withOutageWait) and the call is safe to make (again): outage.go. Its
// errors are scrubbed of the server's secrets.
func (p *Pool) do(ctx context.Context, server string, retry bool, f func(context.Context, *mcp.ClientSession) error) error {
	c, err := p.conn(server)
	if err != nil {
		return err
	}
	w := p.outageWait(ctx, c)
	var (
		made  int   // times the call was made
		broke error // its last break, when it is to be made again
	)
	for {
		session, gen, err := c.sessionFor(ctx)
		if err == nil {
			w.reached()
			made++
			var unsent bool
			unsent, err = c.call(ctx, session, f)
			if !broken(err) || ctx.Err() != nil {
				return c.scrub.err(err)
			}
			if made > 1 || tooLarge(err) || (!unsent && !retry) {
				return c.scrub.err(c.notRepeated(gen, err, retry || unsent))
			}
			broke = err
			c.drop(gen)
			continue
		}
		// Connecting failed: wait for the server, or fail.
		if err := w.next(ctx, err); err != nil {
			if broke != nil && w.tries == 0 && ctx.Err() == nil {
				err = fmt.Errorf("%w (and reconnecting failed: %v)", broke, err)
			}
			return c.scrub.err(err)
		}
	}
}

// call makes the call f on session, under the server's timeout; unsent
// reports that nothing of it reached the server.
func (c *conn) call(ctx context.Context, session *mcp.ClientSession, f func(context.Context, *mcp.ClientSession) error) (unsent bool, err error) {
	cctx, fl, end := c.begin(ctx)
	defer end()
	err = f(cctx, session)
	// The sentinel alone is not enough: calls in flight get it too when
	// another request (or the resumption of their own stream) met the
	// 404.
	unsent = (errors.Is(err, mcp.ErrSessionMissing) && fl.sessionRefused.Load()) || fl.undialled.Load()
	if err != nil && context.Cause(cctx) == errCallTimeout && ctx.Err() == nil {
		return false, fmt.Errorf("mcp server %q: no answer within %s", c.name, c.sc.timeout())
	}
	return unsent, err
}

// notRepeated is the error of a call whose transport broke and which is
// not made again: it may have taken effect (safe is false), its answer
// was too large, or it broke again after it was made again. The session
// is replaced for the next call.
func (c *conn) notRepeated(gen int, err error, safe bool) error {
	_, _, rerr := c.reconnect(context.Background(), gen)
	switch {
	case tooLarge(err):
		if rerr != nil {
			return fmt.Errorf("%w (and reconnecting failed: %v)", namedTooLarge(c.name, err), rerr)
		}
		return fmt.Errorf("%w (reconnected for the next call)", namedTooLarge(c.name, err))
	case !safe:
		how := "reconnected for the next call"
		if rerr != nil {
			how = fmt.Sprintf("and reconnecting failed: %v", rerr)
		}
		return fmt.Errorf("the connection to mcp server %q broke during the call, which may have taken effect; it was not repeated (%s): %w", c.name, how, err)
	case rerr != nil:
		return fmt.Errorf("%w (and reconnecting failed: %v)", err, rerr)
	}
	return err
}

// lineLogger turns a stdio server's stderr into log lines.
type lineLogger struct {
	log   *slog.Logger
	scrub *scrubber // the server's env values, among others
	buf   []byte
	mu    sync.Mutex
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(l.buf[:i])); line != "" {
			l.log.Info("mcp server stderr", "line", l.scrub.text(line))
		}
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a line without end: log what there is
		l.log.Info("mcp server stderr", "line", l.scrub.text(string(l.buf)))
		l.buf = nil
	}
	return len(p), nil
}
