package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// task owns one TaskState: every mutation happens under mu (the single
// writer's lock, owner.go), and nothing under mu calls another owner.
type task struct {
	sys *System

	mu ownerMu[TaskState]
	st TaskState // guarded by mu
	// recorded indexes the IDs of the messages in st's conversation
	// (record), and replies counts, for each waiting ID and receiver, the
	// messages in it that carry that return_waiting_id to that receiver
	// (answered). Both are nil until indexLocked makes them, and change
	// with the conversation: an append adds its message, a trim takes its
	// messages away. Guarded by mu.
	recorded map[string]struct{}
	replies  map[replyKey]int

	// pauseMu orders the task's pauses and resumes (pause.go), and its
	// end (endTask), which takes its pause back: each is one step, the
	// task's stored state, s.paused and its agents' wait deadlines
	// together. It is taken before mu or any agent's lock, and held while
	// pauseTask takes them one at a time.
	pauseMu sync.Mutex
}

func newTaskOwner(s *System, st TaskState) *task {
	t := &task{sys: s, st: st}
	t.mu.ops = ownerOps[TaskState]{
		clone:    (*TaskState).clone,
		copy:     func(*TaskState) TaskState { return t.docLocked() },
		restore:  t.restoreLocked,
		announce: s.publish,
		refused: func(err error) {
			s.log.Error("store: put task refused: change withdrawn or kept for a retry", "task", t.st.TaskID, "err", err)
		},
		tightened: func(err error) {
			s.log.Warn("store: the task's document is too large for the store: bounded harder and written again", tooLargeAttrs("task", t.st.TaskID, err)...)
		},
		withdrawn: func(err error, changes int) {
			s.log.Error("store: the task's document is too large for the store even bounded harder: its changes since the last write are withdrawn, not retried",
				append(tooLargeAttrs("task", t.st.TaskID, err), "changes", changes)...)
		},
	}
	if store := s.cfg.Store; store != nil {
		t.mu.ops.put = func(doc *TaskState) error { return store.PutTask(s.storeCtx, doc) }
		// The task is bounded at each change (changedLocked); a commit
		// bounds it again only harder, after the store refused one of its
		// documents as too large.
		t.mu.ops.bound = func(harder bool) {
			if harder {
				t.boundLocked(true)
			}
		}
		// A refused commit is retried until the store takes one: changes
		// kept in memory through an outage (the meter's count of tokens
		// spent, the reports a restart replays) must reach the store even
		// when nothing else changes the task afterwards.
		t.mu.ops.retry = true
		if r, ok := store.(StoreReader); ok {
			id := st.TaskID
			t.mu.ops.readBack = func() (TaskState, error) { return r.ReadTask(s.storeCtx, id) }
		}
		first := t.docLocked()
		t.mu.snap.Store(&first)
	}
	return t
}

// docLocked copies the task for the store and the readers' snapshot. The
// conversation is shared, not copied: a message in it is never changed,
// and the pool is only appended to or replaced. mu must be held.
func (t *task) docLocked() TaskState {
	pool := t.st.SharedConversationPool
	t.st.SharedConversationPool = nil
	c := t.st.clone()
	t.st.SharedConversationPool = pool
	c.SharedConversationPool = slices.Clip(pool)
	return c
}

// changedLocked stamps a change and records it, to be stored and then
// announced when mu is released (owner.go). A change the store refuses is
// withdrawn: the task takes back the document the store holds (its
// conversation stays); callers learn of it from mu.syncLocked.
func (t *task) changedLocked(ev Event) {
	t.st.UpdatedAt = t.sys.now()
	if t.sys.cfg.Store != nil {
		t.boundLocked(t.mu.tightLocked())
	}
	t.mu.change(t.event(ev), true)
}

// event completes an event about the task.
func (t *task) event(ev Event) Event {
	if ev.Kind == "" {
		ev.Kind = EventTaskChanged
	}
	ev.TaskID = t.st.TaskID
	return ev
}

// restoreLocked takes back the document the store holds after a refused
// write; the conversation, kept through PutMessage, stays.
func (t *task) restoreLocked(got TaskState) {
	got.SharedConversationPool = t.st.SharedConversationPool
	t.st = got
}

// stop ends the retries of refused commits (the MAS stops).
func (t *task) stop() {
	t.mu.lockToRead()
	t.mu.closeLocked()
	t.mu.unlockRead()
}

// brief is the task without its lists and logs.
func (t *task) brief() TaskState {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.st
	b.TaskGroup, b.SharedInfoPool, b.CommunicationQueue, b.SharedConversationPool, b.StageList = nil, nil, nil, nil, nil
	return b
}

func (t *task) snapshot() TaskState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.clone()
}

// ended reports whether the task is finished or failed. mu must be held.
func (t *task) endedLocked() bool {
	return stateEnded(t.st.ExecutionState)
}

func (t *task) stageLocked(id string) (*StageState, int) {
	for i := range t.st.StageList {
		if t.st.StageList[i].StageID == id {
			return &t.st.StageList[i], i
		}
	}
	return nil, -1
}

func (t *task) runningStageLocked() *StageState {
	for i := range t.st.StageList {
		if t.st.StageList[i].ExecutionState == StateRunning {
			return &t.st.StageList[i]
		}
	}
	return nil
}

// runningStageIDLocked is the running stage's ID, nil when none runs.
func (t *task) runningStageIDLocked() *string {
	if rs := t.runningStageLocked(); rs != nil {
		id := rs.StageID
		return &id
	}
	return nil
}

func (t *task) inGroupLocked(agentID string) bool { return slices.Contains(t.st.TaskGroup, agentID) }

// baseLogLimit bounds the base task's conversation pool and shared info
// pool: the base task never ends (spec §1.1), so its logs keep the newest
// entries only. Other tasks keep everything until they end.
const baseLogLimit = 1000

// trimBase drops the oldest entries once there are twice baseLogLimit,
// keeping the newest baseLogLimit: trimming in batches keeps an append
// amortised O(1). The kept entries go into an array with room for the
// next batch, so that the appends up to the next trim copy nothing: one
// copy per baseLogLimit appends, not the five of append's growth, each
// a slow append (the slowest percent of message hops).
func trimBase[T any](l []T) []T {
	if len(l) <= 2*baseLogLimit {
		return l
	}
	kept := make([]T, baseLogLimit, 2*baseLogLimit+1)
	copy(kept, l[len(l)-baseLogLimit:])
	return kept
}

// replyKey names the replies to one wait: the waiting ID a message
// carries as its return_waiting_id, and one of its receivers.
type replyKey struct{ waitingID, receiver string }

// indexLocked makes the conversation's indexes (recorded, replies) once,
// from the conversation the task owner was made with: a new task's empty
// one, or at a restart the one rebuilt from the stored messages. Looking
// through the log itself cost a compare of each of the last 512 messages
// at every delivery, and of every message at every send that waits. mu
// must be held.
func (t *task) indexLocked() {
	if t.recorded != nil {
		return
	}
	pool := t.st.SharedConversationPool
	t.recorded = make(map[string]struct{}, len(pool))
	t.replies = map[replyKey]int{}
	for i := range pool {
		t.indexMessageLocked(&pool[i])
	}
}

// indexMessageLocked adds a message of the conversation to its indexes.
// mu must be held.
func (t *task) indexMessageLocked(m *Message) {
	t.recorded[m.MessageID] = struct{}{}
	if m.ReturnWaitingID == "" {
		return
	}
	for _, r := range m.Receiver {
		t.replies[replyKey{m.ReturnWaitingID, r}]++
	}
}

// unindexMessageLocked takes a message the conversation dropped out of
// its indexes (what indexMessageLocked added). mu must be held.
func (t *task) unindexMessageLocked(m *Message) {
	delete(t.recorded, m.MessageID)
	if m.ReturnWaitingID == "" {
		return
	}
	for _, r := range m.Receiver {
		k := replyKey{m.ReturnWaitingID, r}
		if t.replies[k] <= 1 {
			delete(t.replies, k)
		} else {
			t.replies[k]--
		}
	}
}

// record appends a delivered message to the conversation pool (spec §1.2),
// once: a message delivered again after a restart is not logged twice.
func (t *task) record(m Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.indexLocked()
	if _, ok := t.recorded[m.MessageID]; ok {
		return
	}
	t.st.SharedConversationPool = append(t.st.SharedConversationPool, m.clone())
	t.indexMessageLocked(&t.st.SharedConversationPool[len(t.st.SharedConversationPool)-1])
	if t.st.Base {
		// A trim takes the IDs it drops out of the indexes: made again,
		// the thousand inserts and the maps' growth made the delivery
		// after each trim one of the slowest percent of message hops.
		pool := t.st.SharedConversationPool
		if t.st.SharedConversationPool = trimBase(pool); len(t.st.SharedConversationPool) < len(pool) {
			for i := range pool[:len(pool)-len(t.st.SharedConversationPool)] {
				t.unindexMessageLocked(&pool[i])
			}
		}
	}
	// The store has the message already (PutMessage): the task document
	// itself need not be written for it.
	t.st.UpdatedAt = t.sys.now()
	t.mu.change(t.event(Event{Kind: EventMessageDelivered, MessageID: m.MessageID, StageID: m.StageRelative, AgentID: m.SenderID}), false)
}

// answered returns the waiting IDs, of ids, that a message to agent in the
// conversation carries as its return_waiting_id: the waits it answered.
// Each is returned once, in the order of ids. Every send that waits asks,
// under the task's lock: the index makes it cost the IDs asked about, not
// the conversation's length.
func (t *task) answered(agent string, ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.indexLocked()
	var out []string
	for _, id := range ids {
		if id != "" && t.replies[replyKey{id, agent}] > 0 && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// addUsage adds an LLM call's cost to the task's total.
func (t *task) addUsage(u Usage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.st.Usage.Add(u)
	t.changedLocked(Event{Kind: EventLLMCall})
}

// StepReport is what one finished step tells its task (spec §2.5
// update_stage_agent_state, send_shared_info,
// update_stage_agent_completion).
type StepReport struct {
	TaskID     string  `json:"task_id"`
	StageID    string  `json:"stage_id"`
	AgentID    string  `json:"agent_id"`
	Role       string  `json:"role,omitempty"`
	StepID     string  `json:"step_id"`
	AgentState string  `json:"agent_state"` // AgentWorking, AgentFinished or AgentFailed
	SharedInfo string  `json:"shared_info,omitempty"`
	Completion *string `json:"completion,omitempty"`
	Usage      Usage   `json:"usage"`
}

// report applies a step's outcome, stores it and returns the notice for
// the task's manager when the stage has just completed (spec §2.2.1).
func (t *task) report(r StepReport) ([]Message, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.reportLocked(r)
	if err := t.mu.syncLocked(); err != nil {
		return nil, err
	}
	return out, nil
}

// take applies a step's outcome, whose step's end the agent has stored
// with the report, and returns the notices to deliver once the task is
// stored (storeReport). The change is kept, never withdrawn: the step has
// ended, and its task must learn so.
func (t *task) take(r StepReport) []Message {
	t.mu.Lock()
	out := t.reportLocked(r)
	t.takenLocked(r)
	t.mu.keepLocked()
	t.mu.unlockUncommitted()
	return out
}

// replay applies, at a restart, the reports one agent stored with its
// steps' ends for this task, in their order, but those the task took
// already: up to the one it took last from the agent (TakenReports). They
// are the reports a crash came between the agent's write and the task's.
// The notices they imply are sent by the restore. A refused write keeps
// the change in memory, committed again until the store takes it.
func (t *task) replay(agentID string, reports []StepReport) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if last := t.st.TakenReports[agentID]; last != "" {
		if i := slices.IndexFunc(reports, func(r StepReport) bool { return r.StepID == last }); i >= 0 {
			reports = reports[i+1:]
		}
	}
	if len(reports) == 0 {
		return nil
	}
	for _, r := range reports {
		t.reportLocked(r)
		t.takenLocked(r)
	}
	t.mu.keepLocked()
	return t.mu.syncLocked()
}

// takenLocked records r as the last report the task took from its agent
// of those the agent stores with its steps' ends (take, replay; not one
// reported directly, which the agent's document never holds). t.mu is
// held.
func (t *task) takenLocked(r StepReport) {
	if r.StepID == "" || r.AgentID == "" {
		return
	}
	if t.st.TakenReports == nil {
		t.st.TakenReports = map[string]string{}
	}
	t.st.TakenReports[r.AgentID] = r.StepID
}

// stored commits the task's changes and returns the store's refusal. When
// again is set, a commit is made even when nothing changed since the last
// one: a refused one's changes, kept in memory, are written again.
func (t *task) stored(again bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if again {
		t.mu.writeAgainLocked()
	}
	return t.mu.syncLocked()
}

// reportLocked applies a step's outcome in memory and returns the notice
// for the task's manager when the stage has just completed. t.mu is held.
func (t *task) reportLocked(r StepReport) []Message {
	now := t.sys.now()
	if r.StepID != "" && t.reportedLocked(r.StepID) {
		// The step ran again after a restart: its first report stands,
		// but a completion it brings now is still recorded.
		r.Usage, r.SharedInfo = Usage{}, ""
	}
	t.st.Usage.Add(r.Usage)
	if r.SharedInfo != "" {
		t.st.SharedInfoPool = append(t.st.SharedInfoPool, SharedInfo{
			AgentID: r.AgentID, Role: r.Role, StageID: r.StageID, StepID: r.StepID,
			Content: r.SharedInfo, Timestamp: now,
		})
		if t.st.Base {
			t.st.SharedInfoPool = trimBase(t.st.SharedInfoPool)
		}
	}
	var out []Message
	if st, _ := t.stageLocked(r.StageID); st != nil && st.ExecutionState == StateRunning {
		if _, allocated := st.AgentAllocation[r.AgentID]; allocated {
			// Once an agent finished its part, later steps (replies to
			// others) do not reopen it.
			if st.EveryAgentState[r.AgentID] != AgentFinished || r.Completion != nil {
				st.EveryAgentState[r.AgentID] = r.AgentState
			}
			if r.Completion != nil {
				st.CompletionSummary[r.AgentID] = *r.Completion
				if m, ok := t.stageCompleteLocked(st); ok {
					out = append(out, m)
				}
			}
		}
	}
	t.changedLocked(Event{Kind: EventStageChanged, StageID: r.StageID, AgentID: r.AgentID, StepID: r.StepID, Detail: r.AgentState})
	return out
}

// reportedLocked reports whether a step's report is in the shared info pool
// already (the newest entries are searched).
func (t *task) reportedLocked(stepID string) bool {
	pool := t.st.SharedInfoPool
	for i := len(pool) - 1; i >= 0 && i >= len(pool)-64; i-- {
		if pool[i].StepID == stepID {
			return true
		}
	}
	return false
}

// stageCompleteLocked builds the manager's notice when every allocated agent
// submitted its completion summary (spec §2.2.1). The base task's stage
// never completes.
func (t *task) stageCompleteLocked(st *StageState) (Message, bool) {
	if t.st.Base {
		return Message{}, false
	}
	for id := range st.AgentAllocation {
		if _, ok := st.CompletionSummary[id]; !ok {
			return Message{}, false
		}
	}
	text := t.sys.text("stage_complete", map[string]any{
		"TaskID": t.st.TaskID, "StageID": st.StageID, "StageIntention": st.StageIntention,
		"Allocation": formatMap(st.AgentAllocation), "Completion": formatMap(st.CompletionSummary),
	})
	return t.sys.newMessage(derivedID(st.StageID, "complete"), t.st.TaskID, SystemSender, []string{t.st.TaskManager}, text, st.StageID), true
}

// stageOf returns a copy of one stage as it is in memory (for the task's
// own decisions).
func (t *task) stageOf(stageID string) (StageState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, _ := t.stageLocked(stageID)
	if st == nil {
		return StageState{}, false
	}
	return st.clone(), true
}

// storedStage returns a copy of one stage as the store holds it and the
// bus announced it (for readers: what they see is stored).
func (t *task) storedStage(stageID string) (out StageState, ok bool) {
	t.mu.peek(func(ts *TaskState) {
		for i := range ts.StageList {
			if ts.StageList[i].StageID == stageID {
				out, ok = ts.StageList[i].clone(), true
				return
			}
		}
	})
	return out, ok
}

// startNextStageLocked starts the first stage still in init, if no stage is
// running, and returns the start_stage instructions for its agents.
func (t *task) startNextStageLocked() []Message {
	if t.runningStageLocked() != nil || t.endedLocked() {
		return nil
	}
	for i := range t.st.StageList {
		st := &t.st.StageList[i]
		if st.ExecutionState != StateInit {
			continue
		}
		return t.startStageLocked(st)
	}
	return nil
}

func (t *task) startStageLocked(st *StageState) []Message {
	now := t.sys.now()
	st.ExecutionState = StateRunning
	st.StartedAt = now
	if t.st.ExecutionState == StateInit {
		t.st.ExecutionState = StateRunning
	}
	for _, id := range slices.Sorted(maps.Keys(st.AgentAllocation)) {
		st.EveryAgentState[id] = AgentIdle
	}
	t.changedLocked(Event{Kind: EventStageChanged, StageID: st.StageID, Detail: StateRunning})
	return t.startStageNoticesLocked(st)
}

// startStageNoticesLocked builds the start_stage instructions of a stage
// for its agents.
func (t *task) startStageNoticesLocked(st *StageState) []Message {
	var out []Message
	for _, id := range slices.Sorted(maps.Keys(st.AgentAllocation)) {
		in := &StartStage{TaskID: t.st.TaskID, StageID: st.StageID, StageIntention: st.StageIntention, Goal: st.AgentAllocation[id]}
		text := t.sys.text("stage_started_notice", map[string]any{
			"TaskID": t.st.TaskID, "StageID": st.StageID, "StageIntention": st.StageIntention, "Goal": in.Goal,
		})
		out = append(out, t.sys.instruction("", t.st.TaskID, st.StageID, id, text, &Instruction{StartStage: in}))
	}
	return out
}

// endStageLocked marks a stage finished or failed and returns the
// finish_stage instructions for its agents and the task's manager.
func (t *task) endStageLocked(st *StageState, state, by string) []Message {
	now := t.sys.now()
	st.ExecutionState = state
	st.EndedBy = by
	st.EndedAt = now
	t.changedLocked(Event{Kind: EventStageChanged, StageID: st.StageID, Detail: state})
	return t.endStageNoticesLocked(st)
}

// endStageNoticesLocked builds the finish_stage instructions of an ended
// stage for its agents and the task's manager.
func (t *task) endStageNoticesLocked(st *StageState) []Message {
	receivers := slices.Sorted(maps.Keys(st.AgentAllocation))
	if !slices.Contains(receivers, t.st.TaskManager) {
		receivers = append(receivers, t.st.TaskManager)
	}
	var out []Message
	for _, id := range receivers {
		text := t.sys.text("stage_finished_notice", map[string]any{"TaskID": t.st.TaskID, "StageID": st.StageID, "State": st.ExecutionState})
		out = append(out, t.sys.instruction("", t.st.TaskID, st.StageID, id, text, &Instruction{
			FinishStage: &StageRef{TaskID: t.st.TaskID, StageID: st.StageID, EndedBy: st.EndedBy},
		}))
	}
	return out
}

// judgeLocked builds the notice asking the manager to judge the whole task
// once its last stage (after) finished (spec §2.1.1).
func (t *task) judgeLocked(after string) Message {
	var b strings.Builder
	for _, st := range t.st.StageList {
		fmt.Fprintf(&b, "- %s [%s]: %s\n", st.StageID, st.ExecutionState, oneLine(st.StageIntention))
	}
	text := t.sys.text("task_judge", map[string]any{
		"TaskID": t.st.TaskID, "TaskName": t.st.TaskName, "TaskIntention": t.st.TaskIntention,
		"Stages": strings.TrimRight(b.String(), "\n"),
	})
	return t.sys.newMessage(derivedID(after, "judge"), t.st.TaskID, SystemSender, []string{t.st.TaskManager}, text, NoRelative)
}

// endTaskLocked ends the task and returns the finish_task instructions for
// the whole task group.
func (t *task) endTaskLocked(state, summary, by string) ([]Message, error) {
	now := t.sys.now()
	if rs := t.runningStageLocked(); rs != nil {
		done := AgentFinished
		for id := range rs.AgentAllocation {
			if rs.EveryAgentState[id] != AgentFinished {
				done = ""
			}
		}
		rs.ExecutionState = StateFailed
		if done != "" && state == StateFinished {
			rs.ExecutionState = StateFinished
		}
		rs.EndedAt = now
		// The stage's own readers (its resource) are told too.
		t.changedLocked(Event{Kind: EventStageChanged, StageID: rs.StageID, Detail: rs.ExecutionState})
	}
	t.st.ExecutionState = state
	// An ended task holds nobody: its pause ends with it.
	t.st.Paused, t.st.PausedFor = false, ""
	t.st.TaskSummary = t.sys.clipText(summary)
	t.st.EndedBy = by
	t.st.EndedAt = now
	t.changedLocked(Event{Detail: state})
	if err := t.mu.syncLocked(); err != nil {
		return nil, err
	}
	return t.endTaskNoticesLocked(), nil
}

// endTaskNoticesLocked builds the finish_task instructions of an ended task
// for its group.
func (t *task) endTaskNoticesLocked() []Message {
	var out []Message
	for _, id := range t.st.TaskGroup {
		text := t.sys.text("task_finished_notice", map[string]any{
			"TaskID": t.st.TaskID, "TaskName": t.st.TaskName, "State": t.st.ExecutionState, "Summary": t.st.TaskSummary,
		})
		out = append(out, t.sys.instruction("", t.st.TaskID, NoRelative, id, text, &Instruction{
			FinishTask: &TaskRef{TaskID: t.st.TaskID},
		}))
	}
	return out
}

// implied returns the engine's instructions and notices that the task's
// state implies were sent, built as they were then (same derived IDs):
// finish_task to the group of an ended task; otherwise start_stage to the
// agents of the running stage, the manager's notice once all of them
// submitted their summaries, finish_stage for each ended stage, and the
// manager's judge notice once the last stage finished. The task's document
// is written before these messages: a crash in between loses them, and a
// restart delivers again those the store lacks. The base task has none.
func (t *task) implied() []Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.st.Base {
		return nil
	}
	if t.endedLocked() {
		return t.endTaskNoticesLocked()
	}
	out := t.startNoticesLocked()
	for i := range t.st.StageList {
		st := &t.st.StageList[i]
		switch st.ExecutionState {
		case StateRunning:
			out = append(out, t.startStageNoticesLocked(st)...)
			if m, ok := t.stageCompleteLocked(st); ok {
				out = append(out, m)
			}
		case StateFinished, StateFailed:
			out = append(out, t.endStageNoticesLocked(st)...)
		}
	}
	if n := len(t.st.StageList); n > 0 && t.st.StageList[n-1].ExecutionState == StateFinished &&
		!slices.ContainsFunc(t.st.StageList, func(st StageState) bool {
			return st.ExecutionState == StateInit || st.ExecutionState == StateRunning
		}) {
		// finishStage asked the manager to judge the task after its last stage.
		out = append(out, t.judgeLocked(t.st.StageList[n-1].StageID))
	}
	return out
}

// startNoticesLocked builds the instructions a new task sends: every member
// of its group records it in working memory, and a manager it was handed to
// is told to staff and stage it (until it has stages, which shows that it
// got this). Restored, members who have them take them once, by their IDs.
func (t *task) startNoticesLocked() []Message {
	var out []Message
	for _, member := range t.st.TaskGroup {
		out = append(out, t.sys.instruction("", t.st.TaskID, "", member, "", &Instruction{UpdateWorkingMemory: &StageRef{TaskID: t.st.TaskID}}))
	}
	if t.st.HandedOver && len(t.st.StageList) == 0 {
		out = append(out, t.sys.instruction("", t.st.TaskID, "", t.st.TaskManager, "", &Instruction{StartTask: &TaskRef{TaskID: t.st.TaskID}}))
	}
	return out
}

// stageStatus tells an agent's progress guard where it stands in a stage.
type stageStatus struct {
	running   bool
	allocated bool
	state     string
	base      bool
}

func (t *task) status(stageID, agentID string) stageStatus {
	t.mu.lockToRead()
	defer t.mu.unlockRead()
	st, _ := t.stageLocked(stageID)
	if st == nil {
		return stageStatus{base: t.st.Base}
	}
	_, alloc := st.AgentAllocation[agentID]
	return stageStatus{
		running:   st.ExecutionState == StateRunning && !t.endedLocked(),
		allocated: alloc,
		state:     st.EveryAgentState[agentID],
		base:      t.st.Base,
	}
}

func formatMap(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "- %s: %s\n", k, m[k])
	}
	return strings.TrimRight(b.String(), "\n")
}

// oneLine folds a text onto one line of at most 160 characters (never
// cutting a character in two).
func oneLine(s string) string {
	return Truncate(strings.Join(strings.Fields(s), " "), 160)
}

// newStage builds a stage in init state.
func newStage(id, taskID, intention string, alloc map[string]string) StageState {
	return StageState{
		TaskID:            taskID,
		StageID:           id,
		StageIntention:    intention,
		AgentAllocation:   maps.Clone(alloc),
		ExecutionState:    StateInit,
		EveryAgentState:   map[string]string{},
		CompletionSummary: map[string]string{},
	}
}

// operator is the operator the task reports to ("" for the MAS's), and
// whether the task has ended.
func (t *task) operator() (op string, ended bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.Operator, t.endedLocked()
}

// members is the task's ID and group, and whether it has ended.
func (t *task) members() (taskID string, group []string, ended bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.TaskID, slices.Clone(t.st.TaskGroup), t.endedLocked()
}

// stageCount is the number of the task's stages.
func (t *task) stageCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.st.StageList)
}

// traceParent is the task's trace span, for its steps' spans.
func (t *task) traceParent() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.TraceParent
}

// checkStageRelative validates a message's stage_relative.
func (t *task) checkStageRelative(stage string) error {
	if stage == NoRelative {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, _ := t.stageLocked(stage); st == nil {
		return errf(ErrNotFound, "stage_relative %q: no such stage in task %s (use %q for messages outside stages)", stage, t.st.TaskID, NoRelative)
	}
	return nil
}

// added stores a new task; the store's refusal is returned (a task the
// store refuses does not exist). It is announced by registerTask, once it
// can be looked up.
func (t *task) added() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.st.UpdatedAt = t.sys.now()
	if t.sys.cfg.Store != nil {
		t.boundLocked(t.mu.tightLocked())
	}
	t.mu.change(Event{}, true)
	return t.mu.syncLocked()
}
