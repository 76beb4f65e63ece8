// Package downstream connects mas-mcp's agents to downstream MCP servers
// (spec §4): a pool of client sessions, one per configured server, shared by
// every agent, and the one executor that runs every tool step (spec §4.2),
// with operator confirmation of risky calls.
package downstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// Risk levels of a server (our key beyond the hosts' mcpServers shape).
const (
	RiskLow  = "low"
	RiskHigh = "high"
)

// ServerConfig is one entry of mcpServers, in the shape Claude Desktop and
// most hosts use, plus mas-mcp's optional keys.
type ServerConfig struct {
	// Command, Args and Env start a stdio server.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// URL (with Headers) reaches a remote server; Transport is "http"
	// (streamable HTTP, default) or "sse".
	URL       string            `json:"url,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Transport string            `json:"transport,omitempty"`

	// Description is the use guide agents see for the server (spec §4.2
	// level 1).
	Description string `json:"description,omitempty"`
	// Timeout bounds one call ("30s", or a number of seconds). Default 60s.
	Timeout Duration `json:"timeout,omitzero"`
	// OutageWindow is how long a call waits for the server when it cannot
	// be reached (nothing listens, a gateway answers 502/503/504, the
	// process cannot start), trying again with backoff, before it fails
	// ("10m", or a number of seconds). Default DefaultOutageWindow;
	// negative: not at all, the call fails at once.
	OutageWindow Duration `json:"outageWindow,omitzero"`
	// Risk "high" makes every tool call of the server wait for the
	// operator's approval; "low" (default) only destructive tools do.
	Risk string `json:"risk,omitempty"`
	// Disabled servers are ignored.
	Disabled bool `json:"disabled,omitempty"`
	// AutoApprove names tools that never wait for approval.
	AutoApprove []string `json:"autoApprove,omitempty"`
	// AllowSampling lets the server ask the MAS's LLM (sampling/createMessage
	// during a call): without it mas-mcp does not offer sampling and the
	// server's request is refused.
	AllowSampling bool `json:"allowSampling,omitempty"`
	// Roots are what mas-mcp answers the server's roots/list with: absolute
	// directory paths or file:// URIs. None: an empty list.
	Roots []string `json:"roots,omitempty"`
}

// Config is a downstream configuration: {"mcpServers": {name: ServerConfig}}.
type Config struct {
	Servers map[string]ServerConfig `json:"mcpServers"`
}

// Duration is a time.Duration written in JSON as "30s" or as seconds.
type Duration time.Duration

// UnmarshalJSON accepts "1m30s" and 90.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if n, err := strconv.ParseFloat(string(b), 64); err == nil {
		if math.Abs(n*float64(time.Second)) >= math.MaxInt64 {
			return fmt.Errorf("%s seconds is longer than a duration can be (about 292 years)", b)
		}
		*d = Duration(n * float64(time.Second))
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration like \"30s\" or a number of seconds")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration like \"30s\" or a number of seconds: %v", err)
	}
	*d = Duration(v)
	return nil
}

// decodeStrict decodes exactly one JSON value with no unknown fields.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the configuration's JSON object (offset %d)", dec.InputOffset())
	}
	return nil
}

// decodeServer decodes one server's entry; the durations are decoded on
// their own so that their errors name the field.
func decodeServer(raw json.RawMessage) (ServerConfig, error) {
	var entry struct {
		ServerConfig
		Timeout      json.RawMessage `json:"timeout"`
		OutageWindow json.RawMessage `json:"outageWindow"`
	}
	if err := decodeStrict(raw, &entry); err != nil {
		return ServerConfig{}, err
	}
	sc := entry.ServerConfig
	for _, d := range []struct {
		field string
		raw   json.RawMessage
		to    *Duration
	}{{"timeout", entry.Timeout, &sc.Timeout}, {"outageWindow", entry.OutageWindow, &sc.OutageWindow}} {
		if len(d.raw) > 0 && string(d.raw) != "null" {
			if err := json.Unmarshal(d.raw, d.to); err != nil {
				return ServerConfig{}, fmt.Errorf("%s %s: %w", d.field, d.raw, err)
			}
		}
	}
	return sc, nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// DefaultTimeout bounds a call when the server sets no timeout.
const DefaultTimeout = 60 * time.Second

// DefaultOutageWindow is how long a call waits for a server it cannot
// reach when the server sets no outageWindow.
const DefaultOutageWindow = 10 * time.Minute

// LoadConfig reads a configuration file ("" means none: no servers).
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		return &Config{Servers: map[string]ServerConfig{}}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcp servers config: %w", err)
	}
	return ParseConfig(data, path)
}

// ParseConfig parses and checks a configuration; errors name the source,
// the server and the field.
func ParseConfig(data []byte, source string) (*Config, error) {
	var file struct {
		Servers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := decodeStrict(data, &file); err != nil {
		return nil, fmt.Errorf("mcp servers config %s: %w", source, err)
	}
	var cfg Config
	if file.Servers != nil {
		cfg.Servers = make(map[string]ServerConfig, len(file.Servers))
	}
	for name, raw := range file.Servers {
		sc, err := decodeServer(raw)
		if err != nil {
			return nil, fmt.Errorf("mcp servers config %s: server %q: %w", source, name, err)
		}
		cfg.Servers[name] = sc
	}
	if cfg.Servers == nil {
		return nil, fmt.Errorf("mcp servers config %s: no \"mcpServers\" object", source)
	}
	for _, name := range cfg.Names() {
		if err := cfg.Servers[name].check(); err != nil {
			return nil, fmt.Errorf("mcp servers config %s: server %q: %w", source, name, err)
		}
	}
	// Disabled servers do not exist for anyone.
	for name, sc := range cfg.Servers {
		if sc.Disabled {
			delete(cfg.Servers, name)
		}
	}
	return &cfg, nil
}

func (sc ServerConfig) check() error {
	switch {
	case sc.Command == "" && sc.URL == "":
		return fmt.Errorf("command or url: set one (command for a stdio server, url for a remote one)")
	case sc.Command != "" && sc.URL != "":
		return fmt.Errorf("command and url: set only one")
	case sc.Command == "" && (len(sc.Args) > 0 || len(sc.Env) > 0):
		return fmt.Errorf("args/env: only for a stdio server (with command)")
	case sc.URL == "" && (len(sc.Headers) > 0 || sc.Transport != ""):
		return fmt.Errorf("headers/transport: only for a remote server (with url)")
	case !slices.Contains([]string{"", "http", "sse"}, sc.Transport):
		return fmt.Errorf("transport %q: must be \"http\" or \"sse\"", sc.Transport)
	case !slices.Contains([]string{"", RiskLow, RiskHigh}, sc.Risk):
		return fmt.Errorf("risk %q: must be %q or %q", sc.Risk, RiskLow, RiskHigh)
	case sc.Timeout < 0:
		return fmt.Errorf("timeout %s: must not be negative", time.Duration(sc.Timeout))
	}
	for _, r := range sc.Roots {
		if _, err := rootURI(r); err != nil {
			return fmt.Errorf("roots: %w", err)
		}
	}
	if sc.URL != "" {
		u, err := url.Parse(sc.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q: want an http:// or https:// URL", redactURL(sc.URL))
		}
	}
	return nil
}

// Names returns the server names, sorted.
func (c *Config) Names() []string {
	names := make([]string, 0, len(c.Servers))
	for n := range c.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (sc ServerConfig) timeout() time.Duration {
	if sc.Timeout > 0 {
		return time.Duration(sc.Timeout)
	}
	return DefaultTimeout
}

// outageWindow is how long a call waits for the server when it cannot be
// reached; negative: not at all.
func (sc ServerConfig) outageWindow() time.Duration {
	if sc.OutageWindow != 0 {
		return time.Duration(sc.OutageWindow)
	}
	return DefaultOutageWindow
}

// describe is a short form of the server for logs and errors, without
// secrets: no env values, no headers, the URL's user information and query
// values replaced, and the values of secret flags among the args
// (redactArgs).
func (sc ServerConfig) describe() string {
	if sc.URL != "" {
		return strings.TrimSpace(sc.Transport + " " + redactURL(sc.URL))
	}
	return strings.TrimSpace(sc.Command + " " + strings.Join(redactArgs(sc.Args), " "))
}

// redactURL is llm.RedactURL, but for a URL that does not parse (checked
// when the configuration is loaded, whose error shows it): its user
// information and query are replaced as they are written.
func redactURL(raw string) string {
	if _, err := url.Parse(raw); err == nil {
		return llm.RedactURL(raw)
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	} else {
		scheme += "://"
	}
	authority, _, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		rest = redacted + rest[i:]
	}
	if i := strings.Index(rest, "?"); i >= 0 {
		rest = rest[:i] + "?" + redacted
	}
	return scheme + rest
}
