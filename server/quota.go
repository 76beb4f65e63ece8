package server

import (
	"fmt"
	"sync"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
)

// taskQuota bounds what one operator hands the MAS with add_task: tasks
// not yet ended (each runs LLM agents) and tasks added per minute. Checked
// at the tool boundary before the engine creates anything; an add_task in
// flight holds its place, so that concurrent calls cannot slip past.
type taskQuota struct {
	l   *Limits
	sys *engine.System

	mu      sync.Mutex
	pending map[string]int         // add_task calls in flight per operator; guarded by mu
	added   map[string][]time.Time // per operator, the times of its additions in the last minute; guarded by mu
}

func newTaskQuota(l *Limits, sys *engine.System) *taskQuota {
	return &taskQuota{l: l, sys: sys, pending: map[string]int{}, added: map[string][]time.Time{}}
}

// admit takes a place for one add_task of op, or says why not. done gives
// it back, counting the task as added when ok.
func (q *taskQuota) admit(op string) (done func(ok bool), err error) {
	running := q.running(op)
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.l.Now()
	recent := q.added[op]
	for len(recent) > 0 && now.Sub(recent[0]) >= time.Minute {
		recent = recent[1:]
	}
	if len(recent) == 0 {
		delete(q.added, op)
	} else {
		q.added[op] = recent
	}
	if n := running + q.pending[op]; n >= q.l.RunningTasksPerOperator {
		return nil, fmt.Errorf("add_task: operator %s has %d tasks that have not ended, the most one operator may have (%s): "+
			"wait for one to end, or end one with manage_task (finish_task or cancel_task)", op, n, keyRunningTasksOp)
	}
	if n := len(recent) + q.pending[op]; n >= q.l.TasksPerMinute {
		retry := time.Minute
		if len(recent) > 0 {
			retry = recent[0].Add(time.Minute).Sub(now)
		}
		return nil, fmt.Errorf("add_task: operator %s added %d tasks in the last minute, the most one operator may add (%s): try again in %ds",
			op, n, keyTasksPerMinuteOp, int((retry+time.Second-1)/time.Second))
	}
	q.pending[op]++
	return func(ok bool) {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.pending[op]--; q.pending[op] <= 0 {
			delete(q.pending, op)
		}
		if ok {
			q.added[op] = append(q.added[op], q.l.Now())
		}
	}, nil
}

// running counts the tasks reporting to op that have not ended (the base
// task, which never ends, aside).
func (q *taskQuota) running(op string) int {
	n := 0
	base := q.sys.BaseTaskID()
	for _, t := range q.sys.Tasks() {
		if t.Operator == op && t.TaskID != base && t.ExecutionState != engine.StateFinished && t.ExecutionState != engine.StateFailed {
			n++
		}
	}
	return n
}
