package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClipKeepsRunesWhole(t *testing.T) {
	s := bareSystem(t, nil)
	text := strings.Repeat("任务", 50) // 100 characters, 300 bytes
	got := s.clip(text, 15)
	if !utf8.ValidString(got) {
		t.Fatalf("clip split a character: %q", got)
	}
	if !strings.HasPrefix(got, strings.Repeat("任务", 7)+"任…") || !strings.Contains(got, "85 more characters dropped") {
		t.Errorf("clip = %q", got)
	}
	if got := s.clip(text, 100); got != text {
		t.Errorf("a text at the limit was changed: %q", got)
	}
}

func FuzzClip(f *testing.F) {
	s := bareSystem(f, nil)
	f.Add("hello world", 5)
	f.Add("任务阶段步骤", 3)
	f.Fuzz(func(t *testing.T, text string, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		got := s.clip(text, max)
		if utf8.ValidString(text) && !utf8.ValidString(got) {
			t.Fatalf("clip(%q, %d) = %q: not valid UTF-8", text, max, got)
		}
		if max > 0 && utf8.RuneCountInString(text) <= max && got != text {
			t.Fatalf("clip changed a text within the limit")
		}
		// The other truncation paths: Truncate (server, skills,
		// engine), oneLine (ask_info, notices), clipValue (results).
		cut := Truncate(text, max)
		if utf8.ValidString(text) && !utf8.ValidString(cut) {
			t.Fatalf("Truncate(%q, %d) = %q: not valid UTF-8", text, max, cut)
		}
		if n := utf8.RuneCountInString(cut); n > max+1 {
			t.Fatalf("Truncate(%q, %d) has %d characters", text, max, n)
		}
		if line := oneLine(text); utf8.ValidString(text) && !utf8.ValidString(line) {
			t.Fatalf("oneLine(%q) = %q: not valid UTF-8", text, line)
		}
		v, _ := s.clipValue(map[string]any{"a": []any{text}}, max).(map[string]any)
		if inner := v["a"].([]any)[0].(string); utf8.ValidString(text) && !utf8.ValidString(inner) {
			t.Fatalf("clipValue cut %q to invalid UTF-8", text)
		}
	})
}

// TestOperatorPoolIsBounded: an operator's conversation pool grows with
// every notice over the MAS's life; its document stays under the limit,
// shedding the oldest entries, and keeps what still awaits a reply.
func TestOperatorPoolIsBounded(t *testing.T) {
	const limit = 64 << 10
	st := NewMemoryStore()
	b := newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = limit })
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	q := b.sys.newMessage("", id, alice, []string{b.op()}, "QUESTION that awaits a reply", NoRelative)
	q.NeedReply = true
	if err := b.sys.post(q); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		b.sys.tellOperator(b.op(), "llm_refused", map[string]any{"Reason": strings.Repeat("x", 1000) + string(rune('a'+i%26))})
	}
	stored, _ := st.Agent(b.op())
	raw, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > limit {
		t.Errorf("the operator's document is %d bytes, over the limit of %d", len(raw), limit)
	}
	if !b.inboxHas("QUESTION that awaits a reply") {
		t.Error("the question awaiting a reply was dropped")
	}
	in, _ := b.sys.Inbox(b.op())
	if len(in) < 10 || len(in) > 100 {
		t.Errorf("%d inbox entries kept, want the newest few dozen", len(in))
	}
}

// TestAskInfoKeepsChineseWhole: texts of 80 Chinese characters come back
// whole and valid UTF-8 (they used to be cut at 160 bytes).
func TestAskInfoKeepsChineseWhole(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	intention := strings.Repeat("研究任务阶段目标", 10) // 80 characters
	id, err := b.sys.AddTask(b.op(), AddTaskRequest{TaskName: "报告", TaskIntention: intention})
	if err != nil {
		t.Fatal(err)
	}
	b.join(id, alice)
	goal := strings.Repeat("找到资料", 20) // 80 characters
	b.addStages(id, StageSpec{StageIntention: intention, AgentAllocation: map[string]string{alice: goal}})
	res, err := b.sys.Query(b.op(), AskInfoQuery{Type: QueryTaskInfo, TaskID: id})
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(res.Markdown) {
		t.Fatal("the answer is not valid UTF-8")
	}
	for _, whole := range []string{intention, goal} {
		if !strings.Contains(res.Markdown, whole) {
			t.Errorf("the answer does not hold %q whole:\n%s", whole, res.Markdown)
		}
	}
}

// TestAskInfoAgentShowsSteps: ask_info agent lists the agent's steps one
// line each, and with step_id shows one step's full result (what a folded
// history points the agent to).
func TestAskInfoAgentShowsSteps(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	long := strings.Repeat("finding ", 500) + "THE END"
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		return &Output{AddSteps: []StepSpec{spec(SkillThink, "think")}}
	})
	b.sc.onAgent("alice", SkillThink, func(context.Context, *ExecInput) *Output {
		return &Output{Result: map[string]any{"think": long}}
	})
	id := b.newTask("report", alice)
	b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	var think StepState
	b.waitFor("the think step", func() bool {
		steps := b.steps(alice, func(s StepState) bool { return s.Executor == SkillThink && s.ExecutionState == StateFinished })
		if len(steps) == 1 {
			think = steps[0]
		}
		return len(steps) == 1
	})
	res, err := b.sys.Query(alice, AskInfoQuery{Type: QueryAgent, AgentID: StringList{alice}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Markdown, think.StepID+" [finished] think") || strings.Contains(res.Markdown, "THE END") {
		t.Errorf("the agent's steps are not listed one line each:\n%s", res.Markdown)
	}
	res, err = b.sys.Query(alice, AskInfoQuery{Type: QueryAgent, AgentID: StringList{alice}, StepID: think.StepID})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Markdown, "THE END") {
		t.Errorf("step_id does not show the full result:\n%.300s", res.Markdown)
	}
	_, err = b.sys.Query(alice, AskInfoQuery{Type: QueryAgent, AgentID: StringList{alice}, StepID: "nope"})
	isErr(t, err, ErrNotFound, "nope")
}

// TestTaskInfoShowsTheConversationTail: task_info carries a readable tail
// of the task's conversation (it used to give only its length).
func TestTaskInfoShowsTheConversationTail(t *testing.T) {
	b := newTestbed(t, nil)
	id := b.newTask("report")
	if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: id, Receiver: []string{b.mgr()}, Content: "MARKER: use the 2024 figures"}); err != nil {
		t.Fatal(err)
	}
	res, err := b.sys.Query(b.mgr(), AskInfoQuery{Type: QueryTaskInfo, TaskID: id})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Markdown, "- conversation (") || !strings.Contains(res.Markdown, "MARKER: use the 2024 figures") {
		t.Errorf("task_info lacks the conversation tail:\n%s", res.Markdown)
	}
	if ti := res.Data.(TaskInfo); len(ti.Conversation) != 1 || ti.Conversation[0].SenderID != b.op() {
		t.Errorf("conversation %+v, want the operator's message (instructions left out)", ti.Conversation)
	}
}

// TestLongStageKeepsTheAgentDocumentBounded: an agent whose stage runs
// many steps with long results (50 × 10,000 characters, far past the
// limit) keeps its stored document under MaxDocumentBytes: the store,
// which refuses anything larger, never refuses a write, every step
// finishes, and what the store holds is what clients see.
func TestLongStageKeepsTheAgentDocumentBounded(t *testing.T) {
	longStageIsBounded(t, strings.Repeat("y", 10_000), 50)
}

// TestEscapedResultsKeepTheAgentDocumentBounded: results whose characters
// JSON writes as more than their bytes (control characters as six bytes,
// \u0001; quotes, backslashes and newlines as two; U+2028 as \u2028) are
// bounded by their stored size: every step finishes (its outcome stored,
// not refused), and the store never refuses the agent's document.
func TestEscapedResultsKeepTheAgentDocumentBounded(t *testing.T) {
	for _, c := range []struct{ name, text string }{
		{"control characters", "\x01"},
		{"quotes, backslashes and newlines", "\"\\\n"},
		{"line separators", "\u2028"},
	} {
		t.Run(c.name, func(t *testing.T) {
			longStageIsBounded(t, strings.Repeat(c.text, 5_000/len([]rune(c.text))), 20)
		})
	}
}

// longStageIsBounded runs a stage of steps think steps, each with long as
// its result, against a store that refuses a document over the limit.
func longStageIsBounded(t *testing.T, long string, steps int) {
	const limit = 64 << 10
	st := &payloadStore{MemoryStore: NewMemoryStore(), max: limit}
	b := newTestbed(t, func(c *Config) { c.Store = st; c.MaxDocumentBytes = limit })
	alice := b.newAgent("alice")
	b.sc.onAgent("alice", SkillPlanning, func(context.Context, *ExecInput) *Output {
		var specs []StepSpec
		for range steps {
			specs = append(specs, spec(SkillThink, "think at length"))
		}
		return &Output{AddSteps: specs}
	})
	b.sc.onAgent("alice", SkillThink, func(context.Context, *ExecInput) *Output {
		return &Output{Result: map[string]any{"think": long}}
	})
	id := b.newTask("report", alice)
	stages := b.addStages(id, StageSpec{StageIntention: "collect", AgentAllocation: map[string]string{alice: "collect facts"}})
	b.waitFor("alice's summary", func() bool {
		_, ok := b.stage(id, stages[0]).CompletionSummary[alice]
		return ok
	})
	b.settle()
	if n := st.refused.Load(); n != 0 {
		t.Errorf("the store refused %d writes over %d bytes", n, limit)
	}
	thinks := b.steps(alice, func(s StepState) bool { return s.Executor == SkillThink })
	if len(thinks) != steps {
		t.Fatalf("%d think steps, want %d\n%s", len(thinks), steps, b.dump())
	}
	for _, s := range thinks {
		if s.ExecutionState != StateFinished {
			t.Fatalf("think step %s %s: %v", s.StepID, s.ExecutionState, s.ExecuteResult["error"])
		}
	}
	stored, ok := st.Agent(alice)
	if !ok {
		t.Fatal("alice is not in the store")
	}
	raw, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > limit {
		t.Errorf("alice's stored document is %d bytes, over the limit of %d", len(raw), limit)
	}
	// The oldest results were shortened, with the note.
	if r, _ := thinks[0].ExecuteResult["think"].(string); len(r) >= len(long) || !strings.Contains(r, "characters dropped") {
		t.Errorf("the oldest think result was not shortened with a note (%d characters)", len(r))
	}
	seen, err := json.Marshal(b.agent(alice))
	if err != nil {
		t.Fatal(err)
	}
	if string(seen) != string(raw) {
		t.Error("what clients see of alice differs from what the store holds")
	}
}
