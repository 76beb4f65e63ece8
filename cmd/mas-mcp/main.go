// Command mas-mcp runs the multi-agent system: a manager agent, the
// operator's HumanAgent and the base task come up at once; agents call an
// OpenAI-compatible LLM as they work.
//
// Logs go to stderr only (stdout is reserved for the MCP stdio protocol).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/server"
	"github.com/mas-mcp/mas-mcp/skills"
	"github.com/mas-mcp/mas-mcp/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "mas-mcp:", err)
		os.Exit(1)
	}
}

// run starts the MAS and its MCP server and blocks until ctx is done or the
// stdio client disconnects, then shuts both down.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := loadConfig(args, getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	st, img, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	if st != nil {
		defer st.Close() // last: after the MAS wrote its final state
	}
	sys, pool, err := build(cfg, log, st)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := sys.StartFrom(img); err != nil {
		return err
	}
	defer closeWithin(sys, log, 5*time.Second)

	tokens, err := operatorTokens(cfg, sys, getenv)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{
		System: sys, Version: version, Logger: log.With("component", "server"),
		HTTP: server.HTTPConfig{
			Addr: cfg.HTTP.Addr, Tokens: tokens, AllowedOrigins: cfg.HTTP.AllowedOrigins,
			AllowedHosts: cfg.HTTP.AllowedHosts, MaxBodyBytes: cfg.HTTP.MaxBodyBytes,
			SessionTimeout: cfg.HTTP.SessionTimeout,
		},
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	ready := func(transport, where string) {
		log.Info("mas-mcp ready",
			"transport", transport, "listen", where, "lang", cfg.Lang, "model", cfg.LLM.Model, "llm", cfg.LLM.BaseURL,
			"api_key_set", cfg.apiKey != "", "operators", len(tokens), "mcp_servers", len(pool.ToolGuides()), "base_task", sys.BaseTaskID(),
			"manager", sys.ManagerID(), "operator", sys.OperatorID())
	}
	if cfg.Stdio {
		ready("stdio", "stdin/stdout")
		err = srv.ServeStdio(ctx)
	} else {
		err = srv.ServeHTTP(ctx, func(addr string) { ready("http", "http://"+addr+"/mcp (SSE: /sse)") })
	}
	log.Info("shutting down")
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// openStore opens the durable store (nil with --memory) and loads what it
// holds (an empty image on a first start).
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (*store.Store, *engine.Image, error) {
	if cfg.Memory {
		log.Warn("state is kept in memory only (--memory): nothing survives a restart")
		return nil, &engine.Image{}, nil
	}
	st, err := store.Open(ctx, store.Options{
		DataDir: cfg.DataDir, NATSURL: cfg.NATSURL, SyncInterval: cfg.SyncInterval, Logger: log.With("component", "store"),
	})
	if err != nil {
		return nil, nil, err
	}
	if st.Role() == store.RoleClient {
		st.Close()
		return nil, nil, fmt.Errorf("the data directory %s is in use by another running mas-mcp: give this one its own --data-dir, or connect your MCP client to the running one", cfg.DataDir)
	}
	img, err := st.Load(ctx)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, img, nil
}

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

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
func operatorTokens(cfg Config, sys *engine.System, getenv func(string) string) (map[string]string, error) {
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

// build wires prompts, the LLM client, the downstream MCP servers, the
// skills, the tool executor and the engine. The returned pool must be
// closed after the engine (it stops the servers' processes).
func build(cfg Config, log *slog.Logger, st engine.Store) (*engine.System, *downstream.Pool, error) {
	set, err := prompts.Load(cfg.Lang, cfg.PromptsDir)
	if err != nil {
		return nil, nil, err
	}
	mcpCfg, err := downstream.LoadConfig(cfg.MCPConfig)
	if err != nil {
		return nil, nil, err
	}
	client, err := llm.NewOpenAI(llm.OpenAIConfig{
		BaseURL:     cfg.LLM.BaseURL,
		APIKey:      cfg.apiKey,
		Model:       cfg.LLM.Model,
		Timeout:     cfg.LLM.Timeout,
		MaxRetries:  cfg.LLM.MaxRetries,
		Concurrency: cfg.LLM.Concurrency,
		Logger:      log.With("component", "llm"),
	})
	if err != nil {
		return nil, nil, err
	}
	pool := downstream.NewPool(mcpCfg, log.With("component", "downstream"))
	execs, err := skills.Executors(skills.Config{LLM: client, Prompts: set, Tools: pool, Logger: log.With("component", "skills")})
	if err != nil {
		return nil, nil, err
	}
	sys, err := engine.New(engine.Config{
		Texts:                 set,
		Skills:                execs,
		Tools:                 pool,
		SkillGuides:           set.SkillGuides(),
		Templates:             skills.Templates(set),
		OperatorName:          cfg.Operator,
		WaitTimeout:           cfg.WaitTimeout,
		StageStepBudget:       cfg.StageStepBudget,
		StageReflectionBudget: cfg.StageReflectionBudget,
		Store:                 st,
		Logger:                log.With("component", "engine"),
	})
	if err != nil {
		return nil, nil, err
	}
	tool, err := downstream.NewExecutor(downstream.ExecutorConfig{
		Pool: pool, System: sys, Texts: set, ConfirmTimeout: cfg.ConfirmTimeout, Logger: log.With("component", "downstream"),
	})
	if err != nil {
		return nil, nil, err
	}
	if err := sys.SetToolExecutor(tool); err != nil {
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
