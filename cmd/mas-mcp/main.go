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

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/llm"
	"github.com/mas-mcp/mas-mcp/prompts"
	"github.com/mas-mcp/mas-mcp/skills"
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

// run starts the MAS and blocks until ctx is done, then shuts it down.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := loadConfig(args, getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	sys, err := build(cfg, log)
	if err != nil {
		return err
	}
	if err := sys.Start(); err != nil {
		return err
	}
	log.Info("mas-mcp ready",
		"lang", cfg.Lang, "model", cfg.LLM.Model, "llm", cfg.LLM.BaseURL,
		"api_key_set", cfg.apiKey != "", "base_task", sys.BaseTaskID(),
		"manager", sys.ManagerID(), "operator", sys.OperatorID())
	<-ctx.Done()
	log.Info("shutting down")
	done := make(chan struct{})
	go func() {
		_ = sys.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		log.Warn("shutdown timed out")
	}
	return nil
}

// build wires prompts, the LLM client, the skills and the engine.
func build(cfg Config, log *slog.Logger) (*engine.System, error) {
	set, err := prompts.Load(cfg.Lang, cfg.PromptsDir)
	if err != nil {
		return nil, err
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
		return nil, err
	}
	execs, err := skills.Executors(skills.Config{LLM: client, Prompts: set, Logger: log.With("component", "skills")})
	if err != nil {
		return nil, err
	}
	return engine.New(engine.Config{
		Texts:                 set,
		Skills:                execs,
		SkillGuides:           set.SkillGuides(),
		Templates:             skills.Templates(set),
		OperatorName:          cfg.Operator,
		WaitTimeout:           cfg.WaitTimeout,
		StageStepBudget:       cfg.StageStepBudget,
		StageReflectionBudget: cfg.StageReflectionBudget,
		Logger:                log.With("component", "engine"),
	})
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
