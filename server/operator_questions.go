package server

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// The operator's open questions as elicitation forms, for clients that
// take no server requests (protocol 2026-07-28): a task's inputRequests
// (tasks/get) and wait_for_updates's input_required result. The key of a
// question is its message_id (get_inbox), unique over a task's life as
// the tasks extension asks. An answer goes where answer_approval (or, for
// an agent's plain question, send_message) would send it, so the first
// answer from any channel wins and a later one is refused.

// approvalForm is the form of an approval question asked without one (the
// budget questions); the risk gate's own carries the same fields.
var approvalForm = map[string]any{"type": "object", "required": []string{"approve"}, "properties": map[string]any{
	"approve": map[string]any{"type": "boolean", "title": "Approve", "description": "approve (true) or deny (false)"},
	"note":    map[string]any{"type": "string", "title": "Note", "description": "shown to the agent (optional)"},
}}

// replyForm is the form of an agent's plain question: the reply's text.
var replyForm = map[string]any{"type": "object", "required": []string{"reply"}, "properties": map[string]any{
	"reply": map[string]any{"type": "string", "title": "Reply", "description": "your answer, sent to the agent"},
}}

// errNotAwaited is answerQuestion's error for a question that was
// answered already (from any channel) or is no longer waited for.
var errNotAwaited = errors.New("already answered, or no longer awaited")

// openQuestions returns op's questions awaiting a reply, of the task
// taskID ("": of every task), as get_inbox orders them.
func (s *Server) openQuestions(op, taskID string) []engine.InboxEntry {
	in, err := s.sys.Inbox(op)
	if err != nil {
		return nil
	}
	var out []engine.InboxEntry
	for _, e := range in {
		if e.AwaitingReply && (taskID == "" || e.TaskID == taskID) {
			out = append(out, e)
		}
	}
	return out
}

// taskQuestions returns op's questions awaiting a reply of the task t, as
// get_inbox orders them: those asked in it and, while op's daily budget
// holds it, the daily budget question, which may be asked in another of
// op's tasks (every task the hold pauses waits on that one answer).
func (s *Server) taskQuestions(op string, t engine.TaskState) []engine.InboxEntry {
	daily := s.dailyQuestionOf(op, t)
	var out []engine.InboxEntry
	for _, e := range s.openQuestions(op, "") {
		if e.TaskID == t.TaskID || (daily != "" && e.MessageID == daily) {
			out = append(out, e)
		}
	}
	return out
}

// dailyQuestionOf is the message ID of the question about op's daily
// budget while that budget holds the task t ("": it does not).
func (s *Server) dailyQuestionOf(op string, t engine.TaskState) string {
	if t.Budget.HeldFor != engine.HeldForDaily || cmp.Or(t.Operator, s.sys.OperatorID()) != op {
		return ""
	}
	_, id, _ := s.sys.DailyQuestion(op)
	return id
}

// moreInputsMeta is the _meta key of a result whose inputRequests were
// cut: how many more questions wait.
const moreInputsMeta = "mas-mcp/moreInputRequests"

// inputRequests puts questions as elicitation requests keyed by message_id:
// the first limits.list_items of them, as many as one answer may carry
// (answerQuestions); more is how many were left for later (asked once these
// are answered).
func (s *Server) inputRequests(qs []engine.InboxEntry) (_ mcp.InputRequestMap, more int) {
	if n := s.cfg.Limits.ListItems; len(qs) > n {
		qs, more = qs[:n], len(qs)-n
	}
	out := mcp.InputRequestMap{}
	for _, q := range qs {
		out[q.MessageID] = s.questionForm(q)
	}
	return out, more
}

// questionForm is the elicitation form of the question q: its own (the
// executor's forms, engine.QuestionForm), else an approval's or a reply's.
func (s *Server) questionForm(q engine.InboxEntry) *mcp.ElicitParams {
	p := &mcp.ElicitParams{Mode: "form", Message: q.Content, RequestedSchema: replyForm}
	if f, ok := s.sys.QuestionForm(q.MessageID); ok {
		p.Message, p.RequestedSchema = f.Message, f.Schema
	} else if q.Approval {
		p.RequestedSchema = approvalForm
	}
	return p
}

// answerQuestions answers op's questions (of the task taskID, "": any)
// with the elicitation results keyed by their message IDs, in key order,
// and returns what went wrong with each answer that failed (the others
// are applied).
//
// The answers are bounded like the tool inputs they stand for: more of them
// than a list may hold are refused together, an answer over a limit alone.
func (s *Server) answerQuestions(op, taskID string, responses mcp.InputResponseMap) []string {
	l := &s.cfg.Limits
	all := inputCheck{l: l}
	if all.list("inputResponses", len(responses)); all.err != nil {
		return []string{all.err.Error() + "; none was applied"}
	}
	var problems []string
	for _, key := range slices.Sorted(maps.Keys(responses)) {
		field := fmt.Sprintf("inputResponses[%q]", clip(key))
		r, ok := responses[key].(*mcp.ElicitResult)
		if !ok {
			problems = append(problems, field+": want an elicitation result (action, content)")
			continue
		}
		c := inputCheck{l: l}
		c.name(field+" key", key)
		c.elicitAnswer(field, r)
		if c.err != nil {
			problems = append(problems, c.err.Error())
			continue
		}
		if err := s.answerQuestion(op, taskID, key, r); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return problems
}

// answerQuestion answers op's question messageID (of the task taskID, ""
// any: asked in it, or the daily budget question that holds it,
// taskQuestions) with an elicitation's result: an approval or a form
// through AnswerApproval, a plain question with a reply to its sender. A
// result whose action is cancel (the form was dismissed) leaves the
// question open.
func (s *Server) answerQuestion(op, taskID, messageID string, r *mcp.ElicitResult) error {
	in, err := s.sys.Inbox(op)
	if err != nil {
		return err
	}
	ofTask := func(e engine.InboxEntry) bool {
		if taskID == "" || e.TaskID == taskID {
			return true
		}
		t, ok := s.sys.Task(taskID)
		return ok && s.dailyQuestionOf(op, t) == e.MessageID
	}
	var q *engine.InboxEntry
	for i := range in {
		if in[i].MessageID == messageID && ofTask(in[i]) {
			q = &in[i]
			break
		}
	}
	switch {
	case q == nil && taskID != "":
		return fmt.Errorf("question %q: no such question of task %s for operator %s", messageID, taskID, op)
	case q == nil:
		return fmt.Errorf("question %q: no such question for operator %s", messageID, op)
	case !q.AwaitingReply:
		return fmt.Errorf("question %q: %w", messageID, errNotAwaited)
	}
	switch r.Action {
	case "cancel":
		return nil
	case "accept", "decline":
	default:
		return fmt.Errorf("question %q: action %q: want accept, decline or cancel", messageID, r.Action)
	}
	if f := s.beforeAnswer.Load(); f != nil {
		(*f)(messageID)
	}
	accept := r.Action == "accept"
	if !q.Approval {
		reply, _ := r.Content["reply"].(string)
		if reply = strings.TrimSpace(reply); !accept || reply == "" {
			reply = "(the operator declined to answer)"
		}
		// AnswerOnly: the check above and the send are not one step; an
		// answer from another channel meanwhile makes this one refused
		// rather than sent again as a plain message.
		_, err := s.sys.HumanSend(op, engine.HumanMessage{TaskID: q.TaskID, Receiver: []string{q.SenderID},
			Content: reply, StageRelative: q.StageRelative, ReplyTo: messageID, AnswerOnly: true})
		if errors.Is(err, engine.ErrNotAwaited) {
			return fmt.Errorf("question %q: %w", messageID, errNotAwaited)
		}
		return err
	}
	var d engine.Decision
	if f, ok := s.sys.QuestionForm(messageID); ok && f.Arguments {
		d.Approve = accept
		if accept {
			d.Arguments = r.Content
		}
	} else {
		approve, _ := r.Content["approve"].(bool)
		note, _ := r.Content["note"].(string)
		d.Approve, d.Note = accept && approve, note
	}
	if err := s.sys.AnswerApproval(op, messageID, d); err != nil {
		if errors.Is(err, engine.ErrInvalid) {
			// Answered meanwhile, from another channel.
			return fmt.Errorf("question %q: %w", messageID, errNotAwaited)
		}
		return err
	}
	return nil
}
