package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/secret"
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
// it returns, whatever recorded them (those of secret.MinLen bytes or more:
// internal/secret).
func configuredSecrets(cfg Config, getenv func(string) string) []string {
	var out []string
	for _, s := range namedSecrets(cfg, getenv) {
		out = append(out, s.value)
	}
	return out
}

// namedSecret is a configured secret and what it is.
type namedSecret struct{ name, value string }

// namedSecrets are the configured secrets (configuredSecrets) with what
// each is.
func namedSecrets(cfg Config, getenv func(string) string) []namedSecret {
	out := []namedSecret{{"the LLM API key (OPENAI_API_KEY)", cfg.apiKey}, {"the NATS password", cfg.natsPassword}, {"the NATS token", cfg.natsToken}}
	if toks, err := cfg.tokens(getenv); err == nil {
		for tok, op := range toks {
			out = append(out, namedSecret{"the bearer token of operator " + op, tok})
		}
	}
	if pws, err := cfg.passwords(getenv); err == nil {
		for op, pw := range pws {
			out = append(out, namedSecret{"the password of operator " + op, pw})
		}
	}
	return out
}

// warnShortSecrets logs each configured secret too short to be scrubbed
// (internal/secret's rule), by what it is, never its value: it will show
// wherever a text holds it.
func warnShortSecrets(log *slog.Logger, cfg Config, getenv func(string) string) {
	for _, s := range namedSecrets(cfg, getenv) {
		if s.value != "" && !secret.Scrubbed(s.value) {
			log.Warn("a configured secret is too short to be scrubbed from the state, the trail and the logs: use a longer one",
				"secret", s.name, "min_bytes", secret.MinLen)
		}
	}
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
