package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// Two channels answer the operator's question at once: an elicitation
// answer (tasks/result's inputResponses) found the question awaiting a
// reply, and before it sends its answer the question is answered from
// another channel (a second elicitation answer, or send_message with
// reply_to). The first answer wins; the later elicitation answer is
// refused, saying so, and sends nothing: alice gets one message from the
// operator, not the answer and then a second "answer" as a plain message.
func TestConcurrentAnswersSendOne(t *testing.T) {
	for _, other := range []string{"elicitation", "send_message"} {
		t.Run(other, func(t *testing.T) {
			e := newEnv(t)
			f := e.startTask()
			q := f.Question.MessageID
			var otherProblems []string
			e.srv.BeforeAnswer(func(id string) {
				e.srv.BeforeAnswer(nil) // the racing answer goes straight through
				if other == "elicitation" {
					otherProblems = e.srv.AnswerQuestions(f.Operator, f.TaskID, mcp.InputResponseMap{
						id: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"reply": "first: markdown"}}})
					return
				}
				if _, err := e.stack.Sys.HumanSend(f.Operator, engine.HumanMessage{TaskID: f.TaskID, Receiver: []string{f.Alice},
					Content: "first: markdown", ReplyTo: id}); err != nil {
					otherProblems = []string{err.Error()}
				}
			})
			problems := e.srv.AnswerQuestions(f.Operator, f.TaskID, mcp.InputResponseMap{
				q: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"reply": "second: plain text"}}})
			if len(otherProblems) != 0 {
				t.Fatalf("the first answer (%s) failed: %q", other, otherProblems)
			}
			if len(problems) != 1 || !strings.Contains(problems[0], "already answered") {
				t.Errorf("the second answer's problems: %q, want one saying the question was already answered", problems)
			}
			var sent []string
			err := engine.ReadAllTrail(context.Background(), e.stack.Trail, engine.TrailQuery{TaskID: f.TaskID}, func(te engine.TrailEntry) error {
				if m := te.Message; m != nil && m.SenderID == f.Operator && contains(m.Receiver, f.Alice) {
					sent = append(sent, m.Text.Text)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(sent) != 1 || sent[0] != "first: markdown" {
				t.Errorf("the operator's messages to alice: %q, want the first answer alone", sent)
			}
		})
	}
}
