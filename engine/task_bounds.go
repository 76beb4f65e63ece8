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
	for _, sg := range t.st.StageList {
		n += 400 + storedLen(sg.StageIntention)
		for _, g := range sg.AgentAllocation {
			n += storedLen(g) + 80
		}
		for _, c := range sg.CompletionSummary {
			n += storedLen(c) + 80
		}
		n += 60 * len(sg.EveryAgentState)
	}
	return n
}

// boundLocked keeps the task's document under MaxDocumentBytes by dropping
// the oldest shared info entries (each is a one-line report of a step),
// then, when that is not enough (many stages, each agent's summary up to
// MaxTextChars), by shortening the completion summaries of the oldest
// ended stages to a paragraph: the whole summaries stay in their agents'
// summary steps and the trail. Past the limit every write of the task
// would be refused, its reports retried for ever. mu must be held.
func (t *task) boundLocked() {
	limit := t.sys.cfg.MaxDocumentBytes
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
			if short := t.sys.clip(c, shortened); len(short) < len(c) {
				sg.CompletionSummary[id] = short
				size -= storedLen(c) - storedLen(short)
			}
		}
	}
}
