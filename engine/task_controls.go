package engine

import (
	"slices"
	"time"
)

// setPaused pauses or resumes the task for actorID and reports whether that
// changed it, how long it was held (on resume) and its group then.
func (t *task) setPaused(actorID string, human, pause bool, now time.Time) (changed bool, held time.Duration, group []string, err error) {
	t.mu.Lock()
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
		t.mu.Unlock()
		return false, 0, nil, nil
	}
	held = now.Sub(t.st.PausedAt) // on resume: how long it was held
	t.st.Paused = pause
	if pause {
		t.st.PausedAt = now
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
