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

	report := a.applyMemoryLocked("t-1", maps.Clone(a.st.PersistentMemory), []MemoryOp{
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
	a.applyMemoryLocked("t-1", nil, ops)
	a.applyMemoryLocked("t-2", nil, []MemoryOp{{Add: "later call, same second"}})
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
		report := a.applyMemoryLocked("t-1", maps.Clone(a.st.PersistentMemory), st.ops)
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
	taskOf := func(op, name string) string {
		id, err := b.sys.AddTask(op, AddTaskRequest{TaskName: name, TaskIntention: "intention of " + name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.sys.AgentInstruction(op, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: id, Agents: StringList{w}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	taskA, taskB, taskAdmin := taskOf(opA, "a's"), taskOf(opB, "b's"), taskOf(admin, "admin's")
	b.settle()

	const noteA, noteB, noteBase, noteAdmin, legacy = "NOTE-A", "NOTE-B", "NOTE-base", "NOTE-admin", "NOTE-legacy"
	a, _ := b.sys.agent(w)
	a.mu.Lock()
	a.st.PersistentMemory["20200101T000000"] = legacy // written before entries recorded their task
	a.mu.Unlock()
	run := func(task, text string, h handler) map[string]any {
		t.Helper()
		b.sc.onText(text, h)
		id := b.inject(w, task, NoRelative, false, spec(SkillThink, text))[0]
		b.waitFor(text+" in "+task, func() bool { return b.stepDone(w, id) })
		st, _ := b.step(w, id)
		return st.ExecuteResult
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
