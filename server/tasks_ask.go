package server

import (
	"context"
	"errors"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// A task's questions through tasks/result (protocol 2025-11-25, SEP-1686):
// a client that finds a task input_required calls tasks/result, and the
// receiver sends it the requests the task waits on while that call waits
// (the TypeScript SDK's tasks client does just this, and would otherwise
// wait for ever on a task that waits on it). So while tasks/result waits,
// the caller's open questions of the task (taskStatus: those its agents
// ask the caller, and the daily budget question that holds it) are put to
// the caller's session as elicitation/create requests on the call's own
// stream, tagged io.modelcontextprotocol/related-task, when the session
// declared elicitation (form). An answer goes where answer_approval or
// send_message would send it (answerQuestion): the first answer from any
// channel wins. A question answered elsewhere meanwhile is withdrawn
// (notifications/cancelled), and an answer that loses is dropped. A form
// dismissed (cancel), or one the client failed, leaves the question open
// and is not asked again in that call; the next tasks/result asks it.
// At most limits.list_items questions are asked of a call at once.
//
// One question is put to one session once at a time (sessionAsks): two
// tasks/result calls of one session share it, and so does the executor's
// own elicitation of the same question (ElicitOperator), which goes to
// another of the operator's clients or none.

// askKey is one question put to one session, named by the task and the
// form's text: the executor's elicitation (ElicitOperator) has no message
// ID, but carries the text its inbox question's form has.
type askKey struct {
	ss           *mcp.ServerSession
	taskID, text string
}

// sessionAsks holds the questions being put to sessions.
type sessionAsks struct {
	mu sync.Mutex
	m  map[askKey]bool
}

// claim marks k asked, unless it is already: then it reports false.
func (a *sessionAsks) claim(k askKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m[k] {
		return false
	}
	if a.m == nil {
		a.m = map[askKey]bool{}
	}
	a.m[k] = true
	return true
}

func (a *sessionAsks) release(k askKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, k)
}

// takesForms reports whether a session can be sent elicitation forms: a
// stateful one (2026-07-28 requests are stateless and take no server
// requests) whose client declared form elicitation.
func takesForms(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil || ip.ProtocolVersion >= statelessFrom {
		return false
	}
	e := ip.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil // neither: form (as the SDK reads it)
}

// taskAsker puts one task's questions to the session of one tasks/result
// call.
type taskAsker struct {
	s          *Server
	ctx        context.Context // the call's: its requests go on its stream
	ss         *mcp.ServerSession
	op, taskID string

	mu      sync.Mutex
	running map[string]context.CancelFunc // questions being asked, by message ID
	settled map[string]bool               // asked by this call and over: not asked again in it
	wg      sync.WaitGroup
}

// newTaskAsker returns the asker of the task's questions for op's call on
// ss, or nil when ss takes no forms.
func (s *Server) newTaskAsker(ctx context.Context, ss *mcp.ServerSession, op, taskID string) *taskAsker {
	if !takesForms(ss) {
		return nil
	}
	return &taskAsker{s: s, ctx: ctx, ss: ss, op: op, taskID: taskID,
		running: map[string]context.CancelFunc{}, settled: map[string]bool{}}
}

// ask puts each question of open (the task's, for op) not asked yet, and
// withdraws those being asked that are no longer open.
func (a *taskAsker) ask(open []engine.InboxEntry) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	still := map[string]bool{}
	for _, q := range open {
		still[q.MessageID] = true
	}
	for id, cancel := range a.running {
		if !still[id] {
			cancel()
		}
	}
	for _, q := range open {
		if len(a.running) >= max(a.s.cfg.Limits.ListItems, 1) {
			break
		}
		if a.running[q.MessageID] != nil || a.settled[q.MessageID] {
			continue
		}
		p := a.s.questionForm(q)
		key := askKey{a.ss, q.TaskID, p.Message}
		if !a.s.asks.claim(key) {
			continue // asked of this session already (another call, the executor)
		}
		p.Meta = mcp.Meta{relatedTaskMeta: map[string]any{"taskId": a.taskID}}
		ctx, cancel := context.WithCancel(a.ctx)
		a.running[q.MessageID] = cancel
		a.wg.Add(1)
		go a.put(ctx, cancel, key, q.MessageID, p)
	}
}

// put sends one question and applies its answer.
func (a *taskAsker) put(ctx context.Context, cancel context.CancelFunc, key askKey, messageID string, p *mcp.ElicitParams) {
	defer a.wg.Done()
	defer cancel()
	res, err := a.ss.Elicit(ctx, p)
	if err == nil && ctx.Err() == nil {
		err = a.s.answerQuestion(a.op, a.taskID, messageID, res)
	}
	a.s.asks.release(key)
	a.mu.Lock()
	delete(a.running, messageID)
	a.settled[messageID] = true
	a.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		// Withdrawn: answered elsewhere, or the call is over.
	case errors.Is(err, errNotAwaited):
		a.s.log.Info("tasks/result: an answer by elicitation lost to another", "task", a.taskID, "question", messageID)
	case err != nil:
		a.s.log.Warn("tasks/result: a question put by elicitation was not answered", "task", a.taskID, "question", messageID, "err", err)
	}
}

// stop withdraws the questions still being asked and waits for them.
func (a *taskAsker) stop() {
	if a == nil {
		return
	}
	a.mu.Lock()
	for _, cancel := range a.running {
		cancel()
	}
	a.mu.Unlock()
	a.wg.Wait()
}
