package downstream

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestServerURLSecretsHidden: a remote server's URL may carry its
// credentials (user:password@, ?api_key=…). Neither the connect error
// (which becomes a step's execute_result.error, read by every client;
// net/http quotes the URL in its own errors) nor the log line "mcp server
// connected" shows them.
func TestServerURLSecretsHidden(t *testing.T) {
	const password, key = "hunter2-downstream-pw", "sk-downstream-URLSECRET-123"
	live := rigServer(t, addSamplingTool, nil)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadHost := strings.TrimPrefix(dead.URL, "http://")
	dead.Close() // nothing listens there any more: connection refused
	log := &rigLog{}
	liveHost := strings.TrimPrefix(live.URL, "http://")
	pool := NewPool(&Config{Servers: map[string]ServerConfig{
		"dead": {URL: "http://mcpuser:" + password + "@" + deadHost + "/mcp?api_key=" + key, Timeout: Duration(time.Minute)},
		"live": {URL: "http://mcpuser:" + password + "@" + liveHost + "/mcp?api_key=" + key, Timeout: Duration(time.Minute)},
	}}, log.logger())
	t.Cleanup(func() { _ = pool.Close() })

	_, err := pool.Describe(context.Background(), "dead")
	if err == nil {
		t.Fatal("Describe of a server nobody serves succeeded")
	}
	for _, s := range []string{password, key} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the connect error shows the URL's secret %q: %v", s, err)
		}
	}
	if !strings.Contains(err.Error(), "http://[REDACTED]@"+deadHost+"/mcp?api_key=[REDACTED]") {
		t.Errorf("the connect error does not show the server's URL without its secrets: %v", err)
	}
	if _, err := pool.Describe(context.Background(), "live"); err != nil {
		t.Fatalf("Describe live: %v", err)
	}
	for _, s := range []string{password, key} {
		if strings.Contains(log.String(), s) {
			t.Errorf("the log shows the URL's secret %q:\n%s", s, log.String())
		}
	}
}

// TestEchoedHeaderHidden: a server (or a proxy in front of it) that
// echoes the configured Authorization header in its error does not put
// the token into the step's error or result (the MAS's state, read by
// every client) nor into the trail.
func TestEchoedHeaderHidden(t *testing.T) {
	const token = "ghp_headerSecret0123456789"
	ts := rigServer(t, func(srv *mcp.Server) {
		mcp.AddTool(srv, &mcp.Tool{Name: "whoami", Description: "Says who you are.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(_ context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, any, error) {
				auth := ""
				if req.Extra != nil {
					auth = req.Extra.Header.Get("Authorization")
				}
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
					Text: "upstream refused the credentials " + auth + " (token " + strings.TrimPrefix(auth, "Bearer ") + "): bad credentials"}}}, nil, nil
			})
	}, nil)
	pool := NewPool(&Config{Servers: map[string]ServerConfig{"srv": {URL: ts.URL + "/mcp", Timeout: Duration(time.Minute),
		Headers: map[string]string{"Authorization": "Bearer " + token}}}}, nil)
	t.Cleanup(func() { _ = pool.Close() })
	trail := &rigTrail{}
	e, err := NewExecutor(ExecutorConfig{Pool: pool, Texts: rigTexts{}, Trail: trail})
	if err != nil {
		t.Fatal(err)
	}
	out := e.Execute(context.Background(), rigInput("srv", &engine.ToolCall{ToolName: "whoami", Arguments: map[string]any{}}))
	if out.Err == nil {
		t.Fatal("the call succeeded; want the tool's error")
	}
	if !strings.Contains(out.Err.Error(), "bad credentials") {
		t.Fatalf("the header did not reach the tool: %v", out.Err)
	}
	if strings.Contains(out.Err.Error(), token) {
		t.Errorf("the step's error shows the server's Authorization header: %v", out.Err)
	}
	if b, _ := json.Marshal(out.Result); bytes.Contains(b, []byte(token)) {
		t.Errorf("the step's result shows the server's Authorization header: %s", b)
	}
	if b, _ := json.Marshal(trail.entries); bytes.Contains(b, []byte(token)) || !bytes.Contains(b, []byte("bad credentials")) {
		t.Errorf("the trail shows the server's Authorization header (or not the call): %s", b)
	}
}

// rigTrail keeps the trail's entries.
type rigTrail struct{ entries []engine.TrailEntry }

func (r *rigTrail) Append(_ context.Context, e engine.TrailEntry) { r.entries = append(r.entries, e) }

// TestStderrEnvSecretHidden: a stdio server's stderr is logged line by
// line, without the env values mas-mcp gave the server (a failed login, a
// debug line naming the token).
func TestStderrEnvSecretHidden(t *testing.T) {
	const secret = "ghp_envSecret0123456789"
	log := &rigLog{}
	pool := NewPool(&Config{Servers: map[string]ServerConfig{"srv": {
		Command: "/bin/sh", Args: []string{"-c", `echo "login failed for token $TEST_TOKEN" >&2; exit 1`},
		Env: map[string]string{"TEST_TOKEN": secret}, Timeout: Duration(time.Minute),
	}}}, log.logger())
	t.Cleanup(func() { _ = pool.Close() })
	_, err := pool.Describe(context.Background(), "srv")
	if err == nil {
		t.Fatal("Describe of a server that exits succeeded")
	}
	// The failed Connect waited for the process (go-sdk closes the
	// CommandTransport), and so for its stderr to be copied.
	if !strings.Contains(log.String(), "login failed for token [REDACTED]") {
		t.Fatalf("the server's stderr was not logged, scrubbed:\n%s", log.String())
	}
	if strings.Contains(log.String(), secret) || strings.Contains(err.Error(), secret) {
		t.Errorf("the server's env value reached mas-mcp's log:\n%s", log.String())
	}
}

// TestScrubber: what a server's scrubber hides, and what it leaves alone
// so that results stay readable.
func TestScrubber(t *testing.T) {
	basic := base64.StdEncoding.EncodeToString([]byte("alice:basic-password-1"))
	s := newScrubber(ServerConfig{
		URL: "https://user:url-password@h.example/mcp?key=query-secret-1&sid=%2Fabcdef0123456789&v=2024-01-01&x=%2Fa%2Fb%2Fc%2Fd%2Fe",
		Headers: map[string]string{"Authorization": "Bearer bearer-token-1", "Proxy-Authorization": "Basic " + basic,
			"Accept": "application/json", "X-Short": "abc"},
		Env:  map[string]string{"DEBUG": "1", "TOKEN": "env-token-1234", "ROOT": "/home/me/projects"},
		Args: []string{"--api-key", "args-key-1234", "--token=args-token-1234", "--verbose", "postgres://db:db-password@h/x"},
	})
	for _, secret := range []string{"url-password", "query-secret-1", "/abcdef0123456789", "%2Fabcdef0123456789", "bearer-token-1", basic, "basic-password-1",
		"env-token-1234", "args-key-1234", "args-token-1234", "db-password"} {
		if got := s.text("x " + secret + " y"); got != "x [REDACTED] y" {
			t.Errorf("text(%q) = %q, want it hidden", secret, got)
		}
	}
	for _, kept := range []string{"application/json", "abc", "1", "/home/me/projects", "--verbose", "user", "2024-01-01", "/a/b/c/d/e"} {
		if got := s.text("x " + kept + " y"); got != "x "+kept+" y" {
			t.Errorf("text(%q) = %q, want it kept (not a secret, or too short to hide)", kept, got)
		}
	}
	if got := s.text("Authorization: Bearer bearer-token-1"); got != "Authorization: [REDACTED]" {
		t.Errorf("the whole header value is hidden at once: %q", got)
	}
	base := errors.New("base")
	err := s.err(errors.Join(base, errors.New("said env-token-1234")))
	if strings.Contains(err.Error(), "env-token-1234") || !errors.Is(err, base) {
		t.Errorf("err() = %v (unwraps to base: %v); want it scrubbed and still base", err, errors.Is(err, base))
	}
	v := s.value(map[string]any{"a": []any{"env-token-1234", 1.0, map[string]any{"env-token-1234": true}}, "b": &mcp.TextContent{Text: "env-token-1234"}})
	if b, _ := json.Marshal(v); bytes.Contains(b, []byte("env-token-1234")) {
		t.Errorf("value() = %s; want every string scrubbed", b)
	}
	if newScrubber(ServerConfig{Command: "x", Env: map[string]string{"DEBUG": "1"}}) != nil {
		t.Error("a server without secrets has a scrubber; want none (nothing to do)")
	}
}

// TestDescribeHidesSecrets: the short form of a server in logs and errors
// hides the URL's credentials and query values and the values of secret
// flags among a stdio server's args.
func TestDescribeHidesSecrets(t *testing.T) {
	for _, tc := range []struct {
		sc   ServerConfig
		want string
	}{
		{ServerConfig{URL: "https://u:p@h.example/mcp?k=v", Transport: "sse"}, "sse https://[REDACTED]@h.example/mcp?k=[REDACTED]"},
		{ServerConfig{URL: "https://h.example/mcp"}, "https://h.example/mcp"},
		{ServerConfig{Command: "npx", Args: []string{"-y", "srv", "--api-key", "K", "--token=T", "/home/me", "https://u:p@h/x"}},
			"npx -y srv --api-key [REDACTED] --token=[REDACTED] /home/me https://[REDACTED]@h/x"},
	} {
		if got := tc.sc.describe(); got != tc.want {
			t.Errorf("describe() = %q, want %q", got, tc.want)
		}
	}
}

// TestRedactURLUnparsable: a URL the configuration check refuses is shown
// in its error without its user information and query.
func TestRedactURLUnparsable(t *testing.T) {
	for raw, want := range map[string]string{
		"http://h:port/":                "http://h:port/",
		"http://u:pw@h:port/a@b?k=v":    "http://[REDACTED]@h:port/a@b?[REDACTED]",
		"http://u:pw@h/x?k=v%zz":        "http://[REDACTED]@h/x?k=[REDACTED]",
		"https://u:p@h.example/mcp?k=v": "https://[REDACTED]@h.example/mcp?k=[REDACTED]",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}
