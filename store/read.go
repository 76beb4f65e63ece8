package store

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mas-mcp/mas-mcp/engine"
)

var _ engine.StoreReader = (*Store)(nil)

// ReadTask reads a task document back (engine.StoreReader): after a write
// the store refused, the engine takes back what the store holds. The
// task's conversation is not part of it.
func (s *Store) ReadTask(ctx context.Context, id string) (engine.TaskState, error) {
	e, err := s.read(ctx, s.kvT, "task", id)
	if err != nil {
		return engine.TaskState{}, err
	}
	if e.Task == nil {
		return engine.TaskState{}, fmt.Errorf("store: task %s: the document holds no task", id)
	}
	return *e.Task, nil
}

// ReadAgent reads an agent document back (engine.StoreReader).
func (s *Store) ReadAgent(ctx context.Context, id string) (engine.AgentState, error) {
	e, err := s.read(ctx, s.kvA, "agent", id)
	if err != nil {
		return engine.AgentState{}, err
	}
	if e.Agent == nil {
		return engine.AgentState{}, fmt.Errorf("store: agent %s: the document holds no agent", id)
	}
	if err := s.assemble(ctx, e, nil); err != nil {
		return engine.AgentState{}, err
	}
	return *e.Agent, nil
}

// read gets one document. A value that is this store's own write whose
// outcome was unknown is adopted as the base of the next write, as put
// does.
func (s *Store) read(ctx context.Context, kv jetstream.KeyValue, kind, key string) (*envelope, error) {
	entry, err := kv.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("store: read %s %s: %w", kind, key, err)
	}
	k := kv.Bucket() + "/" + key
	s.mu.Lock()
	s.adoptedLocked(k, entry.Value(), entry.Revision())
	s.mu.Unlock()
	return decode(entry.Value(), kind+" "+key)
}
