package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mas.yaml")
	if err := os.WriteFile(file, []byte("lang: zh\nllm:\n  model: from-file\n  concurrency: 3\nwait_timeout: 2m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := loadConfig([]string{"--config", file, "--model", "from-flag", "--stage-step-budget", "7"},
		env(map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1", "MAS_MODEL": "from-env", "OPENAI_API_KEY": "sk-x"}))
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	want.Lang = "zh"                               // file
	want.LLM.Concurrency = 3                       // file
	want.WaitTimeout = 2 * time.Minute             // file
	want.LLM.BaseURL = "http://localhost:11434/v1" // env
	want.LLM.Model = "from-flag"                   // flag beats env beats file
	want.StageStepBudget = 7                       // flag
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Config{})); diff != "" {
		t.Errorf("config mismatch (-want +got):\n%s", diff)
	}
	if got.apiKey != "sk-x" {
		t.Error("API key not read from OPENAI_API_KEY")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("llm:\n  modle: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lang", "fr"}, `lang "fr"`},
		{[]string{"--llm-concurrency", "-1"}, "llm.concurrency -1"},
		{[]string{"--wait-timeout", "-1s"}, "wait_timeout -1s"},
		{[]string{"--log-format", "xml"}, `log_format "xml"`},
		{[]string{"--log-level", "loud"}, `log_level "loud"`},
		{[]string{"--config", bad}, "field modle not found"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "config file"},
		{[]string{"stray"}, `unexpected argument "stray"`},
	} {
		_, err := loadConfig(tc.args, env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// TestRunStartsAndStops runs the real wiring: the base task comes up,
// readiness is logged on stderr, and cancelling stops it cleanly. The API
// key never shows in the logs.
func TestRunStartsAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	done := make(chan error, 1)
	w := &lockedWriter{w: &stderr}
	go func() {
		done <- run(ctx, []string{"--log-format", "json", "--http", "127.0.0.1:0"}, env(map[string]string{"OPENAI_API_KEY": "sk-SENTINEL-main"}), w)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(w.String(), "mas-mcp ready") {
		if time.Now().After(deadline) {
			t.Fatalf("no readiness line; stderr:\n%s", w.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := w.String()
	for _, want := range []string{`"base_task"`, `"manager"`, `"operator"`, `"api_key_set":true`, "shutting down"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "sk-SENTINEL-main") {
		t.Error("the API key appears in the logs")
	}
}
