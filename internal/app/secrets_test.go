package app

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestShortSecretsWarned: a configured secret shorter than secret.MinLen
// (an Ollama-style dummy API key, a short monitor password) is scrubbed
// nowhere, so the start says which ones are, naming them, never showing
// them; one long enough is not named.
func TestShortSecretsWarned(t *testing.T) {
	const shortKey, shortPW, longPW = "ollama", "pw-4242", "pw-long-enough-4242"
	file := filepath.Join(t.TempDir(), "mas.yaml")
	yaml := "http:\n  passwords:\n    - {operator: ann, password_env: ANN_PW}\n    - {operator: bea, password_env: BEA_PW}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--memory", "--config", file},
		env(map[string]string{"OPENAI_API_KEY": shortKey, "ANN_PW": shortPW, "BEA_PW": longPW}))
	if err != nil {
		t.Fatal(err)
	}
	var logs teststack.SyncBuffer
	inst, err := start(t.Context(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), func() {})
	if err != nil {
		t.Fatal(err)
	}
	inst.close()
	var warned []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "too short to be scrubbed") {
			warned = append(warned, line)
		}
	}
	all := strings.Join(warned, "")
	if len(warned) != 2 || !strings.Contains(all, "OPENAI_API_KEY") || !strings.Contains(all, "operator ann") {
		t.Errorf("warnings %q, want two: the API key's and operator ann's password's", warned)
	}
	if strings.Contains(all, "operator bea") || strings.Contains(logs.String(), shortPW) || strings.Contains(logs.String(), longPW) {
		t.Errorf("a warning names bea's long password, or the logs show a password:\n%s", logs.String())
	}
}
