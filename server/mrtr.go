package server

import (
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// Multi round-trip requests (protocol 2026-07-28, go-sdk's mcp/mrtr.go)
// carry the operator's open questions to clients that take no server
// requests, the way elicitation carries them to older clients
// (operator_elicit.go). The rule:
//
//   - wait_for_updates, called by a 2026-07-28 client that declares form
//     elicitation while questions await the operator's answer (of the
//     call's task_id, with the daily budget question that holds it
//     wherever it was asked, as tasks/get; or of any task), first answers input_required with
//     each open question as an elicitation input request keyed by its
//     message_id (operator_questions.go gives the forms), at most
//     limits.list_items of them (_meta mas-mcp/moreInputRequests says how
//     many more wait: they come in the next round).
//   - The client's retry carries inputResponses: each answers its question
//     as answer_approval (or, for a plain question, send_message) would;
//     a dismissed form (cancel) leaves the question open. The retry then
//     waits as usual. Questions asked or answered in this round are not
//     asked again in it; those still open are asked at the next call.
//   - An answer that loses (the question was answered meanwhile from the
//     inbox, the monitor or another client) makes the call an isError
//     result that says so.
//
// Other tools and older clients are unaffected: the stateful ones get
// the questions as elicitation requests, every client in get_inbox.

// questionsInline is wait_for_updates's part of the rule: the
// input_required result to answer instead of waiting (nil: wait), or the
// error of answers that failed.
func (s *Server) questionsInline(req *mcp.CallToolRequest, op, taskID string) (*mcp.CallToolResult, error) {
	if req.ProtocolVersion() < statelessFrom {
		return nil, nil
	}
	var responses mcp.InputResponseMap
	if req.Params != nil {
		responses = req.Params.InputResponses
	}
	if problems := s.answerQuestions(op, "", responses); len(problems) > 0 {
		return nil, fmt.Errorf("answering the operator's questions: %s", strings.Join(problems, "; "))
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil || (caps.Elicitation.Form == nil && caps.Elicitation.URL != nil) {
		return nil, nil // the client cannot show a form
	}
	// A task's questions are tasks/get's (taskQuestions): with the daily
	// budget question that holds it, wherever that one was asked.
	qs := s.openQuestions(op, "")
	if taskID != "" {
		t, ok := s.sys.Task(taskID)
		if !ok {
			return nil, nil // the wait says so
		}
		qs = s.taskQuestions(op, t)
	}
	// Questions answered in this round are not asked again in it.
	open := slices.DeleteFunc(qs, func(q engine.InboxEntry) bool {
		_, asked := responses[q.MessageID]
		return asked
	})
	if len(open) == 0 {
		return nil, nil
	}
	res := &mcp.CallToolResult{}
	var more int
	if res.InputRequests, more = s.inputRequests(open); more > 0 {
		res.SetMeta(mcp.Meta{moreInputsMeta: more})
	}
	return res, nil
}
