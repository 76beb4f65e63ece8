package engine

import (
	"testing"
	"testing/synctest"
)

// TestEndedSetStaysWithinTheRegistry: the System's set of ended tasks
// (s.ended, read without the tasks' locks by popLocked and lateLocked)
// holds only tasks the System still knows: it grows with the registry of
// tasks, never past it. Today the registry keeps every task for the
// process's life; should tasks ever leave it, their marks must go with
// them, and this test says so. An ended task's late message is still not
// taken.
func TestEndedSetStaysWithinTheRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		w := b.newAgent("w")
		const n = 20
		var last string
		for range n {
			last = b.newTask("short", w)
			synctest.Wait()
			b.cancelTask(last)
			synctest.Wait()
		}
		b.sys.mu.RLock()
		known := len(b.sys.tasks)
		marked, stray := 0, 0
		b.sys.ended.Range(func(k, _ any) bool {
			marked++
			if _, ok := b.sys.tasks[k.(string)]; !ok {
				stray++
			}
			return true
		})
		b.sys.mu.RUnlock()
		if marked < n || marked > known || stray > 0 {
			t.Errorf("%d tasks marked ended (%d of them unknown to the registry), %d known, %d ended: the marks must stay within the registry", marked, stray, known, n)
		}
		a, _ := b.sys.agent(w)
		late := b.sys.newMessage("", last, b.op(), []string{w}, "a late word", NoRelative)
		if a.receive(late) {
			t.Errorf("w took a message of task %s, which ended", last)
		}
	})
}
