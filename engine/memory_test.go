package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var memoryClock = time.Date(2025, 6, 13, 10, 30, 22, 0, time.UTC)

func fixedClock() time.Time { return memoryClock }

func TestPersistentMemoryOps(t *testing.T) {
	s := bareSystem(t, func(c *Config) { c.Now = fixedClock })
	a := looseAgent(s, "x")
	a.st.PersistentMemory["20250101T000000"] = "old note"
	a.mu.Lock()
	defer a.mu.Unlock()

	report := a.applyMemoryLocked("t-1", "op", maps.Clone(a.st.PersistentMemory), []MemoryOp{
		{Add: "  first  "},
		{Add: "second"},
		{Delete: "20250101T000000"},
		{Delete: " 20250613T103022 "},
		{Delete: "19990101T000000"},
		{},
		{Add: "   "},
		{Add: "third"},
	})
	wantReport := []string{
		"added 20250613T103022",
		"added 20250613T103023",
		"deleted 20250101T000000",
		"deleted 20250613T103022",
		`delete "19990101T000000": no such key`,
		"ignored an op with neither add nor delete",
		"ignored an op with neither add nor delete",
		// The first key is free again, and the first free key is taken.
		"added 20250613T103022",
	}
	if diff := cmp.Diff(wantReport, report); diff != "" {
		t.Errorf("report mismatch (-want +got):\n%s", diff)
	}
	want := map[string]string{"20250613T103022": "third", "20250613T103023": "second"}
	if diff := cmp.Diff(want, a.st.PersistentMemory); diff != "" {
		t.Errorf("persistent_memory mismatch (-want +got):\n%s", diff)
	}
	// Each entry's task goes with it (the old note recorded none).
	wantTasks := map[string]string{"20250613T103022": "t-1", "20250613T103023": "t-1"}
	if diff := cmp.Diff(wantTasks, a.st.MemoryTasks); diff != "" {
		t.Errorf("persistent_memory_tasks mismatch (-want +got):\n%s", diff)
	}
}

func TestPersistentMemoryKeysStayUnique(t *testing.T) {
	s := bareSystem(t, func(c *Config) { c.Now = fixedClock })
	a := looseAgent(s, "x")
	a.mu.Lock()
	defer a.mu.Unlock()
	var ops []MemoryOp
	for range 3 {
		ops = append(ops, MemoryOp{Add: "same second"})
	}
	a.applyMemoryLocked("t-1", "op", nil, ops)
	a.applyMemoryLocked("t-2", "op", nil, []MemoryOp{{Add: "later call, same second"}})
	want := []string{"20250613T103022", "20250613T103023", "20250613T103024", "20250613T103025"}
	if diff := cmp.Diff(want, slices.Sorted(maps.Keys(a.st.PersistentMemory))); diff != "" {
		t.Errorf("keys mismatch (-want +got):\n%s", diff)
	}
	wantTasks := map[string]string{want[0]: "t-1", want[1]: "t-1", want[2]: "t-1", want[3]: "t-2"}
	if diff := cmp.Diff(wantTasks, a.st.MemoryTasks); diff != "" {
		t.Errorf("persistent_memory_tasks mismatch (-want +got):\n%s", diff)
	}
	for _, k := range want {
		if _, err := time.Parse(memoryKeyLayout, k); err != nil {
			t.Errorf("key %q is not %%Y%%m%%dT%%H%%M%%S: %v", k, err)
		}
	}
}

func TestDemoteHeadings(t *testing.T) {
	tests := []struct{ in, want string }{
		{"# Title", "### Title"},
		{"## Section", "### Section"},
		{"### Kept", "### Kept"},
		{"#### Deeper", "#### Deeper"},
		{"   ## Indented", "### Indented"},
		{"#hashtag and ##tags", "#hashtag and ##tags"},
		{"text\n# A\nmore\n## B\n- item", "text\n### A\nmore\n### B\n- item"},
		{"no headings at all", "no headings at all"},
	}
	for _, tt := range tests {
		if got := demoteHeadings(tt.in); got != tt.want {
			t.Errorf("demoteHeadings(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMemoryFromAStep(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Now = fixedClock })
	mgr := b.mgr()
	b.sc.onText("remember", func(context.Context, *ExecInput) *Output {
		return &Output{Memory: []MemoryOp{{Add: "# Lesson\nask early"}, {Add: "second"}, {Delete: "missing"}}}
	})
	id := b.inject(mgr, b.sys.BaseTaskID(), b.sys.BaseStageID(), false, spec(SkillThink, "remember"))[0]
	b.waitFor("the step", func() bool { return b.stepDone(mgr, id) })

	want := map[string]string{"20250613T103022": "### Lesson\nask early", "20250613T103023": "second"}
	if diff := cmp.Diff(want, b.agent(mgr).PersistentMemory); diff != "" {
		t.Errorf("persistent_memory mismatch (-want +got):\n%s", diff)
	}
	st, _ := b.step(mgr, id)
	wantReport := []string{"added 20250613T103022", "added 20250613T103023", `delete "missing": no such key`}
	if diff := cmp.Diff(jsonNorm(t, wantReport), jsonNorm(t, st.ExecuteResult["persistent_memory"])); diff != "" {
		t.Errorf("execute_result.persistent_memory mismatch (-want +got):\n%s", diff)
	}
}

// TestPersistentMemoryCap: adds past the entry or character cap are refused
// whole and reported, nothing else is dropped, MemoryFull is set until a
// block applies without refusal, and a delete first makes room.
func TestPersistentMemoryCap(t *testing.T) {
	s := bareSystem(t, func(c *Config) { c.Now = fixedClock; c.MemoryMaxEntries = 2; c.MemoryMaxChars = 10 })
	a := looseAgent(s, "x")
	a.mu.Lock()
	defer a.mu.Unlock()

	steps := []struct {
		ops      []MemoryOp
		wantKeys []string
		wantFull bool
		refused  int
	}{
		{[]MemoryOp{{Add: "12345"}, {Add: "123456"}}, []string{"20250613T103022"}, true, 1}, // chars: 5+6 > 10
		{[]MemoryOp{{Add: "abc"}}, []string{"20250613T103022", "20250613T103023"}, false, 0},
		{[]MemoryOp{{Add: "z"}}, []string{"20250613T103022", "20250613T103023"}, true, 1}, // entries: 3 > 2
		{[]MemoryOp{{Delete: "20250613T103022"}, {Add: "merged"}}, []string{"20250613T103022", "20250613T103023"}, false, 0},
	}
	for i, st := range steps {
		report := a.applyMemoryLocked("t-1", "op", maps.Clone(a.st.PersistentMemory), st.ops)
		refused := 0
		for _, r := range report {
			if strings.HasPrefix(r, "refused to add") {
				refused++
			}
		}
		if refused != st.refused {
			t.Errorf("step %d: %d refusals in %q, want %d", i, refused, report, st.refused)
		}
		if diff := cmp.Diff(st.wantKeys, slices.Sorted(maps.Keys(a.st.PersistentMemory))); diff != "" {
			t.Errorf("step %d: keys mismatch (-want +got):\n%s", i, diff)
		}
		if a.st.MemoryFull != st.wantFull {
			t.Errorf("step %d: MemoryFull = %v, want %v", i, a.st.MemoryFull, st.wantFull)
		}
	}
	if got := a.st.PersistentMemory["20250613T103022"]; got != "merged" {
		t.Errorf("entry after delete and add = %q, want %q", got, "merged")
	}
}

// TestPersistentMemoryBoundedAsAWhole: the caps are each view's, and the
// whole memory, every view's entries, stays within half the document bound
// (memoryBytes): an add past it is refused, whatever the step's view holds,
// without telling the other views' counts, until entries are deleted.
func TestPersistentMemoryBoundedAsAWhole(t *testing.T) {
	s := bareSystem(t, func(c *Config) { c.Now = fixedClock; c.MaxDocumentBytes = 4096 })
	a := looseAgent(s, "x")
	a.mu.Lock()
	defer a.mu.Unlock()
	note := strings.Repeat("n", 500) // 551 bytes with its key and task: 3 fit in 2048, not 4

	shown := func(task string) map[string]string {
		m := map[string]string{}
		for k, v := range a.st.PersistentMemory {
			if a.st.MemoryTasks[k] == task {
				m[k] = v
			}
		}
		return m
	}
	a.applyMemoryLocked("t-a", "ann", shown("t-a"), []MemoryOp{{Add: note}, {Add: note}, {Add: note}})
	if len(a.st.PersistentMemory) != 3 || a.st.MemoryFull {
		t.Fatalf("ann's view holds %d entries, full %v; want 3, not full", len(a.st.PersistentMemory), a.st.MemoryFull)
	}
	report := a.applyMemoryLocked("t-b", "bea", shown("t-b"), []MemoryOp{{Add: note}})
	if want := []string{s.text("memory_refused_total", map[string]any{"Size": 500})}; !slices.Equal(report, want) {
		t.Errorf("bea's add past the whole bound: report %q, want %q", report, want)
	}
	if !slices.Equal(a.st.MemoryFullIn, []string{"bea"}) {
		t.Errorf("memory_full_in %q, want bea's view only", a.st.MemoryFullIn)
	}
	if got := a.memorySizeLocked(); got > s.memoryBytes() {
		t.Errorf("memory takes %d bytes, past its bound %d", got, s.memoryBytes())
	}
	// ann makes room: bea's add fits, and bea's view is no longer full.
	keys := slices.Sorted(maps.Keys(shown("t-a")))
	a.applyMemoryLocked("t-a", "ann", shown("t-a"), []MemoryOp{{Delete: keys[0]}})
	if report := a.applyMemoryLocked("t-b", "bea", shown("t-b"), []MemoryOp{{Add: note}}); len(report) != 1 || !strings.HasPrefix(report[0], "added ") {
		t.Errorf("bea's add after ann's delete: report %q, want it added", report)
	}
	if a.st.MemoryFullIn != nil || a.st.MemoryFull {
		t.Errorf("memory_full_in %q, memory_full %v after bea's add; want none full", a.st.MemoryFullIn, a.st.MemoryFull)
	}
}

// TestStepMemoryIsItsTaskOwners: a step is shown only the persistent-memory
// entries the owner of its task may see — those written in that task, in
// the base task and in the other tasks the owner sees; one that records no
// task only when the owner is an admin; in the base task, which is
// everyone's, what every operator sees — and a delete of an entry it was
// not shown is refused as one of no such key.
func TestStepMemoryIsItsTaskOwners(t *testing.T) {
	b := newTestbed(t, func(c *Config) { c.Now = steppingClock(time.Second) })
	opA, base := b.op(), b.sys.BaseTaskID()
	opB, admin := b.operator("bob"), b.operator("admin")
	if err := b.sys.SetAdmins([]string{admin}); err != nil {
		t.Fatal(err)
	}
	w := b.newAgent("w")
	taskA, taskB, taskAdmin := b.ownedTask(opA, "a's", w), b.ownedTask(opB, "b's", w), b.ownedTask(admin, "admin's", w)
	b.settle()

	const noteA, noteB, noteBase, noteAdmin, legacy = "NOTE-A", "NOTE-B", "NOTE-base", "NOTE-admin", "NOTE-legacy"
	a, _ := b.sys.agent(w)
	a.mu.Lock()
	a.st.PersistentMemory["20200101T000000"] = legacy // written before entries recorded their task
	a.mu.Unlock()
	run := func(task, text string, h handler) map[string]any {
		t.Helper()
		return b.runText(w, task, text, h)
	}
	for task, note := range map[string]string{taskA: noteA, taskB: noteB, base: noteBase, taskAdmin: noteAdmin} {
		run(task, "remember "+note, func(context.Context, *ExecInput) *Output {
			return &Output{Memory: []MemoryOp{{Add: note}}}
		})
	}
	for _, tc := range []struct {
		task string
		want []string
	}{
		{taskA, []string{noteA, noteBase, legacy}}, // the default operator's: legacy entries are its
		{taskB, []string{noteB, noteBase}},
		{base, []string{noteBase}}, // everyone's: what every operator sees
		{taskAdmin, []string{noteA, noteB, noteBase, noteAdmin, legacy}},
	} {
		var shown []string
		run(tc.task, "recall in "+tc.task, func(_ context.Context, in *ExecInput) *Output {
			shown = slices.Sorted(maps.Values(in.Agent.PersistentMemory))
			for k := range in.Agent.MemoryTasks {
				if _, ok := in.Agent.PersistentMemory[k]; !ok {
					t.Errorf("the step in %s is shown the task of memory entry %s, not shown to it", tc.task, k)
				}
			}
			return &Output{}
		})
		if want := slices.Sorted(slices.Values(tc.want)); !slices.Equal(shown, want) {
			t.Errorf("the step in %s was shown memory %q, want %q", tc.task, shown, want)
		}
	}

	// A step in b's task deletes an entry of a's and one of its own: only
	// its own goes.
	keyOf := map[string]string{}
	for k, v := range b.agent(w).PersistentMemory {
		keyOf[v] = k
	}
	res := run(taskB, "forget", func(context.Context, *ExecInput) *Output {
		return &Output{Memory: []MemoryOp{{Delete: keyOf[noteA]}, {Delete: keyOf[legacy]}, {Delete: keyOf[noteB]}}}
	})
	wantReport := []string{
		fmt.Sprintf("delete %q: no such key", keyOf[noteA]),
		fmt.Sprintf("delete %q: no such key", keyOf[legacy]),
		"deleted " + keyOf[noteB],
	}
	if diff := cmp.Diff(jsonNorm(t, wantReport), jsonNorm(t, res["persistent_memory"])); diff != "" {
		t.Errorf("the deletes' report mismatch (-want +got):\n%s", diff)
	}
	got := slices.Sorted(maps.Values(b.agent(w).PersistentMemory))
	if want := slices.Sorted(slices.Values([]string{noteA, noteBase, noteAdmin, legacy})); !slices.Equal(got, want) {
		t.Errorf("memory after the deletes %q, want %q", got, want)
	}
}

// TestSharedTaskStepsHoldOnlyWhatItsReadersSee: a step in a task its owner
// shares with another operator is shown only the memory both may see: not
// what the agent learnt in the owner's other tasks, which the task's trail
// would show the other operator.
func TestSharedTaskStepsHoldOnlyWhatItsReadersSee(t *testing.T) {
	b := newTestbed(t, nil)
	ann, bob := b.op(), b.operator("bob")
	w := b.newAgent("w")
	taskOf := func(name string) string {
		id, err := b.sys.AddTask(ann, AddTaskRequest{TaskName: name, TaskIntention: "intention of " + name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.sys.AgentInstruction(ann, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList{w}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	private, shared := taskOf("private"), taskOf("shared")
	if _, err := b.sys.ShareTask(ann, shared, bob); err != nil {
		t.Fatal(err)
	}
	b.settle()
	run := func(task, text string, h handler) {
		t.Helper()
		b.sc.onText(text, h)
		id := b.inject(w, task, NoRelative, false, spec(SkillThink, text))[0]
		b.waitFor(text+" in "+task, func() bool { return b.stepDone(w, id) })
	}
	run(private, "remember", func(context.Context, *ExecInput) *Output {
		return &Output{Memory: []MemoryOp{{Add: "NOTE-private"}}}
	})
	for task, want := range map[string]bool{private: true, shared: false} {
		var shown bool
		run(task, "recall in "+task, func(_ context.Context, in *ExecInput) *Output {
			shown = slices.Contains(slices.Collect(maps.Values(in.Agent.PersistentMemory)), "NOTE-private")
			return &Output{}
		})
		if shown != want {
			t.Errorf("a step in the %s task was shown the note of ann's private task: %v, want %v", map[bool]string{true: "private", false: "shared"}[want], shown, want)
		}
	}
}

// TestMemoryCapsCountTheStepsView: the caps count the entries the step
// sees (its task owner's view), not the whole memory. An agent whose
// memory is full of one operator's entries still stores what it learns in
// another's task; a refusal there reports that view's entries and
// characters only; and the memory-full notice is the view's: told in the
// view that had an add refused until it consolidates, not in the others.
func TestMemoryCapsCountTheStepsView(t *testing.T) {
	const maxChars = 1000
	b := newTestbed(t, func(c *Config) {
		c.Now = steppingClock(time.Second)
		c.MemoryMaxEntries, c.MemoryMaxChars = 2, maxChars
	})
	ann, bea := b.op(), b.operator("bea")
	w := b.newAgent("w")
	taskA, taskB := b.ownedTask(ann, "ann's", w), b.ownedTask(bea, "bea's", w)
	b.settle()

	refusal := func(size, entries, chars int) string {
		return b.sys.text("memory_refused", map[string]any{"Entries": entries, "MaxEntries": 2, "Chars": chars, "MaxChars": maxChars, "Size": size})
	}
	var full bool // what the last step's prompt was told
	step := func(task, name string, ops ...MemoryOp) []string {
		t.Helper()
		res := b.runText(w, task, name, func(_ context.Context, in *ExecInput) *Output {
			full = in.Agent.MemoryFull
			return &Output{Memory: ops}
		})
		var report []string
		if r, ok := jsonNorm(t, res["persistent_memory"]).([]any); ok {
			for _, l := range r {
				report = append(report, fmt.Sprint(l))
			}
		}
		return report
	}
	added := func(report []string) bool {
		return len(report) > 0 && strings.HasPrefix(report[len(report)-1], "added ")
	}

	// ann's view fills: 2 entries of 100 characters, a third refused.
	annNote := strings.Repeat("a", 100)
	report := step(taskA, "fill ann's", MemoryOp{Add: annNote}, MemoryOp{Add: annNote}, MemoryOp{Add: "a3"})
	if want := refusal(2, 2, 200); len(report) != 3 || report[2] != want {
		t.Fatalf("ann's third add: report %q, want its last line %q", report, want)
	}

	// In bea's task the memory is not full: ann's entries are not its.
	report = step(taskB, "bea's first", MemoryOp{Add: "b1"})
	if full {
		t.Errorf("the step in bea's task was told its memory is full (ann's view is)")
	}
	if !added(report) {
		t.Fatalf("an add in bea's task, whose view is empty: report %q, want it added", report)
	}
	// bea's view fills in turn; the refusal counts bea's entries only.
	report = step(taskB, "bea's more", MemoryOp{Add: "b22"}, MemoryOp{Add: "b333"})
	if want := []string{report[0], refusal(4, 2, 5)}; !added(report[:1]) || !slices.Equal(report, want) {
		t.Errorf("bea's adds past the cap: report %q, want an add then %q", report, want[1])
	}
	for _, r := range report {
		if strings.Contains(r, "200") {
			t.Errorf("bea's report %q tells ann's characters", r)
		}
	}

	// Each view is told of its own refusal until it consolidates.
	mem := b.agent(w)
	var annKey string
	for k, v := range mem.PersistentMemory {
		if v == annNote {
			annKey = k
		}
	}
	if report = step(taskA, "ann consolidates", MemoryOp{Delete: annKey}, MemoryOp{Add: "merged"}); !full || !added(report) {
		t.Errorf("ann's step after its refusal: told full %v, report %q; want told, and the merge added", full, report)
	}
	if step(taskA, "ann again"); full {
		t.Errorf("ann's step after it consolidated was told its memory is full")
	}
	if step(taskB, "bea again"); !full {
		t.Errorf("bea's step after its refusal was not told its memory is full")
	}
	// An operator reading the agent sees its own view's notice.
	for op, want := range map[string]bool{ann: false, bea: true} {
		if st, _ := b.sys.AgentFor(op, w); st.MemoryFull != want {
			t.Errorf("%s reads memory_full %v, want %v", op, st.MemoryFull, want)
		}
	}
	if got := len(b.agent(w).PersistentMemory); got != 4 {
		t.Errorf("the agent holds %d entries, want 4 (2 per view)", got)
	}
}

// ownedTask adds a task of operator op with agents as participants.
func (b *testbed) ownedTask(op, name string, agents ...string) string {
	b.t.Helper()
	id, err := b.sys.AddTask(op, AddTaskRequest{TaskName: name, TaskIntention: "intention of " + name})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.sys.AgentInstruction(op, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList(agents)}); err != nil {
		b.t.Fatal(err)
	}
	return id
}

// runText runs a think step of agent in task whose text is text, handled
// by h, and returns its result once it ended.
func (b *testbed) runText(agent, task, text string, h handler) map[string]any {
	b.t.Helper()
	b.sc.onText(text, h)
	id := b.inject(agent, task, NoRelative, false, spec(SkillThink, text))[0]
	b.waitFor(text+" in "+task, func() bool { return b.stepDone(agent, id) })
	st, _ := b.step(agent, id)
	return st.ExecuteResult
}
