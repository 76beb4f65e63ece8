package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
)

// tooLargeStore is a MemoryStore that refuses, as the NATS store does a
// payload over its limit, every agent or task document over max bytes
// and every agent document refuse matches, with a TooLargeError naming
// the size and the limit.
type tooLargeStore struct {
	*MemoryStore
	max    int
	mu     sync.Mutex
	refuse func(*AgentState) bool
	puts   map[string]int // every write of each agent or task
	nays   map[string]int // the refused ones
}

func newTooLargeStore(max int) *tooLargeStore {
	return &tooLargeStore{MemoryStore: NewMemoryStore(), max: max, puts: map[string]int{}, nays: map[string]int{}}
}

// check counts a write of the document v of key and refuses it when it is
// over max bytes, or when matched.
func (s *tooLargeStore) check(key, what string, v any, matched bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts[key]++
	if len(b) <= s.max && !matched {
		return nil
	}
	s.nays[key]++
	return &TooLargeError{What: what + " " + key, Size: len(b), Limit: s.max, Err: errMaxPayload}
}

func (s *tooLargeStore) PutTask(ctx context.Context, t *TaskState) error {
	// The conversation is stored as messages, not in the document (as
	// the durable store does).
	doc := *t
	doc.SharedConversationPool = nil
	if err := s.check(t.TaskID, "task", &doc, false); err != nil {
		return err
	}
	return s.MemoryStore.PutTask(ctx, t)
}

func (s *tooLargeStore) PutAgent(ctx context.Context, a *AgentState) error {
	s.mu.Lock()
	refuse := s.refuse
	s.mu.Unlock()
	if err := s.check(a.AgentID, "agent", a, refuse != nil && refuse(a)); err != nil {
		return err
	}
	return s.MemoryStore.PutAgent(ctx, a)
}

// counts returns the writes of an agent or task and the refused ones.
func (s *tooLargeStore) counts(key string) (puts, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts[key], s.nays[key]
}

// logBuffer collects a System's log lines (JSON), for tests to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// matching returns the lines holding every one of parts.
func (l *logBuffer) matching(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.buf.String()) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

// line returns the first line holding every one of parts ("" if none).
func (l *logBuffer) line(parts ...string) string {
	if m := l.matching(parts...); len(m) > 0 {
		return m[0]
	}
	return ""
}

// text returns every line logged so far.
func (l *logBuffer) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestTooLargeDocumentIsBoundedHarder: when the store refuses a document
// as too large although the bound let it through (its estimate fell
// short: here the store takes less than MaxDocumentBytes), the owner does
// not write it again as it is: it bounds the document harder and writes
// it once more, at once, and bounds it so from then on. Every question
// the operator is sent is stored and shown; the store refused one write.
func TestTooLargeDocumentIsBoundedHarder(t *testing.T) {
	const docBound, questions = 64 << 10, 30
	st := newTooLargeStore(docBound * 7 / 8)
	logs := &logBuffer{}
	b := newTestbed(t, func(c *Config) {
		c.Store, c.MaxDocumentBytes = st, docBound
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	alice := b.newAgent("alice")
	id := b.newTask("ask", alice)
	ids := postQuestions(b, id, alice, questions, 1200)
	if _, refused := st.counts(b.op()); refused != 1 {
		t.Errorf("the store refused the operator's document %d times, want once (then bounded harder)", refused)
	}
	if line := logs.line("too large for the store: bounded harder", `"size":`, fmt.Sprintf(`"limit":%d`, docBound*7/8)); line == "" {
		t.Error("no log line says the document was too large and is bounded harder, with its size and the limit")
	}
	stored, _ := st.Agent(b.op())
	in, _ := b.sys.Inbox(b.op())
	for i, mid := range ids {
		if !hasPrivate(stored, mid) {
			t.Errorf("question %d is not in the operator's stored document", i)
		}
		if !inInbox(in, mid) {
			t.Errorf("question %d is not in the operator's inbox", i)
		}
	}
	// Shortened again from their head, the oldest say once where the
	// whole message is.
	for _, e := range in {
		if n := strings.Count(e.Content, "mas://tasks/"); n > 1 || (e.Shortened && (n != 1 || utf8.RuneCountInString(e.Content) > shortened+200)) {
			t.Errorf("a question kept shortened (%v) to %d characters with the note %d times: %.60q…", e.Shortened, utf8.RuneCountInString(e.Content), n, e.Content)
		}
	}
}

// TestTooLargeTaskDocumentIsBoundedHarder: as for an agent, a task's
// document the store refuses as too large although within the bound (its
// stages' long summaries) is bounded harder, its ended stages' summaries
// cut to a line, and written again: the store refused one write, every
// summary was reported, the newest is whole.
func TestTooLargeTaskDocumentIsBoundedHarder(t *testing.T) {
	const docBound, stages = 40_000, 6
	long := strings.Repeat("finding ", 750) // 6,000 bytes
	st := newTooLargeStore(docBound * 3 / 4)
	b := newTestbed(t, func(c *Config) { c.Store, c.MaxDocumentBytes = st, docBound })
	alice := b.newAgent("alice")
	b.sc.onAgent("alice", SkillSummary, func(context.Context, *ExecInput) *Output { return &Output{Completion: &long} })
	id := b.newTask("report", alice)
	var ids []string
	for i := range stages {
		sg := b.addStages(id, StageSpec{StageIntention: fmt.Sprint("stage ", i), AgentAllocation: map[string]string{alice: "collect"}})[0]
		ids = append(ids, sg)
		b.waitFor("alice's summary", func() bool { _, ok := b.stage(id, sg).CompletionSummary[alice]; return ok })
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: id, StageID: sg}); err != nil {
			t.Fatal(err)
		}
	}
	b.settle()
	if _, refused := st.counts(id); refused != 1 {
		t.Errorf("the store refused the task's document %d times, want once (then bounded harder)", refused)
	}
	stored, _ := st.Task(id)
	for i, sg := range stored.StageList {
		if sg.CompletionSummary[alice] == "" {
			t.Errorf("stage %d has no summary stored", i)
		}
	}
	if got := b.stage(id, ids[stages-1]).CompletionSummary[alice]; got != long {
		t.Errorf("the newest stage's summary is %d bytes, want it whole (%d)", len(got), len(long))
	}
}

// TestTooLargeDocumentIsWithdrawnNotRetried: a change the store refuses
// as too large even bounded harder (here: a message to the operator whose
// receipt the store refuses whatever its size, as if nothing could shed
// enough) is withdrawn, although kept changes are otherwise retried until
// the store takes them: retried as it is it would be refused for ever,
// every later change of the operator stuck behind it. The withdrawal is
// logged with the document's size and the limit; the owner is not left
// failing: a later message is stored and shown, and in a minute no write
// of the operator is tried again.
func TestTooLargeDocumentIsWithdrawnNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newTooLargeStore(1 << 20)
		logs := &logBuffer{}
		b := newTestbed(t, func(c *Config) {
			c.Store = st
			c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		})
		alice := b.newAgent("alice")
		id := b.newTask("ask", alice)
		st.mu.Lock()
		st.refuse = func(a *AgentState) bool {
			return a.ConversationPool != nil && strings.Contains(fmt.Sprint(a.ConversationPool.ConversationPrivates), "POISON")
		}
		st.mu.Unlock()
		send := func(text string) string {
			m := b.sys.newMessage("", id, alice, []string{b.op()}, text, NoRelative)
			m.NeedReply = true
			if err := b.sys.post(m); err != nil {
				t.Fatal(err)
			}
			return m.MessageID
		}
		poison := send("POISON that no bound can shed")
		synctest.Wait()
		if line := logs.line("even bounded harder", "withdrawn", `"size":`, `"limit":1048576`); line == "" {
			t.Errorf("no log line says the operator's changes were withdrawn, with the document's size and the limit")
		}
		fine := send("a question that fits")
		synctest.Wait()
		stored, _ := st.Agent(b.op())
		in, _ := b.sys.Inbox(b.op())
		if !hasPrivate(stored, fine) || !inInbox(in, fine) {
			t.Errorf("a later message to the operator is not stored (%v) or not shown (%v): stuck behind the refused one",
				hasPrivate(stored, fine), inInbox(in, fine))
		}
		if inInbox(in, poison) {
			t.Error("the withdrawn message is shown although the store does not hold it")
		}
		before, _ := st.counts(b.op())
		<-time.After(time.Minute) // fake time, passed at once: the owner's retries would come every 5 s at most
		synctest.Wait()
		if after, _ := st.counts(b.op()); after != before {
			t.Errorf("%d writes of the operator in a quiet minute: a refused document is retried", after-before)
		}
	})
}

// hasPrivate reports whether an operator's document holds a message.
func hasPrivate(a AgentState, messageID string) bool {
	if a.ConversationPool == nil {
		return false
	}
	for _, msgs := range a.ConversationPool.ConversationPrivates {
		for _, p := range msgs {
			if p.MessageID == messageID {
				return true
			}
		}
	}
	return false
}

// inInbox reports whether an inbox holds a message.
func inInbox(in []InboxEntry, messageID string) bool {
	for _, e := range in {
		if e.MessageID == messageID {
			return true
		}
	}
	return false
}
