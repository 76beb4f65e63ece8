package downstream_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/downstream"
)

// badConfigs are configurations ParseConfig refuses; the error names the
// source, the server (when there is one) and the field.
var badConfigs = []struct {
	name   string
	json   string
	server string   // "" when the error is not about one server
	want   []string // further substrings of the error
	// decoded: found while decoding JSON (rather than by the checks
	// after it); TestParseConfigDecodeErrorsNameTheServer looks closer.
	decoded bool
}{
	{name: "command and url", json: `{"mcpServers": {"both": {"command": "npx", "url": "https://h/mcp"}}}`,
		server: "both", want: []string{"command and url"}},
	{name: "neither command nor url", json: `{"mcpServers": {"none": {"description": "what?"}}}`,
		server: "none", want: []string{"command or url"}},
	{name: "args without command", json: `{"mcpServers": {"remote": {"url": "https://h/mcp", "args": ["-y"]}}}`,
		server: "remote", want: []string{"args/env"}},
	{name: "env without command", json: `{"mcpServers": {"remote": {"url": "https://h/mcp", "env": {"K": "v"}}}}`,
		server: "remote", want: []string{"args/env"}},
	{name: "headers without url", json: `{"mcpServers": {"local": {"command": "srv", "headers": {"Authorization": "Bearer x"}}}}`,
		server: "local", want: []string{"headers/transport"}},
	{name: "transport without url", json: `{"mcpServers": {"local": {"command": "srv", "transport": "sse"}}}`,
		server: "local", want: []string{"headers/transport"}},
	{name: "bad transport", json: `{"mcpServers": {"ws": {"url": "https://h/mcp", "transport": "websocket"}}}`,
		server: "ws", want: []string{`transport "websocket"`, `"http" or "sse"`}},
	{name: "relative root", json: `{"mcpServers": {"r": {"command": "srv", "roots": ["data"]}}}`,
		server: "r", want: []string{"roots", `"data"`, "absolute"}},
	{name: "bad risk", json: `{"mcpServers": {"r": {"command": "srv", "risk": "medium"}}}`,
		server: "r", want: []string{`risk "medium"`, `"low" or "high"`}},
	{name: "negative timeout number", json: `{"mcpServers": {"t": {"command": "srv", "timeout": -5}}}`,
		server: "t", want: []string{"timeout -5s", "negative"}},
	{name: "negative timeout string", json: `{"mcpServers": {"t": {"command": "srv", "timeout": "-1m"}}}`,
		server: "t", want: []string{"timeout -1m0s", "negative"}},
	{name: "ftp url", json: `{"mcpServers": {"u": {"url": "ftp://h/mcp"}}}`,
		server: "u", want: []string{`url "ftp://h/mcp"`, "http:// or https://"}},
	{name: "url without scheme", json: `{"mcpServers": {"u": {"url": "localhost:8080/mcp"}}}`,
		server: "u", want: []string{`url "localhost:8080/mcp"`}},
	{name: "url without host", json: `{"mcpServers": {"u": {"url": "http:///mcp"}}}`,
		server: "u", want: []string{`url "http:///mcp"`}},
	{name: "unparsable url", json: `{"mcpServers": {"u": {"url": "http://h:port/"}}}`,
		server: "u", want: []string{`url "http://h:port/"`}},
	{name: "missing mcpServers", json: `{}`, want: []string{`no "mcpServers" object`}},
	{name: "null mcpServers", json: `{"mcpServers": null}`, want: []string{`no "mcpServers" object`}},
	{name: "VS Code's servers key", json: `{"servers": {"x": {"command": "srv"}}}`, want: []string{`unknown field "servers"`}},
	{name: "not an object", json: `[]`, want: []string{"array"}},
	{name: "not JSON", json: `mcpServers: {}`, want: []string{"invalid character"}},
	{name: "empty", json: ``, want: []string{"EOF"}},
	{name: "unknown key", json: `{"mcpServers": {"k": {"command": "srv", "cmd": "other"}}}`,
		server: "k", want: []string{`unknown field "cmd"`}, decoded: true},
	{name: "bad timeout string", json: `{"mcpServers": {"d": {"command": "srv", "timeout": "soon"}}}`,
		server: "d", want: []string{`"soon"`, "duration"}, decoded: true},
	{name: "timeout of another type", json: `{"mcpServers": {"d": {"command": "srv", "timeout": true}}}`,
		server: "d", want: []string{"duration"}, decoded: true},
	{name: "args not a list", json: `{"mcpServers": {"a": {"command": "srv", "args": "-y srv"}}}`,
		server: "a", want: []string{"args"}, decoded: true},
	{name: "bad outageWindow string", json: `{"mcpServers": {"o": {"url": "https://h/mcp", "outageWindow": "a while"}}}`,
		server: "o", want: []string{`outageWindow "a while"`, "duration"}, decoded: true},
	{name: "outageWindow of another type", json: `{"mcpServers": {"o": {"command": "srv", "outageWindow": [10]}}}`,
		server: "o", want: []string{"outageWindow", "duration"}, decoded: true},
	{name: "outageWindow too long", json: `{"mcpServers": {"o": {"command": "srv", "outageWindow": 1e300}}}`,
		server: "o", want: []string{"outageWindow 1e300", "longer than a duration can be"}, decoded: true},
	{name: "timeout too long", json: `{"mcpServers": {"o": {"command": "srv", "timeout": 1e12}}}`,
		server: "o", want: []string{"timeout 1e12", "longer than a duration can be"}, decoded: true},
}

func TestParseConfigRefuses(t *testing.T) {
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := downstream.ParseConfig([]byte(tc.json), "servers.json")
			if err == nil {
				t.Fatalf("ParseConfig(%s) = %+v, want an error", tc.json, cfg)
			}
			want := append([]string{"servers.json"}, tc.want...)
			if tc.server != "" {
				want = append(want, `server "`+tc.server+`"`)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestParseConfigDecodeErrorsNameTheServer: errors found while decoding
// must say which server too, as ParseConfig's contract says.
func TestParseConfigDecodeErrorsNameTheServer(t *testing.T) {
	for _, tc := range badConfigs {
		if !tc.decoded {
			continue
		}
		_, err := downstream.ParseConfig([]byte(tc.json), "servers.json")
		if err == nil || !strings.Contains(err.Error(), `server "`+tc.server+`"`) {
			t.Errorf("%s: error %v does not name server %q", tc.name, err, tc.server)
		}
		if tc.name == "bad timeout string" && !strings.Contains(err.Error(), "timeout") {
			t.Errorf("%s: error %v does not name the field timeout", tc.name, err)
		}
		if strings.Contains(tc.json, "outageWindow") && !strings.Contains(err.Error(), "outageWindow") {
			t.Errorf("%s: error %v does not name the field outageWindow", tc.name, err)
		}
	}
}

// TestParseConfigTrailingData: a file holding more than one JSON value is
// not a configuration.
func TestParseConfigTrailingData(t *testing.T) {
	for _, s := range []string{
		`{"mcpServers": {"a": {"command": "srv"}}} {"mcpServers": {"b": {"command": "srv"}}}`,
		`{"mcpServers": {"a": {"command": "srv"}}} trailing`,
	} {
		if cfg, err := downstream.ParseConfig([]byte(s), "servers.json"); err == nil {
			t.Errorf("ParseConfig(%s) = %v, want an error", s, cfg.Names())
		}
	}
}

func TestParseConfigAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		json string
		want map[string]downstream.ServerConfig
	}{{
		// Claude Desktop's claude_desktop_config.json, as its docs show it.
		name: "Claude Desktop",
		json: `{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/Users/username/Desktop",
        "/Users/username/Downloads"
      ]
    },
    "brave-search": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-brave-search"],
      "env": {
        "BRAVE_API_KEY": "YOUR_API_KEY_HERE"
      }
    }
  }
}`,
		want: map[string]downstream.ServerConfig{
			"filesystem": {Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/Users/username/Desktop", "/Users/username/Downloads"}},
			"brave-search": {Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-brave-search"},
				Env: map[string]string{"BRAVE_API_KEY": "YOUR_API_KEY_HERE"}},
		},
	}, {
		name: "remote servers and our keys",
		json: `{"mcpServers": {
			"remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer t"}, "timeout": "30s",
				"description": "The example service.", "risk": "high", "autoApprove": ["search"]},
			"legacy": {"url": "http://127.0.0.1:3001/sse", "transport": "sse", "timeout": 45},
			"http":   {"url": "http://localhost:8080/mcp", "transport": "http", "timeout": 1.5, "risk": "low"},
			"off":    {"command": "srv", "disabled": true},
			"on":     {"command": "srv", "disabled": false, "timeout": "1m30s"},
			"patient": {"command": "srv", "outageWindow": "1h"},
			"eager":   {"url": "http://localhost:8081/mcp", "outageWindow": -1},
			"brief":   {"url": "http://localhost:8082/mcp", "outageWindow": 90}
		}}`,
		want: map[string]downstream.ServerConfig{
			"remote": {URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer t"},
				Timeout: downstream.Duration(30 * time.Second), Description: "The example service.", Risk: "high", AutoApprove: []string{"search"}},
			"legacy":  {URL: "http://127.0.0.1:3001/sse", Transport: "sse", Timeout: downstream.Duration(45 * time.Second)},
			"http":    {URL: "http://localhost:8080/mcp", Transport: "http", Timeout: downstream.Duration(1500 * time.Millisecond), Risk: "low"},
			"on":      {Command: "srv", Timeout: downstream.Duration(90 * time.Second)},
			"patient": {Command: "srv", OutageWindow: downstream.Duration(time.Hour)},
			"eager":   {URL: "http://localhost:8081/mcp", OutageWindow: downstream.Duration(-time.Second)},
			"brief":   {URL: "http://localhost:8082/mcp", OutageWindow: downstream.Duration(90 * time.Second)},
		},
	}, {
		name: "no servers",
		json: `{"mcpServers": {}}`,
		want: map[string]downstream.ServerConfig{},
	}, {
		name: "only disabled servers",
		json: `{"mcpServers": {"a": {"command": "srv", "disabled": true}}}`,
		want: map[string]downstream.ServerConfig{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := downstream.ParseConfig([]byte(tc.json), "servers.json")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg.Servers); diff != "" {
				t.Errorf("servers mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	cfg, err := downstream.LoadConfig("")
	if err != nil || cfg.Servers == nil || len(cfg.Servers) != 0 {
		t.Errorf(`LoadConfig("") = %+v, %v; want no servers`, cfg, err)
	}

	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"mcpServers": {"b": {"command": "srv"}, "a": {"url": "https://h/mcp"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = downstream.LoadConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, cfg.Names()); diff != "" {
		t.Errorf("Names mismatch (-want +got):\n%s", diff)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"mcpServers": {"b": {"command": "srv", "risk": "extreme"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := downstream.LoadConfig(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `server "b": risk "extreme"`) {
		t.Errorf("LoadConfig(bad) error = %v; want it to name the file, the server and the field", err)
	}
	missing := filepath.Join(dir, "missing.json")
	if _, err := downstream.LoadConfig(missing); err == nil || !strings.Contains(err.Error(), missing) || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("LoadConfig(missing) error = %v; want a not-exist error naming the file", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestDurationJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{`"30s"`, 30 * time.Second}, {`"1m30s"`, 90 * time.Second}, {`"250ms"`, 250 * time.Millisecond},
		{`30`, 30 * time.Second}, {`0.5`, 500 * time.Millisecond}, {`0`, 0},
	} {
		var d downstream.Duration
		if err := json.Unmarshal([]byte(tc.in), &d); err != nil || time.Duration(d) != tc.want {
			t.Errorf("Duration %s = %v, %v; want %v", tc.in, time.Duration(d), err, tc.want)
		}
		// What is written reads back the same.
		b, err := json.Marshal(d)
		var back downstream.Duration
		if err != nil || json.Unmarshal(b, &back) != nil || back != d {
			t.Errorf("Duration %v: wrote %s, read back %v (%v)", time.Duration(d), b, time.Duration(back), err)
		}
	}
}
