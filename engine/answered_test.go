package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// answeredByScan is task.answered as it was before the task indexed its
// replies: a scan of the whole conversation. It is the oracle of the
// index. t.mu must be held.
func answeredByScan(t *task, agent string, ids []string) []string {
	var out []string
	for _, m := range t.st.SharedConversationPool {
		if m.ReturnWaitingID != "" && slices.Contains(ids, m.ReturnWaitingID) && slices.Contains(m.Receiver, agent) {
			out = append(out, m.ReturnWaitingID)
		}
	}
	return out
}

// asSet sorts ids and drops repeats: answered's one caller
// (engagedOrAnswered) reads its result as a set.
func asSet(ids []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(ids)))
}

// replyGen makes random conversations over a few agents and waiting IDs,
// so that replies carry the same waiting ID, reach several receivers and
// are delivered twice (the same message ID) often.
type replyGen struct {
	r      *rand.Rand
	agents []string
	waits  []string
	sent   []string // message IDs recorded so far
}

func newReplyGen(seed uint64) *replyGen {
	g := &replyGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i := range 5 {
		g.agents = append(g.agents, fmt.Sprintf("agent-%d", i))
	}
	for i := range 40 {
		g.waits = append(g.waits, fmt.Sprintf("wait-%d", i))
	}
	return g
}

// message is a new message, or one delivered before (a redelivery).
func (g *replyGen) message(taskID string) Message {
	if len(g.sent) > 0 && g.r.IntN(10) == 0 {
		// A message delivered again: the task must not log it twice.
		id := g.sent[g.r.IntN(len(g.sent))]
		return Message{TaskID: taskID, MessageID: id, SenderID: "other", Receiver: []string{g.agents[0]}, ReturnWaitingID: g.waits[0]}
	}
	m := Message{TaskID: taskID, MessageID: fmt.Sprintf("m-%d", len(g.sent)), SenderID: g.agents[g.r.IntN(len(g.agents))]}
	for range 1 + g.r.IntN(3) {
		m.Receiver = append(m.Receiver, g.agents[g.r.IntN(len(g.agents))])
	}
	if g.r.IntN(3) > 0 {
		m.ReturnWaitingID = g.waits[g.r.IntN(len(g.waits))]
	}
	g.sent = append(g.sent, m.MessageID)
	return m
}

// ask is a random agent and a random set of waiting IDs to ask about
// (some that no message carries).
func (g *replyGen) ask() (string, []string) {
	var ids []string
	for range g.r.IntN(6) {
		if g.r.IntN(8) == 0 {
			ids = append(ids, fmt.Sprintf("never-%d", g.r.IntN(4)))
			continue
		}
		ids = append(ids, g.waits[g.r.IntN(len(g.waits))])
	}
	return g.agents[g.r.IntN(len(g.agents))], ids
}

// checkAnswered compares answered with the scan for a few random asks.
func checkAnswered(tb testing.TB, t *task, g *replyGen, when string) {
	tb.Helper()
	for range 4 {
		agent, ids := g.ask()
		got := asSet(t.answered(agent, ids))
		t.mu.Lock()
		want := asSet(answeredByScan(t, agent, ids))
		t.mu.Unlock()
		if !slices.Equal(got, want) {
			tb.Fatalf("%s: answered(%s, %v) = %v, the conversation's scan = %v", when, agent, ids, got, want)
		}
	}
}

// TestAnsweredMatchesScan drives random conversations through record and
// compares answered, which reads the task's index of replies, with a scan
// of the conversation after every delivery: in an ordinary task (kept
// whole) and in the base task, whose conversation is trimmed past
// 2*baseLogLimit messages (replies that leave it answer nothing any more),
// and for a task made from a stored conversation, as a restart makes it.
func TestAnsweredMatchesScan(t *testing.T) {
	b := newTestbed(t, nil)
	for _, base := range []bool{false, true} {
		t.Run(fmt.Sprintf("base=%v", base), func(t *testing.T) {
			g := newReplyGen(uint64(len(t.Name())))
			tk := newTaskOwner(b.sys, TaskState{TaskID: newID(), TaskName: "replies", Base: base, ExecutionState: StateRunning})
			n := 600
			if base {
				n = 2*baseLogLimit + 1500 // two trims
			}
			for i := range n {
				tk.record(g.message(tk.st.TaskID))
				checkAnswered(t, tk, g, fmt.Sprintf("after delivery %d", i))
			}
			if base {
				tk.mu.Lock()
				kept := len(tk.st.SharedConversationPool)
				tk.mu.Unlock()
				if kept >= n {
					t.Fatalf("the base task kept %d of %d messages: no trim was tested", kept, n)
				}
			}

			// A restart makes the task again from its stored messages:
			// its index is made from them.
			tk.mu.Lock()
			st := tk.st.clone()
			tk.mu.Unlock()
			again := newTaskOwner(b.sys, st)
			checkAnswered(t, again, g, "restored")
			for i := range 300 {
				again.record(g.message(again.st.TaskID))
				checkAnswered(t, again, g, fmt.Sprintf("restored, after delivery %d", i))
			}
		})
	}
}

// TestAnsweredFindsReply pins the oracle itself to the rule on a
// conversation written out: a reply answers the waits of its receivers
// only, and a message without return_waiting_id answers none.
func TestAnsweredFindsReply(t *testing.T) {
	b := newTestbed(t, nil)
	tk := newTaskOwner(b.sys, TaskState{TaskID: newID(), TaskName: "replies", ExecutionState: StateRunning})
	tk.record(Message{MessageID: "1", SenderID: "b", Receiver: []string{"a"}, ReturnWaitingID: "w1"})
	tk.record(Message{MessageID: "2", SenderID: "c", Receiver: []string{"a", "d"}, ReturnWaitingID: "w2"})
	tk.record(Message{MessageID: "3", SenderID: "a", Receiver: []string{"b"}})
	for _, c := range []struct {
		agent string
		ids   []string
		want  []string
	}{
		{"a", []string{"w1", "w2", "w3"}, []string{"w1", "w2"}},
		{"d", []string{"w1", "w2"}, []string{"w2"}},
		{"b", []string{"w1", "w2", ""}, nil},
		{"a", nil, nil},
	} {
		if got := asSet(tk.answered(c.agent, c.ids)); !slices.Equal(got, asSet(c.want)) {
			t.Errorf("answered(%s, %v) = %v, want %v", c.agent, c.ids, got, c.want)
		}
	}
}

// BenchmarkAnswered is one waiting send's look at its task's conversation
// (engagedOrAnswered): with the conversation indexed, its cost is the
// waiting IDs', the same at 1k and 10k messages; a scan's grew with the
// conversation, under the task's lock.
func BenchmarkAnswered(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			tb := newTestbed(b, nil)
			tk := newTaskOwner(tb.sys, TaskState{TaskID: newID(), TaskName: "long", ExecutionState: StateRunning})
			for i := range n {
				tk.record(Message{
					TaskID: tk.st.TaskID, MessageID: fmt.Sprintf("m-%d", i), SenderID: "b", Receiver: []string{"a"},
					ReturnWaitingID: fmt.Sprintf("w-%d", i),
				})
			}
			ids := []string{"w-10", "w-new"} // one answered, one not
			if got := tk.answered("a", ids); !slices.Equal(got, []string{"w-10"}) {
				b.Fatalf("answered = %v, want [w-10]", got)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				tk.answered("a", ids)
			}
		})
	}
}
