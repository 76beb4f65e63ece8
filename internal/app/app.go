// Package app is mas-mcp's wiring: it turns a Config (LoadConfig reads it
// from flags, the environment and a config file) into a running MAS (the
// store, the engine, the skills, the downstream tool servers) behind its
// MCP server, and stops it all in order. cmd/mas-mcp only parses its
// command line and calls Run.
//
// Logs go to Config.Logs (stderr) only: stdout is reserved for the MCP
// stdio protocol.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/telemetry"
	"github.com/mas-mcp/mas-mcp/llm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/server"
	"github.com/mas-mcp/mas-mcp/skills"
	"github.com/mas-mcp/mas-mcp/store"
)

// Run starts the MAS and its MCP server and blocks until ctx is done or the
// stdio client disconnects, then shuts both down. When another mas-mcp owns
// the data directory, a stdio run relays its host's session to that one
// (and takes over if it stops); see join.go.
func Run(ctx context.Context, cfg Config) error {
	logs := cfg.Logs
	if logs == nil {
		logs = os.Stderr
	}
	log := newLogger(cfg, logs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inst, err := start(ctx, cfg, log, cancel)
	var inUse *store.InUseError
	if errors.As(err, &inUse) {
		return join(ctx, cfg, log, inUse)
	}
	if err != nil {
		return err
	}
	defer inst.close()
	checked := checkLLM(ctx, cfg, log)
	defer func() { cancel(); <-checked }()

	if cfg.Stdio && cfg.StdioHTTP {
		err = serveBoth(ctx, inst, func(addr string) {
			inst.announceHTTP(addr)
			logReady(log, cfg, inst, "stdio and http://"+addr+"/mcp (SSE: /sse)", "http://"+addr+"/")
		})
	} else if cfg.Stdio {
		logReady(log, cfg, inst, "stdio", "none (add --http 127.0.0.1:7777 to serve it)")
		err = inst.srv.ServeStdio(ctx)
	} else {
		err = inst.srv.ServeHTTP(ctx, func(addr string) {
			inst.announceHTTP(addr)
			logReady(log, cfg, inst, "http://"+addr+"/mcp (SSE: /sse)", "http://"+addr+"/")
		})
	}
	log.Info("shutting down")
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// logReady logs the line a user looks for: where MCP and the web monitor
// are served, who the operator is, whether an API key is set, the model.
func logReady(log *slog.Logger, cfg Config, inst *instance, mcpAt, monitorAt string) {
	operator := inst.sys.OperatorID()
	if b, ok := inst.sys.AgentBrief(operator); ok {
		operator = fmt.Sprintf("%s (%s)", b.Name, b.AgentID)
	}
	operators := 0
	for _, b := range inst.sys.AgentBriefs() {
		if b.Kind == engine.KindHuman {
			operators++
		}
	}
	log.Info("mas-mcp ready",
		"mcp", mcpAt, "monitor", monitorAt, "operator", operator, "api_key_set", cfg.apiKey != "",
		"model", cfg.LLM.Model, "llm", llm.RedactURL(cfg.LLM.BaseURL), "lang", cfg.Lang, "version", moduleVersion(cfg.Version),
		"operators", operators, "mcp_servers", len(inst.pool.ToolGuides()),
		"base_task", inst.sys.BaseTaskID(), "manager", inst.sys.ManagerID())
}

// serveBoth serves MCP on stdio and HTTP (MCP and the web monitor) from one
// process until the stdio client disconnects or ctx is done; then it stops
// the HTTP server too. ready is called once HTTP listens.
func serveBoth(ctx context.Context, inst *instance, ready func(addr string)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	httpDone := make(chan error, 1)
	go func() { httpDone <- inst.srv.ServeHTTP(ctx, ready) }()
	stdioDone := make(chan error, 1)
	go func() { stdioDone <- inst.srv.ServeStdio(ctx) }()
	select {
	case err := <-stdioDone:
		cancel()
		if herr := <-httpDone; err == nil && herr != nil && !errors.Is(herr, context.Canceled) {
			err = herr
		}
		return err
	case err := <-httpDone:
		// The HTTP server failed (its address is taken, say): stop.
		cancel()
		<-stdioDone
		if err == nil || errors.Is(err, context.Canceled) {
			return ctx.Err()
		}
		return fmt.Errorf("http: %w", err)
	}
}

// instance is a running MAS: its store, engine, downstream pool and MCP
// server, and (when it owns a data directory) the local socket other
// mas-mcp processes on that directory join through.
type instance struct {
	log    *slog.Logger
	st     *store.Store
	sys    *engine.System
	pool   *downstream.Pool
	srv    *server.Server
	tokens map[string]string
	tel    *telemetry.Telemetry

	stopLocal context.CancelFunc
	localDone chan struct{}
	httpNote  string // the file announceHTTP wrote, removed by close
}

// start opens the store, restores the MAS from it and builds the MCP
// server. With a data directory (or external NATS state) owned by another
// process it fails with a *store.InUseError. stop is called should another
// process take the external NATS state over.
func start(ctx context.Context, cfg Config, log *slog.Logger, stop func()) (inst *instance, err error) {
	inst = &instance{log: log}
	defer func() {
		if err != nil {
			inst.close()
			inst = nil
		}
	}()
	if inst.tel, err = telemetry.Setup(ctx, telemetry.Config{ServiceVersion: moduleVersion(cfg.Version), Prometheus: cfg.HTTP.Metrics}); err != nil {
		return inst, err
	}
	var img *engine.Image
	if inst.st, img, err = openStore(ctx, cfg, log, stop); err != nil {
		return inst, err
	}
	var st engine.Store
	if inst.st != nil {
		st = inst.st
	}
	tr, err := openTrail(ctx, cfg, inst.st, cfg.env)
	if err != nil {
		return inst, err
	}
	warnShortSecrets(log, cfg, cfg.env)
	if inst.sys, inst.pool, err = build(cfg, log, st, tr); err != nil {
		return inst, err
	}
	if err = inst.sys.StartFrom(img); err != nil {
		return inst, err
	}
	if inst.tokens, err = operatorTokens(cfg, inst.sys, log, cfg.env); err != nil {
		return inst, err
	}
	admins, err := operatorAdmins(cfg, inst.sys)
	if err != nil {
		return inst, err
	}
	inst.srv, err = server.New(server.Config{
		System: inst.sys, Version: moduleVersion(cfg.Version), Logger: log.With("component", "server"),
		HTTP: server.HTTPConfig{
			Addr: cfg.HTTP.Addr, Tokens: inst.tokens, AllowedOrigins: cfg.HTTP.AllowedOrigins,
			AllowedHosts: cfg.HTTP.AllowedHosts, MaxBodyBytes: cfg.HTTP.MaxBodyBytes,
			SessionTimeout: cfg.HTTP.SessionTimeout, Admins: admins, Metrics: inst.tel.MetricsHandler(),
		},
		Limits: cfg.Limits.server(),
		Trail:  tr,
	})
	if err != nil {
		return inst, err
	}
	// Questions a tool call waits on also go to the operator's own MCP client.
	inst.pool.SetOperatorElicit(inst.srv.ElicitOperator)
	if inst.st != nil && inst.st.Role() == store.RoleOwner {
		inst.serveLocal(store.SocketPath(inst.st.DataDir()))
	}
	return inst, nil
}

// serveLocal accepts other mas-mcp processes of the data directory on a
// unix socket only this user can open. Without it (a path too long for a
// socket, say) they cannot join: that is logged, not fatal.
func (in *instance) serveLocal(path string) {
	_ = os.Remove(path) // a stale socket of a previous owner; we hold the lock
	ln, err := net.Listen("unix", path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		in.log.Warn("other mas-mcp processes on this data directory cannot join this one", "socket", path, "err", err)
		if ln != nil {
			ln.Close()
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.stopLocal, in.localDone = cancel, make(chan struct{})
	go func() {
		defer close(in.localDone)
		if err := in.srv.ServeListener(ctx, ln); err != nil {
			in.log.Warn("local socket", "err", err)
		}
	}()
}

// close stops what start started, in order: the local socket and the MCP
// server, the MAS (its last writes), the downstream servers, the store.
func (in *instance) close() {
	if in.httpNote != "" {
		_ = os.Remove(in.httpNote)
	}
	if in.stopLocal != nil {
		in.stopLocal()
		<-in.localDone
	}
	if in.srv != nil {
		_ = in.srv.Close()
	}
	if in.sys != nil {
		closeWithin(in.sys, in.log, 5*time.Second)
	}
	if in.pool != nil {
		_ = in.pool.Close()
	}
	if in.st != nil {
		_ = in.st.Close()
	}
	in.shutdownTelemetry()
}

// shutdownTelemetry exports what telemetry still holds, within a bound:
// an unreachable collector does not hold the shutdown.
func (in *instance) shutdownTelemetry() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := in.tel.Shutdown(ctx); err != nil {
		in.log.Warn("telemetry: shutdown", "err", err)
	}
}

// openStore opens the durable store (nil with --memory) and loads what it
// holds (an empty image on a first start).
func openStore(ctx context.Context, cfg Config, log *slog.Logger, stop func()) (*store.Store, *engine.Image, error) {
	if cfg.Memory {
		log.Warn("state is kept in memory only (--memory): nothing survives a restart")
		return nil, &engine.Image{}, nil
	}
	st, err := store.Open(ctx, store.Options{
		DataDir: cfg.DataDir, NATSURL: cfg.NATSURL, NATSAuth: cfg.natsAuth(), SyncInterval: cfg.SyncInterval, Logger: log.With("component", "store"),
		OnLeaseLost: stop,
	})
	if err != nil {
		return nil, nil, err
	}
	img, err := st.Load(ctx)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, img, nil
}

// closeWithin closes the MAS, giving up waiting after d.
func closeWithin(sys *engine.System, log *slog.Logger, d time.Duration) {
	done := make(chan struct{})
	go func() {
		_ = sys.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		log.Warn("shutdown timed out")
	}
}

// operatorTokens creates (or finds) each configured operator's HumanAgent,
// sets the passwords configured for the web monitor, and maps each bearer
// token to its operator's ID.
func operatorTokens(cfg Config, sys *engine.System, log *slog.Logger, getenv func(string) string) (map[string]string, error) {
	byName, err := cfg.tokens(getenv)
	if err != nil {
		return nil, err
	}
	passwords, err := cfg.passwords(getenv)
	if err != nil {
		return nil, err
	}
	ids := map[string]string{}
	if def, ok := sys.AgentBrief(sys.OperatorID()); ok {
		ids[def.Name] = def.AgentID
	}
	operator := func(name string) (string, error) {
		if id, ok := ids[name]; ok {
			return id, nil
		}
		// An operator of an earlier start is found again by its name:
		// added again, its token would act as a new operator that owns
		// none of its tasks and questions.
		if id, others := sys.OperatorNamed(name); id != "" {
			if len(others) > 0 {
				log.Warn("several operators have this name: its token and password act as the earliest created; the others keep their tasks, seen by admins",
					"operator", name, "acts_as", id, "others", others)
			}
			ids[name] = id
			return id, nil
		}
		id, err := sys.AddOperator(name)
		if err != nil {
			return "", fmt.Errorf("operator %s: %w", name, err)
		}
		ids[name] = id
		return id, nil
	}
	out := map[string]string{}
	for tok, name := range byName {
		id, err := operator(name)
		if err != nil {
			return nil, fmt.Errorf("http.tokens: %w", err)
		}
		out[tok] = id
	}
	for name, pw := range passwords {
		id, err := operator(name)
		if err != nil {
			return nil, fmt.Errorf("http.passwords: %w", err)
		}
		if err := sys.SetOperatorPassword(id, pw); err != nil {
			return nil, fmt.Errorf("http.passwords: operator %s: %w", name, err)
		}
	}
	return out, nil
}

// operatorAdmins resolves http.admins (operator names) to HumanAgent IDs;
// operatorTokens has created the operators already.
func operatorAdmins(cfg Config, sys *engine.System) ([]string, error) {
	var out []string
	for i, name := range cfg.HTTP.Admins {
		name = strings.TrimSpace(name)
		id, _ := sys.OperatorNamed(name)
		if id == "" {
			return nil, fmt.Errorf("http.admins[%d] %q: no such operator (name the operator of a token, a password or the default operator)", i, name)
		}
		out = append(out, id)
	}
	return out, nil
}

// build wires prompts, the LLM client, the downstream MCP servers, the
// skills, the tool executor and the engine. The returned pool must be
// closed after the engine (it stops the servers' processes).
func build(cfg Config, log *slog.Logger, st engine.Store, tr trail) (*engine.System, *downstream.Pool, error) {
	set, err := prompts.Load(cfg.Lang, cfg.PromptsDir)
	if err != nil {
		return nil, nil, err
	}
	mcpCfg, err := downstream.LoadConfig(cfg.MCPConfig)
	if err != nil {
		return nil, nil, err
	}
	client, err := llm.NewOpenAI(llm.OpenAIConfig{
		BaseURL:      cfg.LLM.BaseURL,
		APIKey:       cfg.apiKey,
		Model:        cfg.LLM.Model,
		Timeout:      cfg.LLM.Timeout,
		MaxRetries:   none(cfg.LLM.MaxRetries),
		OutageWindow: none(cfg.LLM.OutageWindow),
		Concurrency:  cfg.LLM.Concurrency,
		Logger:       log.With("component", "llm"),
	})
	if err != nil {
		return nil, nil, err
	}
	pool := downstream.NewPool(mcpCfg, log.With("component", "downstream"))
	execs, err := skills.Executors(skills.Config{LLM: client, Prompts: set, Tools: pool, Logger: log.With("component", "skills"),
		PromptBudget: cfg.PromptBudget, Trail: tr})
	if err != nil {
		return nil, nil, err
	}
	tool, err := downstream.NewExecutor(downstream.ExecutorConfig{
		Pool: pool, Texts: set, ConfirmTimeout: cfg.ConfirmTimeout, LLM: client, Logger: log.With("component", "downstream"),
		Trail: tr,
	})
	if err != nil {
		return nil, nil, err
	}
	sys, err := engine.New(engine.Config{
		Texts:                 set,
		Skills:                execs,
		Tools:                 pool,
		Tool:                  tool,
		SkillGuides:           set.SkillGuides(),
		Templates:             skills.Templates(set),
		OperatorName:          cfg.Operator,
		WaitTimeout:           cfg.WaitTimeout,
		StageStepBudget:       cfg.StageStepBudget,
		StageReflectionBudget: cfg.StageReflectionBudget,
		UnstagedStepBudget:    cfg.UnstagedStepBudget,
		MessageChainLimit:     cfg.MessageChainLimit,
		RetryStageLimit:       cfg.RetryStageLimit,
		StallTimeout:          cfg.StallTimeout,
		StallNotices:          cfg.StallNotices,
		ProbeLLM:              client.Check,
		MemoryMaxEntries:      cfg.MemoryMaxEntries,
		MemoryMaxChars:        cfg.MemoryMaxChars,
		Budgets:               cfg.Budgets.engine(cfg.LLM.Model),
		Store:                 st,
		Trail:                 tr,
		Secrets:               configuredSecrets(cfg, cfg.env),
		Logger:                log.With("component", "engine"),
	})
	if err != nil {
		return nil, nil, err
	}
	return sys, pool, nil
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel)
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	f, isFile := w.(*os.File)
	noColor := !isFile || !isTerminal(f)
	return slog.New(tint.NewHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: noColor}))
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// none turns a configured 0 ("none") into the llm package's "none" (a
// negative value; its zero means the default).
func none[T int | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
