package engine

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestOwnershipRule: the operator who adds a task owns it; another operator
// may neither manage it, add participants, message inside it, share it, nor
// see it, until the owner shares it; admins and the MAS's agents may; the
// base task is everyone's.
func TestOwnershipRule(t *testing.T) {
	b := newTestbed(t, nil)
	owner, base, mgr := b.op(), b.sys.BaseTaskID(), b.mgr()
	w1 := b.newAgent("w1")
	other, admin := b.operator("other"), b.operator("admin")
	if err := b.sys.SetAdmins([]string{admin}); err != nil {
		t.Fatal(err)
	}
	if err := b.sys.SetAdmins([]string{w1}); err == nil {
		t.Errorf("SetAdmins accepted an LLM agent")
	}
	task := b.newTask("owned", w1)
	b.settle()
	const rule = "only its owner, operators it is shared with and admins may manage it"

	for _, tc := range []struct {
		who  string
		task string
		ok   bool
	}{
		{owner, task, true}, {admin, task, true}, {mgr, task, true}, {w1, task, true},
		{other, task, false}, {other, base, true}, {"a-404", task, false},
	} {
		err := b.sys.MayOperate(tc.who, tc.task)
		if tc.ok != (err == nil) || tc.ok != b.sys.Visible(tc.who, tc.task) {
			t.Errorf("MayOperate(%s, %s) = %v, Visible %v; want allowed %v", tc.who, tc.task, err, b.sys.Visible(tc.who, tc.task), tc.ok)
		}
		if !tc.ok {
			isErr(t, err, ErrForbidden, "owned by operator "+owner+"; "+rule)
		}
	}

	// Every operator action of the other operator is refused, naming the rule.
	seq := b.sys.EventSeq()
	for name, call := range map[string]func() error{
		"add_stage": func() error {
			_, err := b.sys.TaskInstruction(other, TaskInstruction{Action: ActionAddStage, TaskID: task,
				Stages: []StageSpec{{StageIntention: "x", AgentAllocation: map[string]string{w1: "x"}}}})
			return err
		},
		"cancel_task": func() error {
			_, err := b.sys.TaskInstruction(other, TaskInstruction{Action: ActionCancelTask, TaskID: task})
			return err
		},
		"finish_task": func() error {
			_, err := b.sys.TaskInstruction(other, TaskInstruction{Action: ActionFinishTask, TaskID: task, Summary: "x"})
			return err
		},
		"add_task_participant": func() error {
			_, err := b.sys.AgentInstruction(other, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: task, Agents: StringList{other}})
			return err
		},
		"send_message": func() error {
			_, err := b.sys.HumanSend(other, HumanMessage{TaskID: task, Receiver: []string{w1}, Content: "x"})
			return err
		},
		"share": func() error { _, err := b.sys.ShareTask(other, task, other); return err },
		"task_info": func() error {
			_, err := b.sys.Query(other, AskInfoQuery{Type: QueryTaskInfo, TaskID: task})
			return err
		},
		"TaskFor": func() error { _, err := b.sys.TaskFor(other, task); return err },
	} {
		err := call()
		if err == nil {
			t.Errorf("%s by another operator: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), rule) && !strings.Contains(err.Error(), "no such task visible to operator "+other) {
			t.Errorf("%s by another operator: error %q does not name the rule", name, err)
		}
	}
	if got := b.sys.EventSeq(); got != seq {
		t.Errorf("refused actions changed the state (%d events)", got-seq)
	}
	if slices.ContainsFunc(b.sys.TasksFor(other), func(ts TaskState) bool { return ts.TaskID == task }) {
		t.Errorf("TasksFor(other) lists the owner's task")
	}
	if !slices.ContainsFunc(b.sys.TasksFor(other), func(ts TaskState) bool { return ts.TaskID == base }) {
		t.Errorf("TasksFor(other) lacks the base task")
	}
	res, err := b.sys.Query(other, AskInfoQuery{Type: QueryAssignedTaskAndStageInfo})
	if err != nil || slices.ContainsFunc(res.Data.([]TaskInfo), func(ti TaskInfo) bool { return ti.TaskID == task }) {
		t.Errorf("assigned_task_and_stage_info for the other operator: %v %v", res, err)
	}

	// The owner shares the task: the other operator joins its group and may act.
	out, err := b.sys.ShareTask(owner, task, other)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.task(task); !slices.Contains(got.SharedWith, other) || !slices.Contains(got.TaskGroup, other) {
		t.Errorf("after share: shared_with %v, group %v; want %s in both (result %v)", got.SharedWith, got.TaskGroup, other, out)
	}
	if err := b.sys.MayOperate(other, task); err != nil {
		t.Errorf("after share: %v", err)
	}
	if _, err := b.sys.HumanSend(other, HumanMessage{TaskID: task, Receiver: []string{w1}, Content: "hello from a sharer", NeedReply: false}); err != nil {
		t.Errorf("after share, send_message: %v", err)
	}
	if _, err := b.sys.ShareTask(owner, base, other); err == nil {
		t.Errorf("sharing the base task: accepted")
	}
	if _, err := b.sys.ShareTask(owner, task, w1); err == nil {
		t.Errorf("sharing with an LLM agent: accepted")
	}
}

// TestPrivateMessagesFiltered: a message to an operator is seen by that
// operator and its sender only: not in another operator's view of the
// task's conversation, nor in an agent's steps that carry it.
func TestPrivateMessagesFiltered(t *testing.T) {
	b := newTestbed(t, nil)
	op, base := b.op(), b.sys.BaseTaskID()
	w1 := b.newAgent("w1")
	b.join(base, w1)
	other, err := b.sys.AddOperator("other")
	if err != nil {
		t.Fatal(err)
	}
	b.settle()
	const marker = "MARKER-private-to-other \"quoted\""
	m := b.sys.newMessage("", base, w1, []string{other}, marker, NoRelative)
	if err := b.sys.post(m); err != nil {
		t.Fatal(err)
	}
	step := b.inject(w1, base, NoRelative, false, StepSpec{StepIntention: "relay", Type: StepSkill, Executor: SkillSendMessage, TextContent: "tell: " + marker})
	// A tool step whose call a risk-gate question to other quotes.
	gate := b.sys.newMessage("", base, w1, []string{other}, `Approve delete_file {"path":"/gate-args"}?`, NoRelative)
	if err := b.sys.post(gate); err != nil {
		t.Fatal(err)
	}
	if a, ok := b.sys.agent(w1); ok {
		a.mu.Lock()
		ids := a.addStepsLocked(base, NoRelative, []StepSpec{{StepIntention: "delete", Type: StepTool, Executor: "files"}}, false, "")
		for i := range a.st.AgentStep.StepList {
			if a.st.AgentStep.StepList[i].StepID == ids[0] {
				a.st.AgentStep.StepList[i].InstructionContent = &ToolCall{ToolName: "delete_file", Arguments: map[string]any{"path": "/gate-args"}}
			}
		}
		a.st.AgentStep.TodoList = slices.DeleteFunc(a.st.AgentStep.TodoList, func(id string) bool { return id == ids[0] })
		a.mu.Unlock()
	}
	b.waitFor("the message in the conversation", func() bool {
		return strings.Contains(jsonOf(t, b.task(base).SharedConversationPool), "MARKER")
	})

	for _, tc := range []struct {
		viewer string
		sees   bool
	}{{op, false}, {other, true}, {w1, true}} {
		ts, err := b.sys.TaskFor(tc.viewer, base)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{
			"gate arguments": strings.Contains(jsonOf(t, b.sys.AgentsFor(tc.viewer)), "gate-args"),
			"conversation":   strings.Contains(jsonOf(t, ts), "MARKER"),
			"agent":          strings.Contains(jsonOf(t, mustAgent(t, b.sys, tc.viewer, w1)), "MARKER"),
			"agents":         strings.Contains(jsonOf(t, b.sys.AgentsFor(tc.viewer)), "MARKER"),
			"task list":      strings.Contains(jsonOf(t, b.sys.TasksFor(tc.viewer)), "MARKER"),
		}
		for what, saw := range got {
			if saw != tc.sees {
				t.Errorf("viewer %s, %s: sees the marker %v, want %v", tc.viewer, what, saw, tc.sees)
			}
		}
		if tc.viewer == op {
			a, _ := b.sys.AgentFor(op, w1)
			if slices.Contains(a.AgentStep.TodoList, step[0]) {
				t.Errorf("the hidden step stays in w1's todo list as op sees it")
			}
		}
	}
	res, err := b.sys.Query(op, AskInfoQuery{Type: QueryAgent, AgentID: StringList{w1, other}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(jsonOf(t, res), "MARKER") {
		t.Errorf("ask_info agent shows op the message to other")
	}
}

func mustAgent(t *testing.T, s *System, viewer, id string) AgentState {
	t.Helper()
	a, ok := s.AgentFor(viewer, id)
	if !ok {
		t.Fatalf("no agent %s", id)
	}
	return a
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPersistentMemoryFiltered: an LLM agent that works for two operators
// memorises something in a task of each; each operator sees in the agent's
// persistent memory only what it wrote in tasks that operator sees (and in
// the base task, which everyone sees), admins and the MAS's agents see it
// all, and the agent's steps in a task are shown what the task's operator
// sees (TestStepMemoryIsItsTaskOwners). After a restart from the
// store it is the same, and an entry that records no task (written before
// entries recorded theirs) is shown to admins and the MAS's agents only.
func TestPersistentMemoryFiltered(t *testing.T) {
	st := NewMemoryStore()
	var cfg Config
	b := newTestbed(t, func(c *Config) { c.Store = st; c.Now = steppingClock(time.Second); cfg = *c })
	opA, base, mgr := b.op(), b.sys.BaseTaskID(), b.mgr()
	opB, admin := b.operator("bob"), b.operator("admin")
	if err := b.sys.SetAdmins([]string{admin}); err != nil {
		t.Fatal(err)
	}
	w := b.newAgent("w")
	taskA := b.newTask("a's", w)
	taskB, err := b.sys.AddTask(opB, AddTaskRequest{TaskName: "b's", TaskIntention: "intention of b's"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.sys.AgentInstruction(opB, AgentInstruction{Action: ActionAddTaskParticipant, TaskID: taskB, Agents: StringList{w}}); err != nil {
		t.Fatal(err)
	}
	b.settle()

	const noteA, noteB, noteBase, legacy = "NOTE-of-a's-task", "NOTE-of-b's-task", "NOTE-of-the-base-task", "NOTE-legacy"
	events := b.sys.Subscribe(1 << 12)
	defer events.Close()
	var prompted []string // what the agent's last step had in its memory
	for task, note := range map[string]string{taskA: noteA, taskB: noteB, base: noteBase} {
		b.sc.onText("remember "+note, func(_ context.Context, in *ExecInput) *Output {
			return &Output{Memory: []MemoryOp{{Add: note}}}
		})
		id := b.inject(w, task, NoRelative, false, spec(SkillThink, "remember "+note))[0]
		b.waitFor("the memory step in "+task, func() bool { return b.stepDone(w, id) })
	}
	b.sc.onText("recall", func(_ context.Context, in *ExecInput) *Output {
		prompted = slices.Sorted(maps.Values(in.Agent.PersistentMemory))
		return &Output{}
	})
	recall := b.inject(w, taskA, NoRelative, false, spec(SkillThink, "recall"))[0]
	b.waitFor("the recall step", func() bool { return b.stepDone(w, recall) })
	b.settle()
	if want := slices.Sorted(slices.Values([]string{noteBase, noteA})); !slices.Equal(prompted, want) {
		t.Errorf("the agent's prompt in a's task had memory %q, want %q", prompted, want)
	}

	// The change of the agent's memory is told to those who see the task
	// it was made in.
	hang := time.After(20 * time.Second)
	for seen := 0; seen < 3; {
		select {
		case ev := <-events.C:
			if ev.AgentID != w || ev.Detail != "persistent_memory" {
				continue
			}
			seen++
			for who, sees := range map[string]bool{opA: ev.TaskID == taskA || ev.TaskID == base, opB: ev.TaskID == taskB || ev.TaskID == base, admin: true} {
				if got := b.sys.EventVisible(who, ev); got != sees {
					t.Errorf("the memory change in task %s: visible to %s %v, want %v", ev.TaskID, who, got, sees)
				}
			}
		case <-hang:
			t.Fatalf("the memory changes' events never came")
		}
	}

	check := func(b *testbed, when string, all []string) {
		t.Helper()
		for _, tc := range []struct {
			who  string
			want []string
		}{
			// opA is the default operator: an entry with no recorded
			// task (legacy, from a MAS of one operator) is its too.
			{opA, slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == noteB })},
			{opB, []string{noteBase, noteB}},
			{admin, all},
			{mgr, all},
		} {
			tc.want = slices.Sorted(slices.Values(tc.want))
			a := mustAgent(t, b.sys, tc.who, w)
			got := slices.Sorted(maps.Values(a.PersistentMemory))
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: %s sees memory %q, want %q", when, tc.who, got, tc.want)
			}
			for k := range a.MemoryTasks {
				if _, ok := a.PersistentMemory[k]; !ok {
					t.Errorf("%s: %s sees the task of memory entry %s, hidden from it", when, tc.who, k)
				}
			}
			i := slices.IndexFunc(b.sys.AgentsFor(tc.who), func(a AgentState) bool { return a.AgentID == w })
			if got := slices.Sorted(maps.Values(b.sys.AgentsFor(tc.who)[i].PersistentMemory)); !slices.Equal(got, tc.want) {
				t.Errorf("%s: in the agent list, %s sees memory %q, want %q", when, tc.who, got, tc.want)
			}
			res, err := b.sys.Query(tc.who, AskInfoQuery{Type: QueryAgent, AgentID: StringList{w}})
			if err != nil {
				t.Fatal(err)
			}
			for _, note := range all {
				if shown := strings.Contains(res.Markdown, note); shown != slices.Contains(tc.want, note) {
					t.Errorf("%s: ask_info agent by %s shows %s: %v", when, tc.who, note, shown)
				}
			}
		}
	}
	check(b, "before the restart", []string{noteBase, noteA, noteB})

	// A crash, and an entry in the store that records no task, as one
	// written before entries recorded theirs.
	img, err := st.Image()
	if err != nil {
		t.Fatal(err)
	}
	b.sub.Close()
	_ = b.sys.Close()
	i := slices.IndexFunc(img.Agents, func(a AgentState) bool { return a.AgentID == w })
	img.Agents[i].PersistentMemory["20200101T000000"] = legacy
	r := restartFrom(t, cfg, img, b.sc)
	if err := r.sys.SetAdmins([]string{admin}); err != nil {
		t.Fatal(err)
	}
	check(r, "after the restart", []string{legacy, noteBase, noteA, noteB})
}

// TestTrimmedPrivateMessageEventsStayHidden: the base task keeps its newest
// messages only. The delivery event of an agent's private message to one
// operator must stay hidden from another once the message has left the log
// (its receivers can no longer be looked up): the rule cannot be told, so
// it is hidden, as for a message of an operator.
func TestTrimmedPrivateMessageEventsStayHidden(t *testing.T) {
	b := newTestbed(t, nil)
	ann, bea := b.operator("ann"), b.operator("bea")
	alice := b.newAgent("alice")
	base := b.sys.baseTaskID
	bt, _ := b.sys.task(base)
	bt.record(Message{TaskID: base, MessageID: "private", SenderID: alice, Receiver: []string{ann}, Message: "for ann only"})
	ev := Event{Kind: EventMessageDelivered, TaskID: base, MessageID: "private", AgentID: alice}
	if b.sys.EventVisible(bea, ev) {
		t.Fatal("bea sees the delivery of alice's private message to ann while the log holds it")
	}
	for i := range 2 * baseLogLimit {
		bt.record(Message{TaskID: base, MessageID: "m" + strconv.Itoa(i), SenderID: alice, Receiver: []string{alice}})
	}
	if b.sys.EventVisible(bea, ev) {
		t.Error("bea sees the delivery of alice's private message to ann once the log no longer holds it")
	}
}
