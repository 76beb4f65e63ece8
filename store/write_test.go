package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestWriteThatLandedDespiteAnError: a write reported as failed (say a
// timeout) may have landed. The next write of the document must find it
// at its newer revision, see that it holds this store's own bytes and
// carry on, instead of refusing every later write as a conflict; a
// revision written by anyone else is still a conflict.
func TestWriteThatLandedDespiteAnError(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	tk := sampleTask("t")
	k, landed := landedUnsure(t, s, &tk, "landed, reported as failed")

	tk.TaskSummary = "the next write"
	if err := s.PutTask(ctx, &tk); err != nil {
		t.Fatalf("write after an own write that landed: %v", err)
	}
	img, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Tasks) != 1 || img.Tasks[0].TaskSummary != "the next write" {
		t.Fatalf("stored tasks %+v, want the next write", img.Tasks)
	}

	// Someone else's newer revision is refused, even with an unsure write
	// of ours pending.
	if _, err := s.kvT.Put(ctx, "t", []byte(`{"schema":1,"task":{"task_id":"t","task_summary":"theirs"}}`)); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.unsure[k] = append(s.unsure[k], landed)
	s.mu.Unlock()
	tk.TaskSummary = "mine, over theirs"
	if err := s.PutTask(ctx, &tk); !errors.Is(err, ErrConflict) {
		t.Errorf("write over another writer's revision: %v, want ErrConflict", err)
	}
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{errors.New("nats: no responders available for request"), true},
		{context.Canceled, false},
		{ErrConflict, false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// landedUnsure stores task tk, then leaves what a write whose
// acknowledgement was lost leaves: the task with the given summary is in
// the bucket at a newer revision, the store still knows the old one and
// counts the write as unsure. It returns the task's key and that write.
func landedUnsure(t *testing.T, s *Store, tk *engine.TaskState, summary string) (string, []byte) {
	t.Helper()
	ctx := context.Background()
	if err := s.PutTask(ctx, tk); err != nil {
		t.Fatal(err)
	}
	k := s.kvT.Bucket() + "/" + tk.TaskID
	tk.TaskSummary = summary
	doc := *tk
	doc.SharedConversationPool = nil
	landed, err := json.Marshal(envelope{Schema: SchemaVersion, Task: &doc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.kvT.Put(ctx, tk.TaskID, landed); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.unsure[k] = append(s.unsure[k], landed)
	s.mu.Unlock()
	return k, landed
}

// TestTwoUnsureWritesInARow: during a NATS stall, a task's write times out
// after it landed (unsure), the read-back that would adopt it fails too,
// and the next write of the task times out as well (unsure, not landed).
// Nobody else writes the document; once NATS answers again the store must
// carry on from its own landed write, not refuse every later write of the
// document as a conflict.
func TestTwoUnsureWritesInARow(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	tk := sampleTask("t")
	landedUnsure(t, s, &tk, "write 2: landed, reported as failed")

	// Write 3: times out before it lands (through put itself).
	expired, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	<-expired.Done()
	tk.TaskSummary = "write 3: timed out, did not land"
	if err := s.PutTask(expired, &tk); err == nil {
		t.Fatal("write 3 with an expired context succeeded")
	}

	// NATS answers again: the engine reads back and writes on.
	refused := 0
	for i := range 3 {
		if _, err := s.ReadTask(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		tk.TaskSummary = "a later write"
		if err := s.PutTask(ctx, &tk); err != nil {
			if !errors.Is(err, ErrConflict) {
				t.Fatal(err)
			}
			refused++
			t.Logf("later write %d: %v", i+1, err)
		}
	}
	if refused > 0 {
		t.Errorf("%d of 3 later writes refused as conflicts: the document holds this store's own write 2; nobody else wrote it", refused)
	}
}
