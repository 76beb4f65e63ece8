package app

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestLLMCheckAtStartUp(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		status  int
		want    []string // in the logs
		wantNot []string
	}{
		{name: "refused key", key: "sk-wrong-key-1234", status: 401,
			want:    []string{"level=ERROR", "refuses mas-mcp's requests", "refused the API key (HTTP 401)"},
			wantNot: []string{"sk-wrong-key-1234"}},
		{name: "no key", status: 401, want: []string{"OPENAI_API_KEY is not set", "refuses"}},
		{name: "fine", key: "sk-good", status: 200, wantNot: []string{"level=WARN", "level=ERROR"}},
		{name: "no /models on this server", key: "sk-good", status: 404, wantNot: []string{"level=WARN", "level=ERROR"}},
		{name: "unreachable", key: "sk-good", status: -1, want: []string{"could not be checked"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/models" {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				if tt.status != 200 {
					w.WriteHeader(tt.status)
					_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided: sk-wro*********1234"}}`))
					return
				}
				_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"gpt-test","object":"model"}]}`))
			}))
			base := srv.URL + "/v1"
			if tt.status == -1 {
				srv.Close() // nothing listens there any more
			} else {
				defer srv.Close()
			}
			cfg := defaultConfig()
			cfg.LLM.BaseURL, cfg.apiKey, cfg.LLM.Timeout = base, tt.key, 5*time.Second
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			<-checkLLM(context.Background(), cfg, log)
			got := logs.String()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("logs lack %q:\n%s", w, got)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(got, w) {
					t.Errorf("logs hold %q:\n%s", w, got)
				}
			}
		})
	}
}

func TestLivenessFlags(t *testing.T) {
	got, err := loadConfig([]string{"--llm-retries", "0", "--llm-outage-window", "0", "--stall-timeout", "5s",
		"--stall-notices", "4", "--retry-stage-limit", "1"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got.LLM.MaxRetries != 0 || got.LLM.OutageWindow != 0 || got.StallTimeout != 5*time.Second ||
		got.StallNotices != 4 || got.RetryStageLimit != 1 {
		t.Errorf("config %+v", got)
	}
	if none(got.LLM.MaxRetries) >= 0 || none(got.LLM.OutageWindow) >= 0 {
		t.Error("a configured 0 does not reach the LLM client as none")
	}
	def, err := loadConfig(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if def.LLM.MaxRetries != 3 || def.LLM.OutageWindow != 10*time.Minute || def.StallTimeout != 3*time.Minute ||
		def.StallNotices != 2 || def.RetryStageLimit != 3 {
		t.Errorf("defaults %+v", def)
	}
	for _, args := range [][]string{{"--stall-timeout", "-1s"}, {"--stall-notices", "-1"}, {"--retry-stage-limit", "-2"}} {
		if _, err := loadConfig(args, env(nil)); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
