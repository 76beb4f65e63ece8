package server_test

import (
	"context"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The MCP Bundle (`make bundle`): server/mcpb/manifest.json and pack.mjs,
// validated with @anthropic-ai/mcpb's own validator (pinned in
// server/mcpb/package-lock.json; make deps installs it).

const mcpbDir = "mcpb"

// bundleManifest is what the tests read of manifest.json.
type bundleManifest struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Server  struct {
		Type       string `json:"type"`
		EntryPoint string `json:"entry_point"`
		MCPConfig  struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcp_config"`
	} `json:"server"`
	UserConfig map[string]struct {
		Type      string `json:"type"`
		Sensitive bool   `json:"sensitive"`
		Required  bool   `json:"required"`
		Default   any    `json:"default"`
	} `json:"user_config"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Compatibility struct {
		Platforms []string `json:"platforms"`
	} `json:"compatibility"`
}

// mcpb runs the pinned mcpb CLI with args and returns its output.
func mcpb(t *testing.T, args ...string) string {
	t.Helper()
	node, err := nodeBinary()
	if err != nil {
		t.Fatalf("the bundle tests need Node.js: %v; run `make deps`", err)
	}
	dir, err := filepath.Abs(mcpbDir)
	if err != nil {
		t.Fatal(err)
	}
	checkPinned(t, dir, "run `make deps` (it installs @anthropic-ai/mcpb from server/mcpb's lockfile)")
	cmd := exec.Command(node, append([]string{filepath.Join(dir, "node_modules", "@anthropic-ai", "mcpb", "dist", "cli", "cli.js")}, args...)...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mcpb %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestBundleManifest: mcpb's validator accepts the manifest; it starts the
// binary on stdio with the API key (sensitive, required), the base URL and
// the model from user_config, and lists exactly the server's tools.
func TestBundleManifest(t *testing.T) {
	path, err := filepath.Abs(filepath.Join(mcpbDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if out := mcpb(t, "validate", path); !strings.Contains(out, "validation passes") {
		t.Fatalf("mcpb validate: %s", out)
	}
	var m bundleManifest
	readJSONFile(t, path, &m)
	if m.Server.Type != "binary" || !slices.Contains(m.Server.MCPConfig.Args, "--stdio") ||
		m.Server.MCPConfig.Command != "${__dirname}/"+m.Server.EntryPoint {
		t.Errorf("server %+v: want the bundled binary (entry_point) started with --stdio", m.Server)
	}
	env := map[string]string{"OPENAI_API_KEY": "api_key", "OPENAI_BASE_URL": "base_url", "MAS_MODEL": "model"}
	for v, key := range env {
		if got := m.Server.MCPConfig.Env[v]; got != "${user_config."+key+"}" {
			t.Errorf("env %s = %q, want ${user_config.%s}", v, got, key)
		}
		uc, ok := m.UserConfig[key]
		if !ok || uc.Type != "string" {
			t.Errorf("user_config.%s: %+v, want a string", key, uc)
		}
	}
	if k := m.UserConfig["api_key"]; !k.Sensitive || !k.Required {
		t.Errorf("user_config.api_key: %+v, want sensitive and required", k)
	}
	if m.UserConfig["base_url"].Default != "https://api.openai.com/v1" || m.UserConfig["model"].Default != "gpt-4o-mini" {
		t.Errorf("base_url and model defaults %v, %v: want mas-mcp's own", m.UserConfig["base_url"].Default, m.UserConfig["model"].Default)
	}

	e := newEnv(t)
	res, err := e.client.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var served, listed []string
	for _, tool := range res.Tools {
		served = append(served, tool.Name)
	}
	for _, tool := range m.Tools {
		listed = append(listed, tool.Name)
	}
	slices.Sort(served)
	slices.Sort(listed)
	if !slices.Equal(served, listed) {
		t.Errorf("manifest.json lists the tools %v, the server has %v", listed, served)
	}
}

// TestBundlePack: pack.mjs (make bundle) packs the binary into a .mcpb
// whose unpacked manifest mcpb validates, with this platform and a semver
// version, and whose binary runs.
func TestBundlePack(t *testing.T) {
	node, err := nodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	mcpb(t, "--version") // the pinned CLI is there
	bin := teststack.Binary(t, teststack.MasPlain)
	dir := t.TempDir()
	bundle := filepath.Join(dir, "mas-mcp.mcpb")
	dirAbs, err := filepath.Abs(mcpbDir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join(dirAbs, "pack.mjs"), "--binary", bin, "--out", bundle, "--version", "v1.2.3-4-gabcdef0-dirty")
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pack.mjs: %v\n%s", err, out)
	}
	unpacked := filepath.Join(dir, "unpacked")
	mcpb(t, "unpack", bundle, unpacked)
	manifest := filepath.Join(unpacked, "manifest.json")
	if out := mcpb(t, "validate", manifest); !strings.Contains(out, "validation passes") {
		t.Fatalf("mcpb validate of the packed manifest: %s", out)
	}
	var m bundleManifest
	readJSONFile(t, manifest, &m)
	if m.Version != "1.2.3-4-gabcdef0-dirty" {
		t.Errorf("version %q, want 1.2.3-4-gabcdef0-dirty", m.Version)
	}
	if len(m.Compatibility.Platforms) != 1 || m.Compatibility.Platforms[0] != "linux" {
		t.Errorf("platforms %v, want [linux] (the binary's)", m.Compatibility.Platforms)
	}
	exe := filepath.Join(unpacked, filepath.FromSlash(m.Server.EntryPoint))
	fi, err := os.Stat(exe)
	if err != nil || fi.Mode()&0o100 == 0 {
		t.Fatalf("the bundled binary %s: %v (mode %v), want an executable", m.Server.EntryPoint, err, fi)
	}
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mas-mcp") {
		t.Errorf("%s --version: %v\n%s", m.Server.EntryPoint, err, out)
	}
}
