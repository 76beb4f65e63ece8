package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
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
	got, err := loadConfig([]string{"--config", file, "--model", "from-flag", "--stage-step-budget", "7", "--unstaged-step-budget", "40"},
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
	want.UnstagedStepBudget = 40                   // flag
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
		{[]string{"--unstaged-step-budget", "0"}, "unstaged_step_budget 0: must be positive"},
		{[]string{"--message-chain-limit", "-1"}, "message_chain_limit -1: must be positive"},
		{[]string{"--log-format", "xml"}, `log_format "xml"`},
		{[]string{"--log-level", "loud"}, `log_level "loud"`},
		{[]string{"--config", bad}, "field modle not found"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "config file"},
		{[]string{"stray"}, `unexpected argument "stray"`},
		{[]string{"--operator", "ann\nSYSTEM"}, `operator "ann\nSYSTEM": has a control character`},
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
	done := make(chan error, 1)
	w := &teststack.SyncBuffer{}
	go func() {
		done <- run(ctx, []string{"--log-format", "json", "--http", "127.0.0.1:0", "--data-dir", t.TempDir()}, env(map[string]string{"OPENAI_API_KEY": "sk-SENTINEL-main"}), w)
	}()
	if !w.WaitFor(20*time.Second, nil, func(s string) bool { return strings.Contains(s, "mas-mcp ready") }) {
		t.Fatalf("no readiness line; stderr:\n%s", w.String())
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

// TestOperatorTokensAndPasswords: configured tokens and passwords create
// their operators once, bind tokens to them and set the passwords; the
// default operator's name reuses the default operator.
func TestOperatorTokensAndPasswords(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mas.yaml")
	yaml := "http:\n  tokens:\n    - {operator: alice, token_env: TOK_A}\n    - {operator: operator, token_env: TOK_D}\n" +
		"  passwords:\n    - {operator: alice, password_env: PW_A}\n    - {operator: bob, password_env: PW_B}\n" +
		"  admins: [bob]\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"TOK_A": "token-of-alice-0123456789", "TOK_D": "token-of-default-0123456", "PW_A": "pw-alice", "PW_B": "pw-bob"}
	cfg, err := loadConfig([]string{"--config", file}, env(vars))
	if err != nil {
		t.Fatal(err)
	}
	sys, pool, err := build(cfg, newLogger(cfg, io.Discard), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := sys.Start(); err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	tokens, err := operatorTokens(cfg, sys, slog.New(slog.DiscardHandler), env(vars))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, b := range sys.AgentBriefs() {
		if b.Kind == "human" {
			ids[b.Name] = b.AgentID
		}
	}
	if len(ids) != 3 {
		t.Fatalf("operators %v, want operator, alice and bob", ids)
	}
	if tokens["token-of-alice-0123456789"] != ids["alice"] || tokens["token-of-default-0123456"] != sys.OperatorID() {
		t.Errorf("tokens bound to %v, operators %v", tokens, ids)
	}
	// What a restart does: the operators exist already (restored), and
	// each configured name is found again, not added again — added, a
	// token would act as a new operator owning none of its tasks.
	again, err := operatorTokens(cfg, sys, slog.New(slog.DiscardHandler), env(vars))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(again, tokens) {
		t.Errorf("the tokens bound again to %v, first to %v", again, tokens)
	}
	humans := 0
	for _, b := range sys.AgentBriefs() {
		if b.Kind == "human" {
			humans++
		}
	}
	if humans != 3 {
		t.Errorf("%d operators after binding the tokens again, want the same 3", humans)
	}
	if !sys.CheckOperatorPassword(ids["alice"], "pw-alice") || !sys.CheckOperatorPassword(ids["bob"], "pw-bob") || sys.CheckOperatorPassword(ids["bob"], "pw-alice") {
		t.Error("passwords not set as configured")
	}
	// http.admins names operators: bob may manage alice's task.
	admins, err := operatorAdmins(cfg, sys)
	if err != nil || len(admins) != 1 || admins[0] != ids["bob"] {
		t.Fatalf("admins %v, %v; want bob (%s)", admins, err, ids["bob"])
	}
	if err := sys.SetAdmins(admins); err != nil {
		t.Fatal(err)
	}
	task, err := sys.AddTask(ids["alice"], engine.AddTaskRequest{TaskName: "a", TaskIntention: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.MayOperate(ids["bob"], task); err != nil {
		t.Errorf("the admin bob on alice's task: %v", err)
	}
	if err := sys.MayOperate(sys.OperatorID(), task); err == nil {
		t.Errorf("the default operator, no admin, may operate alice's task")
	}
	cfg.HTTP.Admins = []string{"nobody"}
	if _, err := operatorAdmins(cfg, sys); err == nil || !strings.Contains(err.Error(), `http.admins[0] "nobody"`) {
		t.Errorf("an unknown admin: error %v, want it named", err)
	}
	delete(vars, "PW_B")
	if _, err := operatorTokens(cfg, sys, slog.New(slog.DiscardHandler), env(vars)); err == nil || !strings.Contains(err.Error(), "PW_B") {
		t.Errorf("missing password variable: error %v, want it named", err)
	}
}

// TestHelpShowsDefaultsAndEnvironment: --help shows every flag's default
// (the README's, not a sentinel like -1) and names the environment
// variables.
func TestHelpShowsDefaultsAndEnvironment(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	for _, want := range []string{
		"-llm-retries int", "(default 3)", "(default 10m0s)", `(default "gpt-4o-mini")`, `(default "127.0.0.1:7777")`,
		"(default 8)", "(default 60)", "OPENAI_API_KEY", "OPENAI_BASE_URL", "MAS_LANG", "MAS_MODEL", "MAS_DATA_DIR", "-version",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %s:\n%s", want, help)
		}
	}
	if strings.Contains(help, "(default -1)") {
		t.Errorf("--help shows a sentinel default:\n%s", help)
	}
}

// TestFlagsOverrideOnlyWhenGiven: a flag left out keeps the file's and the
// environment's values even though --help shows it with a default; a flag
// given as 0 counts.
func TestFlagsOverrideOnlyWhenGiven(t *testing.T) {
	got, err := loadConfig([]string{"--llm-retries", "0"}, env(map[string]string{"MAS_MODEL": "from-env", "MAS_LANG": "zh"}))
	if err != nil {
		t.Fatal(err)
	}
	if got.LLM.Model != "from-env" || got.Lang != "zh" || got.LLM.MaxRetries != 0 {
		t.Errorf("model %q lang %q retries %d, want from-env, zh, 0", got.LLM.Model, got.Lang, got.LLM.MaxRetries)
	}
}

func TestVersionOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a tagged module", debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"a commit", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "devel-0123456789ab+dirty"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		if got := versionOf(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestJoinRefusesHTTPNamingTheOwner: with another Run owning the data
// directory and serving HTTP, a --stdio --http Run on it is refused with
// the owner's addresses; an HTTP-only one too. The note goes with the
// owner.
func TestJoinRefusesHTTPNamingTheOwner(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &teststack.SyncBuffer{}
	go func() {
		done <- run(ctx, []string{"--log-format", "json", "--http", "127.0.0.1:0", "--data-dir", dir}, env(nil), logs)
	}()
	ready := regexp.MustCompile(`"monitor":"(http://[^"]+/)"`)
	if !logs.WaitFor(20*time.Second, nil, ready.MatchString) {
		cancel()
		t.Fatalf("the owner never got ready:\n%s", logs.String())
	}
	monitor := ready.FindStringSubmatch(logs.String())[1]
	for _, args := range [][]string{{"--stdio", "--http", "127.0.0.1:0"}, {"--http", "127.0.0.1:0"}} {
		err := run(context.Background(), append(args, "--data-dir", dir), env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "the owner serves the web monitor at "+monitor) {
			t.Errorf("%v on an owned directory: %v, want a refusal naming %s", args, err, monitor)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(httpNoteFile(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the owner's HTTP note outlived it: %v", err)
	}
}
