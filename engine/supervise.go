package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// supervisor keeps the liveness promise (beyond the spec, extending §2.1.1
// and §2.2.1): a task that has not ended is always making progress,
// waiting on someone who has been told, or it ends with a reason.
//
// Every event about a task moves its quiet clock. A task whose clock has
// not moved for StallTimeout is looked at: when nothing is running or
// runnable in it, no wait of it will be released by a timeout and no
// message of it awaits an operator's reply, it is quiet, and its manager
// gets a notice (a message from mas.system, so a process_message step)
// saying what is outstanding. After StallNotices
// notices without progress (no change of its stages, their agents' states
// or its group) the task fails with a reason and its operator learns it
// from the finish_task notice. The base task is quiet whenever the MAS is
// idle, so only a failed last step of its manager counts there; it is
// never failed, and its manager is told at most StallNotices times.
//
// One timer per open task, re-armed while the task is open; a timer only
// ever reads the owners (each under its own mutex, one at a time) and
// acts through the same paths as a manager or an operator would.
type supervisor struct {
	sys *System

	mu      sync.Mutex
	closed  bool
	watches map[string]*watch // open tasks by ID
	running sync.WaitGroup    // timer callbacks in progress
}

// watch is the supervision of one task.
type watch struct {
	timer *time.Timer
	// last is when an event last touched the task.
	last time.Time
	// sent counts the notices sent since mark last changed.
	sent int
	// mark is the task's progress mark when the last notice was sent.
	mark string
}

// touch records an event about a task: its quiet clock starts again.
// It is called while owners publish (under their mutex): it only takes
// the supervisor's own mutex and never calls an owner.
func (sv *supervisor) touch(taskID string) {
	if taskID == "" {
		return
	}
	now := sv.sys.now()
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.closed {
		return
	}
	if sv.watches == nil {
		sv.watches = map[string]*watch{}
	}
	w := sv.watches[taskID]
	if w == nil {
		w = &watch{}
		sv.watches[taskID] = w
	}
	w.last = now
	if w.timer == nil {
		w.timer = time.AfterFunc(sv.sys.cfg.StallTimeout, func() { sv.fire(taskID) })
	}
}

// forget stops supervising a task that ended.
func (sv *supervisor) forget(taskID string) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if w := sv.watches[taskID]; w != nil {
		if w.timer != nil {
			w.timer.Stop()
		}
		delete(sv.watches, taskID)
	}
}

// stop ends supervision and waits for timer callbacks in progress.
func (sv *supervisor) stop() {
	sv.mu.Lock()
	sv.closed = true
	for _, w := range sv.watches {
		if w.timer != nil {
			w.timer.Stop()
		}
	}
	sv.mu.Unlock()
	sv.running.Wait()
}

// fire runs when a task's timer expires.
func (sv *supervisor) fire(taskID string) {
	s := sv.sys
	sv.mu.Lock()
	w := sv.watches[taskID]
	if sv.closed || w == nil {
		sv.mu.Unlock()
		return
	}
	sv.running.Add(1)
	defer sv.running.Done()
	timeout := s.cfg.StallTimeout
	if quiet := s.now().Sub(w.last); quiet < timeout {
		// Touched meanwhile: wait for the rest of the quiet period.
		w.timer.Reset(timeout - quiet)
		sv.mu.Unlock()
		return
	}
	sv.mu.Unlock()

	t, ok := s.task(taskID)
	if !ok || s.isClosed() {
		sv.forget(taskID)
		return
	}
	st := t.snapshot()
	if stateEnded(st.ExecutionState) {
		sv.forget(taskID)
		return
	}
	var act func()
	if !st.Paused && !s.busy(&st) { // a paused task waits on its operator
		act = sv.judge(w, &st)
	}
	sv.mu.Lock()
	if !sv.closed {
		w.timer.Reset(timeout)
	}
	sv.mu.Unlock()
	if act != nil {
		act()
	}
}

// judge decides what a quiet task needs: a notice to its manager, or,
// after StallNotices of them without progress, to fail. It returns the
// action to take (after the supervisor's mutex is released), nil for none.
func (sv *supervisor) judge(w *watch, st *TaskState) func() {
	s := sv.sys
	mark, outstanding := s.outstanding(st)
	if outstanding == "" {
		return nil
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if mark != w.mark {
		w.sent = 0
	}
	if w.sent >= s.cfg.StallNotices {
		if st.Base {
			return nil // told enough; the base task never fails
		}
		return func() { s.failStalled(st, outstanding) }
	}
	w.sent++
	w.mark = mark
	n := w.sent
	return func() { s.noticeStalled(st, outstanding, n) }
}

// busy reports whether anything in the task runs, can run, or waits: a
// running step (an LLM or tool call in flight, an outage waited out, an
// approval asked), a step in a todo list, a step-lock entry (each has a
// deadline), or a message of the task in an operator's inbox awaiting its
// reply. That operator has been told (the inbox says "reply needed",
// tasks/get input_required), and its answer can come whenever it comes
// back: a step-lock wait for it that timed out leaves the question open,
// and the late answer reaches the asker as a message. Such a task is not
// quiet, however long the operator is away; it waits on the answer, the
// operator's cancel_task, or the asker's end with the task.
func (s *System) busy(st *TaskState) bool {
	for _, id := range st.TaskGroup {
		a, ok := s.agent(id)
		if !ok {
			continue
		}
		if a.kind == KindLLM && a.busyIn(st.TaskID) || a.kind == KindHuman && a.awaitsReplyIn(st.TaskID) {
			return true
		}
	}
	return false
}

// outstanding describes what a quiet task waits for, and returns its
// progress mark (which changes whenever the task moves on). "" means
// nothing is outstanding: the base task with nothing failed.
func (s *System) outstanding(st *TaskState) (mark, text string) {
	if st.Base {
		return s.baseOutstanding(st)
	}
	mark, text = s.stagesOutstanding(st)
	// Why the manager has not acted may be that its steps fail (a model
	// whose answers never parse, a refused call): said, or the operator
	// of a task failed for it reads only what was missing.
	if a, ok := s.agent(st.TaskManager); ok {
		if e := a.endedStepsIn(st.TaskID); e.failure != nil {
			text += "; " + s.text("stall_last_failure", map[string]any{
				"Failed": e.failed, "StepID": e.failure.StepID, "Executor": e.failure.Executor, "Reason": Truncate(errorOf(e.failure), 300),
			})
		}
	}
	return mark, text
}

// stagesOutstanding is outstanding for a task's stages.
func (s *System) stagesOutstanding(st *TaskState) (mark, text string) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d", st.ExecutionState, len(st.TaskGroup))
	for _, sg := range st.StageList {
		fmt.Fprintf(&b, "|%s:%s:%d", sg.StageID, sg.ExecutionState, len(sg.CompletionSummary))
		for _, id := range slices.Sorted(maps.Keys(sg.EveryAgentState)) {
			fmt.Fprintf(&b, ",%s=%s", id, sg.EveryAgentState[id])
		}
	}
	mark = b.String()
	data := map[string]any{"TaskID": st.TaskID, "TaskName": st.TaskName}
	if len(st.StageList) == 0 {
		return mark, s.text("stall_no_stages", data)
	}
	for _, sg := range st.StageList {
		if sg.ExecutionState != StateRunning {
			continue
		}
		var done, open []string
		for _, id := range slices.Sorted(maps.Keys(sg.AgentAllocation)) {
			name := s.nameOf(id)
			if _, ok := sg.CompletionSummary[id]; ok {
				done = append(done, name)
			} else {
				open = append(open, name)
			}
		}
		data["StageID"], data["StageIntention"] = sg.StageID, oneLine(sg.StageIntention)
		data["Finished"], data["Open"] = strings.Join(done, ", "), strings.Join(open, ", ")
		return mark, s.text("stall_stage", data)
	}
	return mark, s.text("stall_no_running_stage", data)
}

// baseOutstanding reports the base task as stalled when its manager's
// newest finished step there failed: a request of the operator may have
// been dropped on the way.
func (s *System) baseOutstanding(st *TaskState) (mark, text string) {
	a, ok := s.agent(st.TaskManager)
	if !ok {
		return "", ""
	}
	e := a.endedStepsIn(st.TaskID)
	if e.last == nil || e.last.ExecutionState != StateFailed {
		return "", ""
	}
	if e.good != nil {
		// Progress is a step that went well: notices count from it.
		mark = e.good.StepID
	}
	return mark, s.text("stall_base", map[string]any{
		"StepID": e.last.StepID, "Executor": e.last.Executor, "Reason": Truncate(errorOf(e.last), 300),
	})
}

// nameOf names an agent for a notice: "name (id)".
func (s *System) nameOf(id string) string {
	if b, ok := s.AgentBrief(id); ok {
		return fmt.Sprintf("%s (%s)", b.Name, id)
	}
	return id
}

// noticeStalled tells a quiet task's manager what is outstanding.
func (s *System) noticeStalled(st *TaskState, outstanding string, n int) {
	text := s.text("stall_notice", map[string]any{
		"TaskID": st.TaskID, "TaskName": st.TaskName, "Quiet": s.cfg.StallTimeout.String(),
		"Outstanding": outstanding, "Notice": n, "Notices": s.cfg.StallNotices, "Base": st.Base,
	})
	s.log.Warn("task stalled: manager told", "task", st.TaskID, "manager", st.TaskManager, "notice", n, "outstanding", outstanding)
	m := s.newMessage("", st.TaskID, SystemSender, []string{st.TaskManager}, text, NoRelative)
	m.NotNewInput = true // the notice its stop brings starts no agent again
	s.deliver(m)
}

// failStalled ends a task that stayed quiet through every notice.
func (s *System) failStalled(st *TaskState, outstanding string) {
	t, ok := s.task(st.TaskID)
	if !ok {
		return
	}
	reason := s.text("stall_failed", map[string]any{
		"Notices": s.cfg.StallNotices, "Quiet": s.cfg.StallTimeout.String(), "Outstanding": outstanding,
	})
	if err := s.failTask(t, reason); err != nil {
		s.log.Error("supervision: could not fail a stalled task", "task", st.TaskID, "err", err)
		return
	}
	s.log.Error("task failed: no progress after notices to its manager", "task", st.TaskID, "outstanding", outstanding)
}

// failTask ends a task as failed on the MAS's own account (supervision, an
// endpoint that refuses its manager) and tells its operator why, in the
// inbox: the task's own messages leave the operator's conversations with
// the task.
func (s *System) failTask(t *task, reason string) error {
	if _, err := s.endTask(t, SystemSender, true, StateFailed, reason, SystemSender); err != nil {
		return err
	}
	st := t.brief()
	s.tellOperator(s.operatorOf(st.TaskID), "operator_task_failed", map[string]any{
		"TaskID": st.TaskID, "TaskName": st.TaskName, "Reason": st.TaskSummary,
	})
	return nil
}

// publish makes an event visible and moves the quiet clock of its task.
func (s *System) publish(ev Event) {
	s.bus.publish(ev)
	s.sup.touch(ev.TaskID)
}
