package engine

import (
	"testing"
)

// TestRefusedChangeCommittedByAReaderIsWithdrawn: a reader that takes the
// lock in the window syncLocked opens between releasing the lock and its
// commit commits the maker's change itself (Unlock commits what is
// pending). The write still holds one holding's changes: refused, it is
// withdrawn, as its maker is told, not kept to be stored later. (ownerMu
// counts the holdings whose changes the store lacks, whoever commits.) The
// maker's side is syncLocked's own code, split at the point where it has
// released the lock and not yet called commit.
func TestRefusedChangeCommittedByAReaderIsWithdrawn(t *testing.T) {
	st := &refuseTaskStore{MemoryStore: NewMemoryStore()}
	b := newTestbed(t, func(c *Config) { c.Store = st })
	alice := b.newAgent("alice")
	id := b.newTask("report", alice)
	b.settle()
	tk, _ := b.sys.task(id)
	st.refuseWhen(func(ts *TaskState) bool { return ts.TaskID == id && ts.TaskName == "POISON" })

	// The maker (as finishStage after lockDurable): its change, then
	// syncLocked, which releases the lock before it commits.
	tk.mu.Lock()
	tk.st.TaskName = "POISON"
	tk.changedLocked(Event{Detail: "renamed"})
	v := tk.mu.made
	tk.mu.Mutex.Unlock()

	// A reader in that window.
	_ = tk.inGroup(alice)

	// The maker's commit.
	err := tk.mu.commit(v)
	tk.mu.Lock()
	name := tk.st.TaskName
	tk.mu.Unlock()
	if err == nil {
		t.Fatal("the maker was not told its change was refused")
	}
	if name == "POISON" {
		t.Errorf("the maker was told its change failed, but it is kept in memory to be stored later")
	}
	st.refuseWhen(nil)
	if err := tk.stored(true); err != nil {
		t.Fatal(err)
	}
	if stored, _ := st.Task(id); stored.TaskName == "POISON" {
		t.Errorf("the store holds the change whose maker was told it failed")
	}
}
