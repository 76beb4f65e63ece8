package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// sepHost connects a stateful 2025-11-25 client to the env's server over
// streamable HTTP, taking elicitation with elicit, able to send tasks/get
// and tasks/result (SEP-1686).
func (e *env) sepHost(elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) *mcp.ClientSession {
	t := e.t
	t.Helper()
	ts := httptest.NewServer(e.srv.Handler())
	t.Cleanup(ts.Close)
	// The server first (cleanups run last-in first): a tasks/result whose
	// client went away waits until the task ends or the server closes,
	// and httptest's Close waits for it.
	t.Cleanup(func() { _ = e.srv.Close() })
	c := mcp.NewClient(&mcp.Implementation{Name: "sep-1686-host", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: elicit})
	if err := mcp.AddSendingCustomMethod[*sepTaskParams, *sepTask](c, "tasks/get"); err != nil {
		t.Fatal(err)
	}
	if err := mcp.AddSendingCustomMethod[*sepTaskParams, *mcp.CallToolResult](c, "tasks/result"); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp",
		HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// taskResultCall is a tasks/result call under way.
type taskResultCall struct {
	res  *mcp.CallToolResult
	err  error
	done chan struct{}
}

// startTaskResult calls tasks/result of taskID on a goroutine. At the
// test's end the call is cancelled and waited for, and the server closed:
// the client's cancellation may be lost as its session closes, and the
// session's DELETE would wait for the call the server still serves.
func (e *env) startTaskResult(cs *mcp.ClientSession, taskID string) *taskResultCall {
	ctx, cancel := context.WithCancel(context.Background())
	c := &taskResultCall{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.res, c.err = mcp.CallCustomMethod[*sepTaskParams, *mcp.CallToolResult](ctx, cs, "tasks/result", &sepTaskParams{TaskID: taskID})
	}()
	e.t.Cleanup(func() {
		cancel()
		<-c.done
		_ = e.srv.Close()
	})
	return c
}

// relatedTask is the taskId of a message's io.modelcontextprotocol/related-task.
func relatedTask(meta mcp.Meta) string {
	rt, _ := meta["io.modelcontextprotocol/related-task"].(map[string]any)
	id, _ := rt["taskId"].(string)
	return id
}

// TestTasksResultAsksTheCallerTheTasksQuestions: protocol 2025-11-25
// (SEP-1686): "When the requestor encounters the input_required status,
// it SHOULD call tasks/result prematurely", and the receiver sends the
// requests the task needs while that call waits (the TypeScript SDK's
// tasks client does exactly this). The operator comes back on a stateful
// 2025-11-25 client that takes elicitation, finds its task input_required
// (alice waits on its answer) and calls tasks/result: alice's question
// comes as an elicitation/create tagged with the task
// (io.modelcontextprotocol/related-task), its answer goes to alice, and
// tasks/result answers the task's result once it ends.
func TestTasksResultAsksTheCallerTheTasksQuestions(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	asked := make(chan *mcp.ElicitParams, 4)
	cs := e.sepHost(func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked <- req.Params
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"reply": "Markdown, please."}}, nil
	})

	got, err := mcp.CallCustomMethod[*sepTaskParams, *sepTask](context.Background(), cs, "tasks/get", &sepTaskParams{TaskID: f.TaskID})
	if err != nil || got.Status != "input_required" {
		t.Fatalf("tasks/get: %+v, %v; want input_required (alice waits on the operator)", got, err)
	}
	call := e.startTaskResult(cs, f.TaskID)

	// Generous guards for a hang: the question is open now, and the task
	// runs to its end once it is answered.
	guard := time.NewTimer(20 * time.Second)
	defer guard.Stop()
	select {
	case p := <-asked:
		if p.Message != scripted.OperatorQuestion {
			t.Errorf("tasks/result asked %q, want alice's question", p.Message)
		}
		if id := relatedTask(p.Meta); id != f.TaskID {
			t.Errorf("the elicitation's _meta %v: want io.modelcontextprotocol/related-task {taskId: %s}", p.Meta, f.TaskID)
		}
	case <-call.done:
		t.Fatalf("tasks/result of an input_required task returned before the task ended: %v", call.err)
	case <-guard.C:
		t.Fatalf("tasks/result of task %s, input_required for the caller (alice's question %s awaits it), sent the caller no elicitation: "+
			"it only waits for the task's end, and the task waits on that question (task still %s)",
			f.TaskID, f.Question.MessageID, e.stack.Task(f.TaskID).ExecutionState)
	}
	select {
	case <-call.done:
	case <-guard.C:
		t.Fatalf("the answer given through tasks/result's elicitation did not take the task to its end (task still %s)",
			e.stack.Task(f.TaskID).ExecutionState)
	}
	if call.err != nil || call.res.IsError || relatedTask(call.res.Meta) != f.TaskID {
		t.Fatalf("tasks/result: %+v, %v; want the completed task's result", call.res, call.err)
	}
	select {
	case p := <-asked:
		t.Errorf("the question was asked again after its answer: %q", p.Message)
	default:
	}
}

// TestTasksResultWithdrawsAQuestionAnsweredElsewhere: while tasks/result
// puts a question to the caller's client, the question is not put to the
// same client again (the executor's own elicitation, ElicitOperator, is
// refused there); once it is answered from another channel (send_message
// here) the elicitation is withdrawn (notifications/cancelled: the client's
// handler sees its context end) and tasks/result goes on to the task's
// result.
func TestTasksResultWithdrawsAQuestionAnsweredElsewhere(t *testing.T) {
	e := newEnv(t)
	f := e.startTask()
	asked := make(chan *mcp.ElicitParams, 4)
	withdrawn := make(chan struct{}, 4)
	cs := e.sepHost(func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked <- req.Params
		<-ctx.Done() // the operator is away from this client
		withdrawn <- struct{}{}
		return nil, ctx.Err()
	})
	call := e.startTaskResult(cs, f.TaskID)
	guard := time.NewTimer(20 * time.Second)
	defer guard.Stop()
	select {
	case <-asked:
	case <-guard.C:
		t.Fatal("tasks/result sent no elicitation of alice's question")
	}

	// The executor's elicitation of the same question finds the client
	// asked already: refused at once, not sent twice.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	again := make(chan error, 1)
	go func() {
		_, err := e.srv.ElicitOperator(ctx, f.TaskID, &mcp.ElicitParams{Message: scripted.OperatorQuestion,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"reply": map[string]any{"type": "string"}}}})
		again <- err
	}()
	select {
	case err := <-again:
		if err == nil {
			t.Error("ElicitOperator of the question asked already answered without an error")
		}
	case p := <-asked:
		t.Errorf("the question was put to the client twice at once: %q", p.Message)
		cancel()
	}

	e.call("send_message", map[string]any{"task_id": f.TaskID, "receiver": f.Alice, "content": "Markdown, please."}, nil)
	select {
	case <-withdrawn:
	case <-guard.C:
		t.Fatal("the elicitation of a question answered from the inbox was not withdrawn")
	}
	select {
	case <-call.done:
	case <-guard.C:
		t.Fatalf("tasks/result did not answer after the task ran on (task %s)", e.stack.Task(f.TaskID).ExecutionState)
	}
	if call.err != nil || call.res.IsError {
		t.Fatalf("tasks/result: %+v, %v; want the completed task's result", call.res, call.err)
	}
}
