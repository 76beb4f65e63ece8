package engine

import (
	"slices"
	"time"
)

// pauseRank orders who holds a paused task: a pause by someone ranked
// higher takes a paused task over (its PausedFor becomes the new one's),
// and a resume ends only the pause of its own reason. An operator's or a
// manager's pause ("") outranks a budget's, which outranks an outage's:
// the budget's release does not resume a task an operator paused, and an
// outage's end does not resume one held for its budget.
func pauseRank(reason string) int {
	switch reason {
	case "":
		return 3
	case PausedBudget:
		return 2
	default:
		return 1
	}
}

// setPaused pauses or resumes the task for actorID and reports whether that
// changed it, how long it was held (on resume) and its group then.
//
// reason is the MAS's own reason for a pause (TaskState.PausedFor, "" for
// an operator's); a pause that outranks the one holding the task takes it
// over (pauseRank). A resume with a reason resumes only a task paused for
// that reason.
func (t *task) setPaused(actorID string, human, pause bool, reason string, now time.Time) (changed bool, held time.Duration, group []string, err error) {
	if err := t.mu.lockDurable(); err != nil {
		return false, 0, nil, err
	}
	if err := mayManage(t, actorID, human); err != nil {
		t.mu.Unlock()
		return false, 0, nil, err
	}
	id := t.st.TaskID
	switch {
	case t.st.Base:
		t.mu.Unlock()
		return false, 0, nil, errf(ErrInvalid, "task_id %q: the base task cannot be paused", id)
	case t.endedLocked():
		t.mu.Unlock()
		return false, 0, nil, errf(ErrEnded, "task_id %q: has already ended (%s)", id, t.st.ExecutionState)
	case t.st.Paused == pause:
		if pause && pauseRank(reason) > pauseRank(t.st.PausedFor) {
			t.st.PausedFor = reason
			t.changedLocked(Event{Detail: "paused"})
			err := t.mu.syncLocked()
			t.mu.Unlock()
			return false, 0, nil, err
		}
		t.mu.Unlock()
		return false, 0, nil, nil
	case !pause && reason != "" && t.st.PausedFor != reason:
		t.mu.Unlock()
		return false, 0, nil, nil
	}
	held = now.Sub(t.st.PausedAt) // on resume: how long it was held
	t.st.Paused = pause
	t.st.PausedFor = ""
	if pause {
		t.st.PausedAt = now
		t.st.PausedFor = reason
	}
	detail := "resumed"
	if pause {
		detail = "paused"
	}
	t.changedLocked(Event{Detail: detail})
	if err := t.mu.syncLocked(); err != nil {
		t.mu.Unlock()
		return false, 0, nil, err
	}
	group = slices.Clone(t.st.TaskGroup)
	t.mu.Unlock()
	return true, held, group, nil
}

// inGroup reports whether the agent is in the task's group.
func (t *task) inGroup(agentID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inGroupLocked(agentID)
}

// share shares the task with an operator (share_task).
func (t *task) share(operatorID string) error {
	if err := t.mu.lockDurable(); err != nil {
		return err
	}
	defer t.mu.Unlock()
	if t.st.Base {
		return errf(ErrInvalid, "task_id %q: the base task is every operator's already", t.st.TaskID)
	}
	t.shareLocked(operatorID)
	// A share the store refused is withdrawn: the caller must learn it,
	// not tell the operator it may now see the task.
	return t.mu.syncLocked()
}

// sharedWith is the operators the task is shared with.
func (t *task) sharedWith() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return nonNil(slices.Clone(t.st.SharedWith))
}

// shareLocked records that the task is shared with an operator. t.mu must
// be held.
func (t *task) shareLocked(operatorID string) {
	if operatorID == t.st.Operator || slices.Contains(t.st.SharedWith, operatorID) {
		return
	}
	t.st.SharedWith = append(t.st.SharedWith, operatorID)
	t.changedLocked(Event{AgentID: operatorID, Detail: "shared"})
}
