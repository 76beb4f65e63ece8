package engine

import (
	"slices"
	"sync"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// A downstream MCP server's outage as agents meet it (beyond the spec).
// A tool call that could not reach its server (nothing listens, a gateway
// answers 502/503/504, a stdio server's process cannot start) is waited
// out inside the call by the tool executor, within the server's outage
// window, and told to the step's ExecInput.ServerOutage. Meanwhile the
// step keeps running and consumes no budget, the agent shows
// working_state "waiting" with waiting_on "tool_outage" and a waiting_for
// naming the server, and the operator of each affected task is told once
// per server when its calls begin waiting, and once when the server is
// reached again (any tool step of it succeeding) — or, when none of that
// operator's calls waits any more because their windows passed, that they
// gave up. These are not the LLM endpoint's notices (endpoint.go), and
// nothing is held or paused: a tool step whose call gave up fails with
// the executor's reason, as any failed call (its call is not made twice;
// the agent's model sees the failure and decides). A call that leaves
// (its step's context ended: an interrupt, a cancel, its task's end, a
// stop) tells nobody anything. Like the waits themselves, this lives in
// this process only: a restart ends the calls, and the operators told of
// an outage are not told when it ends.

// ToolOutage is AgentState.WaitingOn while the agent's running tool step
// waits out an outage of its MCP server.
const ToolOutage = "tool_outage"

// stepServerOutage is a running tool step's ExecInput.ServerOutage.
type stepServerOutage struct {
	a    *agent
	step *StepState
}

// OutageBegan shows the agent waiting for the server and tells the
// operator once.
func (o *stepServerOutage) OutageBegan(since time.Time, reason string) {
	a, s, server := o.a, o.a.sys, o.step.Executor
	a.showWaiting(o.step, ToolOutage, s.text("tool_waiting", map[string]any{
		"Server": server, "Since": since.Format(time.DateTime), "Reason": Truncate(reason, 300),
	}))
	s.servers.began(s, server, o.step.TaskID, since, reason)
}

// OutageEnded shows the agent working again.
func (o *stepServerOutage) OutageEnded(end llm.OutageEnd) {
	o.a.waitingOver(o.step, ToolOutage)
	o.a.sys.servers.ended(o.a.sys, o.step.Executor, o.step.TaskID, end)
}

// serverOutages tracks, per server, the calls waiting out its outage and
// the operators told of it. Its mutex is held while the notices are
// told, so that they go out in the order of the changes they report.
type serverOutages struct {
	mu sync.Mutex
	of map[string]*serverOutage
}

// serverOutage is one server's outage.
type serverOutage struct {
	since time.Time
	// waitingOf counts the waiting calls by the operator of their task:
	// a give-up is told to an operator once none of its calls waits.
	waitingOf map[string]int
	told      []string // operators told that it is down, in order
}

// began records one more call waiting for server; the operator of its
// task is told once per outage.
func (t *serverOutages) began(s *System, server, taskID string, since time.Time, reason string) {
	op := s.operatorOf(taskID)
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.of[server]
	if o == nil {
		if t.of == nil {
			t.of = map[string]*serverOutage{}
		}
		o = &serverOutage{since: since, waitingOf: map[string]int{}}
		t.of[server] = o
		s.log.Error("MCP server unreachable: its tool calls wait and retry", "server", server, "since", since, "reason", reason)
	}
	o.waitingOf[op]++
	if op == "" || slices.Contains(o.told, op) {
		return
	}
	o.told = append(o.told, op)
	s.tellOperator(op, "tool_outage_began", map[string]any{
		"Server": server, "Since": o.since.Format(time.DateTime), "Reason": Truncate(reason, 300),
	})
}

// ended records that a call of taskID no longer waits for server, and
// how its wait ended: reached, everyone told of the outage is told it is
// over; gave up, the task's operator is told once none of its calls
// waits any more; left, nobody is told anything.
func (t *serverOutages) ended(s *System, server, taskID string, end llm.OutageEnd) {
	op := s.operatorOf(taskID)
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.of[server]
	if o == nil {
		return
	}
	if o.waitingOf[op]--; o.waitingOf[op] <= 0 {
		delete(o.waitingOf, op)
	}
	switch end {
	case llm.OutageRecovered:
		t.overLocked(s, server, o)
	case llm.OutageGaveUp:
		if i := slices.Index(o.told, op); i >= 0 && o.waitingOf[op] == 0 {
			o.told = slices.Delete(o.told, i, i+1)
			s.log.Warn("MCP server still unreachable: a tool call gave up waiting", "server", server, "since", o.since)
			s.tellOperator(op, "tool_outage_gave_up", map[string]any{
				"Server": server, "Since": o.since.Format(time.DateTime), "Duration": s.now().Sub(o.since).Round(time.Second).String(),
			})
		}
	}
	t.forgetLocked(server, o)
}

// answered is told that a tool call of server succeeded: the operators
// told it was down are told it is back (the calls that waited may have
// left meanwhile).
func (t *serverOutages) answered(s *System, server string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.of[server]; o != nil {
		t.overLocked(s, server, o)
		t.forgetLocked(server, o)
	}
}

// overLocked tells the operators told of server's outage, once, that it
// is reached again.
func (t *serverOutages) overLocked(s *System, server string, o *serverOutage) {
	told := o.told
	o.told = nil
	if len(told) == 0 {
		return
	}
	s.log.Info("MCP server reachable again", "server", server, "since", o.since)
	data := map[string]any{
		"Server": server, "Since": o.since.Format(time.DateTime), "Duration": s.now().Sub(o.since).Round(time.Second).String(),
	}
	for _, op := range told {
		s.tellOperator(op, "tool_outage_ended", data)
	}
}

// forgetLocked drops an outage no call waits out and nobody was told of.
func (t *serverOutages) forgetLocked(server string, o *serverOutage) {
	if len(o.waitingOf) == 0 && len(o.told) == 0 {
		delete(t.of, server)
	}
}
