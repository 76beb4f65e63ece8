package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	b, err := marshal(e)
	if err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	return s.putEncoded(ctx, kv, what, key, b)
}

// putEncoded is put of a document already encoded.
func (s *Store) putEncoded(ctx context.Context, kv jetstream.KeyValue, what, key string, b []byte) error {
	k := kv.Bucket() + "/" + key
	err := retry(ctx, func() error {
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
			mine, err := s.adoptOwnWrite(ctx, kv, key, k)
			switch {
			case err != nil:
				return err // whose write it is, is not known yet: tried again
			case !mine:
				return fmt.Errorf("%w (revision %d): refusing to overwrite", ErrConflict, rev)
			}
			return errOwnWriteLanded
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			// A payload over NATS's limit is refused by the client before
			// it is sent: it cannot have landed.
			if !errors.Is(err, nats.ErrMaxPayload) {
				s.unsureLocked(k, b)
			}
			return err
		}
		s.revs[k] = n
		delete(s.unsure, k)
		return nil
	})
	if err != nil {
		return s.refusal(what, len(b), err)
	}
	s.counted(kv.Bucket(), len(b))
	return nil
}

// refusal is the error of a failed write of size bytes. A payload over
// NATS's limit is an engine.TooLargeError, naming the size and the limit:
// the engine answers it by bounding the document harder or withdrawing
// the change, never by writing the same document again (engine/owner.go).
func (s *Store) refusal(what string, size int, err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return &engine.TooLargeError{What: what, Size: size, Limit: int(s.nc.MaxPayload()), Err: err}
	}
	return fmt.Errorf("store: %s: %w", what, err)
}

// errOwnWriteLanded asks retry for one more try at once: an earlier write
// of this store whose outcome was unknown had landed, and its revision is
// now the base.
var errOwnWriteLanded = errors.New("an earlier write landed")

// maxUnsure bounds the writes of one document kept while their outcome is
// unknown (a stall that outlasts the retries, write after write).
const maxUnsure = 8

// unsureLocked records a write of k whose outcome is unknown. Every such
// write since the last one known to land is kept: while NATS stalls, one
// may land and the next ones not, and the store must know the one that
// landed as its own. s.mu is held.
func (s *Store) unsureLocked(k string, b []byte) {
	u := s.unsure[k]
	if n := len(u); n > 0 && bytes.Equal(u[n-1], b) {
		return // the same document tried again
	}
	u = append(u, b)
	if len(u) > maxUnsure {
		u = slices.Delete(u, 0, len(u)-maxUnsure)
	}
	s.unsure[k] = u
}

// adoptedLocked takes the value stored at k, at revision rev, as the base
// of the next write if it is one of this store's writes whose outcome was
// unknown, and reports whether it was. s.mu is held.
func (s *Store) adoptedLocked(k string, value []byte, rev uint64) bool {
	if !slices.ContainsFunc(s.unsure[k], func(b []byte) bool { return bytes.Equal(b, value) }) {
		return false
	}
	s.revs[k] = rev
	delete(s.unsure, k)
	return true
}

// adoptOwnWrite reports whether the key's current value is a document this
// store tried to write without learning the outcome; if so its revision
// becomes the base for the next write (the next write puts the newest
// state over it). An error means the value could not be read.
func (s *Store) adoptOwnWrite(ctx context.Context, kv jetstream.KeyValue, key, k string) (bool, error) {
	s.mu.Lock()
	_, ok := s.unsure[k]
	s.mu.Unlock()
	if !ok {
		return false, nil
	}
	entry, err := kv.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("reading it back after a write found it changed: %w", err)
	}
	s.mu.Lock()
	mine := s.adoptedLocked(k, entry.Value(), entry.Revision())
	s.mu.Unlock()
	if mine {
		s.log.Warn("store: a write reported as failed had landed; carrying on from it", "key", k, "revision", entry.Revision())
	}
	return mine, nil
}

// PutMessage publishes a message and waits for the stream's
// acknowledgement. A publish tried again carries the same Nats-Msg-Id, so
// the stream keeps one copy even if an earlier try landed.
func (s *Store) PutMessage(ctx context.Context, m *engine.Message) error {
	b, err := marshal(envelope{Schema: SchemaVersion, Message: m})
	if err != nil {
		return fmt.Errorf("store: message %s: %w", m.MessageID, err)
	}
	err = retry(ctx, func() error {
		_, err := s.js.Publish(ctx, subjectMsgs+m.TaskID, b, jetstream.WithMsgID(m.MessageID))
		return err
	})
	if err != nil {
		return s.refusal("message "+m.MessageID, len(b), err)
	}
	s.counted(streamMsgs, len(b))
	return nil
}

// WriteStats counts what a Store has written since it was opened, by kind:
// how many documents, chunks and messages, and their bytes. It shows
// whether writes grow in proportion to the changes (BenchmarkTaskBurst).
type WriteStats struct {
	Tasks, Agents, Chunks, Messages                 int64
	TaskBytes, AgentBytes, ChunkBytes, MessageBytes int64
}

// Written returns the writes counted so far.
func (s *Store) Written() WriteStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written
}

// counted adds a write of n bytes to the bucket's or stream's count.
func (s *Store) counted(where string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &s.written
	switch where {
	case bucketTasks:
		w.Tasks, w.TaskBytes = w.Tasks+1, w.TaskBytes+int64(n)
	case bucketAgents:
		w.Agents, w.AgentBytes = w.Agents+1, w.AgentBytes+int64(n)
	case bucketSteps:
		w.Chunks, w.ChunkBytes = w.Chunks+1, w.ChunkBytes+int64(n)
	case streamMsgs:
		w.Messages, w.MessageBytes = w.Messages+1, w.MessageBytes+int64(n)
	}
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

// marshal encodes what the store writes: JSON as encoding/json writes it,
// but '<', '>' and '&' as they are. encoding/json writes each as six bytes
// (\u003c), so a text of markup or code would take up to six times its
// size in a document. The engine's bound on a document's size
// (MaxDocumentBytes) counts texts as this writes them (one byte for each
// of '<', '>' and '&'; six for a control character): a document it lets
// through fits NATS's payload limit. Documents read the same either way.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
