package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestHTTPChallengeOnlyOn401: WWW-Authenticate goes with 401 answers only
// (RFC 9110 §11.6.1), on the MCP endpoints and the monitor API alike.
func TestHTTPChallengeOnlyOn401(t *testing.T) {
	tr := newTokenRig(t)
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"unknown token", "Bearer not-a-token-of-anyone-at-all", http.StatusUnauthorized},
		{"lower-case scheme", "bearer " + tr.tokA, http.StatusOK},
		{"right token", "Bearer " + tr.tokA, http.StatusOK},
	} {
		for _, path := range []string{"/mcp", "/sse"} {
			q := probe(path)
			if tc.auth != "" {
				q.header["Authorization"] = tc.auth
			}
			got := tr.send(q)
			ch := got.header.Get("WWW-Authenticate")
			if got.status != tc.want || (ch != "") != (tc.want == http.StatusUnauthorized) {
				t.Errorf("%s, %s: status %d, WWW-Authenticate %q; want %d with a challenge only if 401", path, tc.name, got.status, ch, tc.want)
			}
		}
	}

	var ann, bea string
	m := newMonitorEnv(t, tokenOperators(t, &ann, &bea))
	c := m.client()
	c.token = tokenAnn
	for _, path := range []string{"/api/whoami", "/api/inbox", "/api/states?type=task"} {
		if r := c.json("GET", path, nil, http.StatusOK, nil); r.header.Get("WWW-Authenticate") != "" {
			t.Errorf("GET %s with a token: 200 with WWW-Authenticate %q", path, r.header.Get("WWW-Authenticate"))
		}
	}
	anon := m.client()
	if r := anon.do("GET", "/api/whoami", nil); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("GET /api/whoami without a token: status %d, WWW-Authenticate %q; want 401 with a challenge", r.status, r.header.Get("WWW-Authenticate"))
	}
}

// TestHTTPNoFraming: no other site may frame the monitor page or the API
// (CSP frame-ancestors for current browsers, X-Frame-Options for older ones).
func TestHTTPNoFraming(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	c := m.client()
	for _, ep := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/", nil}, {"GET", "/app.js", nil}, {"GET", "/style.css", nil},
		{"GET", "/api/whoami", nil}, {"GET", "/api/states?type=task", nil}, {"GET", "/api/no-such-endpoint", nil},
		{"POST", "/api/send_message", map[string]any{}},
	} {
		r := c.do(ep.method, ep.path, ep.body)
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s %s (%d): Content-Security-Policy %q, want frame-ancestors 'none'", ep.method, ep.path, r.status, csp)
		}
		if xfo := r.header.Get("X-Frame-Options"); xfo != "DENY" {
			t.Errorf("%s %s (%d): X-Frame-Options %q, want DENY", ep.method, ep.path, r.status, xfo)
		}
	}
}

// TestMonitorAPIStrictBodies: the JSON API's POSTs take application/json
// only (415), one JSON object and nothing after it (400), and name every
// required field that is missing (400, not 404). Nothing changes in the
// MAS on a refused call.
func TestMonitorAPIStrictBodies(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	c := m.client()
	sys := m.stack.Sys
	ok := `{"task_id": "` + sys.BaseTaskID() + `", "receiver": ["` + sys.ManagerID() + `"], "content": "hi"}`
	before := masSnapshot(sys)
	for _, tc := range []struct {
		name        string
		path        string
		contentType string // "-": none
		body        string
		status      int
		words       []string
	}{
		{"empty object", "/api/send_message", "", `{}`, http.StatusBadRequest, []string{"task_id: is required", "receiver: is required", "content: is empty"}},
		{"content only", "/api/send_message", "", `{"content": "hi"}`, http.StatusBadRequest, []string{"task_id", "receiver"}},
		{"trailing garbage", "/api/send_message", "", ok + ` garbage`, http.StatusBadRequest, []string{"body", "after the JSON object"}},
		{"two objects", "/api/send_message", "", ok + ok, http.StatusBadRequest, []string{"body", "after the JSON object"}},
		{"trailing garbage on bind", "/api/bind_human_agent", "", `{} x`, http.StatusBadRequest, []string{"after the JSON object"}},
		{"text/plain", "/api/send_message", "text/plain", ok, http.StatusUnsupportedMediaType, []string{"Content-Type", "application/json"}},
		{"form", "/api/bind_human_agent", "application/x-www-form-urlencoded", `{}`, http.StatusUnsupportedMediaType, []string{"Content-Type"}},
		{"no Content-Type", "/api/send_message", "-", ok, http.StatusUnsupportedMediaType, []string{"Content-Type"}},
		{"another charset", "/api/send_message", "application/json; charset=latin1", ok, http.StatusUnsupportedMediaType, []string{"Content-Type"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.header = http.Header{}
			switch tc.contentType {
			case "":
			case "-":
				c.header["Content-Type"] = nil
			default:
				c.header.Set("Content-Type", tc.contentType)
			}
			c.fails("POST", tc.path, tc.body, tc.status, tc.words...)
		})
	}
	m.unchanged("refused API calls", before)

	// White space after the object, and a charset parameter, are fine.
	c.header = http.Header{"Content-Type": {"application/json; charset=UTF-8"}}
	c.json("POST", "/api/send_message", ok+"\n \r\n", http.StatusOK, nil)
}
