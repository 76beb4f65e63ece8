package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/secret"
)

// The trail (engine.Trail) is a stream with one subject per task, agent and
// kind — mas.trail.<task>.<agent>.<kind> — so that a task's trail, or one
// agent's or one kind's part of it, is read without scanning the others.
// Large bodies (prompts, answers, tool results) go to a KV bucket under
// their SHA-256 and entries refer to them: a system prompt sent a thousand
// times is kept once. Both are retained by age and size.
const (
	streamTrail   = "MAS_TRAIL"
	subjectTrail  = "mas.trail."
	bucketBodies  = "mas_trail_bodies"
	bodyRefPrefix = "sha256:"
	// maxTrailEntry bounds one entry without its bodies (NATS refuses
	// messages over 1 MiB).
	maxTrailEntry = 768 << 10
)

// TrailOptions configure OpenTrail. Zero values mean defaults.
type TrailOptions struct {
	// MaxAge drops entries (and bodies no entry refreshed) older than
	// this. Default 90 days.
	MaxAge time.Duration
	// MaxBytes bounds the stream and the bodies bucket each; the oldest
	// entries go first. Default 1 GiB; negative: unbounded.
	MaxBytes int64
	// BodyThreshold is the size from which a body is kept apart, once.
	// Default 1 KiB.
	BodyThreshold int
	// MaxBody bounds one body; a longer one is cut with a note. Default
	// 512 KiB (NATS refuses messages over 1 MiB).
	MaxBody int
	// Secrets are scrubbed from everything the trail keeps (API keys,
	// tokens, passwords), whatever recorded them, by internal/secret's
	// rule (those under secret.MinLen bytes are not, as the engine does
	// not scrub them).
	Secrets []string
	// Queue is how many entries may wait to be written before Append
	// blocks. Default 4096.
	Queue int
	// ReadOnly opens an existing trail without changing its
	// configuration (an export beside a running owner).
	ReadOnly bool
}

// Trail is the durable engine.Trail and engine.TrailReader. Appends are
// queued and written in order by one goroutine, so recording never makes
// an agent wait on fsync; a read first waits for the appends before it.
type Trail struct {
	o       TrailOptions
	secrets *secret.List // o.Secrets
	log     *slog.Logger
	stream  jetstream.Stream
	js      jetstream.JetStream
	bodies  jetstream.KeyValue

	// mu guards closed; Append holds it shared while it queues.
	mu     sync.RWMutex
	closed bool
	q      chan trailJob
	done   chan struct{} // closed when the writer has stopped

	// put remembers when each body was last written (writer only).
	put map[string]time.Time
}

// trailJob is an entry to write (JSON) or, with flushed set, a marker the
// writer closes when it reaches it.
type trailJob struct {
	entry   *engine.TrailEntry
	flushed chan struct{}
}

// OpenTrail opens (creating it unless o.ReadOnly) the trail on s. The
// store closes it before it closes itself.
func (s *Store) OpenTrail(ctx context.Context, o TrailOptions) (*Trail, error) {
	if o.MaxAge < 0 || o.BodyThreshold < 0 || o.MaxBody < 0 || o.Queue < 0 {
		return nil, errors.New("store: trail: MaxAge, BodyThreshold, MaxBody and Queue must not be negative")
	}
	o.MaxAge = cmpOr(o.MaxAge, 90*24*time.Hour)
	if o.MaxBytes == 0 {
		o.MaxBytes = 1 << 30
	}
	o.BodyThreshold = cmpOr(o.BodyThreshold, 1<<10)
	o.MaxBody = cmpOr(o.MaxBody, 512<<10)
	o.Queue = cmpOr(o.Queue, 4096)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t := &Trail{o: o, secrets: secret.New(engine.Redacted, o.Secrets...), log: s.log, js: s.js, q: make(chan trailJob, o.Queue), done: make(chan struct{}), put: map[string]time.Time{}}
	var err error
	if o.ReadOnly {
		if t.stream, err = s.js.Stream(ctx, streamTrail); err != nil {
			return nil, fmt.Errorf("store: trail: %w", err)
		}
		if t.bodies, err = s.js.KeyValue(ctx, bucketBodies); err != nil {
			return nil, fmt.Errorf("store: trail bodies: %w", err)
		}
	} else {
		maxBytes := o.MaxBytes
		if maxBytes < 0 {
			maxBytes = -1
		}
		t.stream, err = s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        streamTrail,
			Description: "mas-mcp audit trail: every LLM call, tool call, message, instruction and operator action, per task",
			Subjects:    []string{subjectTrail + ">"},
			Storage:     jetstream.FileStorage,
			Replicas:    s.opts.Replicas,
			Duplicates:  2 * time.Minute,
			MaxAge:      o.MaxAge,
			MaxBytes:    maxBytes,
			Discard:     jetstream.DiscardOld,
		})
		if err != nil {
			return nil, fmt.Errorf("store: stream %s: %w", streamTrail, err)
		}
		t.bodies, err = s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bucketBodies, Description: "mas-mcp audit trail: large bodies by SHA-256", History: 1,
			TTL: o.MaxAge, MaxBytes: maxBytes, Storage: jetstream.FileStorage, Replicas: s.opts.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("store: bucket %s: %w", bucketBodies, err)
		}
	}
	go t.write()
	s.mu.Lock()
	s.trails = append(s.trails, t)
	s.mu.Unlock()
	return t, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Append implements engine.Trail: it queues a deep copy of e for the
// writer, which encodes it: the caller pays for the copy only. It blocks
// only while the queue is full.
func (t *Trail) Append(_ context.Context, e engine.TrailEntry) {
	c := e.Clone()
	c.Seq = 0
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		t.log.Warn("trail: closed; entry not recorded", "kind", e.Kind, "task", e.TaskID)
		return
	}
	t.q <- trailJob{entry: &c}
}

// Close writes what is queued and stops the writer. Safe to call twice.
func (t *Trail) Close() error {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.q)
	}
	t.mu.Unlock()
	<-t.done
	return nil
}

// flush waits until everything queued before it is written.
func (t *Trail) flush(ctx context.Context) error {
	ch := make(chan struct{})
	t.mu.RLock()
	if t.closed {
		t.mu.RUnlock()
		return nil // the writer drains the queue before done closes
	}
	t.q <- trailJob{flushed: ch}
	t.mu.RUnlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write is the one goroutine that writes the trail, in append order.
func (t *Trail) write() {
	defer close(t.done)
	for j := range t.q {
		if j.flushed != nil {
			close(j.flushed)
			continue
		}
		if err := t.writeEntry(j.entry); err != nil {
			t.log.Error("trail: entry not recorded", "err", err)
		}
	}
}

func (t *Trail) writeEntry(e *engine.TrailEntry) error {
	// The writes of one entry are bounded even when NATS is unreachable:
	// the queue behind it must move.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, body := range e.Bodies() {
		if err := t.keep(ctx, body); err != nil {
			return fmt.Errorf("trail: body of a %s entry of task %s: %w", e.Kind, e.TaskID, err)
		}
	}
	out, err := marshal(e)
	if err != nil {
		return fmt.Errorf("trail: a %s entry of task %s: %w", e.Kind, e.TaskID, err)
	}
	if len(out) > maxTrailEntry {
		// Bodies are apart already: what is left is the entry's own
		// fields (a step's result). Keep who and when, say what was lost.
		n := len(out)
		*e = engine.TrailEntry{ID: e.ID, Time: e.Time, Kind: e.Kind, TaskID: e.TaskID, StageID: e.StageID, AgentID: e.AgentID,
			StepID: e.StepID, Skill: e.Skill, Note: fmt.Sprintf("entry of %d bytes left out: over the trail's bound of %d bytes", n, maxTrailEntry)}
		if out, err = marshal(e); err != nil {
			return err
		}
	}
	out = t.scrub(out)
	msg := &nats.Msg{Subject: trailSubject(e.TaskID, e.AgentID, e.Kind), Data: out, Header: nats.Header{}}
	if e.ID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, e.TaskID+"/"+e.ID)
	}
	if _, err := t.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("trail: publish a %s entry of task %s: %w", e.Kind, e.TaskID, err)
	}
	return nil
}

// keep scrubs a body, cuts it to MaxBody, and moves a large one to the
// bodies bucket, leaving its reference.
func (t *Trail) keep(ctx context.Context, body *engine.TrailBody) error {
	text := string(t.scrub([]byte(body.Text)))
	if len(text) > t.o.MaxBody {
		cut := len(text) - t.o.MaxBody
		text = strings.ToValidUTF8(text[:t.o.MaxBody], "") + fmt.Sprintf("…[%d bytes cut]", cut)
	}
	body.Text, body.Size = text, len(text)
	if len(text) < t.o.BodyThreshold {
		return nil
	}
	sum := sha256.Sum256([]byte(text))
	key := hex.EncodeToString(sum[:])
	body.Ref, body.Text = bodyRefPrefix+key, ""
	// A body is written again when half its retention has passed, so an
	// entry never outlives a body it refers to.
	if at, ok := t.put[key]; ok && time.Since(at) < t.o.MaxAge/2 {
		return nil
	}
	if _, err := t.bodies.Put(ctx, key, []byte(text)); err != nil {
		return err
	}
	t.put[key] = time.Now()
	return nil
}

// scrub replaces every configured secret in b.
func (t *Trail) scrub(b []byte) []byte { return t.secrets.Bytes(b) }

// trailSubject is the subject of a task's entries by one agent of one
// kind ("*" for any).
func trailSubject(task, agent, kind string) string {
	tok := func(s string) string {
		if s == "*" {
			return s
		}
		return engine.TrailSubjectToken(s)
	}
	return subjectTrail + tok(task) + "." + tok(agent) + "." + tok(kind)
}

// ReadTrail implements engine.TrailReader: the page of q's task's entries
// after its cursor, bodies filled in.
func (t *Trail) ReadTrail(ctx context.Context, q engine.TrailQuery) (engine.TrailPage, error) {
	after, limit, err := q.Check()
	if err != nil {
		return engine.TrailPage{}, err
	}
	if err := t.flush(ctx); err != nil {
		return engine.TrailPage{}, err
	}
	agent, kind := q.AgentID, q.Kind
	if agent == "" {
		agent = "*"
	}
	if kind == "" {
		kind = "*"
	}
	subj := trailSubject(q.TaskID, agent, kind)
	page := engine.TrailPage{Entries: []engine.TrailEntry{}}
	for seq := after + 1; ; {
		m, err := t.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return page, nil
		}
		if err != nil {
			return engine.TrailPage{}, fmt.Errorf("store: read the trail of task %s: %w", q.TaskID, err)
		}
		seq = m.Sequence + 1
		var e engine.TrailEntry
		if err := json.Unmarshal(m.Data, &e); err != nil {
			return engine.TrailPage{}, fmt.Errorf("store: trail entry %d: %w", m.Sequence, err)
		}
		e.Seq = m.Sequence
		if !q.Matches(&e) {
			continue
		}
		if len(page.Entries) == limit {
			page.NextCursor = engine.TrailCursor(page.Entries[limit-1].Seq)
			return page, nil
		}
		if err := t.fill(ctx, &e); err != nil {
			return engine.TrailPage{}, err
		}
		page.Entries = append(page.Entries, e)
	}
}

// fill reads back the bodies an entry refers to.
func (t *Trail) fill(ctx context.Context, e *engine.TrailEntry) error {
	for _, body := range e.Bodies() {
		if body.Ref == "" {
			continue
		}
		kv, err := t.bodies.Get(ctx, strings.TrimPrefix(body.Ref, bodyRefPrefix))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			body.Text = "(body no longer retained)"
		case err != nil:
			return fmt.Errorf("store: trail body %s: %w", body.Ref, err)
		default:
			body.Text = string(kv.Value())
		}
	}
	return nil
}
