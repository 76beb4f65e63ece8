package engine

// A task's own bound (bounds.go): its shared info pool sheds the detail
// of its oldest entries before its document outgrows the store's limit.

// taskSizeLocked estimates the task document's stored size, counting its
// texts as JSON writes them (storedLen), without its conversation (which
// the store keeps as messages). mu must be held.
func (t *task) taskSizeLocked() int {
	n := 4096 + storedLen(t.st.TaskIntention) + storedLen(t.st.TaskSummary) + 40*len(t.st.TaskGroup)
	for _, e := range t.st.SharedInfoPool {
		n += storedLen(e.Content) + 250
	}
	for i := range t.st.StageList {
		n += stageSize(&t.st.StageList[i])
	}
	return n
}

// stageSize estimates a stage's stored size in its task's document.
func stageSize(sg *StageState) int {
	n := 400 + storedLen(sg.StageIntention)
	for _, g := range sg.AgentAllocation {
		n += storedLen(g) + 80
	}
	for _, c := range sg.CompletionSummary {
		n += storedLen(c) + 80
	}
	// Each allocated agent gets its state in the stage once it starts.
	return n + 60*max(len(sg.EveryAgentState), len(sg.AgentAllocation))
}

// shortenedBytes bounds what a text shortened to `shortened` characters
// takes stored: six bytes a character at most (\u0001), and the note.
const shortenedBytes = 6*shortened + 200

// floorSizeLocked estimates the smallest size boundLocked can bring the
// task's document to: without its shared info, with the texts of its
// ended stages shortened (endedTexts). What is past the limit even then cannot be
// stored at all, and is refused before it is made (checkRoomLocked). mu
// must be held.
func (t *task) floorSizeLocked() int {
	n := t.taskSizeLocked()
	for _, e := range t.st.SharedInfoPool {
		n -= storedLen(e.Content) + 250
	}
	for i := range t.st.StageList {
		endedTexts(&t.st.StageList[i], func(text string, _ func(string)) {
			n -= max(storedLen(text)-shortenedBytes, 0)
		})
	}
	return n
}

// endedTexts calls f with each text boundLocked may shorten in sg, if it
// has ended, and what sets it: its agents' completion summaries, and its
// intention and goals (history too: the trail keeps the add_stage that
// gave them, and a long-lived task whose ended stages had long ones could
// otherwise never take another stage). The sizes floorSizeLocked counts
// on are those boundLocked sheds.
func endedTexts(sg *StageState, f func(text string, set func(string))) {
	if sg.ExecutionState != StateFinished && sg.ExecutionState != StateFailed {
		return
	}
	for id, c := range sg.CompletionSummary {
		f(c, func(v string) { sg.CompletionSummary[id] = v })
	}
	f(sg.StageIntention, func(v string) { sg.StageIntention = v })
	for id, g := range sg.AgentAllocation {
		f(g, func(v string) { sg.AgentAllocation[id] = v })
	}
}

// checkRoomLocked refuses an instruction that would add more bytes to the
// task's document (stored, estimated) than it can hold after boundLocked
// shed all it can: the store would refuse every write of the task from
// then on. field names what the caller gave, detail (if any) what in it
// takes most. mu must be held.
func (t *task) checkRoomLocked(field string, adds int, detail string) error {
	limit := t.sys.cfg.MaxDocumentBytes
	floor := t.floorSizeLocked()
	if floor+adds <= limit {
		return nil
	}
	return errf(ErrLimit, "%s: takes %d bytes stored%s, which would make task %s's document %d bytes, over its limit of %d bytes (%d KiB, "+
		"the engine's bound on a stored document, under the store's 1 MiB message limit) even with its shared info dropped and its ended stages' "+
		"texts shortened; %d bytes are left: give fewer stages at a time, or shorter texts",
		field, adds, detail, t.st.TaskID, floor+adds, limit, limit>>10, max(limit-floor, 0))
}

// boundLocked keeps the task's document under MaxDocumentBytes by dropping
// the oldest shared info entries (each is a one-line report of a step),
// then, when that is not enough (many stages, each agent's summary up to
// MaxTextChars), by shortening the completion summaries of the oldest
// ended stages to a paragraph: the whole summaries stay in their agents'
// summary steps and the trail. Past the limit every write of the task
// would be refused, its reports retried for ever. harder bounds it to half
// of that, the summaries to a line: the store refused a document of the
// task's as too large, so the estimate fell short of what was written
// (owner.go, tighter). mu must be held.
func (t *task) boundLocked(harder bool) {
	limit, keep := t.sys.cfg.MaxDocumentBytes, shortened
	if harder {
		limit, keep = limit/2, shortenedMore
	}
	size := t.taskSizeLocked()
	drop := 0
	for drop < len(t.st.SharedInfoPool) && size > limit {
		size -= storedLen(t.st.SharedInfoPool[drop].Content) + 250
		drop++
	}
	if drop > 0 {
		t.st.SharedInfoPool = append([]SharedInfo(nil), t.st.SharedInfoPool[drop:]...)
	}
	for i := range t.st.StageList {
		if size <= limit {
			return
		}
		// The readers' copies are clones (docLocked).
		endedTexts(&t.st.StageList[i], func(text string, set func(string)) {
			if short := t.sys.clip(text, keep); len(short) < len(text) {
				set(short)
				size -= storedLen(text) - storedLen(short)
			}
		})
	}
}
