package server_test

import (
	"context"
	"errors"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// viewerRig is the scripted team served over HTTP to three operators: ann,
// who adds the tasks, bea, whom they are shared with, and carol, an admin.
type viewerRig struct {
	*extRig
	carol string
	// down makes the LLM endpoint unavailable (with outage set).
	down atomic.Bool
	// shared is closed once ann's task is shared with bea: with toShared,
	// alice's question for the operator waits for it and goes to bea.
	shared    chan struct{}
	closeOnce sync.Once
}

type viewerOptions struct {
	// toShared sends alice's question for the operator to bea, once the
	// task is shared with her (share).
	toShared bool
	// outage gives up on an unavailable endpoint (down) quickly.
	outage bool
}

func newViewerRig(t *testing.T, o viewerOptions) *viewerRig {
	t.Helper()
	r := &viewerRig{extRig: &extRig{}, shared: make(chan struct{})}
	r.env = newEnvWith(t, envOptions{
		Config: func(c *server.Config) {
			for name, id := range map[string]*string{"ann": &r.ann, "bea": &r.bea, "carol": &r.carol} {
				var err error
				if *id, err = c.System.AddOperator(name); err != nil {
					t.Fatal(err)
				}
			}
			c.HTTP.Tokens = map[string]string{tokenAnn: r.ann, tokenBea: r.bea, tokenCarol: r.carol}
			c.HTTP.Admins = []string{r.carol}
		},
		Stack: func(so *teststack.Options) {
			team := so.Handler
			so.Handler = func(c *fakellm.Call) fakellm.Reply {
				if r.down.Load() {
					return fakellm.Reply{Status: 503, Content: "overloaded"}
				}
				rep := team(c)
				if o.toShared && strings.Contains(rep.Content, scripted.OperatorQuestion) {
					<-r.shared
					rep.Content = strings.ReplaceAll(rep.Content, r.ann, r.bea)
				}
				return rep
			}
			if o.outage {
				so.OutageWindow = 50 * time.Millisecond
				so.ProbeInterval = time.Hour
				so.ProbeLLM = func(context.Context) error {
					if r.down.Load() {
						return errors.New("503 overloaded")
					}
					return nil
				}
			}
		},
	})
	// Registered after the stack's: runs before it closes, so that an
	// LLM call held for the share ends.
	t.Cleanup(r.markShared)
	ts := httptest.NewServer(r.srv.Handler())
	t.Cleanup(ts.Close)
	r.url = ts.URL + "/mcp"
	return r
}

func (r *viewerRig) markShared() { r.closeOnce.Do(func() { close(r.shared) }) }

// share shares ann's task with bea.
func (r *viewerRig) share(id string) {
	r.t.Helper()
	if _, err := r.stack.Sys.ShareTask(r.ann, id, r.bea); err != nil {
		r.t.Fatal(err)
	}
	r.markShared()
}

// sepClient connects a 2025-11-25 client with token that calls tasks/get
// and tasks/list.
func (r *viewerRig) sepClient(token string) *mcp.ClientSession {
	r.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "sep-1686", Version: "1"}, nil)
	if err := mcp.AddSendingCustomMethod[*sepTaskParams, *sepTask](c, "tasks/get"); err != nil {
		r.t.Fatal(err)
	}
	if err := mcp.AddSendingCustomMethod[*sepListParams, *sepList](c, "tasks/list"); err != nil {
		r.t.Fatal(err)
	}
	return r.httpClient(c, token)
}

type sepListParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

type sepList struct {
	mcp.ResultBase
	Tasks      []sepTask `json:"tasks"`
	NextCursor string    `json:"nextCursor"`
}

// viewer is one operator's side of the rig.
type viewer struct{ name, token, id string }

func (r *viewerRig) viewers() []viewer {
	return []viewer{{"ann (owner)", tokenAnn, r.ann}, {"bea (shared with)", tokenBea, r.bea}, {"carol (admin)", tokenCarol, r.carol}}
}

// sepView is the task as the 2025-11-25 tasks/get and tasks/list give it
// to v.
func (r *viewerRig) sepView(v viewer, id string) (got, listed sepTask) {
	r.t.Helper()
	cs := r.sepClient(v.token)
	g, err := mcp.CallCustomMethod[*sepTaskParams, *sepTask](context.Background(), cs, "tasks/get", &sepTaskParams{TaskID: id})
	if err != nil {
		r.t.Fatalf("%s: tasks/get: %v", v.name, err)
	}
	l, err := mcp.CallCustomMethod[*sepListParams, *sepList](context.Background(), cs, "tasks/list", &sepListParams{})
	if err != nil {
		r.t.Fatalf("%s: tasks/list: %v", v.name, err)
	}
	i := slices.IndexFunc(l.Tasks, func(t sepTask) bool { return t.TaskID == id })
	if i < 0 {
		r.t.Fatalf("%s: tasks/list %+v: the task is not in it", v.name, l.Tasks)
	}
	return *g, l.Tasks[i]
}

// TestTaskStatusIsTheViewers: an MCP task's status (tasks/get and
// tasks/list of 2025-11-25, tasks/get of 2026-07-28 with its
// inputRequests) is computed for the operator who asks. It is
// input_required only for the operator an agent's question waits on —
// the owner, or an operator the task is shared with — and working for the
// others, the admin included, with nothing in it about a question they
// may not see (a message to an operator is seen only by that operator).
func TestTaskStatusIsTheViewers(t *testing.T) {
	for _, c := range []struct {
		name     string
		toShared bool
	}{{"the owner's question", false}, {"a shared operator's question", true}} {
		t.Run(c.name, func(t *testing.T) {
			r := newViewerRig(t, viewerOptions{toShared: c.toShared})
			id, err := r.stack.Sys.AddTask(r.ann, engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report."})
			if err != nil {
				t.Fatal(err)
			}
			asked := r.ann
			if c.toShared {
				r.share(id)
				asked = r.bea
			}
			q := r.openQuestion(asked, id)
			if !c.toShared {
				r.share(id)
			}

			for _, v := range r.viewers() {
				want := "working"
				if v.id == asked {
					want = "input_required"
				}
				got, listed := r.sepView(v, id)
				for what, mt := range map[string]sepTask{"tasks/get": got, "tasks/list": listed} {
					if mt.Status != want {
						t.Errorf("%s: 2025-11-25 %s: status %s (%q), want %s", v.name, what, mt.Status, mt.StatusMessage, want)
					}
					if want == "working" && strings.Contains(mt.StatusMessage, "answer") {
						t.Errorf("%s: 2025-11-25 %s: status message %q speaks of a question it may not see", v.name, what, mt.StatusMessage)
					}
				}

				ext, err := call(t, r.client(v.token, true, nil), "tasks/get", &extTaskParams{TaskID: id})
				switch {
				case err != nil:
					t.Errorf("%s: 2026-07-28 tasks/get: %v", v.name, err)
				case ext.Status != want:
					t.Errorf("%s: 2026-07-28 tasks/get: status %s (%q), want %s", v.name, ext.Status, ext.StatusMessage, want)
				case want == "input_required" && (len(ext.InputRequests) != 1 || ext.InputRequests[q.MessageID] == nil):
					t.Errorf("%s: 2026-07-28 tasks/get: inputRequests %s, want the question %s", v.name, slices.Collect(maps.Keys(ext.InputRequests)), q.MessageID)
				case want == "working" && (len(ext.InputRequests) != 0 || strings.Contains(ext.StatusMessage, "answer")):
					t.Errorf("%s: 2026-07-28 tasks/get: %d inputRequests, status message %q: want nothing of a question it may not see", v.name, len(ext.InputRequests), ext.StatusMessage)
				}
			}
		})
	}
}

// TestPausedTaskStatusSaysWhy: a paused task's status message says who
// or what paused it — an operator (pause_task), its budget (with the
// budget's reason), or an LLM outage (it resumes by itself once the
// endpoint answers) — over both protocols.
func TestPausedTaskStatusSaysWhy(t *testing.T) {
	r := newViewerRig(t, viewerOptions{outage: true})
	sys := r.stack.Sys
	add := func(budget *engine.BudgetLimits) string {
		t.Helper()
		id, err := sys.AddTask(r.ann, engine.AddTaskRequest{TaskName: "report", TaskIntention: "Research a topic and write a report.", Budget: budget})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// Each task is paused before it is shared, so that no question of
	// its agents goes to bea, whose view is read: working, and why.
	byOperator := add(nil)
	if _, err := sys.TaskInstruction(r.ann, engine.TaskInstruction{Action: engine.ActionPauseTask, TaskID: byOperator}); err != nil {
		t.Fatal(err)
	}
	one := 1
	byBudget := add(&engine.BudgetLimits{Tokens: &one})
	r.stack.WaitFor("the task held for its budget", func() bool {
		st := r.stack.Task(byBudget)
		return st.Paused && st.Budget.Held != ""
	})
	r.down.Store(true)
	byOutage := add(nil)
	r.stack.WaitFor("the task paused for the outage", func() bool {
		st := r.stack.Task(byOutage)
		return st.Paused && st.PausedFor == "llm_outage"
	})
	held := r.stack.Task(byBudget).Budget.Held

	bea := r.viewers()[1]
	for _, c := range []struct {
		name, id string
		want     []string
	}{
		{"paused by an operator", byOperator, []string{"paused by an operator", "resume_task"}},
		{"held by its budget", byBudget, []string{"budget", held}},
		{"paused for an LLM outage", byOutage, []string{"LLM endpoint", "resumes by itself"}},
	} {
		r.share(c.id)
		got, listed := r.sepView(bea, c.id)
		ext, err := call(t, r.client(bea.token, true, nil), "tasks/get", &extTaskParams{TaskID: c.id})
		if err != nil {
			t.Fatalf("%s: 2026-07-28 tasks/get: %v", c.name, err)
		}
		for what, v := range map[string][2]string{
			"2025-11-25 tasks/get": {got.Status, got.StatusMessage}, "2025-11-25 tasks/list": {listed.Status, listed.StatusMessage},
			"2026-07-28 tasks/get": {ext.Status, ext.StatusMessage},
		} {
			status, msg := v[0], v[1]
			if status != "working" {
				t.Errorf("%s: %s: status %s, want working", c.name, what, status)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s: %s: status message %q, want it to say %q", c.name, what, msg, w)
				}
			}
			if c.id != byOperator && strings.Contains(msg, "operator") {
				t.Errorf("%s: %s: status message %q blames an operator", c.name, what, msg)
			}
		}
	}
}
