package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// newOperatorsWrapped is newOperators (notifications folded for 1 ms) with
// the fake LLM's answers passed through wrap (the scripted team answers
// first).
func newOperatorsWrapped(t *testing.T, version string, wrap func(c *fakellm.Call, r fakellm.Reply) fakellm.Reply) *operators {
	t.Helper()
	o := &operators{}
	team := scripted.NewTeam()
	team.AskOperator = true
	handler := func(c *fakellm.Call) fakellm.Reply {
		r := team.Handle(c)
		if wrap != nil {
			r = wrap(c, r)
		}
		return r
	}
	st := teststack.New(t, teststack.Options{Handler: handler})
	cfg := server.Config{System: st.Sys, Logger: st.Log, Trail: st.Trail}
	tokenOperators(t, &o.ann, &o.bea).Config(&cfg)
	cfg.Coalesce = time.Millisecond
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	o.env = &env{t: t, stack: st, team: team, srv: srv}
	o.env.peer = o.env.connect("")
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	o.url = ts.URL
	o.annPeer = o.httpPeer(o.url, tokenAnn, version)
	o.beaPC = o.httpPeer(o.url, tokenBea, version)
	return o
}

// agentEvents lists the events of agent id among evs, but its addition
// (a new agent is everyone's).
func agentEvents(evs []engine.Event, id string) []string {
	var out []string
	for _, ev := range evs {
		if ev.AgentID == id && ev.Kind != engine.EventAgentAdded {
			out = append(out, fmt.Sprintf("%s (task %q, step %q, %s)", ev.Kind, ev.TaskID, ev.StepID, ev.Detail))
		}
	}
	return out
}

// aliceOnAnnsTask brings ann's task to its question to her, and subscribes
// bea to alice (watched) and to mas://tasks; cursor is wait_for_updates'
// cursor then.
func aliceOnAnnsTask(o *operators) (task string, q engine.InboxEntry, alice string, watched []string, cursor uint64) {
	task = annTaskAtRest(o)
	q = annQuestion(o)
	alice = o.stack.AgentByName("alice")
	watched = []string{"mas://agents", "mas://agents/" + alice, "mas://agents/" + alice + "/steps"}
	o.srv.AwaitUpdatesHandled(o.stack.Sys.EventSeq())
	bea := o.beaPC
	bea.subscribe(watched...)
	bea.subscribe("mas://tasks")
	var w0 server.WaitOut
	bea.call("wait_for_updates", map[string]any{"timeout_seconds": 1}, &w0)
	return task, q, alice, watched, w0.Cursor
}

// toldNothingOfAlice checks that bea, who sees none of alice's work, was
// neither notified of watched nor given alice's events by wait_for_updates
// since cursor. A change of bea's own comes first: it arrives after any
// notification alice's work sent her (one stream, in order).
func toldNothingOfAlice(t *testing.T, bea *peer, cursor uint64, alice string, watched []string) {
	t.Helper()
	bea.call("add_task", map[string]any{"task_name": "bea's", "task_intention": "Research a topic and write a report."}, nil)
	bea.waitUntil("bea's notification of mas://tasks", func() bool { return len(bea.noticesOf("mas://tasks")) > 0 })
	if n, got := bea.noticesBefore("mas://tasks", watched...); n > 0 {
		t.Errorf("bea got %d resources/updated of alice while she worked on ann's task only: %v", n, got)
	}
	var w server.WaitOut
	bea.call("wait_for_updates", map[string]any{"cursor": cursor, "agent_id": alice, "max_events": 100000, "timeout_seconds": 1}, &w)
	if leaked := agentEvents(w.Events, alice); len(leaked) > 0 {
		t.Errorf("bea's wait_for_updates shows %d event(s) of alice's work on ann's task:\n%s", len(leaked), strings.Join(leaked, "\n"))
	}
}

// TestMemoryUpdateHidesOtherOperatorsWork: alice works only on
// ann's task, and the step she finishes there writes her persistent memory.
// Bea, subscribed to alice and to mas://agents, must not be told of it (a
// change of an agent made by its work in a task goes only to the operators
// who see that task, docs/mcp.md), nor get its event from wait_for_updates.
func TestMemoryUpdateHidesOtherOperatorsWork(t *testing.T) {
	const note = "remember: ann prefers markdown"
	o := newOperatorsWrapped(t, "2025-11-25", func(c *fakellm.Call, r fakellm.Reply) fakellm.Reply {
		// Alice notes something in her persistent memory with every summary.
		if c.AgentName == "alice" && c.Skill == "summary" && r.Status == 0 {
			r.Content += "\n" + fakellm.Block("persistent_memory", fakellm.JSON([]map[string]string{{"add": note}}))
		}
		return r
	})
	sys := o.stack.Sys
	ann, bea := o.annPeer, o.beaPC
	task, q, alice, watched, cursor := aliceOnAnnsTask(o)

	// Ann answers: her team finishes her task; alice writes her memory.
	ann.call("send_message", map[string]any{"task_id": task, "receiver": []string{q.SenderID}, "content": "Markdown."}, nil)
	o.stack.WaitFor("ann's task finished, and rest", func() bool {
		return o.stack.Task(task).ExecutionState == engine.StateFinished && atRest(sys)
	})
	var st engine.AgentState
	o.stack.WaitFor("alice's memory written", func() bool {
		st, _ = sys.Agent(alice)
		for _, v := range st.PersistentMemory {
			if strings.Contains(v, note) {
				return true
			}
		}
		return false
	})

	toldNothingOfAlice(t, bea, cursor, alice, watched)
}

// TestCancelledStepUpdateHidesOtherOperatorsWork: alice's LLM call in ann's
// task is under way when ann cancels the task. The step's end (its usage
// added to alice) is alice's work in ann's task: bea, subscribed to alice,
// must not be told of it, nor get its event (with the step's ID) from
// wait_for_updates.
func TestCancelledStepUpdateHidesOtherOperatorsWork(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	o := newOperatorsWrapped(t, "2025-11-25", func(c *fakellm.Call, r fakellm.Reply) fakellm.Reply {
		// Alice's reading of ann's answer hangs until the call is given up.
		if c.AgentName == "alice" && c.Skill == "process_message" && strings.Contains(c.Prompt, "Markdown.") {
			once.Do(func() { close(started) })
			r.Delay = time.Hour
		}
		return r
	})
	sys := o.stack.Sys
	ann, bea := o.annPeer, o.beaPC
	task, q, alice, watched, cursor := aliceOnAnnsTask(o)

	ann.call("send_message", map[string]any{"task_id": task, "receiver": []string{q.SenderID}, "content": "Markdown."}, nil)
	<-started
	ann.call("manage_task", map[string]any{"action": "cancel_task", "task_id": task}, nil)
	o.stack.WaitFor("ann's task cancelled, and rest", func() bool {
		return o.stack.Task(task).ExecutionState != engine.StateRunning && atRest(sys)
	})

	toldNothingOfAlice(t, bea, cursor, alice, watched)
}

// TestCancelledTaskTellsItsStageReaders: ann follows the running stage of her
// task (mas://tasks/{id}/stages/{stage_id}). When she cancels the task, the
// stage ends (its execution_state turns failed): she must be told, as of
// any change of a resource she subscribed to.
func TestCancelledTaskTellsItsStageReaders(t *testing.T) {
	o := newOperatorsWith(t, "2025-11-25", func(c *server.Config) { c.Coalesce = time.Millisecond })
	sys := o.stack.Sys
	ann := o.annPeer
	task := annTaskAtRest(o)
	annQuestion(o)
	var running engine.StageState
	for _, st := range o.stack.Task(task).StageList {
		if st.ExecutionState == engine.StateRunning {
			running = st
		}
	}
	if running.StageID == "" {
		t.Fatalf("ann's task has no running stage:\n%s", o.stack.Dump())
	}
	stageURI := "mas://tasks/" + task + "/stages/" + running.StageID
	marker := "mas://agents/" + o.ann
	o.srv.AwaitUpdatesHandled(sys.EventSeq())
	ann.subscribe(stageURI, marker)

	ann.call("manage_task", map[string]any{"action": "cancel_task", "task_id": task, "summary": "not needed"}, nil)
	o.stack.WaitFor("ann's task cancelled, and rest", func() bool {
		return o.stack.Task(task).ExecutionState == engine.StateFailed && atRest(sys)
	})
	var after engine.StageState
	ann.read(stageURI, &after)
	if after.ExecutionState == engine.StateRunning {
		t.Fatalf("the stage still runs after the cancel: the probe is vacuous")
	}

	// A later change ann sees: her own note to the manager. Every
	// notification the cancel sent her came before it (one stream, in order).
	ann.call("send_message", map[string]any{"task_id": sys.BaseTaskID(), "receiver": []string{sys.ManagerID()}, "content": "ann marker", "need_reply": false}, nil)
	ann.waitUntil("ann's notification of her own agent", func() bool { return len(ann.noticesOf(marker)) > 0 })
	if n, _ := ann.noticesBefore(marker, stageURI); n == 0 {
		t.Errorf("ann, subscribed to %s, got no resources/updated when the stage ended with her task (%s → %s)", stageURI, running.ExecutionState, after.ExecutionState)
	}
}

// TestShareTellsTheNewViewer: bea, subscribed to mas://tasks,
// is told when ann shares her task with bea (bea's list gains it); before
// that, ann's changes of it told her nothing.
func TestShareTellsTheNewViewer(t *testing.T) {
	o := newOperatorsWith(t, "2025-11-25", func(c *server.Config) { c.Coalesce = time.Millisecond })
	sys := o.stack.Sys
	ann, bea := o.annPeer, o.beaPC
	task := annTaskAtRest(o)
	o.srv.AwaitUpdatesHandled(sys.EventSeq())
	bea.subscribe("mas://tasks")
	ann.call("manage_task", map[string]any{"action": "pause_task", "task_id": task}, nil)
	ann.call("manage_task", map[string]any{"action": "share", "task_id": task, "operator": o.bea}, nil)
	bea.waitUntil("bea's notification of mas://tasks after the share", func() bool { return len(bea.noticesOf("mas://tasks")) > 0 })
	var list []server.TaskBrief
	bea.read("mas://tasks", &list)
	if !slices.ContainsFunc(list, func(b server.TaskBrief) bool { return b.TaskID == task }) {
		t.Errorf("bea's mas://tasks after the share lacks ann's task")
	}
	// Once shared, the task's changes are hers: she is told of the next.
	n := len(bea.noticesOf("mas://tasks"))
	bea.subscribe("mas://tasks/" + task)
	ann.call("manage_task", map[string]any{"action": "resume_task", "task_id": task}, nil)
	bea.waitUntil("bea's notification of the shared task", func() bool {
		return len(bea.noticesOf("mas://tasks/"+task)) > 0 && len(bea.noticesOf("mas://tasks")) > n
	})
}

// TestWaitForUpdatesIgnoresOtherOperatorsWork: bea's wait_for_updates
// (cursor: now) does not return for ann's work on her own task: it returns
// at bea's own next change, with none of ann's events.
func TestWaitForUpdatesIgnoresOtherOperatorsWork(t *testing.T) {
	o := newOperators(t, "2025-11-25")
	sys := o.stack.Sys
	ann, bea := o.annPeer, o.beaPC
	task := annTaskAtRest(o)
	var w0 server.WaitOut
	bea.call("wait_for_updates", map[string]any{"timeout_seconds": 1}, &w0) // the cursor now

	// Bea waits from now on, while ann works.
	done := make(chan server.WaitOut, 1)
	go func() {
		res, err := bea.client.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_for_updates",
			Arguments: map[string]any{"cursor": w0.Cursor, "timeout_seconds": 120, "max_events": 100000}})
		var out server.WaitOut
		if err == nil && !res.IsError {
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &out)
		}
		done <- out
	}()
	o.srv.AwaitLongRequests(o.bea, 1)
	ann.call("manage_task", map[string]any{"action": "pause_task", "task_id": task}, nil)
	ann.call("manage_task", map[string]any{"action": "resume_task", "task_id": task}, nil)
	o.stack.WaitFor("rest", func() bool { return atRest(sys) })
	o.srv.AwaitUpdatesHandled(sys.EventSeq())
	select {
	case w := <-done:
		t.Fatalf("bea's wait_for_updates returned while only ann worked: %+v", w)
	default:
	}
	bea.call("add_task", map[string]any{"task_name": "bea's", "task_intention": "Research a topic and write a report."}, nil)
	w := <-done
	if w.TimedOut || len(w.Events) == 0 {
		t.Fatalf("bea's wait_for_updates: %+v, want her own task's events", w)
	}
	for _, ev := range w.Events {
		if ev.TaskID == task || ev.AgentID == o.ann {
			t.Errorf("bea's wait_for_updates returned ann's event %s (task %s, agent %s, %s)", ev.Kind, ev.TaskID, ev.AgentID, ev.Detail)
		}
	}
}
