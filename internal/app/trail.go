package app

import (
	"context"
	"fmt"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/store"
)

// TrailConfig is the audit trail's retention (config file key "trail").
type TrailConfig struct {
	// MaxAge drops entries older than this (default 90 days).
	MaxAge time.Duration `yaml:"max_age"`
	// MaxBytes bounds the trail's storage, oldest entries first (default
	// 1 GiB; negative: unbounded).
	MaxBytes int64 `yaml:"max_bytes"`
}

// trail is what the engine, the skills, the tool executor and the MCP
// server are given: one recorder, one reader.
type trail interface {
	engine.Trail
	engine.TrailReader
}

// configuredSecrets lists the configured secrets: the LLM API key, NATS
// credentials, operators' bearer tokens and monitor passwords. The engine
// scrubs them from every text it takes in, and the trail from every entry
// it returns, whatever recorded them.
func configuredSecrets(cfg Config, getenv func(string) string) []string {
	out := []string{cfg.apiKey, cfg.natsPassword, cfg.natsToken}
	if toks, err := cfg.tokens(getenv); err == nil {
		for tok := range toks {
			out = append(out, tok)
		}
	}
	if pws, err := cfg.passwords(getenv); err == nil {
		for _, pw := range pws {
			out = append(out, pw)
		}
	}
	return out
}

// openTrail opens the durable trail in st, or (st nil: --memory) one in
// memory.
func openTrail(ctx context.Context, cfg Config, st *store.Store, getenv func(string) string) (trail, error) {
	secrets := configuredSecrets(cfg, getenv)
	if st == nil {
		m := engine.NewMemoryTrail()
		m.Scrub(secrets...)
		return m, nil
	}
	t, err := st.OpenTrail(ctx, store.TrailOptions{MaxAge: cfg.Trail.MaxAge, MaxBytes: cfg.Trail.MaxBytes, Secrets: secrets})
	if err != nil {
		return nil, fmt.Errorf("trail: %w", err)
	}
	return t, nil
}
