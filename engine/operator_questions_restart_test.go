package engine

// What becomes of the operator's questions when mas-mcp dies while they
// are open (kill -9 at any point).

import (
	"strings"
	"testing"
)

// TestAnswerStoredBeforeACrashMarksTheQuestionReplied: the operator
// answers alice's question; the answer is stored (humanSend persists the
// message first) and the process dies before the operator's own document,
// which marks the question replied, is written. After the restart alice
// takes the redelivered answer, and the operator's inbox no longer shows
// her question awaiting a reply: a second answer would reach her as a new
// message. A question that did not wait is known answered by the answer's
// reply_to, one that waited by its return_waiting_id too (all an answer
// stored by an older mas-mcp names).
func TestAnswerStoredBeforeACrashMarksTheQuestionReplied(t *testing.T) {
	for _, tc := range []struct {
		name            string
		waiting, legacy bool
	}{
		{name: "waiting", waiting: true},
		{name: "not waiting"},
		{name: "waiting, answer stored without reply_to", waiting: true, legacy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, store, cfg := frozenBed(t, nil)
			op := b.op()
			alice := b.newAgent("alice")
			id := b.newTask("crash", alice)
			sayTo(b, "ask op", op, "which format?", true, tc.waiting)
			b.inject(alice, id, NoRelative, false, spec(SkillSendMessage, "ask op"))
			b.waitFor("alice's question", func() bool { return len(awaitingIn(b, id)) == 1 })
			q := awaitingIn(b, id)[0]
			store.freezeAt(func(a *AgentState) bool {
				if a.AgentID != op || a.ConversationPool == nil {
					return false
				}
				for _, p := range a.ConversationPool.ConversationPrivates[alice] {
					if p.MessageID == q.MessageID && p.Replied {
						return true
					}
				}
				return false
			}, nil)
			if _, err := b.sys.HumanSend(op, HumanMessage{TaskID: id, Receiver: []string{alice}, Content: "ANSWER: Markdown", ReplyTo: q.MessageID}); err != nil {
				t.Fatal(err)
			}
			img := crashed(t, b, store)
			stored := false
			for i, m := range img.Messages {
				if m.Message == "ANSWER: Markdown" && m.ReturnWaitingID == q.ReturnWaitingID {
					stored = true
					if tc.legacy {
						img.Messages[i].ReplyTo = ""
					}
				}
			}
			if !stored {
				t.Fatalf("setup: the answer is not in the store image")
			}
			b2 := restartFrom(t, cfg, img, b.sc)
			b2.waitFor("alice to take the answer after the restart", func() bool {
				for _, c := range b2.sc.callsOf("alice", SkillProcessMessage) {
					if strings.Contains(c.Text, "ANSWER: Markdown") {
						return true
					}
				}
				return false
			})
			if open := awaitingIn(b2, id); len(open) > 0 {
				t.Errorf("after the restart alice took the operator's stored answer, yet the operator's inbox shows %d question(s) of the task awaiting a reply: %q (message %s)",
					len(open), open[0].Content, open[0].MessageID)
			}
		})
	}
}
