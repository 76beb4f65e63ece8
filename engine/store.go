package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Store persists the MAS at its owners (write-through). Each owner calls it
// when it commits its changes (owner.go: without its lock held, before the
// changes are announced), so a change is durable before its effects are
// visible. Writes of one document never run at once and arrive in order;
// writes of different documents may run at once. Implementations must not
// retain the pointers after returning, nor a document's slices (an agent's
// step list goes into the array of an older snapshot, ownerMu.reusable),
// only what is in them (strings, ended steps' maps). An ended step (finished or failed)
// is never changed in place: when it changes (bounds.go shortens old ones)
// its maps are replaced, so a store may know an unchanged ended step by
// the identity of its maps (store/ writes ended steps once, in chunks).
//
// A task's conversation (shared_conversation_pool) is the sequence of its
// messages: a store keeps it through PutMessage and may leave it out of the
// task documents.
//
// The durable implementation (NATS JetStream) lives in store/; a nil
// Config.Store means state lives in memory only.
type Store interface {
	PutTask(ctx context.Context, t *TaskState) error
	PutAgent(ctx context.Context, a *AgentState) error
	// PutMessage makes a message durable before it is delivered, so a
	// restart can deliver what a crash interrupted.
	PutMessage(ctx context.Context, m *Message) error
}

// StoreReader is implemented by stores that can read a document back.
// When a write is refused, the owner takes back the document the store
// still holds, so the state in memory never runs ahead of the store (a
// task's conversation, kept through PutMessage, stays as it is). Without
// it a refused change stays in memory, unannounced, and is logged.
type StoreReader interface {
	ReadTask(ctx context.Context, id string) (TaskState, error)
	ReadAgent(ctx context.Context, id string) (AgentState, error)
}

// Image is what a store holds: everything a MAS is rebuilt from (Restore).
// Messages are in the order they were put.
type Image struct {
	Tasks    []TaskState
	Agents   []AgentState
	Messages []Message
}

// Empty reports whether the image holds nothing (a first start).
func (img *Image) Empty() bool {
	return img == nil || (len(img.Tasks) == 0 && len(img.Agents) == 0)
}

// MemoryStore keeps the latest JSON document of every task and agent, and
// every message, in memory. Tests use it to check that every change reaches
// the store and to restart a MAS from it.
type MemoryStore struct {
	mu       sync.Mutex
	tasks    map[string][]byte
	agents   map[string][]byte
	order    []string // task and agent keys in first-put order
	messages [][]byte
	writes   int
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{tasks: map[string][]byte{}, agents: map[string][]byte{}}
}

func (m *MemoryStore) put(into map[string][]byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := into[key]; !ok {
		m.order = append(m.order, key)
	}
	into[key] = b
	m.writes++
	return nil
}

// PutTask stores t's JSON.
func (m *MemoryStore) PutTask(_ context.Context, t *TaskState) error {
	return m.put(m.tasks, t.TaskID, t)
}

// PutAgent stores a's JSON.
func (m *MemoryStore) PutAgent(_ context.Context, a *AgentState) error {
	return m.put(m.agents, a.AgentID, a)
}

// PutMessage appends msg's JSON.
func (m *MemoryStore) PutMessage(_ context.Context, msg *Message) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.messages = append(m.messages, b)
	m.writes++
	m.mu.Unlock()
	return nil
}

// ReadTask implements StoreReader.
func (m *MemoryStore) ReadTask(_ context.Context, id string) (TaskState, error) {
	t, ok := m.Task(id)
	if !ok {
		return TaskState{}, fmt.Errorf("memory store: no task %s", id)
	}
	return t, nil
}

// ReadAgent implements StoreReader.
func (m *MemoryStore) ReadAgent(_ context.Context, id string) (AgentState, error) {
	a, ok := m.Agent(id)
	if !ok {
		return AgentState{}, fmt.Errorf("memory store: no agent %s", id)
	}
	return a, nil
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

// Image decodes everything stored, as Restore takes it.
func (m *MemoryStore) Image() (*Image, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	img := &Image{}
	for _, key := range m.order {
		if b, ok := m.tasks[key]; ok {
			var t TaskState
			if err := json.Unmarshal(b, &t); err != nil {
				return nil, err
			}
			img.Tasks = append(img.Tasks, t)
		}
		if b, ok := m.agents[key]; ok {
			var a AgentState
			if err := json.Unmarshal(b, &a); err != nil {
				return nil, err
			}
			img.Agents = append(img.Agents, a)
		}
	}
	for _, b := range m.messages {
		var msg Message
		if err := json.Unmarshal(b, &msg); err != nil {
			return nil, err
		}
		img.Messages = append(img.Messages, msg)
	}
	return img, nil
}

// Writes counts the documents and messages written.
func (m *MemoryStore) Writes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}
