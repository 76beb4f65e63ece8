package engine

import (
	"context"
	"encoding/json"
	"sync"
)

// Store persists state documents at their owners. Each owner calls it after
// every change, under its own mutex, so writes of one document arrive in
// order. Implementations must not retain the pointers after returning.
//
// The durable implementation (embedded NATS JetStream) lives in store/; a
// nil Config.Store means state lives in memory only.
type Store interface {
	PutTask(ctx context.Context, t *TaskState) error
	PutAgent(ctx context.Context, a *AgentState) error
}

// MemoryStore keeps the latest JSON document of every task and agent in
// memory. It is what tests use to check that every change reaches the store.
type MemoryStore struct {
	mu     sync.Mutex
	tasks  map[string][]byte
	agents map[string][]byte
	writes int
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{tasks: map[string][]byte{}, agents: map[string][]byte{}}
}

// PutTask stores t's JSON.
func (m *MemoryStore) PutTask(_ context.Context, t *TaskState) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.tasks[t.TaskID] = b
	m.writes++
	m.mu.Unlock()
	return nil
}

// PutAgent stores a's JSON.
func (m *MemoryStore) PutAgent(_ context.Context, a *AgentState) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.agents[a.AgentID] = b
	m.writes++
	m.mu.Unlock()
	return nil
}

// Task decodes the stored document of a task.
func (m *MemoryStore) Task(id string) (TaskState, bool) {
	m.mu.Lock()
	b, ok := m.tasks[id]
	m.mu.Unlock()
	var t TaskState
	if !ok || json.Unmarshal(b, &t) != nil {
		return TaskState{}, false
	}
	return t, true
}

// Agent decodes the stored document of an agent.
func (m *MemoryStore) Agent(id string) (AgentState, bool) {
	m.mu.Lock()
	b, ok := m.agents[id]
	m.mu.Unlock()
	var a AgentState
	if !ok || json.Unmarshal(b, &a) != nil {
		return AgentState{}, false
	}
	return a, true
}

// Writes counts the documents written.
func (m *MemoryStore) Writes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}
