package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestStagesPastTheDocumentBoundAreRefused: stages are never shed from a
// task's document, so an add_stage (or retry_stage) whose stages would
// make it pass MaxDocumentBytes, after all its bound can shed, is refused
// before anything is written, with an error naming the field, the size
// and the limit — for an operator, and for a manager's step alike. The
// store refuses nothing; the task keeps its stages. Stages that fit are
// added.
func TestStagesPastTheDocumentBoundAreRefused(t *testing.T) {
	b, st, alice, id := roomBed(t)
	big := func(n int) []StageSpec {
		var out []StageSpec
		for range n {
			out = append(out, StageSpec{StageIntention: strings.Repeat("s", 12_000), AgentAllocation: map[string]string{alice: "collect"}})
		}
		return out
	}

	// The operator: four stages of 12,000 bytes pass the 40,000.
	_, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddStage, TaskID: id, Stages: big(4)})
	isErr(t, err, ErrLimit, "stages")
	for _, part := range []string{"40000", "over its limit", "most in its stage_intention"} {
		if err != nil && !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	if n := len(b.task(id).StageList); n != 0 {
		t.Errorf("after the refused add_stage the task has %d stages", n)
	}
	// Two fit.
	stages := b.addStages(id, big(2)...)

	// A retry of the running stage whose new intention does not fit.
	_, err = b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionRetryStage, TaskID: id, OldStageID: stages[0],
		NewStageIntention: strings.Repeat("r", 20_000), NewAgentAllocation: map[string]string{alice: "again"}})
	isErr(t, err, ErrLimit, "new_stage_intention")
	if n := len(b.task(id).StageList); n != 2 {
		t.Errorf("after the refused retry_stage the task has %d stages, want 2", n)
	}

	// The manager's model: its task_manager step fails, naming the field.
	b.sc.onText("stage it big", func(_ context.Context, in *ExecInput) *Output {
		return &Output{TaskInstruction: &TaskInstruction{Action: ActionAddStage, TaskID: id, Stages: big(2)}}
	})
	ids := b.inject(b.mgr(), id, NoRelative, false, spec(SkillTaskManager, "stage it big"))
	b.waitFor("the manager's add_stage step to end", func() bool { return b.stepDone(b.mgr(), ids[0]) })
	step, _ := b.step(b.mgr(), ids[0])
	if msg, _ := step.ExecuteResult["error"].(string); step.ExecutionState != StateFailed || !strings.Contains(msg, "stages") || !strings.Contains(msg, "40000") {
		t.Errorf("the manager's add_stage step is %s with error %q: want it failed naming stages and the limit", step.ExecutionState, msg)
	}
	if n := len(b.task(id).StageList); n != 2 {
		t.Errorf("after the manager's refused add_stage the task has %d stages, want 2", n)
	}
	if n := st.refused.Load(); n != 0 {
		t.Errorf("the store refused %d writes", n)
	}
}

// TestAgentProfilePastTheDocumentBoundIsRefused: an agent's name, role
// and profile are never shortened; an init_new_agent whose texts would
// take more than a quarter of the agent's document bound is refused
// naming the field and the limit, and no agent is created. A profile
// that fits is taken.
func TestAgentProfilePastTheDocumentBoundIsRefused(t *testing.T) {
	const docBound = 40_000
	st := &payloadStore{MemoryStore: NewMemoryStore(), max: docBound * 3 / 2}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = docBound })
	before := len(b.sys.AgentBriefs())
	_, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionInitNewAgent,
		AgentConfig: &AgentConfig{Template: "researcher", Name: "wordy", Profile: strings.Repeat("p", 12_000)}})
	isErr(t, err, ErrLimit, "agent_config.profile")
	if err != nil && !strings.Contains(err.Error(), "10000") {
		t.Errorf("error %q does not name the limit (10000 bytes)", err)
	}
	if n := len(b.sys.AgentBriefs()); n != before {
		t.Errorf("%d agents after the refused init_new_agent, %d before", n, before)
	}
	if _, err := b.sys.AgentInstruction(b.op(), AgentInstruction{Action: ActionInitNewAgent,
		AgentConfig: &AgentConfig{Template: "researcher", Name: "brief", Profile: strings.Repeat("p", 8_000)}}); err != nil {
		t.Errorf("a profile within the limit: %v", err)
	}
}

// TestOperatorQuestionsPastTheBoundAreShortenedNotLost: questions that
// await the operator's reply are never dropped from its conversations,
// so that nobody waits on a question the operator is not shown. Twenty
// of them, each past a thirtieth of the document's bound, would take the
// operator's document past the store's limit: the oldest are kept
// shortened to a head and a note saying where the whole message is (the
// task's conversation), the store refuses nothing, the inbox shows every
// question, the newest whole, and a shortened one can be answered.
func TestOperatorQuestionsPastTheBoundAreShortenedNotLost(t *testing.T) {
	const docBound, questions = 64 << 10, 20
	st := &payloadStore{MemoryStore: NewMemoryStore(), max: docBound * 3 / 2}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = docBound })
	alice := b.newAgent("alice")
	id := b.newTask("ask", alice)
	ids := postQuestions(b, id, alice, questions, 2000)
	if n := st.refused.Load(); n != 0 {
		t.Errorf("the store refused %d writes", n)
	}
	in, err := b.sys.Inbox(b.op())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]InboxEntry{}
	for _, e := range in {
		byID[e.MessageID] = e
	}
	for i, mid := range ids {
		e, ok := byID[mid]
		switch {
		case !ok:
			t.Errorf("question %d is not in the operator's inbox", i)
		case !e.AwaitingReply || !strings.HasPrefix(e.Content, fmt.Sprintf("QUESTION %d ", i)):
			t.Errorf("question %d in the inbox: awaiting a reply %v, text %.40q", i, e.AwaitingReply, e.Content)
		case strings.Count(e.Content, "mas://tasks/") > 1:
			t.Errorf("question %d, shortened again, holds the note more than once", i)
		}
	}
	if e := byID[ids[0]]; !e.Shortened || !strings.Contains(e.Content, "mas://tasks/"+id+"/conversation") {
		t.Errorf("the oldest question (shortened %v) does not say where the whole message is: …%s", e.Shortened, e.Content[max(0, len(e.Content)-200):])
	}
	if e := byID[ids[questions-1]]; e.Shortened || utf8.RuneCountInString(e.Content) != len("QUESTION 19 ")+2000 {
		t.Errorf("the newest question is shortened (%v) or not whole (%d characters)", e.Shortened, utf8.RuneCountInString(e.Content))
	}
	stored, _ := st.Agent(b.op())
	if raw, _ := json.Marshal(stored); len(raw) > docBound {
		t.Errorf("the operator's stored document is %d bytes, over the bound of %d", len(raw), docBound)
	}
	// The oldest, shortened, is answered as any other.
	if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: id, Receiver: []string{alice}, Content: "the answer", ReplyTo: ids[0]}); err != nil {
		t.Fatal(err)
	}
	in, _ = b.sys.Inbox(b.op())
	for _, e := range in {
		if e.MessageID == ids[0] && e.AwaitingReply {
			t.Error("the shortened question still awaits a reply after the answer")
		}
	}
}

// TestShortenedMessageIsShortenedFromItsHead: a message an operator's
// conversations keep shortened is shortened further from its head (2,000
// characters, then 400, then 80), with the note once, and not again to
// the same length.
func TestShortenedMessageIsShortenedFromItsHead(t *testing.T) {
	b := newTestbed(t, nil)
	op, _ := b.sys.agent(b.op())
	m := PrivateMessage{TaskID: "t-1", Content: "HEAD " + strings.Repeat("x", 5000)}
	note := b.sys.text("message_shortened", map[string]any{"TaskID": "t-1"})
	for _, keep := range []int{pooledHead, shortened, shortenedMore} {
		before := m.Content
		saved := op.shortenPrivate(&m, keep)
		head, ok := strings.CutSuffix(m.Content, "… "+note)
		switch {
		case !ok || !m.Shortened || strings.Contains(head, "mas://tasks/"):
			t.Fatalf("shortened to %d: %q, want the head, an ellipsis and the note once", keep, m.Content)
		case !strings.HasPrefix(head, "HEAD ") || utf8.RuneCountInString(head) != keep:
			t.Errorf("shortened to %d: a head of %d characters", keep, utf8.RuneCountInString(head))
		case saved != len(before)-len(m.Content):
			t.Errorf("shortened to %d: %d bytes saved, reported %d", keep, len(before)-len(m.Content), saved)
		}
		if op.shortenPrivate(&m, keep) != 0 || !strings.HasSuffix(m.Content, note) || strings.Count(m.Content, "mas://") != 1 {
			t.Errorf("shortened to %d again: changed to %q", keep, m.Content)
		}
	}
}

// TestEndedStagesIntentionsAreShortenedPastTheBound: a long-lived task
// whose ended stages had long intentions and goals must still take new
// stages: past its bound the ended stages' intentions and goals are
// shortened, as their summaries are (what they said stays in the trail),
// and the room an add_stage is checked against counts on it. Otherwise
// the task could never get another stage.
func TestEndedStagesIntentionsAreShortenedPastTheBound(t *testing.T) {
	b, st, alice, id := roomBed(t)
	long := func(c string) []StageSpec {
		return []StageSpec{{StageIntention: strings.Repeat(c, 12_000), AgentAllocation: map[string]string{alice: strings.Repeat("g", 2_000)}}}
	}
	b.addStages(id, long("a")...)
	b.addStages(id, long("b")...)
	// Alice runs her steps of the two stages first: their ends are marked
	// below by hand, not by finish_stage, which would drop them; pending,
	// three stages' long steps would pass her own document's bound, which
	// sheds ended steps only (a loaded machine found it).
	b.settle()
	task, _ := b.sys.task(id)
	task.mu.Lock()
	for i := range task.st.StageList {
		task.st.StageList[i].ExecutionState = StateFinished
	}
	task.changedLocked(Event{Detail: "test: stages ended"})
	task.mu.Unlock()

	if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionAddStage, TaskID: id, Stages: long("c")}); err != nil {
		t.Fatalf("a third stage after two ended ones: %v", err)
	}
	got := b.task(id)
	if len(got.StageList) != 3 {
		t.Fatalf("the task has %d stages, want 3", len(got.StageList))
	}
	if n := len(got.StageList[0].StageIntention); n > 3_000 {
		t.Errorf("the oldest ended stage's intention kept %d bytes past the bound", n)
	}
	if n := len(got.StageList[2].StageIntention); n != 12_000 {
		t.Errorf("the new stage's intention has %d bytes, want all 12,000", n)
	}
	if n := st.refused.Load(); n > 0 {
		t.Errorf("the store refused %d writes as too large", n)
	}
}

// roomBed is a testbed whose documents are bounded to docBound, on a store
// that refuses documents half as large again, with alice in a task.
func roomBed(t *testing.T) (b *testbed, st *payloadStore, alice, id string) {
	st = &payloadStore{MemoryStore: NewMemoryStore(), max: docBound * 3 / 2}
	b = newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = docBound })
	alice = b.newAgent("alice")
	return b, st, alice, b.newTask("report", alice)
}

// docBound is roomBed's MaxDocumentBytes.
const docBound = 40_000

// postQuestions has from ask the operator n questions in the task, each
// needing a reply and holding emoji emoji, and returns their IDs.
func postQuestions(b *testbed, taskID, from string, n, emoji int) []string {
	b.t.Helper()
	var ids []string
	for i := range n {
		q := b.sys.newMessage("", taskID, from, []string{b.op()}, fmt.Sprintf("QUESTION %d %s", i, strings.Repeat("😀", emoji)), NoRelative)
		q.NeedReply = true
		if err := b.sys.post(q); err != nil {
			b.t.Fatal(err)
		}
		ids = append(ids, q.MessageID)
	}
	return ids
}
