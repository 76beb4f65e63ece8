package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/mas-mcp/mas-mcp/llm"
)

// checkLLM looks at the LLM endpoint once at start-up and logs what a user
// must fix: no API key, a key or model the endpoint refuses, an endpoint
// that cannot be reached. It never stops mas-mcp from starting: agents
// meet the same failures later as failed steps with the same reasons.
// The returned channel is closed when the check is over (ctx bounds it).
func checkLLM(ctx context.Context, cfg Config, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	where := llm.RedactURL(cfg.LLM.BaseURL)
	if cfg.apiKey == "" {
		log.Warn("OPENAI_API_KEY is not set: endpoints that need a key (OpenAI, DeepSeek, …) will refuse every call; "+
			"set it in the environment of mas-mcp (local servers such as Ollama need none)", "llm", where)
	}
	client, err := llm.NewOpenAI(llm.OpenAIConfig{
		BaseURL: cfg.LLM.BaseURL, APIKey: cfg.apiKey, Model: cfg.LLM.Model, Timeout: cfg.LLM.Timeout,
	})
	if err != nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		err := client.Check(ctx)
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, llm.ErrRefused):
			log.Error("the LLM endpoint refuses mas-mcp's requests: fix this and restart; agents' steps fail until then",
				"llm", where, "model", cfg.LLM.Model, "err", err)
		default:
			log.Warn("the LLM endpoint could not be checked: agents will wait for it and retry (see --llm-outage-window)",
				"llm", where, "err", err)
		}
	}()
	return done
}
