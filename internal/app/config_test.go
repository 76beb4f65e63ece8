package app

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mas-mcp/mas-mcp/server"
	"github.com/mas-mcp/mas-mcp/store"
)

// TestNATSAuthConfig: the external server's credentials come from flags,
// the config file and the environment (secrets from the environment only)
// and reach the store as they were given.
func TestNATSAuthConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mas.yaml")
	yaml := "nats_url: nats://nats.example.org:4222\nnats:\n  user: mas\n  password_env: MY_NATS_PW\n  tls_ca: /etc/ca.pem\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", file, "--nats-tls-cert", "/etc/c.pem", "--nats-tls-key", "/etc/c.key"},
		env(map[string]string{"MY_NATS_PW": "pw-SENTINEL", "MAS_NATS_PASSWORD": "not this one"}))
	if err != nil {
		t.Fatal(err)
	}
	want := store.NATSAuth{User: "mas", Password: "pw-SENTINEL", CAFile: "/etc/ca.pem", CertFile: "/etc/c.pem", KeyFile: "/etc/c.key"}
	if diff := cmp.Diff(want, cfg.natsAuth()); diff != "" {
		t.Errorf("nats auth (-want +got):\n%s", diff)
	}
	if s := cfg.natsAuth().String(); strings.Contains(s, "pw-SENTINEL") {
		t.Errorf("the password shows in %s", s)
	}

	cfg, err = loadConfig([]string{"--nats-url", "nats://h:4222", "--nats-creds", "/etc/u.creds"}, env(map[string]string{"MAS_NATS_TOKEN": "tok"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.natsAuth(); got.CredsFile != "/etc/u.creds" || got.Token != "tok" {
		t.Errorf("nats auth %+v: want the creds file and MAS_NATS_TOKEN", got)
	}

	for _, tc := range []struct {
		args []string
		vars map[string]string
		want string
	}{
		{[]string{"--nats-user", "mas"}, nil, "set nats_url"},
		{[]string{"--nats-url", "nats://h:4222", "--nats-user", "mas"}, nil, "nats.user mas: no password: set MAS_NATS_PASSWORD"},
	} {
		_, err := loadConfig(tc.args, env(tc.vars))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// TestLimitsConfig: the limits block of the config file reaches the
// server's limits; a negative value stops the start with its key named,
// and so does a name_bytes below the longest URI the server gives out
// (it would refuse its own URIs), naming the minimum.
func TestLimitsConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mas.yaml")
	if err := os.WriteFile(file, []byte("limits:\n  sessions_per_operator: 4\n  text_bytes: 1000\n  body_timeout: 5s\n  idle_timeout: 90s\n  stuck_session_timeout: 1m\n  tasks_per_minute: 3\n  long_requests: 40\n  long_requests_per_operator: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", file}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Limits.server()
	want := server.Limits{SessionsPerOperator: 4, TextBytes: 1000, BodyTimeout: 5 * time.Second, IdleTimeout: 90 * time.Second, StuckSession: time.Minute, TasksPerMinute: 3,
		LongRequests: 40, LongRequestsPerOperator: 5}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(server.Limits{}, "Now")); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}

	for _, bad := range []struct{ yaml, want string }{
		{"sessions: -1", "limits.sessions -1"},
		{"name_bytes: 100", fmt.Sprintf("limits.name_bytes 100: must be at least %d", server.MinNameBytes)},
	} {
		if err := os.WriteFile(file, []byte("limits:\n  "+bad.yaml+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err = loadConfig([]string{"--config", file, "--memory", "--http", "127.0.0.1:0"}, env(nil))
		if err != nil {
			t.Fatal(err)
		}
		inst, err := start(t.Context(), cfg, newLogger(cfg, io.Discard), func() {})
		if err == nil {
			inst.close()
			t.Fatalf("start with limits %s succeeded", bad.yaml)
		}
		if !strings.Contains(err.Error(), bad.want) {
			t.Errorf("start with limits %s: %v, want it to say %q", bad.yaml, err, bad.want)
		}
	}
}

// TestMetricsConfig: /metrics is off by default and turned on by the
// config file's http.metrics or by --metrics (which overrides the file).
func TestMetricsConfig(t *testing.T) {
	cfg, err := loadConfig(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Metrics {
		t.Error("metrics on by default")
	}
	file := filepath.Join(t.TempDir(), "mas.yaml")
	if err := os.WriteFile(file, []byte("http:\n  metrics: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = loadConfig([]string{"--config", file}, env(nil)); err != nil || !cfg.HTTP.Metrics {
		t.Errorf("http.metrics: true in the file: metrics %v, err %v", cfg.HTTP.Metrics, err)
	}
	if cfg, err = loadConfig([]string{"--config", file, "--metrics=false"}, env(nil)); err != nil || cfg.HTTP.Metrics {
		t.Errorf("--metrics=false over the file: metrics %v, err %v", cfg.HTTP.Metrics, err)
	}
	if cfg, err = loadConfig([]string{"--metrics"}, env(nil)); err != nil || !cfg.HTTP.Metrics {
		t.Errorf("--metrics: metrics %v, err %v", cfg.HTTP.Metrics, err)
	}
}
