package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mas-mcp/mas-mcp/engine"
)

// Writes that fail for a reason that may pass (a timeout, no responders
// while a server restarts, a dropped connection) are tried again, up to
// writeAttempts times with a doubling pause from writeBackoff. Each try is
// bounded by the JetStream request timeout (5 s unless ctx has a deadline).
const (
	writeAttempts = 3
	writeBackoff  = 100 * time.Millisecond
)

// ErrConflict means another writer changed a document since this store
// last wrote or read it: the write was refused, not applied over theirs.
var ErrConflict = errors.New("written meanwhile by another writer")

// PutTask writes a task document (without its conversation, which is the
// message stream) by revision.
func (s *Store) PutTask(ctx context.Context, t *engine.TaskState) error {
	doc := *t
	doc.SharedConversationPool = nil
	return s.put(ctx, s.kvT, "task "+t.TaskID, t.TaskID, envelope{Schema: SchemaVersion, Task: &doc})
}

// put writes a document by revision: over the revision this store last
// wrote or read, or as a new key. A write whose outcome is unknown may
// have landed: the next try then finds the key at a newer revision, and
// if that revision holds exactly the bytes this store tried to write, it
// is this store's own and is taken as the base; any other newer revision
// is another writer's, refused with ErrConflict.
//
// Writes of different documents run at once; the writes of one document
// never do (each owner commits in order, engine.Store), so s.mu guards
// only the maps of revisions, never a write.
func (s *Store) put(ctx context.Context, kv jetstream.KeyValue, what, key string, e envelope) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	k := kv.Bucket() + "/" + key
	err = retry(ctx, func() error {
		s.mu.Lock()
		rev, known := s.revs[k]
		s.mu.Unlock()
		var n uint64
		var err error
		if known {
			n, err = kv.Update(ctx, key, b, rev)
		} else {
			n, err = kv.Create(ctx, key, b)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			if !s.adoptOwnWrite(ctx, kv, key, k) {
				return fmt.Errorf("%w (revision %d): refusing to overwrite", ErrConflict, rev)
			}
			return errOwnWriteLanded
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.unsure[k] = b
			return err
		}
		s.revs[k] = n
		delete(s.unsure, k)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	return nil
}

// errOwnWriteLanded asks retry for one more try at once: an earlier write
// of this store whose outcome was unknown had landed, and its revision is
// now the base.
var errOwnWriteLanded = errors.New("an earlier write landed")

// adoptOwnWrite reports whether the key's current value is the document
// this store last tried to write without learning the outcome; if so its
// revision becomes the base for the next write.
func (s *Store) adoptOwnWrite(ctx context.Context, kv jetstream.KeyValue, key, k string) bool {
	s.mu.Lock()
	mine, ok := s.unsure[k]
	s.mu.Unlock()
	if !ok {
		return false
	}
	entry, err := kv.Get(ctx, key)
	if err != nil || !bytes.Equal(entry.Value(), mine) {
		return false
	}
	s.mu.Lock()
	s.revs[k] = entry.Revision()
	delete(s.unsure, k)
	s.mu.Unlock()
	s.log.Warn("store: a write reported as failed had landed; carrying on from it", "key", k, "revision", entry.Revision())
	return true
}

// PutMessage publishes a message and waits for the stream's
// acknowledgement. A publish tried again carries the same Nats-Msg-Id, so
// the stream keeps one copy even if an earlier try landed.
func (s *Store) PutMessage(ctx context.Context, m *engine.Message) error {
	b, err := json.Marshal(envelope{Schema: SchemaVersion, Message: m})
	if err != nil {
		return fmt.Errorf("store: message %s: %w", m.MessageID, err)
	}
	err = retry(ctx, func() error {
		_, err := s.js.Publish(ctx, subjectMsgs+m.TaskID, b, jetstream.WithMsgID(m.MessageID))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: message %s: %w", m.MessageID, err)
	}
	return nil
}

// retry runs try until it succeeds, fails for good, or writeAttempts tries
// failed for reasons that may pass.
func retry(ctx context.Context, try func() error) error {
	pause := writeBackoff
	var err error
	for attempt := 1; ; attempt++ {
		err = try()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errOwnWriteLanded):
			attempt-- // not a failure: write again over the adopted revision
			continue
		case !transient(err) || attempt >= writeAttempts || ctx.Err() != nil:
			return err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return err
		}
		pause *= 2
	}
}

// transient reports whether a failed write may succeed when tried again.
func transient(err error) bool {
	switch {
	case errors.Is(err, ErrConflict), errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, context.Canceled):
		return false
	}
	return true
}
