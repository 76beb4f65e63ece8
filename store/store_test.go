package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/mas-mcp/mas-mcp/engine"
)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sampleTask(id string) engine.TaskState {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	return engine.TaskState{
		TaskID: id, TaskName: "t " + id, TaskIntention: "do", TaskManager: "m", TaskGroup: []string{"m"},
		SharedInfoPool: []engine.SharedInfo{}, CommunicationQueue: []engine.Message{},
		SharedConversationPool: []engine.Message{{MessageID: "not stored with the task"}},
		StageList:              []engine.StageState{}, ExecutionState: engine.StateRunning, CreatedAt: now, UpdatedAt: now,
	}
}

func TestPutLoadAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir)
	if s.Role() != RoleOwner {
		t.Fatalf("role %s, want owner", s.Role())
	}
	t1, t2 := sampleTask("t1"), sampleTask("t2")
	t2.CreatedAt = t1.CreatedAt.Add(time.Second)
	a := engine.AgentState{AgentID: "a1", Name: "alice", PersistentMemory: map[string]string{"20260101T000000": "x"},
		MemoryTasks: map[string]string{"20260101T000000": "t1"},
		AgentStep:   engine.AgentStep{AgentID: "a1", TodoList: []string{"s2"}, StepList: []engine.StepState{{StepID: "s1"}, {StepID: "s2"}}},
		StepLock:    []string{"w"}, Waits: []engine.Wait{{WaitingID: "w", For: "b", Deadline: t1.CreatedAt.Add(time.Hour)}}}
	for _, tk := range []engine.TaskState{t2, t1} {
		if err := s.PutTask(ctx, &tk); err != nil {
			t.Fatal(err)
		}
	}
	t1.ExecutionState = engine.StateFinished // a second write: by revision
	if err := s.PutTask(ctx, &t1); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAgent(ctx, &a); err != nil {
		t.Fatal(err)
	}
	msgs := []engine.Message{{MessageID: "m1", TaskID: "t1", Message: "one"}, {MessageID: "m2", TaskID: "t2", Message: "two"}, {MessageID: "m1", TaskID: "t1", Message: "one again"}}
	for _, m := range msgs {
		if err := s.PutMessage(ctx, &m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	img, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Tasks) != 2 || img.Tasks[0].TaskID != "t1" || img.Tasks[0].ExecutionState != engine.StateFinished {
		t.Fatalf("tasks = %+v, want t1 (finished) then t2 by creation", img.Tasks)
	}
	if img.Tasks[0].SharedConversationPool != nil {
		t.Error("the conversation was stored in the task document; it belongs to the message stream")
	}
	if diff := cmp.Diff([]engine.AgentState{a}, img.Agents); diff != "" {
		t.Errorf("agents (-want +got):\n%s", diff)
	}
	var got []string
	for _, m := range img.Messages {
		got = append(got, m.MessageID+":"+m.Message)
	}
	if diff := cmp.Diff([]string{"m1:one", "m2:two"}, got); diff != "" {
		t.Errorf("messages (the duplicate dropped by its ID) (-want +got):\n%s", diff)
	}
	// Writes after a load continue from the loaded revisions.
	t1.TaskSummary = "done"
	if err := s.PutTask(ctx, &t1); err != nil {
		t.Errorf("write after load: %v", err)
	}
}

func TestConflictingWriterDetected(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	owner := open(t, dir)
	defer owner.Close()
	// A second process on the same directory connects to the owner.
	other, err := Open(ctx, Options{DataDir: dir, JoinOwner: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.Role() != RoleClient {
		t.Fatalf("second store on the directory: role %s, want client", other.Role())
	}
	tk := sampleTask("t")
	if err := owner.PutTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}
	if err := other.PutTask(ctx, &tk); !errors.Is(err, ErrConflict) {
		t.Errorf("second writer of an existing document: %v, want ErrConflict", err)
	}
	if _, err := other.Load(ctx); err != nil {
		t.Fatal(err)
	}
	tk.TaskSummary = "by the other"
	if err := other.PutTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}
	tk.TaskSummary = "by the owner, unaware"
	err = owner.PutTask(ctx, &tk)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "task t") {
		t.Errorf("stale writer: %v, want ErrConflict naming the task", err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir)
	defer s.Close()
	b, _ := json.Marshal(map[string]any{"schema": SchemaVersion + 1, "task": map[string]any{"task_id": "t"}})
	if _, err := s.kvT.Put(ctx, "t", b); err != nil {
		t.Fatal(err)
	}
	_, err := s.Load(ctx)
	if err == nil || !strings.Contains(err.Error(), "newer mas-mcp") || !strings.Contains(err.Error(), "task t") {
		t.Errorf("Load of a newer document: %v, want a refusal naming it", err)
	}
}

func TestRedactURL(t *testing.T) {
	if got := redactURL("nats://user:secret@host:4222"); strings.Contains(got, "secret") {
		t.Errorf("redactURL kept the password: %s", got)
	}
}

func TestSecondOwnerRefused(t *testing.T) {
	dir := t.TempDir()
	owner := open(t, dir)
	_, err := Open(context.Background(), Options{DataDir: dir})
	var inUse *InUseError
	if !errors.As(err, &inUse) || inUse.Dir != dir || inUse.Owner != strconv.Itoa(os.Getpid()) {
		t.Fatalf("second Open on %s: %v, want an InUseError naming this process", dir, err)
	}
	// Released on Close: the next process owns the directory.
	owner.Close()
	next := open(t, dir)
	defer next.Close()
	if next.Role() != RoleOwner {
		t.Errorf("after the owner closed: role %s, want owner", next.Role())
	}
}

// externalNATS starts a NATS server with JetStream, as --nats-url users run.
func externalNATS(t *testing.T) string {
	t.Helper()
	return authedNATS(t, natsserver.Options{})
}

// TestExternalLease: on an external NATS server one process runs the MAS;
// a second is refused while the first renews its lease, gets it at once
// after a clean close, and after a crash once the lease expired.
func TestExternalLease(t *testing.T) {
	url := externalNATS(t)
	ctx := context.Background()
	opts := Options{NATSURL: url, LeaseTTL: 300 * time.Millisecond}
	first, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, opts)
	var inUse *InUseError
	if !errors.As(err, &inUse) || !strings.Contains(inUse.Owner, fmt.Sprint(os.Getpid())) {
		t.Fatalf("second Open while the first lives: %v, want an InUseError naming the owner", err)
	}
	first.Close()
	second, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open after a clean close: %v", err)
	}
	// A crash: the lease is neither renewed nor released.
	second.stopLease()
	<-second.leaseDone
	second.stopLease = nil
	second.Close()
	third, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open after the owner crashed: %v", err)
	}
	defer third.Close()
}

// TestExternalLeaseLost: an owner whose lease another process took stops.
func TestExternalLeaseLost(t *testing.T) {
	url := externalNATS(t)
	ctx := context.Background()
	lost := make(chan struct{})
	owner, err := Open(ctx, Options{NATSURL: url, LeaseTTL: 300 * time.Millisecond, OnLeaseLost: func() { close(lost) }})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	// Another process, cut off for longer than the TTL, found it expired.
	if err := owner.lease.Delete(ctx, leaseKey); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.lease.Create(ctx, leaseKey, []byte(`{"pid":1}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the owner did not notice that its lease was taken")
	}
}
