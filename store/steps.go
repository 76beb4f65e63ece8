package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mas-mcp/mas-mcp/engine"
)

// Steps stored in proportion to the change (issue 18).
//
// An agent's document holds its step list, which for a manager grows with
// every task in flight. Writing the whole list on every change made the
// durable cost of a change grow with the work (and a manager with ~100
// tasks in flight passed NATS's 1 MiB payload limit). Ended steps
// (finished or failed) no longer change, so the store moves them out of
// the agent's document into chunks of their own, each written once. So
// does it with steps that wait (init or pending, with no result or tool
// call yet) once they are many: a manager of a hundred tasks has a
// hundred incoming notices queued, each with its text, and until one runs
// nothing in it changes:
//
//   - the agent's document (its head) keeps its steps that may still
//     change (running, and waiting ones while they are few) and the few
//     ended ones not yet chunked, the order of all its steps (their IDs),
//     and the keys of the chunks that hold the others;
//   - a chunk (bucket mas_steps, key "<agent>.<n>") holds up to
//     chunkSteps steps (or chunkBytes of them), written with Create
//     before the head that refers to it;
//   - a chunk none of whose steps the agent still has is deleted after a
//     head without it is written; a chunk with fewer than a quarter of
//     its steps still there is compacted (its live steps go back into the
//     head and into the next chunk).
//
// A crash between a chunk's write and its head's leaves a chunk no head
// refers to: Load deletes it. The head is what the store holds of the
// agent; a chunk is only ever read through a head that refers to it, so
// the crash guarantees of the single document are kept. A step a chunk
// holds that changes after all (it no longer matches what was written, see
// stepLoc) goes back into the head, and into a new chunk when it ended
// again (a waiting step that starts running comes back this way).
const (
	bucketSteps = "mas_steps"
	chunkSteps  = 8
	chunkBytes  = 256 << 10
	// waitingBytes is how many bytes of text the head's waiting steps
	// may hold before they go to chunks: a worker's short plan stays in
	// the head (chunking steps that are about to run writes them twice).
	// It was 32 KiB: a plan of 50 small steps (~15 KB) then went with
	// every write of its agent until its last step ran, and a manager's
	// queued notices with each of its commits; at 8 KiB a burst writes a
	// quarter fewer bytes per task and a durable step costs less
	// (BenchmarkTaskBurst, BenchmarkStepOverheadDurable, 2026-11-24).
	waitingBytes = 8 << 10
)

// agentSteps is the store's record of one agent's chunks. Its mutex also
// orders the writes of the agent's document.
type agentSteps struct {
	mu     sync.Mutex
	next   int                  // number of the next new chunk
	free   []int                // numbers of deleted chunks, to use again
	in     map[string]stepLoc   // chunked step ID → where, and as what
	chunks map[string]*chunkRec // chunk key → what it holds
	loaded map[string]struct{}  // set by Load: chunk keys a head refers to
	base   *base                // the base of the agent's lists, if any (lists.go)
	// enc keeps the encodings of the head's waiting and ended steps from
	// one write to the next (encodeHead).
	enc map[string]encodedStep

	// What the last head written holds, kept so that the next write
	// finds most of it without hashing (a manager of a hundred tasks has
	// seven hundred steps, and was found by ID in maps at every write,
	// which made a write's cost grow with the tasks in flight): nil after
	// a write that failed, when in and chunks alone are to be trusted.
	//
	// seen is its step list by position: each step's ID and where it is
	// chunked (as in has it); referred the chunks it refers to, sorted by
	// key, and referredJSON their keys encoded (a manager of a hundred
	// tasks refers to a hundred chunks). gen numbers the writes (chunkRec).
	seen         []seenStep
	spare        []seenStep // the array of the seen before, to use again
	referred     []*chunkRec
	referredJSON []byte
	gen          uint64
}

// chunkRec is what the store knows of one of an agent's chunks.
type chunkRec struct {
	key   string
	steps int // steps written in it (none in a base)
	// live counts, during the write numbered gen, its steps that the
	// agent still has as written; refer is the number of the last write
	// whose head refers to it.
	live       int
	gen, refer uint64
}

// count counts one more of c's steps as live in write gen.
func (c *chunkRec) count(gen uint64) {
	if c.gen != gen {
		c.gen, c.live = gen, 0
	}
	c.live++
}

// sparse reports whether fewer than a quarter of c's steps are live in
// write gen: its live steps then go back into the head (compaction).
func (c *chunkRec) sparse(gen uint64) bool {
	live := 0
	if c.gen == gen {
		live = c.live
	}
	return live*4 < c.steps
}

// seenStep is a step of the list as last written: its ID and where it is
// chunked (loc.c is nil when it is in the head).
type seenStep struct {
	id  string
	loc stepLoc
}

// locAt finds where the step at position i of the list being written, id,
// is chunked: from seen when the step is at the same position (the
// strings are then the same, and compare at once), else from in.
func (as *agentSteps) locAt(seen []seenStep, i int, id string) (stepLoc, bool) {
	if i < len(seen) && seen[i].id == id {
		return seen[i].loc, seen[i].loc.c != nil
	}
	loc, ok := as.in[id]
	return loc, ok
}

// reset forgets all the store knows of the agent's chunks (Load).
func (as *agentSteps) reset() {
	as.in, as.chunks, as.loaded = map[string]stepLoc{}, map[string]*chunkRec{}, map[string]struct{}{}
	as.seen, as.spare, as.referred, as.referredJSON = nil, nil, nil, nil
	as.base = nil // Load sets the base the head it loads refers to
}

// encodedStep is a step's encoding, with what tells whether it is still
// the step's.
type encodedStep struct {
	loc stepLoc
	b   []byte
}

// encodeHead encodes an agent's head, with chunks, the encoded keys of
// the chunks it refers to (nil: none). Its steps go apart from the agent,
// in head_steps (schema 3): a manager keeps up to waitingBytes of queued
// notices in its head, which do not change from one write to the next,
// and encoding them again at every change cost more than all the rest.
// A waiting or ended step's encoding is kept while it is unchanged (the
// test chunks use, stepLoc.unchanged); the running one is encoded anew.
func (as *agentSteps) encodeHead(e *envelope, chunks []byte) ([]byte, error) {
	head := *e.Agent
	steps := head.AgentStep.StepList
	head.AgentStep.StepList = nil
	cold := *e
	cold.Agent = &head
	b, err := marshal(cold)
	if err != nil || (steps == nil && chunks == nil) {
		return b, err
	}
	out := b[: len(b)-1 : len(b)-1] // b ends with the envelope's '}'
	if chunks != nil {
		out = append(append(out, `,"chunks":`...), chunks...)
	}
	if steps == nil {
		return append(out, '}'), nil
	}
	kept := make(map[string]encodedStep, len(steps))
	out = append(out, `,"head_steps":[`...)
	for i := range steps {
		st := &steps[i]
		if i > 0 {
			out = append(out, ',')
		}
		if enc, ok := as.enc[st.StepID]; ok && enc.loc.unchanged(st) {
			out = append(out, enc.b...)
			kept[st.StepID] = enc
			continue
		}
		sb, err := marshal(st)
		if err != nil {
			return nil, fmt.Errorf("step %s: %w", st.StepID, err)
		}
		out = append(out, sb...)
		if ended(st) || waiting(st) {
			kept[st.StepID] = encodedStep{loc: locOf(nil, st), b: sb}
		}
	}
	as.enc = kept
	return append(out, "]}"...), nil
}

// stepLoc is where a chunked step is, and what it was when written there,
// to tell whether it changed since: an ended step by its fingerprint, a
// waiting one by a shallow copy.
type stepLoc struct {
	c  *chunkRec
	fp fingerprint
	// waiting is the step as written, when it was waiting (its texts
	// shared, not copied).
	waiting *engine.StepState
}

// locOf records st as written in chunk.
func locOf(chunk *chunkRec, st *engine.StepState) stepLoc {
	if ended(st) {
		return stepLoc{c: chunk, fp: fingerprintOf(st)}
	}
	c := *st
	return stepLoc{c: chunk, waiting: &c}
}

// unchanged reports whether st is still what was written in the chunk.
func (l *stepLoc) unchanged(st *engine.StepState) bool {
	if l.waiting != nil {
		return waiting(st) && sameWaiting(l.waiting, st)
	}
	return ended(st) && l.fp.same(fingerprintOf(st))
}

// fingerprint tells, cheaply, whether a chunked ended step was changed
// since. The engine never changes an ended step's result map or tool call
// in place (it replaces them), so they are known by their identity; texts
// by their lengths. The fingerprint holds the map it was taken of: a map
// made later can never share its address.
type fingerprint struct {
	state    string
	finished time.Time
	texts    int              // the lengths of the step's own texts
	result   map[string]any   // its execute_result, compared by identity
	instr    *engine.ToolCall // its instruction_content
}

func fingerprintOf(st *engine.StepState) fingerprint {
	return fingerprint{
		state: st.ExecutionState, finished: st.FinishedAt,
		texts:  len(st.StepIntention) + len(st.TextContent) + len(st.Executor),
		result: st.ExecuteResult,
		instr:  st.InstructionContent,
	}
}

// same reports whether f and g were taken of the same step contents.
func (f fingerprint) same(g fingerprint) bool {
	return f.state == g.state && f.finished.Equal(g.finished) && f.texts == g.texts && f.instr == g.instr &&
		reflect.ValueOf(f.result).UnsafePointer() == reflect.ValueOf(g.result).UnsafePointer()
}

func ended(st *engine.StepState) bool {
	return st.ExecutionState == engine.StateFinished || st.ExecutionState == engine.StateFailed
}

// waiting reports whether st waits to run with nothing in it that could
// change in place: no result map, no tool call (a waiting tool step gets
// its call written into it), only strings and values, compared whole by
// sameWaiting.
func waiting(st *engine.StepState) bool {
	return (st.ExecutionState == engine.StateInit || st.ExecutionState == engine.StatePending) &&
		st.ExecuteResult == nil && st.InstructionContent == nil
}

// sameWaiting compares two waiting steps field by field. Strings are never
// changed in place in Go, so an unchanged one is the same string and
// compares at once. TestSameWaitingKnowsEveryField fails when StepState
// gains a field this does not compare.
func sameWaiting(a, b *engine.StepState) bool {
	return a.TaskID == b.TaskID && a.StageID == b.StageID && a.AgentID == b.AgentID &&
		a.StepID == b.StepID && a.StepIntention == b.StepIntention && a.Type == b.Type &&
		a.Executor == b.Executor && a.ExecutionState == b.ExecutionState &&
		a.TextContent == b.TextContent && a.TargetStepID == b.TargetStepID &&
		a.ReplyTo == b.ReplyTo && a.ReturnWaitingID == b.ReturnWaitingID &&
		a.Usage == b.Usage && a.CreatedAt.Equal(b.CreatedAt) &&
		a.StartedAt.Equal(b.StartedAt) && a.FinishedAt.Equal(b.FinishedAt) &&
		a.InstructionContent == nil && b.InstructionContent == nil &&
		a.ExecuteResult == nil && b.ExecuteResult == nil
}

// textBytes is a step's size in text, roughly what it takes in JSON.
func textBytes(st *engine.StepState) int {
	return len(st.StepIntention) + len(st.TextContent) + len(st.TaskID) + len(st.StageID) +
		len(st.StepID) + len(st.Executor) + 200
}

func (s *Store) stepsOf(agentID string) *agentSteps {
	s.mu.Lock()
	defer s.mu.Unlock()
	as := s.steps[agentID]
	if as == nil {
		as = &agentSteps{}
		as.reset()
		s.steps[agentID] = as
	}
	return as
}

// chunkEnvelope is a chunk's document: steps, or the base of the agent's
// lists (lists.go).
type chunkEnvelope struct {
	Schema int                `json:"schema"`
	Agent  string             `json:"agent"`
	Steps  []engine.StepState `json:"steps"`
	Lists  *headLists         `json:"lists,omitempty"`
}

// PutAgent writes an agent document by revision: its ended steps in
// chunks first (each once), then its head.
func (s *Store) PutAgent(ctx context.Context, a *engine.AgentState) error {
	as := s.stepsOf(a.AgentID)
	as.mu.Lock()
	defer as.mu.Unlock()
	steps := a.AgentStep.StepList
	// What the last head holds is trusted again once this one is written.
	seen, prevReferred, prevJSON := as.seen, as.referred, as.referredJSON
	as.seen, as.referred, as.referredJSON = nil, nil, nil
	as.gen++
	gen := as.gen

	// Where each step is chunked, and which chunks still hold steps the
	// agent has, unchanged (a first walk counts them, so that the second
	// knows which chunks are sparse). This write's list goes into the
	// array of the one before the last.
	next := slices.Grow(as.spare[:0], len(steps))[:len(steps)]
	as.spare = nil
	var counted []*chunkRec
	for i := range steps {
		st := &steps[i]
		next[i] = seenStep{id: st.StepID}
		loc, ok := as.locAt(seen, i, st.StepID)
		if !ok {
			continue
		}
		if !loc.unchanged(st) {
			delete(as.in, st.StepID) // changed since: back in the head
			continue
		}
		if loc.c.gen != gen {
			counted = append(counted, loc.c)
		}
		loc.c.count(gen)
		next[i].loc = loc
	}

	// The steps the head keeps, and the ended ones to chunk.
	var inline, fresh, wait []int
	chunked, waitSize := 0, 0
	for i := range steps {
		st := &steps[i]
		if c := next[i].loc.c; c != nil {
			if !c.sparse(gen) {
				chunked++
				continue
			}
			delete(as.in, st.StepID) // compacted: back in the head
			next[i].loc = stepLoc{}
		}
		inline = append(inline, i)
		switch {
		case ended(st):
			fresh = append(fresh, i)
		case waiting(st):
			wait = append(wait, i)
			waitSize += textBytes(st)
		}
	}
	if waitSize > waitingBytes {
		fresh = append(fresh, wait...)
		slices.Sort(fresh)
	}
	// The chunks the head refers to: those holding the steps it has (the
	// chunks kept, the chunks written now), and the base of its lists
	// (lists.go).
	var refer []*chunkRec
	mark := func(c *chunkRec) {
		if c.refer != gen {
			c.refer = gen
			refer = append(refer, c)
		}
	}
	for _, c := range counted {
		if !c.sparse(gen) {
			mark(c)
		}
	}
	if len(fresh) >= chunkSteps {
		written, err := s.writeChunks(ctx, a.AgentID, as, steps, fresh, next)
		if err != nil {
			return agentError(a.AgentID, err)
		}
		for _, c := range written {
			mark(c)
		}
		chunked += len(fresh)
		inline = slices.DeleteFunc(inline, func(i int) bool { return next[i].loc.c != nil })
	}

	head := *a
	e := envelope{Schema: SchemaVersion, Agent: &head}
	var order []string
	if chunked > 0 {
		head.AgentStep.StepList = make([]engine.StepState, len(inline))
		for j, i := range inline {
			head.AgentStep.StepList[j] = steps[i]
		}
		order = make([]string, len(steps))
		for i := range steps {
			order[i] = steps[i].StepID
		}
	}
	if err := s.putLists(ctx, a, as, &e, order); err != nil {
		return agentError(a.AgentID, err)
	}
	if e.Base != "" {
		c := as.chunks[e.Base]
		if c == nil {
			return fmt.Errorf("store: agent %s: the base %s of its lists is not one of its chunks", a.AgentID, e.Base)
		}
		mark(c)
	}
	// The chunks referred to, sorted by key: as the last head's when they
	// are the same ones (then no other chunk is left to delete either:
	// after a head is written, the store knows only the chunks it refers
	// to).
	same := prevReferred != nil && len(prevReferred) == len(refer) &&
		!slices.ContainsFunc(prevReferred, func(c *chunkRec) bool { return c.refer != gen })
	var chunks []byte
	if same {
		refer, chunks = prevReferred, prevJSON
	} else if len(refer) > 0 {
		slices.SortFunc(refer, func(x, y *chunkRec) int { return strings.Compare(x.key, y.key) })
		keys := make([]string, len(refer))
		for i, c := range refer {
			keys[i] = c.key
		}
		var err error
		if chunks, err = marshal(keys); err != nil {
			return fmt.Errorf("store: agent %s: %w", a.AgentID, err)
		}
	}
	b, err := as.encodeHead(&e, chunks)
	if err != nil {
		return fmt.Errorf("store: agent %s: %w", a.AgentID, err)
	}
	if err := s.putEncoded(ctx, s.kvA, "agent "+a.AgentID, a.AgentID, b); err != nil {
		return err
	}
	if !same {
		s.dropUnreferred(ctx, as, gen)
	}
	as.seen, as.spare = next, seen
	as.referred, as.referredJSON = refer, chunks
	return nil
}

// agentError is the error of a failed write of an agent's chunk: a chunk
// too large for NATS (one step larger than its limit) is the agent's
// TooLargeError as it is, the others name the agent.
func agentError(agentID string, err error) error {
	if tl, ok := errors.AsType[*engine.TooLargeError](err); ok {
		return tl
	}
	return fmt.Errorf("store: agent %s: %w", agentID, err)
}

// dropUnreferred deletes the agent's chunks the head written by write gen
// no longer refers to. as.mu is held.
func (s *Store) dropUnreferred(ctx context.Context, as *agentSteps, gen uint64) {
	var dead []string
	for k, c := range as.chunks {
		if c.refer != gen {
			dead = append(dead, k)
		}
	}
	if len(dead) == 0 {
		return
	}
	for id, loc := range as.in {
		if loc.c.refer != gen {
			delete(as.in, id)
		}
	}
	for _, k := range dead {
		delete(as.chunks, k)
		if err := s.kvS.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			// Swept at the next Load.
			s.log.Warn("store: deleting a chunk of ended steps", "key", k, "err", err)
			continue
		}
		// Its number is used again, so that an agent leaves as many
		// delete markers in the bucket as it ever had chunks at once.
		if num, ok := chunkNumber(k); ok {
			as.free = append(as.free, num)
		}
	}
}

// writeChunks writes the steps at fresh (indices into steps) in
// chunks of at most chunkSteps steps and chunkBytes bytes, records them
// in as and in list (by the same indices), and returns the chunks.
func (s *Store) writeChunks(ctx context.Context, agentID string, as *agentSteps, steps []engine.StepState, fresh []int, list []seenStep) ([]*chunkRec, error) {
	var (
		buf     bytes.Buffer
		at      []int // indices into steps of the chunk's steps
		none    = buf.Len()
		written []*chunkRec
	)
	start := func() {
		buf.Reset()
		fmt.Fprintf(&buf, `{"schema":%d,"agent":%q,"steps":[`, SchemaVersion, agentID)
		none = buf.Len()
		at = at[:0]
	}
	flush := func() error {
		if len(at) == 0 {
			return nil
		}
		buf.WriteString("]}")
		key, err := s.createChunk(ctx, agentID, as, buf.Bytes())
		if err != nil {
			return err
		}
		c := &chunkRec{key: key, steps: len(at)}
		for _, i := range at {
			list[i].loc = locOf(c, &steps[i])
			as.in[steps[i].StepID] = list[i].loc
		}
		as.chunks[key] = c
		written = append(written, c)
		return nil
	}
	start()
	for _, i := range fresh {
		b, err := marshal(&steps[i])
		if err != nil {
			return nil, fmt.Errorf("step %s: %w", steps[i].StepID, err)
		}
		if len(at) > 0 && (len(at) >= chunkSteps || buf.Len()+len(b) > chunkBytes) {
			if err := flush(); err != nil {
				return nil, err
			}
			start()
		}
		if buf.Len() > none {
			buf.WriteByte(',')
		}
		buf.Write(b)
		at = append(at, i)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return written, nil
}

// createChunk writes a new chunk under a free number of the agent's (one
// whose chunk was deleted after a document without it was written, so
// nothing refers to it), or under its next new one. A new key found taken
// (an earlier try that landed, or a chunk a crash left) is skipped.
func (s *Store) createChunk(ctx context.Context, agentID string, as *agentSteps, b []byte) (string, error) {
	if n := len(as.free); n > 0 {
		key := agentID + "." + strconv.Itoa(as.free[n-1])
		if err := retry(ctx, func() error { _, err := s.kvS.Put(ctx, key, b); return err }); err != nil {
			return "", s.chunkRefusal(agentID, len(b), err)
		}
		as.free = as.free[:n-1]
		s.counted(bucketSteps, len(b))
		return key, nil
	}
	var key string
	err := retry(ctx, func() error {
		for {
			key = agentID + "." + strconv.Itoa(as.next)
			as.next++
			_, err := s.kvS.Create(ctx, key, b)
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return err
		}
	})
	if err != nil {
		return "", s.chunkRefusal(agentID, len(b), err)
	}
	s.counted(bucketSteps, len(b))
	return key, nil
}

// chunkRefusal is the error of a chunk's failed write: as it is, or a
// TooLargeError of the agent's when the chunk is over NATS's limit.
func (s *Store) chunkRefusal(agentID string, size int, err error) error {
	if errors.Is(err, nats.ErrMaxPayload) {
		return s.refusal("agent "+agentID+" (a chunk of its steps)", size, err)
	}
	return err
}

// chunkNumber is the number in a chunk's key ("<agent>.<n>").
func chunkNumber(key string) (int, bool) {
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(key[i+1:])
	return n, err == nil
}

// assemble rebuilds an agent's step list from its head and chunks; seen,
// when not nil, records the chunks read and the steps they hold.
func (s *Store) assemble(ctx context.Context, e *envelope, seen *agentSteps) error {
	if e.HeadSteps != nil {
		e.Agent.AgentStep.StepList, e.HeadSteps = e.HeadSteps, nil
	}
	if len(e.Chunks) == 0 {
		return nil
	}
	a := e.Agent
	byID := make(map[string]*engine.StepState, len(a.AgentStep.StepList))
	for i := range a.AgentStep.StepList {
		byID[a.AgentStep.StepList[i].StepID] = &a.AgentStep.StepList[i]
	}
	// A step may be in several chunks: a chunked step that changed went
	// back into the head, and into a later chunk once it ended (again),
	// while the chunk it left may still be referred to for its other
	// steps. Its copy in the chunk written last, the one with the highest
	// revision, is the newest (revisions in a bucket only grow, a chunk
	// number used again included); a copy in the head is newer still.
	type chunkCopy struct {
		rev uint64
		key string
		st  *engine.StepState
	}
	newest := map[string]chunkCopy{}
	var lists *headLists
	for _, key := range e.Chunks {
		entry, err := s.kvS.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("store: agent %s: chunk %s of its ended steps: %w", a.AgentID, key, err)
		}
		var c chunkEnvelope
		if err := json.Unmarshal(entry.Value(), &c); err != nil {
			return fmt.Errorf("store: agent %s: chunk %s: %w", a.AgentID, key, err)
		}
		if c.Schema > SchemaVersion {
			return fmt.Errorf("store: agent %s: chunk %s was written by a newer mas-mcp (schema %d): upgrade mas-mcp", a.AgentID, key, c.Schema)
		}
		if seen != nil {
			seen.chunks[key] = &chunkRec{key: key, steps: len(c.Steps)}
			seen.loaded[key] = struct{}{}
		}
		if key == e.Base {
			lists = c.Lists
		}
		rev := entry.Revision()
		for i := range c.Steps {
			st := &c.Steps[i]
			if cur, ok := newest[st.StepID]; !ok || rev > cur.rev {
				newest[st.StepID] = chunkCopy{rev: rev, key: key, st: st}
			}
		}
	}
	inChunk := map[string]string{} // the chunk of each step taken from one
	for id, cp := range newest {
		if _, ok := byID[id]; !ok {
			byID[id] = cp.st
			inChunk[id] = cp.key
		}
	}
	order := e.StepOrder
	if e.Base != "" {
		if lists == nil || e.Lists == nil {
			return fmt.Errorf("store: agent %s: the base %s of its lists is missing or empty", a.AgentID, e.Base)
		}
		l, o, err := lists.apply(e.Lists)
		if err != nil {
			return fmt.Errorf("store: agent %s: its lists against the base %s: %w", a.AgentID, e.Base, err)
		}
		a.WorkingMemory, a.StageCounts, a.Received, a.AgentStep.TodoList = l.WorkingMemory, l.StageCounts, l.Received, l.TodoList
		order = o
		if seen != nil {
			seen.base = newBase(e.Base, *lists)
		}
	}
	if order == nil {
		return nil // the head holds all the agent's steps
	}
	list := make([]engine.StepState, 0, len(order))
	for _, id := range order {
		st, ok := byID[id]
		if !ok {
			return fmt.Errorf("store: agent %s: step %s is in no chunk its document refers to", a.AgentID, id)
		}
		list = append(list, *st)
		if key, ok := inChunk[id]; ok && seen != nil {
			seen.in[id] = locOf(seen.chunks[key], &list[len(list)-1])
		}
	}
	a.AgentStep.StepList = list
	return nil
}

// sweepChunks deletes the chunks no agent's head refers to (left by a
// crash between a chunk's write and its head's, or by a failed delete),
// sets each agent's next chunk number past its keys, and lists the numbers
// below it that are free to use again.
func (s *Store) sweepChunks(ctx context.Context) error {
	keys, err := s.kvS.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("store: list chunks: %w", err)
	}
	live := map[*agentSteps]map[int]bool{}
	for k := range keys.Keys() {
		agentID, _, _ := strings.Cut(k, ".")
		num, ok := chunkNumber(k)
		if !ok {
			continue
		}
		as := s.stepsOf(agentID)
		as.mu.Lock()
		as.next = max(as.next, num+1)
		_, referred := as.loaded[k]
		as.mu.Unlock()
		if !referred {
			if err := s.kvS.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				s.log.Warn("store: deleting a chunk no agent refers to", "key", k, "err", err)
			}
			continue
		}
		if live[as] == nil {
			live[as] = map[int]bool{}
		}
		live[as][num] = true
	}
	s.mu.Lock()
	all := slices.Collect(maps.Values(s.steps))
	s.mu.Unlock()
	for _, as := range all {
		as.mu.Lock()
		as.free = as.free[:0]
		for n := as.next - 1; n >= 0; n-- {
			if !live[as][n] {
				as.free = append(as.free, n)
			}
		}
		as.mu.Unlock()
	}
	return nil
}
