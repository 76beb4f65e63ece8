package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// MCP Tasks (protocol 2025-11-25, SEP-1686) over our durable MAS tasks: a
// MAS task is an MCP task of the same ID, so tasks survive restarts and
// every MAS task its operator may see can be followed this way.
//
//   - tools/call of add_task with params.task (task-augmented) answers at
//     once with a CreateTaskResult (streamable HTTP only, see below).
//   - tasks/get reports working / input_required (an agent waits on the
//     answer of the operator who asks: taskStatus) / completed / failed /
//     cancelled.
//   - tasks/result waits until the task ends and answers add_task's result:
//     the task's summary (isError when it failed or was cancelled). While
//     it waits, the caller's questions of the task go to its session as
//     elicitation requests tagged with the task (tasks_ask.go).
//   - tasks/list lists the operator's tasks; tasks/cancel cancels one.
//
// go-sdk v1.8.0 has no tasks: the tasks/* methods are custom methods
// (mcp.AddReceivingCustomMethod, every transport). tools/call is the SDK's
// own, which drops params.task and can only answer a CallToolResult, so a
// task-augmented add_task is taken before the SDK sees it, on streamable
// HTTP (taskAugmented). Not possible with the SDK: advertising the tasks
// capability (ServerCapabilities has no field for it), reading the client's
// (ClientCapabilities neither), task-augmented calls over stdio and SSE,
// and sending notifications/tasks/status (no custom notifications).
// Requests of protocol 2026-07-28 get the tasks extension instead
// (tasks_ext.go): the same handlers answer them in its shapes.

// Task statuses (SEP-1686).
const (
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskFailed        = "failed"
	taskCancelled     = "cancelled"
)

// taskPollMS is the poll interval suggested to clients.
const taskPollMS = 500

// mcpTask is SEP-1686's Task.
type mcpTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTL is null: MAS tasks are kept.
	TTL          *int64 `json:"ttl"`
	PollInterval int64  `json:"pollInterval"`
}

type taskIDParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type listTasksParams struct {
	mcp.ParamsBase
	Cursor string `json:"cursor,omitempty"`
}

// taskResult is tasks/get's and tasks/cancel's result: the Task itself.
type taskResult struct {
	mcp.ResultBase
	mcpTask
}

type listTasksResult struct {
	mcp.ResultBase
	Tasks      []mcpTask `json:"tasks"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

// createTaskResult answers a task-augmented request.
type createTaskResult struct {
	Task mcpTask `json:"task"`
}

// relatedTaskMeta is the _meta key tying a result to its task.
const relatedTaskMeta = "io.modelcontextprotocol/related-task"

// addTasks registers the tasks/* methods.
func (s *Server) addTasks() error {
	for _, err := range []error{
		mcp.AddReceivingCustomMethod(s.mcp, "tasks/get", func(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
			if extRequest(p.Meta) {
				return s.extGet(ctx, ss, p)
			}
			t, err := s.visibleTask(ctx, ss, p.TaskID)
			if err != nil {
				return nil, err
			}
			op, _ := s.callerOperator(ctx, ss)
			return &taskResult{mcpTask: s.mcpTaskOf(t, op)}, nil
		}),
		mcp.AddReceivingCustomMethod(s.mcp, "tasks/update", s.extUpdate),
		mcp.AddReceivingCustomMethod(s.mcp, "tasks/list", s.listTasks),
		mcp.AddReceivingCustomMethod(s.mcp, "tasks/result", s.taskResult),
		mcp.AddReceivingCustomMethod(s.mcp, "tasks/cancel", func(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (mcp.Result, error) {
			if extRequest(p.Meta) {
				return s.extCancel(ctx, ss, p)
			}
			t, err := s.visibleTask(ctx, ss, p.TaskID)
			if err != nil {
				return nil, err
			}
			t, cancelled, err := s.cancelTask(ctx, ss, t)
			if err != nil {
				return nil, err
			}
			if !cancelled {
				// SEP-1686: a task already in a terminal status is refused.
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("task %s: already %s", t.TaskID, s.mcpTaskOf(t, "").Status)}
			}
			op, _ := s.callerOperator(ctx, ss)
			return &taskResult{mcpTask: s.mcpTaskOf(t, op)}, nil
		}),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// cancelTask cancels the MAS task t (as manage_task cancel_task) for the
// request's operator and returns the task as it is then. cancelled is false
// when the task had ended already, also when it ended on its own after t
// was read (its manager finished or failed it meanwhile): it stays as it
// ended, and the caller answers as its protocol asks for a terminal task.
func (s *Server) cancelTask(ctx context.Context, ss *mcp.ServerSession, t engine.TaskState) (now engine.TaskState, cancelled bool, err error) {
	if ended(t) {
		return t, false, nil
	}
	if f := s.beforeCancel.Load(); f != nil {
		(*f)(t.TaskID)
	}
	op, _ := s.callerOperator(ctx, ss)
	_, err = s.sys.TaskInstruction(op, engine.TaskInstruction{Action: engine.ActionCancelTask, TaskID: t.TaskID,
		Summary: "cancelled by the operator (MCP tasks/cancel)"})
	if err != nil && !errors.Is(err, engine.ErrEnded) {
		return t, false, err
	}
	now, _ = s.sys.Task(t.TaskID)
	return now, err == nil, nil
}

// visibleTask is the task taskID names, if the request's operator may see
// it. A taskId is an ID: over limits.name_bytes it is refused as a tool's
// task_id is.
func (s *Server) visibleTask(ctx context.Context, ss *mcp.ServerSession, taskID string) (engine.TaskState, error) {
	c := inputCheck{l: &s.cfg.Limits}
	if c.name("taskId", taskID); c.err != nil {
		return engine.TaskState{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: c.err.Error()}
	}
	op, ok := s.callerOperator(ctx, ss)
	t, found := s.sys.Task(taskID)
	if !ok || !found || t.Base || !s.sys.Visible(op, taskID) {
		return engine.TaskState{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("taskId %q: no such task", clip(taskID))}
	}
	return t, nil
}

// listTasks answers tasks/list: the operator's tasks, oldest first, in
// pages of limits.list_items (MCP tasks are kept: the list only grows),
// each with its status message cut to a line (tasks/get and tasks/result
// give the whole summary).
func (s *Server) listTasks(ctx context.Context, ss *mcp.ServerSession, p *listTasksParams) (*listTasksResult, error) {
	op, _ := s.callerOperator(ctx, ss)
	var after *taskPos
	if p != nil && p.Cursor != "" { // a request without params has none
		pos, err := parseTaskCursor(p.Cursor)
		if err != nil {
			return nil, err
		}
		after = &pos
	}
	var mine []engine.TaskState
	for _, t := range s.sys.Tasks() {
		if !t.Base && s.sys.Visible(op, t.TaskID) && (after == nil || after.before(posOf(t))) {
			mine = append(mine, t)
		}
	}
	slices.SortFunc(mine, func(a, b engine.TaskState) int { return posOf(a).cmp(posOf(b)) })
	out := &listTasksResult{Tasks: []mcpTask{}}
	page := max(s.cfg.Limits.ListItems, 1)
	for i, t := range mine {
		if i == page {
			out.NextCursor = posOf(mine[i-1]).cursor()
			break
		}
		mt := s.mcpTaskOf(t, op)
		mt.StatusMessage = engine.Truncate(mt.StatusMessage, listedStatusChars)
		out.Tasks = append(out.Tasks, mt)
	}
	return out, nil
}

// listedStatusChars is how much of a task's status message tasks/list shows.
const listedStatusChars = 300

// taskPos is a task's place in tasks/list: by creation, then ID.
type taskPos struct {
	created time.Time
	id      string
}

func posOf(t engine.TaskState) taskPos { return taskPos{t.CreatedAt.UTC(), t.TaskID} }

func (a taskPos) cmp(b taskPos) int {
	if c := a.created.Compare(b.created); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

func (a taskPos) before(b taskPos) bool { return a.cmp(b) < 0 }

// cursor is tasks/list's cursor after a: opaque to the client. It names
// only a task of the operator's own page.
func (a taskPos) cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte(a.created.Format(time.RFC3339Nano) + " " + a.id))
}

func parseTaskCursor(c string) (taskPos, error) {
	bad := &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("cursor %q: not a cursor tasks/list gave: list again without one", clip(c))}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return taskPos{}, bad
	}
	at, id, ok := strings.Cut(string(b), " ")
	created, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || id == "" {
		return taskPos{}, bad
	}
	return taskPos{created, id}, nil
}

func ended(t engine.TaskState) bool {
	return t.ExecutionState == engine.StateFinished || t.ExecutionState == engine.StateFailed
}

// mcpTaskOf maps a MAS task to an MCP task as the operator viewer sees
// it (taskStatus).
func (s *Server) mcpTaskOf(t engine.TaskState, viewer string) mcpTask {
	mt, _ := s.taskStatus(t, viewer)
	return mt
}

// taskStatus maps a MAS task to an MCP task as the operator viewer sees it,
// with viewer's questions of the task that await an answer. The status is
// the viewer's: input_required while an agent of the task waits on a
// question to viewer (which only the operators among a message's sender
// and receivers see: engine.MessageVisible) or while viewer's daily
// budget holds it (its question may be asked in another task:
// taskQuestions), working otherwise — also while it waits on another
// operator's, which the status must not reveal.
func (s *Server) taskStatus(t engine.TaskState, viewer string) (_ mcpTask, open []engine.InboxEntry) {
	out := mcpTask{TaskID: t.TaskID, PollInterval: taskPollMS, CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if !t.UpdatedAt.IsZero() {
		out.LastUpdatedAt = t.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	if !ended(t) {
		open = s.taskQuestions(viewer, t)
	}
	switch {
	case t.ExecutionState == engine.StateFinished:
		out.Status, out.StatusMessage = taskCompleted, t.TaskSummary
	case t.ExecutionState == engine.StateFailed && s.endedByOperator(t):
		out.Status, out.StatusMessage = taskCancelled, t.TaskSummary
	case t.ExecutionState == engine.StateFailed:
		out.Status, out.StatusMessage = taskFailed, t.TaskSummary
	case len(open) > 0:
		out.Status, out.StatusMessage = taskInputRequired, awaitingMessage(len(open))+" (get_inbox)"+pausedNote(t)
	default:
		out.Status, out.StatusMessage = taskWorking, pausedMessage(t)
	}
	return out, open
}

// pausedMessage says why the task is paused ("": it is not): its budget,
// an LLM outage (the MAS's own pause, which ends by itself) or an
// operator's pause_task. A budget's hold comes first: resume_task is
// refused while it lasts, whoever paused the task before. A task an
// operator paused too (before the hold or during it: engine's pauseRank
// gives the operator's pause the task, PausedFor "") stays paused after
// the raise, and the message says so.
func pausedMessage(t engine.TaskState) string {
	const raise = "the budget question in the owner's inbox, or manage_task set_budget for the task's own limits"
	switch {
	case !t.Paused:
		return ""
	case t.Budget.Held != "" && t.PausedFor == "":
		return "paused by an operator (pause_task) and held for its budget: " + t.Budget.Held + "; once the budget is raised (" + raise + ") it stays paused until resume_task, which is refused while the budget holds it"
	case t.Budget.Held != "":
		return "paused for its budget: " + t.Budget.Held + "; it goes on once the budget is raised (" + raise + ")"
	case t.PausedFor == engine.PausedOutage:
		return "paused: its step gave up waiting for the LLM endpoint, which does not answer; it resumes by itself when the endpoint answers again (resume_task resumes it sooner)"
	}
	return "paused by an operator (pause_task): no new step starts until resume_task"
}

// pausedNote says, after an input_required status message, why the task
// is paused too ("": it is not).
func pausedNote(t engine.TaskState) string {
	if m := pausedMessage(t); m != "" {
		return "; the task is " + m
	}
	return ""
}

// awaitingMessage is the status message of a task with n questions
// awaiting the viewer's answer.
func awaitingMessage(n int) string {
	return fmt.Sprintf("%d question(s) of the task's agents await your answer", n)
}

// endedByOperator reports whether an operator ended the task (cancel_task).
func (s *Server) endedByOperator(t engine.TaskState) bool {
	b, ok := s.sys.AgentBrief(t.EndedBy)
	return ok && b.Kind == engine.KindHuman
}

// taskResult waits until the task ends and answers add_task's final
// result: the summary. Meanwhile the caller's questions of the task are
// put to its session (tasks_ask.go).
func (s *Server) taskResult(ctx context.Context, ss *mcp.ServerSession, p *taskIDParams) (*mcp.CallToolResult, error) {
	t, err := s.visibleTask(ctx, ss, p.TaskID)
	if err != nil {
		return nil, err
	}
	if ended(t) {
		return s.taskCallResult(t), nil
	}
	op, _ := s.callerOperator(ctx, ss)
	release, err := s.holdLong(ctx, op, "tasks/result")
	if err != nil {
		return nil, &jsonrpc.Error{Code: CodeOverLimit, Message: err.Error()}
	}
	defer release()
	sub := s.sys.Subscribe(64)
	defer sub.Close()
	asker := s.newTaskAsker(ctx, ss, op, t.TaskID)
	defer asker.stop()
	for {
		// Read after subscribing: a change since is an event.
		t, _ = s.sys.Task(p.TaskID)
		if ended(t) {
			break
		}
		if asker != nil {
			asker.ask(s.taskQuestions(op, t))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ctx.Done():
			return nil, errors.New("the server is shutting down")
		case _, ok := <-sub.C:
			if !ok {
				return nil, errors.New("the server is shutting down")
			}
		case <-time.After(5 * time.Second): // events may be dropped
		}
	}
	return s.taskCallResult(t), nil
}

// taskCallResult is add_task's final result for the ended task t: its
// summary, isError unless it completed.
func (s *Server) taskCallResult(t engine.TaskState) *mcp.CallToolResult {
	mt := s.mcpTaskOf(t, "") // ended: the same for every viewer
	res := &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("task %s %s: %s", t.TaskID, mt.Status, t.TaskSummary)}},
		StructuredContent: map[string]any{"task_id": t.TaskID, "status": mt.Status, "execution_state": t.ExecutionState,
			"task_summary": t.TaskSummary, "resource_uri": taskURI(t.TaskID)},
		IsError: mt.Status != taskCompleted,
	}
	res.SetMeta(map[string]any{relatedTaskMeta: map[string]any{"taskId": t.TaskID}})
	return res
}

// taskAugmented takes a task-augmented tools/call of add_task (streamable
// HTTP, a stateful session) before the SDK, which would drop params.task:
// the MAS task is added as add_task would, and the answer is the
// CreateTaskResult of the MCP task of the same ID. Everything else passes,
// and so does a call naming a session that is not the caller's own.
func (s *Server) taskAugmented(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stateless := r.Header.Get("Mcp-Protocol-Version") >= statelessFrom
		if r.Method != http.MethodPost || (r.Header.Get("Mcp-Session-Id") == "" && !stateless) ||
			// A request of 2026-07-28 names its method and tool in its
			// headers (the SDK refuses one whose body says otherwise):
			// every other call (ask_info, reads) passes unread.
			(stateless && (r.Header.Get("Mcp-Method") != "tools/call" || r.Header.Get("Mcp-Name") != "add_task")) {
			next.ServeHTTP(w, r)
			return
		}
		// Read up to the SDK's own cap; a larger body goes on whole, for the
		// SDK to refuse.
		body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.HTTP.MaxBodyBytes+1))
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		if err != nil || int64(len(body)) > s.cfg.HTTP.MaxBodyBytes {
			// Too large, or unreadable: the SDK answers it (413, …).
			next.ServeHTTP(w, r)
			return
		}
		if stateless {
			if !s.extAugmented(w, r, body) {
				next.ServeHTTP(w, r)
			}
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
				Task      json.RawMessage `json:"task"`
			} `json:"params"`
		}
		// Most calls are not decoded twice: only a body that names
		// add_task, or may spell it with escapes, is.
		if (!bytes.Contains(body, []byte(`add_task`)) && !bytes.Contains(body, []byte(`\u`))) ||
			json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" || msg.Params.Name != "add_task" ||
			len(msg.Params.Task) == 0 || string(msg.Params.Task) == "null" || len(msg.ID) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		answer := func(result any, rpcErr *jsonrpc.Error) {
			out := map[string]any{"jsonrpc": "2.0", "id": msg.ID}
			if rpcErr != nil {
				out["error"] = rpcErr
			} else {
				out["result"] = result
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(out)
		}
		// Only the caller's own session: another operator's is an unknown
		// one (ownSessions), which the SDK answers.
		op := s.operator(r.Context(), nil)
		if owner, live := s.mcpSessions.sessionOwner(r.Header.Get("Mcp-Session-Id")); !live || owner != op {
			next.ServeHTTP(w, r)
			return
		}
		var in AddTaskIn
		dec := json.NewDecoder(bytes.NewReader(msg.Params.Arguments))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			answer(nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "add_task arguments: " + err.Error()})
			return
		}
		_, out, err := checked(&s.cfg.Limits, s.addTask)(r.Context(), &mcp.CallToolRequest{Extra: &mcp.RequestExtra{Header: r.Header}}, in)
		if err != nil {
			// No task was created: the request fails (a task-augmented
			// request's result can only be a task).
			answer(nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "add_task: " + strings.TrimSpace(err.Error())})
			return
		}
		t, _ := s.sys.Task(out.TaskID)
		answer(&createTaskResult{Task: s.mcpTaskOf(t, op)}, nil)
	})
}
