package server_test

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
)

// TestMonitorAPIAuth: on a server with tokens, every endpoint but the bind
// needs an operator (401 without); each operator sees its own inbox,
// conversations and steps only, and cannot speak for another.
func TestMonitorAPIAuth(t *testing.T) {
	var ann, bea string
	m := newMonitorEnv(t, tokenOperators(t, &ann, &bea))
	sys := m.stack.Sys
	taskID, question := m.operatorTask(ann)

	anon := m.client()
	for _, ep := range []struct{ method, path string }{
		{"GET", "/api/states?type=task"}, {"GET", "/api/states?type=agent"}, {"GET", "/api/states?type=step"},
		{"GET", "/api/states?type=stage"}, {"GET", "/api/events"}, {"GET", "/api/inbox"}, {"GET", "/api/whoami"},
		{"POST", "/api/send_message"},
	} {
		var body any
		if ep.method == "POST" {
			body = map[string]any{"task_id": taskID, "receiver": []string{question.SenderID}, "content": "hi"}
		}
		r := anon.do(ep.method, ep.path, body)
		if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s without auth: status %d, WWW-Authenticate %q; want 401 with a Bearer challenge", ep.method, ep.path, r.status, r.header.Get("WWW-Authenticate"))
		}
	}
	bad := m.client()
	bad.token = "not-a-token-of-this-server"
	bad.fails("GET", "/api/whoami", nil, http.StatusUnauthorized)
	// A bad bearer token is refused even with a good session.
	bad.json("POST", "/api/bind_human_agent", map[string]any{"token": tokenAnn}, http.StatusOK, nil)
	bad.fails("GET", "/api/inbox", nil, http.StatusUnauthorized)

	annC := m.client()
	annC.token = tokenAnn
	beaC := m.client() // bea binds a session, as the page does
	beaC.json("POST", "/api/bind_human_agent", map[string]any{"token": tokenBea}, http.StatusOK, nil)

	// Inboxes.
	var annInbox, beaInbox server.InboxDocument
	annC.json("GET", "/api/inbox", nil, http.StatusOK, &annInbox)
	beaC.json("GET", "/api/inbox", nil, http.StatusOK, &beaInbox)
	if annInbox.OperatorID != ann || len(annInbox.Messages) != 1 || annInbox.Messages[0].MessageID != question.MessageID {
		t.Errorf("ann's inbox = %+v, want alice's question", annInbox)
	}
	if beaInbox.OperatorID != bea || len(beaInbox.Messages) != 0 {
		t.Errorf("bea's inbox = %+v, want bea's own, empty", beaInbox)
	}

	// Ann answers (one step of hers); bea can neither speak for ann nor
	// write in ann's task.
	beaC.fails("POST", "/api/send_message", map[string]any{"human_agent_id": ann, "task_id": taskID, "receiver": []string{question.SenderID}, "content": "hi"},
		http.StatusForbidden, "human_agent_id", ann)
	beaC.fails("POST", "/api/send_message", map[string]any{"task_id": taskID, "receiver": []string{question.SenderID}, "content": "hi"},
		http.StatusForbidden, "task_id", "only its owner, operators it is shared with and admins may manage it")
	var sent sendAnswer
	annC.json("POST", "/api/send_message", map[string]any{"human_agent_id": ann, "task_id": taskID, "receiver": []string{question.SenderID}, "content": "Markdown."}, http.StatusOK, &sent)

	// States: another operator's conversation pool and steps are hidden.
	annSteps := func() []string {
		a, _ := sys.Agent(ann)
		var ids []string
		for _, st := range a.AgentStep.StepList {
			ids = append(ids, st.StepID)
		}
		return ids
	}()
	if len(annSteps) == 0 {
		t.Fatal("ann's answer left no step of hers")
	}
	for _, tc := range []struct {
		name   string
		c      *apiClient
		me     string
		others []string
	}{
		{"ann", annC, ann, []string{bea, sys.OperatorID()}},
		{"bea", beaC, bea, []string{ann, sys.OperatorID()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var agents map[string]engine.AgentState
			tc.c.json("GET", "/api/states?type=agent", nil, http.StatusOK, &agents)
			if agents[tc.me].ConversationPool == nil {
				t.Errorf("%s's own agent state lacks its conversation pool", tc.name)
			}
			for _, o := range tc.others {
				if a := agents[o]; a.ConversationPool != nil || len(a.AgentStep.StepList) != 0 {
					t.Errorf("%s sees operator %s's conversation pool (%v) or steps (%d)", tc.name, a.Name, a.ConversationPool != nil, len(a.AgentStep.StepList))
				}
			}
			var steps map[string]engine.StepState
			tc.c.json("GET", "/api/states?type=step", nil, http.StatusOK, &steps)
			for _, id := range annSteps {
				if _, ok := steps[id]; ok != (tc.me == ann) {
					t.Errorf("%s sees ann's step %s: %v", tc.name, id, ok)
				}
			}
			for _, st := range steps {
				if a, _ := sys.AgentBrief(st.AgentID); a.Kind == engine.KindHuman && st.AgentID != tc.me {
					t.Errorf("%s sees step %s of operator %s", tc.name, st.StepID, a.Name)
				}
			}
			var me whoami
			tc.c.json("GET", "/api/whoami", nil, http.StatusOK, &me)
			if me.HumanAgentID != tc.me {
				t.Errorf("whoami = %s, want %s", me.HumanAgentID, tc.me)
			}
		})
	}
	// Events need an operator too, and then flow.
	s := annC.events()
	if ev := s.next(t, 5*time.Second); ev.Event != "hello" {
		t.Errorf("first event %+v, want hello", ev)
	}
}

// TestMonitorAPIPerimeter: the API and the page answer only their own
// origin and the allowed hosts (a page elsewhere, or DNS rebinding, gets 403).
func TestMonitorAPIPerimeter(t *testing.T) {
	m := newMonitorEnv(t, envOptions{})
	c := m.client()
	endpoints := []struct{ method, path string }{
		{"GET", "/api/states?type=task"}, {"GET", "/api/events"}, {"GET", "/api/inbox"}, {"GET", "/api/whoami"},
		{"POST", "/api/send_message"}, {"POST", "/api/bind_human_agent"}, {"GET", "/"}, {"GET", "/app.js"},
	}
	c.header.Set("Origin", "http://evil.example")
	for _, ep := range endpoints {
		if r := c.do(ep.method, ep.path, `{}`); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "origin") {
			t.Errorf("%s %s from a foreign origin: %d %s, want 403 naming the origin", ep.method, ep.path, r.status, r.body)
		}
	}
	// The page's own host and port, but https: another origin.
	c.header.Set("Origin", "https"+strings.TrimPrefix(m.ts.URL, "http"))
	for _, ep := range endpoints {
		if r := c.do(ep.method, ep.path, `{}`); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "origin") {
			t.Errorf("%s %s from the https origin of an http page: %d %s, want 403 naming the origin", ep.method, ep.path, r.status, r.body)
		}
	}
	c.header.Set("Origin", m.ts.URL) // the page's own origin
	c.json("GET", "/api/whoami", nil, http.StatusOK, nil)

	c.header = http.Header{}
	req, _ := http.NewRequest("GET", m.ts.URL+"/api/whoami", nil)
	req.Host = "attacker.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign Host: status %d, want 403", resp.StatusCode)
	}
}

// TestMonitorPage: / serves the page and every file of server/web with its
// content type, the CSP that forbids anything but the page's own origin,
// and nothing else.
func TestMonitorPage(t *testing.T) {
	var ann, bea string
	m := newMonitorEnv(t, tokenOperators(t, &ann, &bea))
	c := m.client() // no token: the page itself needs none

	want := map[string]string{".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
	files, err := filepath.Glob(filepath.Join("web", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in web/: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		disk, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		path := "/" + name
		if name == "index.html" {
			path = "/"
		}
		r := c.do("GET", path, nil)
		mt, params, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
		switch {
		case r.status != http.StatusOK:
			t.Errorf("GET %s: status %d", path, r.status)
		case mt != want[filepath.Ext(name)]:
			t.Errorf("GET %s: Content-Type %q, want %s", path, r.header.Get("Content-Type"), want[filepath.Ext(name)])
		case mt != "image/svg+xml" && params["charset"] != "utf-8":
			t.Errorf("GET %s: Content-Type %q, want charset=utf-8", path, r.header.Get("Content-Type"))
		case !bytes.Equal(r.body, disk):
			t.Errorf("GET %s: the body differs from web/%s", path, name)
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no X-Content-Type-Options: nosniff", path)
		}
	}
	// The page loads only its own files, as modules (no inline script, no CDN).
	page := string(c.do("GET", "/", nil).body)
	if !strings.Contains(page, `<script type="module" src="app.js">`) || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("index.html must load app.js as a module and nothing from elsewhere")
	}
	for _, js := range []string{"app.js", "board.js", "chat.js", "inbox.js", "store.js", "dom.js", "controls.js"} {
		src, err := os.ReadFile(filepath.Join("web", js))
		if err != nil {
			t.Fatal(err)
		}
		// Text from the server goes into text nodes only.
		if s := string(src); strings.Contains(s, "innerHTML") || strings.Contains(s, "insertAdjacentHTML") || strings.Contains(s, "document.write") {
			t.Errorf("web/%s writes HTML from strings: use textContent", js)
		}
	}
	if r := c.do("GET", "/no-such-file.js", nil); r.status != http.StatusNotFound {
		t.Errorf("GET a missing file: status %d, want 404", r.status)
	}
	if r := c.do("POST", "/", "x"); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /: status %d, want 405", r.status)
	}
	if !slices.Contains(files, filepath.Join("web", "index.html")) {
		t.Error("web/index.html is missing")
	}
}

// TestMonitorEventStreamEndsWithSession: an /api/events stream opened with
// a bound monitor session ends when the session does — it expired
// (limits.monitor_session_ttl) or a newer binding ended it
// (limits.monitor_sessions_per_operator) — and delivers nothing after
// that; a stream opened with the operator's bearer token goes on.
func TestMonitorEventStreamEndsWithSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(m *monitorEnv, clock *fakeClock)
	}{
		{"ended by a newer binding", func(m *monitorEnv, _ *fakeClock) {
			m.client().json(http.MethodPost, "/api/bind_human_agent", map[string]any{"token": tokenAnn}, http.StatusOK, nil)
		}},
		{"expired", func(_ *monitorEnv, clock *fakeClock) { clock.advance(2 * time.Hour) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			var ann, bea string
			tok := tokenOperators(t, &ann, &bea)
			m := newMonitorEnv(t, envOptions{Config: func(c *server.Config) {
				tok.Config(c)
				c.Limits.MonitorSessionTTL, c.Limits.MonitorSessionsPerOperator, c.Limits.Now = time.Hour, 1, clock.Now
			}})
			page := m.client()
			page.json(http.MethodPost, "/api/bind_human_agent", map[string]any{"token": tokenAnn}, http.StatusOK, nil)
			es := page.events()
			program := m.client()
			program.token = tokenAnn
			bs := program.events()
			for _, s := range []*eventStream{es, bs} {
				if ev := s.next(t, 10*time.Second); ev.Event != "hello" {
					t.Fatalf("first event %q, want hello", ev.Event)
				}
			}
			tc.end(m, clock)
			page.fails(http.MethodGet, "/api/whoami", nil, http.StatusUnauthorized, "bind an operator first")
			m.srv.AwaitUpdatesHandled(m.stack.Sys.EventSeq())
			after := m.srv.EventCursor(ann) // both streams are ann's: her numbering
			taskID, err := m.stack.Sys.AddTask(ann, engine.AddTaskRequest{TaskName: "secret-plan", TaskIntention: "Research a topic and write a report."})
			if err != nil {
				t.Fatal(err)
			}
			// The bearer token's stream delivers the task's event…
			for {
				ev := bs.next(t, 20*time.Second)
				var e engine.Event
				if json.Unmarshal([]byte(ev.Data), &e) == nil && e.Seq > after && e.TaskID == taskID {
					break
				}
			}
			// …the ended session's stream ends without it.
			for {
				select {
				case ev, ok := <-es.events:
					if !ok {
						return
					}
					var e engine.Event
					if json.Unmarshal([]byte(ev.Data), &e) == nil && e.Seq > after {
						t.Fatalf("the session has ended, but its /api/events stream delivered %s %s", ev.Event, ev.Data)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("the ended session's /api/events stream has not ended 20s after an event for it")
				}
			}
		})
	}
}

// TestMonitorSessionCookieSecureBehindTLSProxy: the monitor session cookie
// is Secure when the page is an https page, also behind a proxy that
// terminates TLS (the README's deployment: the https origin listed in
// http.allowed_origins) — the bind request's Origin is https://, or the
// proxy sends X-Forwarded-Proto: https — so that the browser never sends
// it over plain http. A plain http page's cookie is not Secure (the
// browser would drop it).
func TestMonitorSessionCookieSecureBehindTLSProxy(t *testing.T) {
	var ann, bea string
	tok := tokenOperators(t, &ann, &bea)
	m := newMonitorEnv(t, envOptions{Config: func(c *server.Config) {
		tok.Config(c)
		c.HTTP.AllowedOrigins = []string{"https://mas.example"}
	}})
	for _, tc := range []struct {
		name   string
		header []string
		secure bool
	}{
		{"https Origin", []string{"Origin", "https://mas.example"}, true},
		{"X-Forwarded-Proto https", []string{"X-Forwarded-Proto", "https"}, true},
		{"X-Forwarded-Proto https of a chain", []string{"X-Forwarded-Proto", "HTTPS, http"}, true},
		{"plain http", nil, false},
		{"X-Forwarded-Proto http", []string{"X-Forwarded-Proto", "http"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := m.client()
			for i := 0; i+1 < len(tc.header); i += 2 {
				c.header.Set(tc.header[i], tc.header[i+1])
			}
			r := c.json(http.MethodPost, "/api/bind_human_agent", map[string]any{"token": tokenAnn}, http.StatusOK, nil)
			ck := r.header.Get("Set-Cookie")
			if !strings.Contains(ck, "mas_session=") {
				t.Fatalf("no session cookie: %q", ck)
			}
			if got := strings.Contains(ck, "; Secure"); got != tc.secure {
				t.Errorf("session cookie %q: Secure %v, want %v", ck, got, tc.secure)
			}
		})
	}
}
