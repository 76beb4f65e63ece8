package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// instructionOut is manage_task's and manage_agent's output as a client
// decodes it (server.InstructionOut with its result read as the JSON
// object it is).
type instructionOut struct {
	Action string         `json:"action"`
	Result map[string]any `json:"result"`
}

// env is a MAS on the fake LLM (scripted team), its MCP server, and one
// client connected over in-memory transports (the embedded peer).
type env struct {
	t     *testing.T
	stack *teststack.Stack
	team  *scripted.Team
	srv   *server.Server
	*peer
}

// envOptions tune newEnvWith; zero values give newEnv's environment.
type envOptions struct {
	// Config adjusts the server's configuration before server.New.
	Config func(*server.Config)
	// ProtocolVersion pins the client's protocol version ("": the SDK's latest).
	ProtocolVersion string
	// Stack adjusts the stack's options (its Handler is the scripted
	// team's) before teststack.New.
	Stack func(*teststack.Options)
}

func newEnv(t *testing.T) *env { return newEnvWith(t, envOptions{}) }

func newEnvWith(t *testing.T, o envOptions) *env {
	t.Helper()
	team := scripted.NewTeam()
	team.AskOperator = true
	so := teststack.Options{Handler: team.Handle}
	if o.Stack != nil {
		o.Stack(&so)
	}
	st := teststack.New(t, so)
	cfg := server.Config{System: st.Sys, Logger: st.Log, Trail: st.Trail}
	if o.Config != nil {
		o.Config(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	e := &env{t: t, stack: st, team: team, srv: srv}
	e.peer = e.connect(o.ProtocolVersion)
	return e
}

// peer is one client session and the notifications it received.
type peer struct {
	t       *testing.T
	client  *mcp.ClientSession
	updates chan string // URIs of resources/updated notifications
	logs    chan *mcp.LoggingMessageParams
	// listChanged receives one value per resources/list_changed.
	listChanged chan struct{}
	progress    chan *mcp.ProgressNotificationParams

	// notified receives a value (never blocking) after every notification
	// of any kind, for waits on them (await).
	notified chan struct{}

	mu      sync.Mutex
	notices []notice // every resources/updated, in arrival order
}

// await waits until cond holds, checking it again after each notification
// the peer receives; it reports false if timeout passed first.
func (p *peer) await(cond func() bool, timeout time.Duration) bool {
	bound := time.NewTimer(timeout)
	defer bound.Stop()
	for !cond() {
		select {
		case <-p.notified:
		case <-bound.C:
			return cond()
		}
	}
	return true
}

// waitUntil waits for cond as await does, failing after a generous bound
// (for a hang, not a performance assertion).
func (p *peer) waitUntil(what string, cond func() bool) {
	p.t.Helper()
	if !p.await(cond, 20*time.Second) {
		p.t.Fatalf("timed out waiting for %s", what)
	}
}

// notice is one resources/updated notification and when it arrived.
type notice struct {
	uri string
	at  time.Time
}

// noticesOf returns when the notifications of uri arrived.
func (p *peer) noticesOf(uri string) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Time
	for _, n := range p.notices {
		if n.uri == uri {
			out = append(out, n.at)
		}
	}
	return out
}

// connect connects another client to the env's server over in-memory
// transports, speaking version ("": the SDK's latest).
func (e *env) connect(version string) *peer {
	e.t.Helper()
	ct, stt := mcp.NewInMemoryTransports()
	ss, err := e.srv.MCP().Connect(context.Background(), stt, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = ss.Close() })
	return e.dial(ct, version)
}

// dial connects a new client over a client transport.
func (e *env) dial(ct mcp.Transport, version string) *peer {
	t := e.t
	t.Helper()
	p := &peer{
		t: t, updates: make(chan string, 4096), logs: make(chan *mcp.LoggingMessageParams, 4096),
		listChanged: make(chan struct{}, 4096), progress: make(chan *mcp.ProgressNotificationParams, 4096),
		notified: make(chan struct{}, 1),
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, p.clientOptions()).
		Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	p.client = cs
	return p
}

// clientOptions routes every notification the tests look at to p's channels
// (never blocking: a full channel drops).
func (p *peer) clientOptions() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			p.mu.Lock()
			p.notices = append(p.notices, notice{r.Params.URI, time.Now()})
			p.mu.Unlock()
			offer(p.updates, r.Params.URI)
			offer(p.notified, struct{}{})
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			offer(p.logs, r.Params)
			offer(p.notified, struct{}{})
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			offer(p.listChanged, struct{}{})
			offer(p.notified, struct{}{})
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			offer(p.progress, r.Params)
			offer(p.notified, struct{}{})
		},
	}
}

func offer[T any](c chan T, v T) {
	select {
	case c <- v:
	default:
	}
}

// call calls a tool and decodes its structured output into out.
func (p *peer) call(name string, args any, out any) *mcp.CallToolResult {
	p.t.Helper()
	res, err := p.client.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		p.t.Fatalf("%s: protocol error: %v", name, err)
	}
	if res.IsError {
		p.t.Fatalf("%s: tool error: %s", name, resultText(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			p.t.Fatalf("%s: structured output %s: %v", name, b, err)
		}
	}
	return res
}

// callErr calls a tool that must fail with a tool error (isError, not a
// JSON-RPC error) and returns the error's text.
func (p *peer) callErr(name string, args any) string {
	p.t.Helper()
	res, err := p.client.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		p.t.Fatalf("%s(%s): got a JSON-RPC error %v, want a tool result with isError", name, jsonString(args), err)
	}
	if !res.IsError {
		p.t.Fatalf("%s(%s): succeeded (%s), want isError", name, jsonString(args), resultText(res))
	}
	return resultText(res)
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// read reads a resource's JSON document into out.
func (p *peer) read(uri string, out any) {
	p.t.Helper()
	res, err := p.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		p.t.Fatalf("read %s: %v", uri, err)
	}
	if err := json.Unmarshal([]byte(res.Contents[0].Text), out); err != nil {
		p.t.Fatalf("read %s: %v", uri, err)
	}
}

// readErr reads a resource that must fail and returns the JSON-RPC error.
func (p *peer) readErr(uri string) *jsonrpc.Error {
	p.t.Helper()
	res, err := p.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	if err == nil {
		p.t.Fatalf("read %s: succeeded (%d contents), want an error", uri, len(res.Contents))
	}
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		p.t.Fatalf("read %s: error %v (%T), want a JSON-RPC error", uri, err, err)
	}
	return werr
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func drain[T any](c chan T) []T {
	var out []T
	for {
		select {
		case s := <-c:
			out = append(out, s)
		default:
			return out
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// taskFixture is a task in mid-flight, at rest: the scripted manager staffed
// it with alice and bob and two stages; in the first (running) stage alice
// asked the operator a waiting question and is blocked on it, so no agent
// can move until the operator answers.
type taskFixture struct {
	TaskID   string
	Stages   []string // stage IDs, in order
	Manager  string
	Operator string
	Alice    string
	Bob      string
	Question engine.InboxEntry
}

// startTask hands the scripted team a task and waits until it is at rest
// with alice's question in the operator's inbox.
func (e *env) startTask() taskFixture {
	e.t.Helper()
	var added server.AddTaskOut
	e.call("add_task", map[string]any{"task_name": "report", "task_intention": "Research a topic and write a report."}, &added)
	f := taskFixture{TaskID: added.TaskID, Manager: e.stack.Sys.ManagerID(), Operator: e.stack.Sys.OperatorID()}
	e.stack.WaitFor("alice's question to the operator, and rest", func() bool {
		entries, err := e.stack.Sys.Inbox(f.Operator)
		if err != nil {
			return false
		}
		f.Question = engine.InboxEntry{}
		for _, m := range entries {
			if m.Content == scripted.OperatorQuestion && m.AwaitingReply {
				f.Question = m
			}
		}
		return f.Question.MessageID != "" && atRest(e.stack.Sys)
	})
	f.Alice, f.Bob = e.stack.AgentByName("alice"), e.stack.AgentByName("bob")
	for _, st := range e.stack.Task(f.TaskID).StageList {
		f.Stages = append(f.Stages, st.StageID)
	}
	if f.Alice == "" || f.Bob == "" || len(f.Stages) != 2 {
		e.t.Fatalf("fixture: alice %q, bob %q, %d stages\n%s", f.Alice, f.Bob, len(f.Stages), e.stack.Dump())
	}
	return f
}

// masState is everything a client can observe of the MAS, to check that a
// failed call changed nothing.
type masState struct {
	Seq    uint64
	Tasks  []engine.TaskState
	Agents []engine.AgentState
}

func masSnapshot(sys *engine.System) masState {
	return masState{Seq: sys.EventSeq(), Tasks: sys.Tasks(), Agents: sys.Agents()}
}

// unchanged fails the test if the MAS changed since before.
func (e *env) unchanged(what string, before masState) {
	e.t.Helper()
	if diff := cmp.Diff(before, masSnapshot(e.stack.Sys)); diff != "" {
		e.t.Errorf("%s changed the MAS (-before +after):\n%s", what, diff)
	}
}

// atRest is teststack.AtRest: no agent can run a step, no report is on its
// way.
func atRest(sys *engine.System) bool { return teststack.AtRest(sys) }
