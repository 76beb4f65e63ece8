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
// task's document to: without its shared info, with the summaries of its
// ended stages shortened. What is past the limit even then cannot be
// stored at all, and is refused before it is made (checkRoomLocked). mu
// must be held.
func (t *task) floorSizeLocked() int {
	n := t.taskSizeLocked()
	for _, e := range t.st.SharedInfoPool {
		n -= storedLen(e.Content) + 250
	}
	for _, sg := range t.st.StageList {
		if sg.ExecutionState != StateFinished && sg.ExecutionState != StateFailed {
			continue
		}
		for _, c := range sg.CompletionSummary {
			n -= max(storedLen(c)-shortenedBytes, 0)
		}
		n -= max(storedLen(sg.StageIntention)-shortenedBytes, 0)
		for _, g := range sg.AgentAllocation {
			n -= max(storedLen(g)-shortenedBytes, 0)
		}
	}
	return n
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
		sg := &t.st.StageList[i] // the readers' copies are clones (docLocked)
		if sg.ExecutionState != StateFinished && sg.ExecutionState != StateFailed {
			continue
		}
		for id, c := range sg.CompletionSummary {
			if short := t.sys.clip(c, keep); len(short) < len(c) {
				sg.CompletionSummary[id] = short
				size -= storedLen(c) - storedLen(short)
			}
		}
		// An ended stage's intention and goals are history too (the trail
		// keeps the add_stage that gave them): a long-lived task whose
		// ended stages had long ones could otherwise never take another.
		if short := t.sys.clip(sg.StageIntention, keep); len(short) < len(sg.StageIntention) {
			size -= storedLen(sg.StageIntention) - storedLen(short)
			sg.StageIntention = short
		}
		for id, g := range sg.AgentAllocation {
			if short := t.sys.clip(g, keep); len(short) < len(g) {
				sg.AgentAllocation[id] = short
				size -= storedLen(g) - storedLen(short)
			}
		}
	}
}
