package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
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
	if err := s.PutTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}
	k := s.kvT.Bucket() + "/t"

	// What a write whose acknowledgement was lost leaves: the value is in
	// the bucket at a newer revision, the store still knows the old one.
	tk.TaskSummary = "landed, reported as failed"
	doc := tk
	doc.SharedConversationPool = nil
	landed, err := json.Marshal(envelope{Schema: SchemaVersion, Task: &doc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.kvT.Put(ctx, "t", landed); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.unsure[k] = landed
	s.mu.Unlock()

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
	s.unsure[k] = landed
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
