package engine

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds on what is stored (beyond the spec): no write may exceed the
// store's limits, so texts are bounded as they are taken in, with a
// visible note, and documents that keep growing (an agent's step list, a
// task's shared info pool) shed the detail of their oldest entries.

// Truncate shortens s to at most n characters (runes: a character is never
// cut in two), marking a cut with "…". It is the one truncation helper of
// the codebase for texts shown to people and models (server, skills and
// engine use it); what bounds stored documents adds a note of what was
// dropped (clip), and what bounds a downstream payload counts bytes.
func Truncate(s string, n int) string {
	if n < 0 {
		n = 0
	}
	if len(s) <= n || utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return s[:i] + "…"
}

// clip bounds a text to max characters (runes, never splitting one), and
// says what was dropped. It scrubs the text of secrets too (secrets.go).
func (s *System) clip(text string, max int) string {
	text = s.Scrub(text)
	if max <= 0 || len(text) <= max || utf8.RuneCountInString(text) <= max {
		return text
	}
	n := utf8.RuneCountInString(text)
	return Truncate(text, max) + " " + s.text("text_clipped", map[string]any{"Dropped": n - max, "Limit": max})
}

// clipText bounds a text an agent or a tool produced (MaxTextChars).
func (s *System) clipText(text string) string { return s.clip(text, s.cfg.MaxTextChars) }

// clipValue bounds every string inside a JSON-shaped value (maps, lists,
// strings, numbers) to max characters, in place for maps and lists.
func (s *System) clipValue(v any, max int) any {
	switch x := v.(type) {
	case string:
		return s.clip(x, max)
	case map[string]any:
		for k, e := range x {
			x[k] = s.clipValue(e, max)
		}
	case []any:
		for i, e := range x {
			x[i] = s.clipValue(e, max)
		}
	}
	return v
}

// sizeOf estimates the stored JSON size of a JSON-shaped value, in bytes.
func sizeOf(v any) int {
	switch x := v.(type) {
	case string:
		return storedLen(x) + 2
	case map[string]any:
		n := 2
		for k, e := range x {
			n += storedLen(k) + 4 + sizeOf(e)
		}
		return n
	case []any:
		n := 2
		for _, e := range x {
			n += sizeOf(e) + 1
		}
		return n
	default:
		return 24
	}
}

// stepOverhead is about what a step's fixed fields take in JSON.
const stepOverhead = 600

func stepSize(st *StepState) int {
	n := stepOverhead + storedLen(st.StepIntention) + storedLen(st.TextContent) + sizeOf(st.ExecuteResult)
	if st.InstructionContent != nil {
		n += st.InstructionContent.size()
	}
	return n
}

// agentSizeLocked estimates the agent document's stored size, counting its
// texts as JSON writes them (storedLen). mu must be held.
func (a *agent) agentSizeLocked() int {
	n := 4096 + storedLen(a.st.Profile) + 40*len(a.st.Received) + 120*len(a.st.Waits) + 40*len(a.st.MemoryFullIn) + 160*len(a.st.StageCounts) + a.memorySizeLocked()
	for _, stages := range a.st.WorkingMemory {
		for _, ids := range stages {
			n += 40 * (len(ids) + 1)
		}
	}
	for i := range a.st.AgentStep.StepList {
		n += a.stepSizeLocked(i) + 40
	}
	if p := a.st.ConversationPool; p != nil {
		for _, msgs := range p.ConversationPrivates {
			for _, m := range msgs {
				n += storedLen(m.Content) + 300
			}
		}
		for _, g := range p.GlobalMessages {
			n += storedLen(g) + 4
		}
	}
	return n
}

// endedStep is what boundLocked knows of an ended step: its estimated
// stored size, and how far it has shortened it (0: not at all, then the
// index+1 of the pass in boundLocked).
type endedStep struct {
	size, shortened int
}

// endedMemo is what boundLocked knows of the ended step at a position of
// the step list.
type endedMemo struct {
	id string
	e  endedStep
}

// endedLocked is what boundLocked knows of the ended step at position i of
// the list, made on first use: an agent with hundreds of ended steps (a
// manager of many tasks) does not walk them all on every change. A step
// where it was when last sized is found by position, without hashing its
// ID (its ID is then the same string, which compares at once); one that
// moved (steps before it were cleaned up), by ID. mu must be held.
func (a *agent) endedLocked(i int) endedStep {
	st := &a.st.AgentStep.StepList[i]
	if i < len(a.endedAt) && a.endedAt[i].id == st.StepID {
		return a.endedAt[i].e
	}
	e, ok := a.ended[st.StepID]
	if !ok {
		e = endedStep{size: stepSize(st)}
	}
	a.sizedLocked(i, e)
	return e
}

// sizedLocked records what boundLocked knows of the ended step at
// position i. What it knew of a step changes only when boundLocked
// shortens it: the step may then still be known at a position it held
// before (and may come back to), so all positions are forgotten. mu must
// be held.
func (a *agent) sizedLocked(i int, e endedStep) {
	n := len(a.st.AgentStep.StepList)
	if a.ended == nil || len(a.ended) > 2*n+64 {
		a.ended = map[string]endedStep{} // forget the steps cleaned up since
	}
	id := a.st.AgentStep.StepList[i].StepID
	if old, ok := a.ended[id]; ok && old != e {
		a.endedAt = a.endedAt[:0]
	}
	a.ended[id] = e
	if have := len(a.endedAt); have < n {
		a.endedAt = slices.Grow(a.endedAt, n-have)[:n]
		clear(a.endedAt[have:]) // what they held is forgotten
	}
	a.endedAt[i] = endedMemo{id: id, e: e}
}

// pendingSize is the cached stepSize of a step not ended yet, with the
// lengths of the texts it was computed from (a text changed since is
// sized again).
type pendingSize struct {
	size, intention, text int
}

// stepSizeLocked is stepSize of the step at position i, cached. mu must be
// held.
func (a *agent) stepSizeLocked(i int) int {
	st := &a.st.AgentStep.StepList[i]
	if stateEnded(st.ExecutionState) {
		return a.endedLocked(i).size
	}
	if p, ok := a.pending[st.StepID]; ok && p.intention == len(st.StepIntention) && p.text == len(st.TextContent) && st.ExecuteResult == nil {
		return p.size
	}
	n := stepSize(st)
	if st.ExecuteResult == nil {
		if a.pending == nil || len(a.pending) > 2*len(a.st.AgentStep.StepList)+64 {
			a.pending = map[string]pendingSize{} // forget the steps ended since
		}
		a.pending[st.StepID] = pendingSize{size: n, intention: len(st.StepIntention), text: len(st.TextContent)}
	}
	return n
}

// shortened is how many characters of each text an old finished step keeps
// when its agent's document is over MaxDocumentBytes.
const shortened = 400

// shortenedMore is what they keep when shortening to 400 was not enough.
const shortenedMore = 80

// boundLocked keeps the agent's document under MaxDocumentBytes: past it,
// the results and texts of its oldest finished steps are shortened (the
// trail of what they said lives in the conversation and shared info
// pools). harder bounds it to half of that, and cuts what an operator's
// conversations keep shorter: the store refused a document of the
// agent's as too large, so the estimate fell short of what was written
// (owner.go, tighter). mu must be held.
func (a *agent) boundLocked(harder bool) {
	limit := a.sys.cfg.MaxDocumentBytes
	if harder {
		limit /= 2
	}
	size := a.agentSizeLocked()
	if size <= limit {
		return
	}
	// Shortened to three quarters of the limit, so that the next changes
	// do not pass it again at once.
	target := limit - limit/4
	// Two passes over the oldest finished steps: first their results and
	// texts shortened, then (an agent with very many steps in flight, as
	// a manager of a hundred tasks is) cut to a line.
	for pass, keep := range []int{shortened, shortenedMore} {
		for i := range a.st.AgentStep.StepList {
			if size <= target {
				return
			}
			st := &a.st.AgentStep.StepList[i]
			if st.ExecutionState != StateFinished && st.ExecutionState != StateFailed {
				continue
			}
			e := a.endedLocked(i)
			if e.shortened > pass {
				continue // as short as this pass makes it, or shorter
			}
			// A copy: an ended step's maps are shared with the copies
			// readers hold (StepState.commitCopy), never changed in place.
			st.ExecuteResult, _ = a.sys.clipValue(cloneJSONMap(st.ExecuteResult), keep).(map[string]any)
			st.TextContent = a.sys.clip(st.TextContent, keep)
			if keep == shortenedMore {
				st.StepIntention = a.sys.clip(st.StepIntention, keep)
				st.InstructionContent = nil
			}
			after := stepSize(st)
			size -= e.size - after
			a.sizedLocked(i, endedStep{size: after, shortened: pass + 1})
		}
	}
	if p := a.st.ConversationPool; p != nil && size > target {
		a.boundPoolLocked(p, size-target, harder)
	}
}

// pooledHead is how many characters of a message awaiting a reply an
// operator's conversations keep when its document is past the bound:
// enough to read and answer most questions; the whole message is in the
// task's conversation.
const pooledHead = 2000

// boundPoolLocked sheds at least excess bytes of an operator's
// conversation pool, which grows with every notice and message over the
// MAS's life: the oldest notices first, then the oldest messages that
// await no reply, then the text of the oldest that do (shortenPoolLocked),
// further when harder.
func (a *agent) boundPoolLocked(p *ConversationPool, excess int, harder bool) {
	drop := 0
	for drop < len(p.GlobalMessages) && excess > 0 {
		excess -= storedLen(p.GlobalMessages[drop]) + 4
		drop++
	}
	p.GlobalMessages = append([]string{}, p.GlobalMessages[drop:]...)
	for excess > 0 {
		// The oldest message that awaits nothing, across all peers.
		peer, at := "", -1
		for id, msgs := range p.ConversationPrivates {
			for i, m := range msgs {
				if m.awaitsReply() {
					continue
				}
				if at < 0 || m.Timestamp.Before(p.ConversationPrivates[peer][at].Timestamp) {
					peer, at = id, i
				}
				break
			}
		}
		if at < 0 {
			break
		}
		msgs := p.ConversationPrivates[peer]
		excess -= storedLen(msgs[at].Content) + 300
		p.ConversationPrivates[peer] = slices.Delete(msgs, at, at+1)
		if len(p.ConversationPrivates[peer]) == 0 {
			delete(p.ConversationPrivates, peer)
		}
	}
	// What is left awaits a reply (or is the operator's own asking for
	// one): it stays, so that the operator is shown every question
	// someone waits on, but its text is shortened, the oldest first, to
	// a head and a note saying where the whole message is (the task's
	// conversation, which the message stream keeps). Kept whole, such
	// messages would take the document past the store's limit: its
	// writes refused, every later change of the operator stuck behind
	// them and the newest questions never shown.
	keeps := []int{pooledHead, shortened}
	if harder {
		keeps = append(keeps, shortenedMore)
	}
	for _, keep := range keeps {
		if excess <= 0 {
			return
		}
		excess -= a.shortenPoolLocked(p, keep, excess)
	}
}

// shortenPoolLocked shortens the texts of the oldest messages of an
// operator's conversations to keep characters (a head and a note), until
// at least want bytes are saved or none is longer; it returns the bytes
// saved. mu must be held.
func (a *agent) shortenPoolLocked(p *ConversationPool, keep, want int) int {
	type pos struct {
		peer string
		at   int
	}
	var all []pos
	for peer, msgs := range p.ConversationPrivates {
		for i := range msgs {
			all = append(all, pos{peer, i})
		}
	}
	slices.SortFunc(all, func(x, y pos) int {
		return p.ConversationPrivates[x.peer][x.at].Timestamp.Compare(p.ConversationPrivates[y.peer][y.at].Timestamp)
	})
	saved := 0
	for _, o := range all {
		if saved >= want {
			break
		}
		saved += a.shortenPrivate(&p.ConversationPrivates[o.peer][o.at], keep)
	}
	return saved
}

// shortenPrivate shortens a message of an operator's conversations to its
// first keep characters and a note saying where the whole message is; a
// message shortened before is shortened further from its head. It
// returns the bytes saved (none when the message is no longer than that).
func (a *agent) shortenPrivate(m *PrivateMessage, keep int) int {
	if !m.Shortened && utf8.RuneCountInString(m.Content) <= keep {
		return 0 // short already: the note is not rendered for it
	}
	note := a.sys.text("message_shortened", map[string]any{"TaskID": m.TaskID})
	head := m.Content
	if m.Shortened {
		head = strings.TrimSuffix(strings.TrimSuffix(head, " "+note), "…")
	}
	if utf8.RuneCountInString(head) <= keep {
		return 0
	}
	short := Truncate(head, keep) + " " + note
	saved := storedLen(m.Content) - storedLen(short)
	m.Content, m.Shortened = short, true
	return saved
}
