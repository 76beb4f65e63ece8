package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// A downstream MCP server that cannot be reached: the tool executor waits
// it out inside the step's call, telling the step's ServerOutage (as the
// downstream pool does); the engine shows the agent waiting and tells each
// operator once which server is down, and once when it is back or the
// calls gave up. These tests play the pool's part with a scripted tool
// executor.

// downServers is a scripted tool executor whose servers are down: a call
// (a tool step whose text is "call") begins waiting out its server's
// outage and ends as the test says: back (the server is reached, the call
// succeeds), gaveUp (its window passed, the step fails), or its context
// ending (it leaves). Any other tool step succeeds at once.
type downServers struct {
	mu     sync.Mutex
	back   map[string]chan struct{} // by server: closed when it answers again
	gaveUp map[string]chan struct{} // by server: closed when its window passes
}

func newDownServers(servers ...string) *downServers {
	d := &downServers{back: map[string]chan struct{}{}, gaveUp: map[string]chan struct{}{}}
	for _, s := range servers {
		d.back[s], d.gaveUp[s] = make(chan struct{}), make(chan struct{})
	}
	return d
}

func (d *downServers) execute(ctx context.Context, in *ExecInput) *Output {
	server := in.Step.Executor
	if in.Step.TextContent != "call" {
		return &Output{Result: map[string]any{"mcp_server_result": "ok"}}
	}
	o := in.ServerOutage
	if o == nil {
		return &Output{Err: errors.New("the tool step got no ServerOutage")}
	}
	o.OutageBegan(time.Now(), `mcp server "`+server+`" (http://127.0.0.1:9/mcp): connect: dial tcp 127.0.0.1:9: connect: connection refused`)
	d.mu.Lock()
	back, gaveUp := d.back[server], d.gaveUp[server]
	d.mu.Unlock()
	select {
	case <-back:
		o.OutageEnded(llm.OutageRecovered)
		return &Output{Result: map[string]any{"mcp_server_result": "ok"}}
	case <-gaveUp:
		o.OutageEnded(llm.OutageGaveUp)
		return &Output{Err: errors.New(`mcp server "` + server + `" could not be reached for 10m0s, its outage window`)}
	case <-ctx.Done():
		o.OutageEnded(llm.OutageLeft)
		return &Output{Err: ctx.Err()}
	}
}

// toolBed is a bubble's testbed whose tool steps reach the given servers
// through d.
func toolBed(t *testing.T, d *downServers, servers ...string) *testbed {
	catalog := toolCatalog{}
	for _, s := range servers {
		catalog[s] = "a server of the test"
	}
	return bubbleBed(t, func(c *Config) {
		c.Tools = catalog
		c.Tool = ExecutorFunc(d.execute)
	})
}

// toolAgent creates an agent that may use the servers.
func (b *testbed) toolAgent(name string, servers ...string) string {
	b.t.Helper()
	id, err := b.sys.CreateAgent(AgentConfig{Template: "researcher", Name: name, Tools: servers})
	if err != nil {
		b.t.Fatal(err)
	}
	return id
}

// toolStep queues a tool step of server on an agent, in the task.
func (b *testbed) toolStep(agentID, taskID, server, text string) string {
	return b.inject(agentID, taskID, NoRelative, false, StepSpec{StepIntention: "call " + server, Type: StepTool, Executor: server, TextContent: text})[0]
}

// inboxOf returns the notices an operator got that start with prefix.
func (b *testbed) inboxOf(op, prefix string) []string {
	b.t.Helper()
	in, err := b.sys.Inbox(op)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []string
	for _, e := range in {
		if strings.HasPrefix(e.Content, prefix) {
			out = append(out, e.Content)
		}
	}
	return out
}

// waitingForFiles has alice's tool step of a task wait for the server
// "files", which cannot be reached, until its operator has been told once
// that it is down. Inside a synctest bubble.
func waitingForFiles(t *testing.T) (d *downServers, b *testbed, alice, task, id string) {
	t.Helper()
	d = newDownServers("files")
	b = toolBed(t, d, "files")
	alice = b.toolAgent("alice", "files")
	task = b.newTask("t", alice)
	id = b.toolStep(alice, task, "files", "call")
	synctest.Wait()
	if got := b.inboxOf(b.op(), toolDown); len(got) != 1 {
		t.Fatalf("the operator's down notices: %q; want one\n%s", got, b.dump())
	}
	return d, b, alice, task, id
}

const (
	toolDown     = "[MCP server unavailable]"
	toolBack     = "[MCP server available]"
	toolGaveUp   = "[MCP server still unavailable]"
	llmAnyNotice = "[LLM endpoint"
)

// TestToolServerOutageShowsWaitingAndTellsOnce: three agents' tool steps
// wait for servers that cannot be reached: two for "files" (in tasks of two
// operators), one for "search". Each agent shows working_state "waiting"
// on "tool_outage", naming its server; each operator is told once per
// server that it is down — not that the LLM endpoint is — and once that it
// is back when its calls reach it again; the steps then finish.
func TestToolServerOutageShowsWaitingAndTellsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDownServers("files", "search")
		b := toolBed(t, d, "files", "search")
		op1, op2 := b.op(), b.operator("op2")
		alice, bob, carol := b.toolAgent("alice", "files", "search"), b.toolAgent("bob", "files"), b.toolAgent("carol", "files")
		task1 := b.newTask("one", alice, carol)
		task2, err := b.sys.AddTask(op2, AddTaskRequest{TaskName: "two", TaskIntention: "intention of two"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.sys.AgentInstruction(op2, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: task2, Agents: StringList{bob}}); err != nil {
			t.Fatal(err)
		}
		steps := map[string]string{
			alice: b.toolStep(alice, task1, "files", "call"),
			carol: b.toolStep(carol, task1, "files", "call"),
			bob:   b.toolStep(bob, task2, "files", "call"),
		}
		synctest.Wait()
		for who, id := range steps {
			a := b.agent(who)
			if a.WorkingState != WorkingWaiting || a.WaitingOn != ToolOutage || !strings.Contains(a.WaitingFor, `"files"`) {
				t.Errorf("%s: working_state %q, waiting_on %q, waiting_for %q; want waiting on %q naming the server\n%s",
					a.Name, a.WorkingState, a.WaitingOn, a.WaitingFor, ToolOutage, b.dump())
			}
			if st, _ := b.step(who, id); st.ExecutionState != StateRunning {
				t.Errorf("%s's tool step is %s while its call waits; want running", a.Name, st.ExecutionState)
			}
		}
		for _, op := range []string{op1, op2} {
			if got := b.inboxOf(op, toolDown); len(got) != 1 || !strings.Contains(got[0], `"files"`) {
				t.Errorf("operator %s was told %d times that a server is down (%q); want once, naming files", op, len(got), got)
			}
			if got := b.inboxOf(op, llmAnyNotice); len(got) > 0 {
				t.Errorf("operator %s got an LLM endpoint notice about a tool server: %q", op, got)
			}
		}

		// Another server goes down too: told apart.
		b.toolStep(alice, task1, "search", "call")
		close(d.back["files"])
		synctest.Wait()
		if got := b.inboxOf(op1, toolDown); len(got) != 2 || !strings.Contains(got[0]+got[1], `"search"`) {
			t.Errorf("operator %s's down notices: %q; want one for files and one for search", op1, got)
		}
		for _, op := range []string{op1, op2} {
			if got := b.inboxOf(op, toolBack); len(got) != 1 || !strings.Contains(got[0], `"files"`) {
				t.Errorf("operator %s was told %d times that a server is back (%q); want once, naming files", op, len(got), got)
			}
		}
		for who, id := range steps {
			if st, _ := b.step(who, id); st.ExecutionState != StateFinished {
				t.Errorf("%s's tool step is %s after its server came back: %v", who, st.ExecutionState, st.ExecuteResult)
			}
		}
		for _, who := range []string{bob, carol} {
			if a := b.agent(who); a.WaitingFor != "" || a.WaitingOn != "" {
				t.Errorf("%s still shows waiting_for %q (%q) after its call was answered", a.Name, a.WaitingFor, a.WaitingOn)
			}
		}
		if a := b.agent(alice); a.WaitingOn != ToolOutage || !strings.Contains(a.WaitingFor, `"search"`) {
			t.Errorf("alice waits for search now; she shows waiting_on %q, waiting_for %q", a.WaitingOn, a.WaitingFor)
		}
		close(d.back["search"])
		synctest.Wait()
		if got := b.inboxOf(op1, toolBack); len(got) != 2 {
			t.Errorf("operator %s's back notices: %q; want one for files and one for search", op1, got)
		}
		if got := b.inboxOf(op2, toolBack); len(got) != 1 {
			t.Errorf("operator %s, whose calls never waited for search, got back notices %q; want only the one for files", op2, got)
		}
	})
}

// TestToolServerOutageGiveUp: the call's window passes with the server
// still unreachable. The step fails with the executor's reason (it is not
// put back, nor its task paused, as an LLM step's would be), the agent no
// longer shows waiting, and the operator is told the calls gave up —
// once, and not that the server is back.
func TestToolServerOutageGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, b, alice, task, id := waitingForFiles(t)
		close(d.gaveUp["files"])
		synctest.Wait()
		st, _ := b.step(alice, id)
		if e, _ := st.ExecuteResult["error"].(string); st.ExecutionState != StateFailed || !strings.Contains(e, "could not be reached") {
			t.Errorf("the step whose call gave up is %s, %v; want it failed with the reason", st.ExecutionState, st.ExecuteResult)
		}
		if got := b.inboxOf(b.op(), toolGaveUp); len(got) != 1 || !strings.Contains(got[0], `"files"`) {
			t.Errorf("the operator's give-up notices: %q; want one naming files", got)
		}
		if got := b.inboxOf(b.op(), toolBack); len(got) > 0 {
			t.Errorf("the operator was told the server is back: %q", got)
		}
		if ts := b.task(task); ts.Paused {
			t.Errorf("the task is paused for %q after a tool call gave up; a tool step is not held", ts.PausedFor)
		}
		if a := b.agent(alice); a.WaitingFor != "" || a.WaitingOn != "" {
			t.Errorf("alice still shows waiting_for %q (%q)", a.WaitingFor, a.WaitingOn)
		}
	})
}

// TestToolServerOutageLeftByCancel: the operator cancels a tool step whose
// call waits for its server. The wait ends with the step; nobody gave up
// on the server, so the operator is not told so, and the agent no longer
// shows waiting. Told the server was down, the operator is told when a
// later call of it succeeds.
func TestToolServerOutageLeftByCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, b, alice, task, id := waitingForFiles(t)
		if err := b.sys.CancelStep(b.op(), alice, id, "no time"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st, _ := b.step(alice, id); st.ExecutionState != StateFailed {
			t.Errorf("the cancelled step is %s", st.ExecutionState)
		}
		if got := b.inboxOf(b.op(), toolGaveUp); len(got) > 0 {
			t.Errorf("after a cancel the operator is told the calls gave up: %q", got)
		}
		if a := b.agent(alice); a.WaitingFor != "" || a.WaitingOn != "" {
			t.Errorf("alice still shows waiting_for %q (%q) after her call left", a.WaitingFor, a.WaitingOn)
		}
		b.toolStep(alice, task, "files", "answered at once")
		synctest.Wait()
		if got := b.inboxOf(b.op(), toolBack); len(got) != 1 {
			t.Errorf("a call of the server succeeded; the operator, told it was down, got back notices %q; want one\n%s", got, b.dump())
		}
	})
}
