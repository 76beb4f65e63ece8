package server_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/server"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func addTaskArgs(name string) map[string]any {
	return map[string]any{"task_name": name, "task_intention": "Research a topic and write a report."}
}

// TestAddTaskQuotas: an operator's add_task is refused, with a tool error
// naming the limit, once it has too many tasks that have not ended, or
// added too many in the last minute; an ended task, or a minute, makes
// room again. Nothing is created by a refused call.
func TestAddTaskQuotas(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		e := newEnvWith(t, envOptions{Config: func(c *server.Config) { c.Limits.RunningTasksPerOperator = 2 }})
		var first server.AddTaskOut
		e.call("add_task", addTaskArgs("one"), &first)
		e.call("add_task", addTaskArgs("two"), nil)
		before := len(e.stack.Sys.Tasks())
		txt := e.callErr("add_task", addTaskArgs("three"))
		for _, w := range []string{"has 2 tasks that have not ended", "limits.running_tasks_per_operator", "cancel_task"} {
			if !strings.Contains(txt, w) {
				t.Errorf("error %q does not mention %q", txt, w)
			}
		}
		// The tasks added before are being worked on: the refusal is
		// judged by the task list, not by a snapshot of the whole MAS.
		if n := len(e.stack.Sys.Tasks()); n != before {
			t.Errorf("a refused add_task changed the task count from %d to %d", before, n)
		}
		e.call("manage_task", map[string]any{"action": "cancel_task", "task_id": first.TaskID, "summary": "not needed"}, nil)
		e.call("add_task", addTaskArgs("three"), nil)
	})
	t.Run("per minute", func(t *testing.T) {
		clock := newFakeClock()
		e := newEnvWith(t, envOptions{Config: func(c *server.Config) {
			c.Limits.TasksPerMinute, c.Limits.Now = 2, clock.Now
		}})
		e.call("add_task", addTaskArgs("one"), nil)
		clock.advance(20 * time.Second)
		e.call("add_task", addTaskArgs("two"), nil)
		before := len(e.stack.Sys.Tasks())
		txt := e.callErr("add_task", addTaskArgs("three"))
		for _, w := range []string{"added 2 tasks in the last minute", "limits.tasks_per_minute", "try again in 40s"} {
			if !strings.Contains(txt, w) {
				t.Errorf("error %q does not mention %q", txt, w)
			}
		}
		// The tasks added before are being worked on: the refusal is
		// judged by the task list, not by a snapshot of the whole MAS.
		if n := len(e.stack.Sys.Tasks()); n != before {
			t.Errorf("a refused add_task changed the task count from %d to %d", before, n)
		}
		clock.advance(40 * time.Second) // the first addition is a minute old
		e.call("add_task", addTaskArgs("three"), nil)
	})
}

// TestMonitorSessionsExpire: a bound monitor session ends after its TTL
// (the cookie says so too); an operator's sessions beyond the cap end
// oldest first; expired sessions are dropped from the table.
func TestMonitorSessionsExpire(t *testing.T) {
	clock := newFakeClock()
	var ann, bea string
	tok := tokenOperators(t, &ann, &bea)
	m := newMonitorEnv(t, envOptions{Config: func(c *server.Config) {
		tok.Config(c)
		c.Limits.MonitorSessionTTL, c.Limits.MonitorSessionsPerOperator, c.Limits.Now = time.Hour, 2, clock.Now
	}})
	bind := func() *apiClient {
		c := m.client()
		r := c.json(http.MethodPost, "/api/bind_human_agent", map[string]any{"token": tokenAnn}, http.StatusOK, nil)
		if ck := r.header.Get("Set-Cookie"); !strings.Contains(ck, "Max-Age=3600") {
			t.Errorf("session cookie %q: want Max-Age=3600", ck)
		}
		c.json(http.MethodGet, "/api/whoami", nil, http.StatusOK, nil)
		return c
	}
	first := bind()
	clock.advance(time.Minute)
	second := bind()
	clock.advance(time.Minute)
	bind() // the third of ann's: the first ends
	first.fails(http.MethodGet, "/api/whoami", nil, http.StatusUnauthorized, "bind an operator first")
	second.json(http.MethodGet, "/api/whoami", nil, http.StatusOK, nil)

	clock.advance(time.Hour)
	second.fails(http.MethodGet, "/api/whoami", nil, http.StatusUnauthorized, "bind an operator first")
	bind() // drops the expired ones
	if _, _, _, n, _ := m.srv.Held(); n != 1 {
		t.Errorf("monitor sessions held: %d, want 1 (the expired ones dropped)", n)
	}
}

// TestPasswordAttemptsThrottled: after the free failures, every
// bind_human_agent attempt of the operator ID or the address waits a
// doubling backoff, refused 429 with Retry-After without the password being
// checked; a success clears the failures.
func TestPasswordAttemptsThrottled(t *testing.T) {
	clock := newFakeClock()
	var ann, bea string
	tok := tokenOperators(t, &ann, &bea)
	m := newMonitorEnv(t, envOptions{Config: func(c *server.Config) {
		tok.Config(c)
		c.Limits.PasswordFailures, c.Limits.PasswordBackoff, c.Limits.PasswordBackoffMax = 2, time.Second, time.Minute
		c.Limits.Now = clock.Now
		if err := c.System.SetOperatorPassword(ann, "right-password"); err != nil {
			t.Fatal(err)
		}
	}})
	c := m.client()
	try := func(pw string) apiResponse {
		return c.do(http.MethodPost, "/api/bind_human_agent", map[string]any{"human_agent_id": ann, "password": pw})
	}
	want := func(what string, r apiResponse, status int, retryAfter string) {
		t.Helper()
		if r.status != status || r.header.Get("Retry-After") != retryAfter {
			t.Fatalf("%s: status %d, Retry-After %q; want %d, %q; body %s", what, r.status, r.header.Get("Retry-After"), status, retryAfter, r.body)
		}
	}
	want("first failure", try("guess1"), http.StatusUnauthorized, "")
	want("second failure", try("guess2"), http.StatusUnauthorized, "")
	want("too early, even with the right password", try("right-password"), http.StatusTooManyRequests, "1")
	clock.advance(time.Second)
	want("third failure", try("guess3"), http.StatusUnauthorized, "")
	want("too early again: the backoff doubled", try("guess4"), http.StatusTooManyRequests, "2")
	// The address is throttled too: another operator ID from it waits.
	r := c.do(http.MethodPost, "/api/bind_human_agent", map[string]any{"human_agent_id": bea, "password": "x"})
	want("another operator from the same address", r, http.StatusTooManyRequests, "2")
	clock.advance(2 * time.Second)
	want("the right password after the backoff", try("right-password"), http.StatusOK, "")
	want("a failure after a success is free again", try("guess5"), http.StatusUnauthorized, "")
	clock.advance(time.Minute) // quiet for the longest backoff: forgotten
	want("after a quiet minute", try("right-password"), http.StatusOK, "")
	if _, _, _, _, n := m.srv.Held(); n != 0 {
		t.Errorf("throttle entries held after successes: %d, want 0", n)
	}
}
