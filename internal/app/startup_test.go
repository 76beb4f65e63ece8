package app

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestExportHelpHidesNATSPassword: `mas-mcp export --help` does not print
// MAS_NATS_URL, whose URL may carry a password (nats://user:password@host).
func TestExportHelpHidesNATSPassword(t *testing.T) {
	var out bytes.Buffer
	_ = Export(context.Background(), []string{"--help"},
		env(map[string]string{"MAS_NATS_URL": "nats://mas:pw-SENTINEL-export@nats.example.org:4222"}), &out, &out)
	if strings.Contains(out.String(), "pw-SENTINEL-export") {
		t.Errorf("export --help shows the NATS password:\n%s", out.String())
	}
}

// TestConfigFileIsOneDocument: a config file holding a second YAML document
// (a "---" line, two snippets pasted together) is refused, not read up to
// the "---" with the rest ignored, unknown keys and all.
func TestConfigFileIsOneDocument(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mas.yaml")
	if err := os.WriteFile(file, []byte("lang: en\n---\nllm:\n  modle: gpt-4o\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", file}, env(nil))
	if err == nil {
		t.Errorf("a config file with a second document (llm.modle, an unknown key) loaded without error; model %q", cfg.LLM.Model)
	}
}

// TestNegativeValuesNameTheirKey: a negative value in the config file stops
// the start with an error naming its key, for these keys as for the
// others (they were refused deep in start with Go names, or not at all).
func TestNegativeValuesNameTheirKey(t *testing.T) {
	for _, tc := range []struct {
		yaml, key string
		memory    bool
	}{
		{"trail:\n  max_age: -1h\n", "trail.max_age", false},
		{"trail:\n  max_age: -1h\n", "trail.max_age", true},
		{"budgets:\n  raise_tokens: -3\n", "budgets.raise_tokens", false},
		{"http:\n  session_timeout: -1s\n", "http.session_timeout", false},
		{"http:\n  max_body_bytes: -1\n", "http.max_body_bytes", false},
	} {
		file := filepath.Join(t.TempDir(), "mas.yaml")
		if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"--config", file, "--http", "127.0.0.1:0", "--data-dir", t.TempDir()}
		if tc.memory {
			args = []string{"--config", file, "--http", "127.0.0.1:0", "--memory"}
		}
		cfg, err := loadConfig(args, env(nil))
		if err == nil {
			var inst *instance
			if inst, err = start(t.Context(), cfg, newLogger(cfg, io.Discard), func() {}); err == nil {
				inst.close()
			}
		}
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q (memory %v): error %v, want it to name %s", tc.yaml, tc.memory, err, tc.key)
		}
	}
}

// TestStdioJoinEndsOnHostEOF: a `mas-mcp --stdio` on a data directory whose
// owner does not answer on its socket (here: its path is too long for a
// unix socket, which the owner only logs) ends when its host closes stdin,
// instead of waiting for the owner for ever.
func TestStdioJoinEndsOnHostEOF(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("long-state-directory-", 5))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ownerDone := make(chan error, 1)
	logs := &teststack.SyncBuffer{}
	go func() {
		ownerDone <- run(ctx, []string{"--log-format", "json", "--http", "127.0.0.1:0", "--data-dir", dir}, env(nil), logs)
	}()
	if !logs.WaitFor(20*time.Second, nil, regexp.MustCompile(`mas-mcp ready`).MatchString) {
		cancel()
		<-ownerDone
		t.Fatalf("the owner never got ready:\n%s", logs.String())
	}
	defer func() {
		cancel()
		if err := <-ownerDone; err != nil {
			t.Error(err)
		}
	}()

	// The joining process's host: stdin already at EOF.
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	stdin, stdout := os.Stdin, os.Stdout
	os.Stdin, os.Stdout = inR, outW
	defer func() { os.Stdin, os.Stdout = stdin, stdout; inR.Close(); outW.Close() }()

	jctx, jcancel := context.WithCancel(context.Background())
	defer jcancel()
	joinLogs := &teststack.SyncBuffer{}
	joined := make(chan error, 1)
	go func() {
		joined <- run(jctx, []string{"--stdio", "--log-format", "json", "--data-dir", dir}, env(nil), joinLogs)
	}()
	select {
	case <-joined:
	case <-time.After(10 * time.Second):
		jcancel()
		<-joined
		t.Fatalf("mas-mcp --stdio on a directory whose owner has no socket still ran 10s after its host closed stdin; its logs:\n%s",
			joinLogs.String())
	}
}
