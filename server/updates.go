package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// updates relays the MAS's change events to MCP clients: resources/updated
// for subscribed URIs (coalesced to one per Coalesce per URI and operator),
// resources/list_changed when tasks and agents appear, logging
// notifications of agents' steps, and the operators' event logs that
// wait_for_updates, show_task and /api/events read (eventlog.go).
// Its run loop is the only goroutine that touches the coalescing state, and
// the only one that sends resources/updated; it waits for no client (the
// outbox delivers what it sends, each session on its own).
type updates struct {
	s   *Server
	sub *engine.Subscription

	// coalescing (run goroutine only)
	last    map[target]time.Time // when each target was last notified
	pending map[target]bool      // targets changed since then
	timer   *time.Timer
	known   map[string]bool // tasks and agents with their own resources

	// only is the operator whose sessions the resources/updated being sent
	// is for (forOperator); nil when none is being sent.
	only atomic.Pointer[string]

	// logs is each operator's event log, which wait_for_updates, show_task
	// and /api/events read (eventlog.go).
	logs *eventLogs
}

func newUpdates(s *Server) *updates {
	u := &updates{
		s:       s,
		sub:     s.sys.Subscribe(4096),
		last:    map[target]time.Time{},
		pending: map[target]bool{},
		known:   map[string]bool{},
	}
	u.logs = newEventLogs(s.cfg.EventLog, s.sys.EventSeq())
	// Tasks and agents that exist already get their resources now.
	for _, t := range s.sys.Tasks() {
		u.addTask(t.TaskID)
	}
	for _, a := range s.sys.AgentBriefs() {
		u.addAgent(a.AgentID, a.Kind)
	}
	return u
}

func (u *updates) run() {
	defer u.sub.Close()
	u.timer = time.NewTimer(time.Hour)
	u.timer.Stop()
	for {
		select {
		case <-u.s.ctx.Done():
			u.timer.Stop()
			return
		case ev, ok := <-u.sub.C:
			if !ok {
				return
			}
			u.handle(ev)
		case <-u.timer.C:
			u.flush()
		}
	}
}

// handle gives a new task or agent its resources, logs an event for the
// operators who may see it and marks the resources it changed.
func (u *updates) handle(ev engine.Event) {
	// Each URI's update goes only to the operators who may see the event
	// (engine.System.EventVisible): the step of a task they do not see
	// changes nothing of an agent, of its steps or of mas://agents that
	// they read (filterAgent), and a private message of others changes
	// nothing of a task's conversation that they read (filterTask). Sent
	// anyway, the notification alone would tell them when others work,
	// and on what.
	var uris []string
	switch ev.Kind {
	case engine.EventTaskAdded:
		u.addTask(ev.TaskID)
		uris = append(uris, uriTasks, taskURI(ev.TaskID))
	case engine.EventTaskChanged:
		if ev.Detail == "shared" {
			u.shared(ev.TaskID, ev.AgentID)
		}
		uris = append(uris, uriTasks, taskURI(ev.TaskID))
	case engine.EventStageChanged:
		uris = append(uris, uriTasks, taskURI(ev.TaskID))
		if ev.StageID != "" && ev.StageID != engine.NoRelative {
			uris = append(uris, stageURI(ev.TaskID, ev.StageID))
		}
	case engine.EventMessageDelivered:
		uris = append(uris, taskURI(ev.TaskID), conversationURI(ev.TaskID))
	case engine.EventAgentAdded:
		u.addAgent(ev.AgentID, ev.Detail)
		uris = append(uris, uriAgents, agentURI(ev.AgentID))
	case engine.EventAgentChanged:
		uris = append(uris, uriAgents, agentURI(ev.AgentID), inboxURI(ev.AgentID))
	case engine.EventStepChanged:
		uris = append(uris, agentURI(ev.AgentID), stepsURI(ev.AgentID))
		if ev.Detail == engine.StateFinished || ev.Detail == engine.StateFailed {
			u.logStep(ev)
		}
	case engine.EventLLMCall:
		if ev.AgentID != "" {
			uris = append(uris, agentURI(ev.AgentID), stepsURI(ev.AgentID))
		}
		if ev.TaskID != "" {
			uris = append(uris, taskURI(ev.TaskID))
		}
	}
	visible := u.visibleTo(ev)
	// Logged once its resources are listed: a client that reads a new
	// task's resources when told of it finds them.
	u.logs.add(ev, u.sub.Dropped(), visible)
	var targets []target
	for _, uri := range uris {
		for _, op := range u.s.subs.operators(uri) {
			if visible(op) {
				targets = append(targets, target{uri: uri, op: op})
			}
		}
	}
	now := time.Now()
	if len(u.last) > lastKept {
		u.forget(now)
	}
	for _, t := range targets {
		if now.Sub(u.last[t]) >= u.s.cfg.Coalesce {
			u.send(t, now)
			continue
		}
		u.pending[t] = true
	}
	u.schedule(now)
}

// visibleTo returns whether an operator may see ev, asking the engine once
// per operator however many of its URIs the operator subscribed to.
func (u *updates) visibleTo(ev engine.Event) func(op string) bool {
	var seen map[string]bool
	return func(op string) bool {
		v, ok := seen[op]
		if !ok {
			v = u.s.sys.EventVisible(op, ev)
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[op] = v
		}
		return v
	}
}

// target is whom a resources/updated is for: the sessions of operator op
// subscribed to uri. Each is coalesced on its own, so that one operator's
// changes neither trigger nor delay another's notifications.
type target struct{ uri, op string }

// send notifies the target's subscribers (the SDK knows them; forOperator
// leaves out those of other operators).
func (u *updates) send(t target, now time.Time) {
	u.last[t] = now
	delete(u.pending, t)
	u.only.Store(&t.op)
	defer u.only.Store(nil)
	if err := u.s.mcp.ResourceUpdated(u.s.ctx, &mcp.ResourceUpdatedNotificationParams{URI: t.uri}); err != nil {
		u.s.log.Debug("resources/updated failed", "uri", t.uri, "err", err)
	}
}

// forOperator is a sending middleware that withholds a resources/updated
// sent for one operator's sessions (send, with only set) from the others,
// and hands it to the session's queue in the outbox (folded by URI) rather
// than waiting for the session to take it. go-sdk's Server.ResourceUpdated
// notifies every subscriber of the URI, in the caller's goroutine
// (notifySessions, notifySubscribedSessions): only the run loop calls it,
// so only holds for exactly that call.
func (u *updates) forOperator(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/resources/updated" {
			if only := u.only.Load(); only != nil {
				ss, _ := req.GetSession().(*mcp.ServerSession)
				if op, ok := u.s.subs.operator(ss); ss == nil || !ok || op != *only {
					return nil, nil
				}
				u.s.outbox.post(ss, *only, delivery{key: updatedKey(req), send: func(ctx context.Context) error {
					_, err := next(ctx, method, req)
					return err
				}})
				return nil, nil
			}
		}
		return next(ctx, method, req)
	}
}

// schedule arms the timer for the earliest pending target's window end.
func (u *updates) schedule(now time.Time) {
	var due time.Time
	for t := range u.pending {
		at := u.last[t].Add(u.s.cfg.Coalesce)
		if due.IsZero() || at.Before(due) {
			due = at
		}
	}
	if due.IsZero() {
		return
	}
	u.timer.Reset(max(due.Sub(now), 0))
}

// lastKept is how many targets' last notification times the updates keep
// before forgetting those whose window has passed (forget).
const lastKept = 4096

// forget drops the last notification times whose window has passed: such
// a target is notified at once whether or not its time is known, and the
// times would otherwise grow with every task and operator over the MAS's
// life.
func (u *updates) forget(now time.Time) {
	for t, at := range u.last {
		if !u.pending[t] && now.Sub(at) >= u.s.cfg.Coalesce {
			delete(u.last, t)
		}
	}
}

// flush sends the pending targets whose window has passed.
func (u *updates) flush() {
	now := time.Now()
	for t := range u.pending {
		if now.Sub(u.last[t]) >= u.s.cfg.Coalesce {
			u.send(t, now)
		}
	}
	u.schedule(now)
}

// addTask gives a task its own listed resources: list_changed follows, to
// the sessions of the operators who see the task (listViews).
func (u *updates) addTask(id string) {
	if id == "" || u.known[id] {
		return
	}
	u.known[id] = true
	u.s.lists.change(func() { u.addTaskResources(id) }, func(op string) bool { return u.s.sys.Visible(op, id) })
}

func (u *updates) addTaskResources(id string) {
	t, ok := u.s.sys.Task(id)
	name := id
	if ok {
		name = t.TaskName
	}
	u.s.mcp.AddResource(&mcp.Resource{URI: taskURI(id), Name: "task-" + id, Title: "Task: " + name, MIMEType: mimeJSON,
		Description: "The task's state (spec task_state)."}, u.s.readResource)
	u.s.mcp.AddResource(&mcp.Resource{URI: conversationURI(id), Name: "conversation-" + id, Title: "Conversation: " + name, MIMEType: mimeJSON,
		Description: "Every message delivered in the task."}, u.s.readResource)
}

// shared tells op's sessions that their resource list gained a task that
// was shared with op. go-sdk sends list_changed only when a resource is
// added: the task's are added again (the same ones), and listViews lets
// the notification through to op's sessions only.
func (u *updates) shared(id, op string) {
	if id == "" || op == "" || !u.known[id] {
		return // not listed yet: addTask counts it for op
	}
	u.s.lists.change(func() { u.addTaskResources(id) }, func(o string) bool { return o == op })
}

// addAgent gives an agent its own listed resources: they are everyone's
// (the MAS's agents are not restricted), and so is the list_changed.
func (u *updates) addAgent(id, kind string) {
	if id == "" || u.known[id] {
		return
	}
	u.known[id] = true
	b, _ := u.s.sys.AgentBrief(id)
	u.s.lists.change(func() {
		u.s.mcp.AddResource(&mcp.Resource{URI: agentURI(id), Name: "agent-" + id, Title: "Agent: " + b.Name, MIMEType: mimeJSON,
			Description: "The agent's state (spec agent_state)."}, u.s.readResource)
		u.s.mcp.AddResource(&mcp.Resource{URI: stepsURI(id), Name: "steps-" + id, Title: "Steps: " + b.Name, MIMEType: mimeJSON,
			Description: "The agent's step list."}, u.s.readResource)
	}, nil)
}

// logStep sends a logging notification of an agent's finished step to every
// session that asked for logs (through the outbox: the loop does not wait
// for any session).
func (u *updates) logStep(ev engine.Event) {
	b, _ := u.s.sys.AgentBrief(ev.AgentID)
	level := mcp.LoggingLevel("info")
	if ev.Detail == engine.StateFailed {
		level = "warning"
	}
	params := &mcp.LoggingMessageParams{Level: level, Logger: "mas", Data: map[string]any{
		"agent_id": ev.AgentID, "agent": b.Name, "task_id": ev.TaskID, "stage_id": ev.StageID,
		"step_id": ev.StepID, "state": ev.Detail,
		"message": fmt.Sprintf("agent %s: step %s %s", b.Name, ev.StepID, ev.Detail),
	}}
	for ss := range u.s.mcp.Sessions() {
		// Only to the sessions of operators who may see the task.
		if op, ok := u.s.sessionOperator(ss); ok && u.s.sys.EventVisible(op, ev) {
			u.s.postLog(ss, op, params)
		}
	}
}

// subscribe accepts subscriptions to our URIs only, to resources the
// caller may read, and at most limits.subscriptions_per_session of them
// per session.
func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	if _, err := parseURI(req.Params.URI); err != nil {
		return err
	}
	op := s.operator(ctx, req.Extra)
	if err := s.checkSubscribe(req.Params.URI, op); err != nil {
		return err
	}
	return s.subs.add(s, req.Session, req.Params.URI, op)
}

// unsubscribe forgets a subscription (the SDK drops its own).
func (s *Server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.subs.remove(req.Session, req.Params.URI)
	return nil
}

// unaskedListChanges is a sending middleware that withholds a list-changed
// notification from a session that did not ask for it. go-sdk (v1.8.0,
// Server.notifySessions) sends each one untagged to every session it takes
// for one of a protocol before 2026-07-28, one whose InitializeParams are
// nil included; a stateless request of 2026-07-28 is such a session from
// its connection until its handler runs and records its protocol, and the
// stateless transport writes a notification unrelated to a request to the
// request's subscriptions/listen stream. So a stream could get one before
// its acknowledgement, which must come first: its HTTP answer then starts
// before the SDK subscribed it, and a go-sdk client, whose Subscribe
// returns once the answer starts, could miss the resource's next update.
// Sessions of 2026-07-28 get these notifications on the listen streams
// that asked for them, tagged with the stream's subscription ID; older
// sessions once initialized, as before.
//
// A resources/list_changed goes, besides, only to the sessions whose own
// resource list changed since they were last told (listViews): go-sdk
// sends it to every session whenever a resource is added, and a new task's
// resources are seen only by the operators who see the task (filterLists).
// Admins see every task, so every change reaches their sessions; a new
// agent's resources are everyone's, and so is its list_changed.
func (s *Server) unaskedListChanges(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && listChanged(method) {
			// An initialized session of an older protocol gets them all.
			ip := ss.InitializeParams()
			older := ip != nil && ip.ProtocolVersion < statelessFrom
			if p := req.GetParams(); !older && (p == nil || p.GetMeta()[mcp.MetaKeySubscriptionID] == nil) {
				return nil, nil // untagged: not for a listen stream that asked
			}
			if method == "notifications/resources/list_changed" && !s.lists.tell(ss) {
				return nil, nil // its list did not change
			}
		}
		return next(ctx, method, req)
	}
}

// maxWaitSeconds is the longest wait_for_updates may wait.
const maxWaitSeconds = 300

// WaitIn is wait_for_updates' input.
type WaitIn struct {
	// Cursor is a number of the operator's own event numbering (eventlog.go).
	Cursor         uint64 `json:"cursor,omitempty" jsonschema:"the cursor returned by the previous call; 0 waits for the next change"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"how long to wait for a change, 1 to 300 (default 30)"`
	TaskID         string `json:"task_id,omitempty" jsonschema:"only events of this task"`
	AgentID        string `json:"agent_id,omitempty" jsonschema:"only events of this agent"`
	MaxEvents      int    `json:"max_events,omitempty" jsonschema:"at most this many events (default 200)"`
}

// WaitOut is wait_for_updates' output.
type WaitOut struct {
	// Cursor and the events' seq are numbers of the operator's own: they
	// count the events it may see, from a random base of the process
	// (eventlog.go).
	Cursor uint64         `json:"cursor"`
	Events []engine.Event `json:"events"`
	// Lost is set when older events after cursor were dropped from the log:
	// re-read the resources you follow.
	Lost     bool `json:"lost,omitempty"`
	TimedOut bool `json:"timed_out,omitempty"`
}

func (s *Server) waitForUpdates(ctx context.Context, req *mcp.CallToolRequest, in WaitIn) (*mcp.CallToolResult, WaitOut, error) {
	switch {
	case in.TimeoutSeconds < 0 || in.TimeoutSeconds > maxWaitSeconds:
		return nil, WaitOut{}, fmt.Errorf("timeout_seconds %d: must be between 1 and %d", in.TimeoutSeconds, maxWaitSeconds)
	case in.MaxEvents < 0:
		return nil, WaitOut{}, fmt.Errorf("max_events %d: must not be negative", in.MaxEvents)
	}
	op := s.operator(ctx, req.Extra)
	if in.TaskID != "" {
		if _, err := s.sys.TaskFor(op, in.TaskID); err != nil {
			return nil, WaitOut{}, err
		}
	}
	if in.AgentID != "" {
		if _, ok := s.sys.AgentBrief(in.AgentID); !ok {
			return nil, WaitOut{}, fmt.Errorf("agent_id %q: no such agent", in.AgentID)
		}
	}
	if res, err := s.questionsInline(req, op, in.TaskID); err != nil || res != nil {
		return res, WaitOut{}, err
	}
	if in.TimeoutSeconds == 0 {
		in.TimeoutSeconds = 30
	}
	if in.MaxEvents == 0 {
		in.MaxEvents = 200
	}
	cursor := in.Cursor
	if cursor == 0 {
		cursor = s.updates.logs.now(op)
	}
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	// Progress while waiting, for clients that asked for it.
	var tick <-chan time.Time
	token := req.Params.GetProgressToken()
	if token != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	start := time.Now()
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	for {
		evs, latest, lost, changed, err := s.updates.logs.since(op, cursor, in.TaskID, in.AgentID, in.MaxEvents)
		if err != nil {
			return nil, WaitOut{}, err
		}
		if len(evs) > 0 || lost {
			out := WaitOut{Cursor: latest, Events: evs, Lost: lost}
			return textResult("%d event(s); next cursor %d.\n%s", len(evs), out.Cursor, jsonText(evs)), out, nil
		}
		if release == nil {
			// A wait holds a place under limits.long_requests_per_operator
			// (an answer at once does not).
			var err error
			if release, err = s.holdLong(ctx, op, "wait_for_updates"); err != nil {
				return nil, WaitOut{}, err
			}
		}
		select {
		case <-changed:
		case <-tick:
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: time.Since(start).Seconds(), Total: timeout.Seconds(),
				Message: "waiting for changes",
			})
		case <-deadline.C:
			out := WaitOut{Cursor: latest, Events: []engine.Event{}, TimedOut: true}
			return textResult("No change within %s; next cursor %d.", timeout, out.Cursor), out, nil
		case <-ctx.Done():
			return nil, WaitOut{}, ctx.Err()
		case <-s.draining:
			out := WaitOut{Cursor: latest, Events: []engine.Event{}, TimedOut: true}
			return textResult("The server is shutting down; next cursor %d.", out.Cursor), out, nil
		}
	}
}
