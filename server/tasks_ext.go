package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// MCP Tasks for protocol 2026-07-28: the extension io.modelcontextprotocol/tasks
// (SEP-2663), over the same durable MAS tasks as tasks.go.
//
//   - A tools/call of add_task from a client that declares the extension in
//     the request's capabilities answers at once with the task (resultType
//     "task"), taken before the SDK (extAugmented), which can only answer a
//     CallToolResult. Other tools and clients get their usual result.
//   - tasks/get reports the task: working; input_required with the
//     caller's open questions of the task as inputRequests (elicitation
//     forms keyed by message_id, operator_questions.go; at most
//     limits.list_items, _meta mas-mcp/moreInputRequests and the status
//     message say how many more wait); completed with
//     add_task's final result (isError when the MAS task failed: the
//     extension keeps failed for JSON-RPC errors, which a MAS task never
//     ends with); cancelled (ended by an operator).
//   - tasks/update answers those questions with its inputResponses, as
//     answer_approval would; tasks/cancel cancels the MAS task.
//
// A request of protocol 2026-07-28 to these methods without the extension
// in its capabilities is refused (-32021), as the extension requires.
// Ownership is as for every task: only operators who may see a task
// (owner, shared with, admins) reach it; the rest are told it does not
// exist. Not possible with go-sdk v1.8.0: notifications/tasks and
// subscriptions/listen's taskIds (no custom notifications, and
// subscriptions/listen is the SDK's own method).

const (
	// tasksExt names the extension in capabilities.
	tasksExt = "io.modelcontextprotocol/tasks"
	// codeMissingCapability is the extension's error for a client that did
	// not declare it.
	codeMissingCapability = -32021
)

// extTask is the extension's Task with its status's payload (DetailedTask).
type extTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTLMs is null: MAS tasks are kept.
	TTLMs          *int64              `json:"ttlMs"`
	PollIntervalMs int64               `json:"pollIntervalMs"`
	InputRequests  mcp.InputRequestMap `json:"inputRequests,omitempty"`
	Result         *mcp.CallToolResult `json:"result,omitempty"`
	// more is how many questions inputRequests left out (inputRequests).
	more int
}

// extResult is a result of the extension's methods: resultType and, for
// tasks/get and a created task, the task.
type extResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	*extTask
}

type updateTaskParams struct {
	mcp.ParamsBase
	TaskID         string               `json:"taskId"`
	InputResponses mcp.InputResponseMap `json:"inputResponses"`
}

// extRequest reports whether a request's _meta says protocol 2026-07-28
// or later: such requests get the extension's shapes.
func extRequest(meta mcp.Meta) bool {
	v, _ := meta[mcp.MetaKeyProtocolVersion].(string)
	return v >= statelessFrom
}

// declaresTasks reports whether a request's _meta declares the extension
// in the client's capabilities.
func declaresTasks(meta mcp.Meta) bool {
	b, err := json.Marshal(meta[mcp.MetaKeyClientCapabilities])
	if err != nil {
		return false
	}
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	return json.Unmarshal(b, &caps) == nil && caps.Extensions[tasksExt] != nil
}

func missingCapability() error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExt: map[string]any{}}}})
	return &jsonrpc.Error{Code: codeMissingCapability, Message: "missing required client capability: extension " + tasksExt, Data: data}
}

// extGet is tasks/get for protocol 2026-07-28.
func (s *Server) extGet(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
	if !declaresTasks(p.Meta) {
		return nil, missingCapability()
	}
	t, err := s.visibleTask(ctx, ss, p.TaskID)
	if err != nil {
		return nil, err
	}
	op, _ := s.callerOperator(ctx, ss)
	res := &extResult{ResultType: "complete", extTask: s.extTaskOf(t, op)}
	if res.more > 0 {
		res.SetMeta(mcp.Meta{moreInputsMeta: res.more})
	}
	return res, nil
}

// extUpdate is tasks/update: each input response answers the question
// its key names (a question of this task for the caller). Unlike the
// extension's advice to ignore responses to requests no longer
// outstanding, such a response is refused with an error naming it, so
// the operator learns that another answer (from the inbox, the monitor,
// another client) won; the other responses are still applied.
func (s *Server) extUpdate(ctx context.Context, ss *mcp.ServerSession, p *updateTaskParams) (mcp.Result, error) {
	if extRequest(p.Meta) && !declaresTasks(p.Meta) {
		return nil, missingCapability()
	}
	t, err := s.visibleTask(ctx, ss, p.TaskID)
	if err != nil {
		return nil, err
	}
	if len(p.InputResponses) == 0 {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses: is empty; answer the task's inputRequests (tasks/get)"}
	}
	op, _ := s.callerOperator(ctx, ss)
	problems := s.answerQuestions(op, t.TaskID, p.InputResponses)
	if len(problems) > 0 {
		msg := strings.Join(problems, "; ")
		if len(problems) < len(p.InputResponses) {
			msg += " (the other responses were applied)"
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
	}
	return &extResult{ResultType: "complete"}, nil
}

// extCancel is tasks/cancel for protocol 2026-07-28: an acknowledgement
// (SEP-2663 asks one even when the work ended first); a task that has
// ended already, or ends on its own while being cancelled, stays as it
// ended.
func (s *Server) extCancel(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
	if !declaresTasks(p.Meta) {
		return nil, missingCapability()
	}
	t, err := s.visibleTask(ctx, ss, p.TaskID)
	if err != nil {
		return nil, err
	}
	if _, _, err := s.cancelTask(ctx, ss, t); err != nil {
		return nil, err
	}
	return &extResult{ResultType: "complete"}, nil
}

// extTaskOf maps a MAS task to the extension's task as the operator op
// sees it: input_required only when op has open questions of it, which
// are its inputRequests (taskStatus).
func (s *Server) extTaskOf(t engine.TaskState, op string) *extTask {
	mt, open := s.taskStatus(t, op)
	out := &extTask{TaskID: mt.TaskID, Status: mt.Status, StatusMessage: mt.StatusMessage, CreatedAt: mt.CreatedAt,
		LastUpdatedAt: mt.LastUpdatedAt, PollIntervalMs: taskPollMS}
	switch mt.Status {
	case taskCompleted, taskFailed:
		out.Status, out.Result = taskCompleted, s.taskCallResult(t)
	case taskInputRequired:
		out.StatusMessage = awaitingMessage(len(open))
		if out.InputRequests, out.more = s.inputRequests(open); out.more > 0 {
			out.StatusMessage += fmt.Sprintf(": %d in inputRequests, %d more once these are answered", len(out.InputRequests), out.more)
		}
		out.StatusMessage += pausedNote(t)
	}
	return out
}

// extAugmented answers a tools/call of add_task of protocol 2026-07-28
// whose client declares the extension with the created task (see above),
// with the body already read (taskAugmented reads it only when the
// request's headers name that call). It reports whether it answered; the
// SDK serves everything else (and refuses what is malformed: arguments
// that do not decode, headers that do not match the body).
func (s *Server) extAugmented(w http.ResponseWriter, r *http.Request, body []byte) bool {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta      mcp.Meta        `json:"_meta"`
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" || msg.Params.Name != "add_task" || len(msg.ID) == 0 ||
		!extRequest(msg.Params.Meta) || !declaresTasks(msg.Params.Meta) {
		return false
	}
	var in AddTaskIn
	dec := json.NewDecoder(bytes.NewReader(msg.Params.Arguments))
	dec.DisallowUnknownFields()
	if dec.Decode(&in) != nil {
		return false
	}
	req := &mcp.CallToolRequest{Extra: &mcp.RequestExtra{Header: r.Header, TokenInfo: auth.TokenInfoFromContext(r.Context())}}
	var result any
	if _, out, err := checked(&s.cfg.Limits, s.addTask)(r.Context(), req, in); err != nil {
		// No task: the call's ordinary result, an error the caller can act on.
		result = map[string]any{"resultType": "complete", "isError": true,
			"content": []*mcp.TextContent{{Text: strings.TrimSpace(err.Error())}}}
	} else {
		t, _ := s.sys.Task(out.TaskID)
		result = &extResult{ResultType: "task", extTask: s.extTaskOf(t, s.operator(r.Context(), req.Extra))}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": result})
	return true
}

// callerOperator is the operator a request acts as: its session's (a
// stateful session is bound to its token), else its own bearer token's
// (stateless requests), else the default operator when there are no
// tokens.
func (s *Server) callerOperator(ctx context.Context, ss *mcp.ServerSession) (string, bool) {
	if op, ok := s.sessionOperator(ss); ok {
		return op, true
	}
	if extra, _ := ctx.Value(requestExtraKey{}).(*mcp.RequestExtra); extra != nil && extra.TokenInfo != nil && extra.TokenInfo.UserID != "" {
		return extra.TokenInfo.UserID, true
	}
	return "", false
}

type requestExtraKey struct{}

// keepExtra hands the tasks/* methods their request's transport details
// (the bearer token): custom methods' handlers get only the session, which
// a stateless request does not bind to an operator.
func keepExtra(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if strings.HasPrefix(method, "tasks/") && req.GetExtra() != nil {
			ctx = context.WithValue(ctx, requestExtraKey{}, req.GetExtra())
		}
		return next(ctx, method, req)
	}
}
