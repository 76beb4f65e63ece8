// Package server exposes the MAS as an MCP server (stdio, streamable HTTP,
// SSE): tools for the operator (hand over tasks, talk to agents, query, manage
// tasks and agents, wait for updates), the MAS's state as resources with live
// subscriptions, a prompt that teaches a host LLM to act as the operator, and
// logging and progress notifications.
//
// It talks to the engine only through engine.System's exported API.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/telemetry"
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// System is the MAS. Required.
	System *engine.System
	// Name and Version identify the server to clients.
	Name, Version string
	// Logger receives the server's logs (nil: discarded).
	Logger *slog.Logger
	// Coalesce is the shortest gap between two resources/updated
	// notifications of one URI. Default 100 ms (at most ~10/s per URI).
	Coalesce time.Duration
	// EventLog is how many engine events wait_for_updates can replay, of
	// each operator's own (eventlog.go).
	// Default 10,000.
	EventLog int

	// HTTP holds what only the HTTP transports use.
	HTTP HTTPConfig
	// Limits bound sessions, streams, input sizes and task quotas.
	Limits Limits
	// Trail serves the trail's resources and get_trail (nil: none kept).
	Trail engine.TrailReader
}

// Server is the MCP surface of one MAS. One *mcp.Server serves every
// transport and session.
type Server struct {
	cfg Config
	sys *engine.System
	log *slog.Logger
	mcp *mcp.Server

	updates  *updates
	outbox   *outbox      // the notifications updates sends, per session
	streams  *openStreams // the HTTP streams the outbox writes to, to cut stuck ones
	sessions apiSessions  // the web monitor's bound operators
	throttle bindThrottle // failed bind_human_agent attempts

	// Caps of what clients hold open, and add_task's quotas (limits.go).
	mcpSessions        *mcpSessions
	eventCaps, sseCaps *streamCaps
	longCaps           *streamCaps // long-lived requests: listen streams, long polls, tasks/result waits
	subs               sessionSubs
	listCursors        *listCursors  // resources/list cursors (visibility.go)
	trailCursors       *trailCursors // the trail's cursors (trail_cursors.go)
	lists              *listViews    // which sessions a resources/list_changed is for (listviews.go)
	quota              *taskQuota
	asks               sessionAsks // questions being put to sessions (tasks_ask.go)

	ctx    context.Context
	cancel context.CancelFunc
	// draining is closed when an HTTP server starts shutting down, so long
	// polls return at once instead of holding the shutdown.
	draining  chan struct{}
	drainOnce sync.Once
	wg        sync.WaitGroup
	once      sync.Once

	// beforeCancel, when set (tests only), is called by tasks/cancel once
	// it found the task running, just before it cancels it.
	beforeCancel atomic.Pointer[func(taskID string)]
	// beforeAnswer, when set (tests only), is called by answerQuestion
	// once it found the question awaiting a reply, just before it answers.
	beforeAnswer atomic.Pointer[func(messageID string)]
}

// New builds the MCP server for a started System and starts relaying the
// MAS's changes to subscribed clients.
func New(cfg Config) (*Server, error) {
	if cfg.System == nil {
		return nil, errors.New("server: config: System is required")
	}
	if cfg.Name == "" {
		cfg.Name = "mas-mcp"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Coalesce <= 0 {
		cfg.Coalesce = 100 * time.Millisecond
	}
	if cfg.EventLog <= 0 {
		cfg.EventLog = 10000
	}
	if err := cfg.HTTP.check(); err != nil {
		return nil, err
	}
	if err := cfg.Limits.check(); err != nil {
		return nil, err
	}
	for _, op := range cfg.HTTP.Tokens {
		if b, ok := cfg.System.AgentBrief(op); !ok || b.Kind != engine.KindHuman {
			return nil, fmt.Errorf("server: http: a token is bound to %q, which is not an operator HumanAgent", op)
		}
	}
	if len(cfg.HTTP.Admins) > 0 {
		// Set only when configured: another Server on the same System
		// (tests) does not clear them.
		if err := cfg.System.SetAdmins(cfg.HTTP.Admins); err != nil {
			return nil, fmt.Errorf("server: http: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, sys: cfg.System, log: cfg.Logger, ctx: ctx, cancel: cancel, draining: make(chan struct{})}
	l := &s.cfg.Limits
	s.sessions.l, s.throttle.l = l, l
	s.mcpSessions = &mcpSessions{live: map[string]liveSession{},
		caps: newStreamCaps("MCP sessions", l.Sessions, l.SessionsPerOperator, keySessions, keySessionsPerOp)}
	s.eventCaps = newStreamCaps("/api/events streams", l.EventStreams, l.EventStreamsPerOperator, keyEventStreams, keyEventStreamsOp)
	s.sseCaps = newStreamCaps("SSE streams", l.SSEStreams, l.SSEStreamsPerOperator, keySSEStreams, keySSEStreamsOp)
	s.longCaps = newStreamCaps("long-lived requests (subscriptions/listen streams, wait_for_updates and tasks/result waits)",
		l.LongRequests, l.LongRequestsPerOperator, keyLongRequests, keyLongRequestsOp)
	s.subs.max = l.SubscriptionsPerSession
	var err error
	if s.listCursors, err = newListCursors(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if s.trailCursors, err = newTrailCursors(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.quota = newTaskQuota(l, s.sys)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: cfg.Name, Title: "mas-mcp multi-agent system", Version: cfg.Version},
		&mcp.ServerOptions{
			Instructions: instructions,
			// The SDK logs every notification at info (even with no
			// subscriber): keep its warnings and errors only, less the
			// notifications a client that went away did not take.
			Logger:             slog.New(minLevel{cfg.Logger.Handler(), slog.LevelWarn}).With("component", "mcp-sdk"),
			SubscribeHandler:   s.subscribe,
			CompletionHandler:  s.complete,
			UnsubscribeHandler: s.unsubscribe,
			Capabilities: &mcp.ServerCapabilities{
				Logging:   &mcp.LoggingCapabilities{},
				Resources: &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
				Tools:     &mcp.ToolCapabilities{ListChanged: true},
				Prompts:   &mcp.PromptCapabilities{ListChanged: true},
				// The 2026-07-28 tasks extension (tasks_ext.go).
				Extensions: map[string]any{tasksExt: map[string]any{}},
			},
			KeepAlive: 0,
		})
	s.streams = newOpenStreams()
	s.lists = newListViews()
	s.mcp.AddReceivingMiddleware(s.streams.bind, s.boundRequests, telemetry.ServerMiddleware, s.recordListViews, s.filterLists, keepExtra, s.scrubAnswers)
	// The outbox sends what queueNotifications queues: a list-changed
	// notification unaskedListChanges lets pass, and a logging one postLog
	// offers that the session's logging level lets through.
	s.outbox = newOutbox(ctx, cfg.Logger, cfg.Limits.StuckSession, s.streams.cut)
	s.mcp.AddSendingMiddleware(s.unaskedListChanges, s.queueNotifications)
	s.addTools()
	s.addResources()
	s.addApp()
	s.addPrompts()
	if err := s.addTasks(); err != nil {
		return nil, fmt.Errorf("server: tasks: %w", err)
	}
	s.updates = newUpdates(s)
	s.mcp.AddSendingMiddleware(s.updates.forOperator)
	s.goTracked(s.updates.run)
	return s, nil
}

// MCP returns the underlying MCP server (one for every transport).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// drain makes pending long polls return (shutdown is starting).
func (s *Server) drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// Close stops relaying updates. Sessions end with their transports; the
// streams of those whose notifications are being written are cut
// (outbox.close), so that a client that stopped reading does not hold
// Close for limits.stuck_session_timeout.
func (s *Server) Close() error {
	s.drain()
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.outbox.close()
	})
	return nil
}

func (s *Server) goTracked(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// operator returns the HumanAgent a request acts as: the one its bearer
// token is bound to, else the MAS's default operator (stdio, and HTTP on
// loopback without tokens). The token comes with the request (streamable
// HTTP) or with the context of the session's stream (SSE, where the SDK
// does not pass it on in RequestExtra).
func (s *Server) operator(ctx context.Context, extra *mcp.RequestExtra) string {
	if extra != nil && extra.TokenInfo != nil && extra.TokenInfo.UserID != "" {
		return extra.TokenInfo.UserID
	}
	if ti := auth.TokenInfoFromContext(ctx); ti != nil && ti.UserID != "" {
		return ti.UserID
	}
	return s.sys.OperatorID()
}

// minLevel drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

// Handle passes r on. The SDK's warning that a notification could not be
// delivered to a client that has gone ("calling notifications/…: rejected
// by transport: …") counts as debug: it is logged only at --log-level
// debug. (Its usual cause, notifications to the lingering session of a
// short-lived client, is gone with the event store, resume.go; a progress
// notification that comes after its request's stream closed still causes
// it.)
func (h minLevel) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "calling notifications/") && strings.Contains(r.Message, "rejected by transport") {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, r.Level) {
			return nil
		}
		return h.Handler.Handle(ctx, r)
	}
	if r.Level < h.min {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
