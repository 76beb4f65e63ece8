package engine

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// memoryKeyLayout is the persistent-memory key format, %Y%m%dT%H%M%S (spec §9.3.1).
const memoryKeyLayout = "20060102T150405"

// applyMemoryLocked applies persistent-memory ops (spec §5.10): add stores
// the text under a new timestamp key (made unique by stepping forward a
// second when taken), delete removes a key of shown, the memory the step
// was shown (stepMemory), or one the block added: the others are not the
// step's to delete and are refused as unknown keys. Ops apply in order, so
// a block that deletes first makes room for its adds.
//
// The caps are the step's view's (view names it, System.memoryView): an
// add that would take the entries the step sees — those it was shown and
// those the block added — past Config.MemoryMaxEntries or MemoryMaxChars
// is refused, never stored in part, and nothing else is dropped to make
// room. The step may delete every entry the caps count, so it is never
// held by entries it cannot consolidate, and the refusal tells of those
// entries only. The agent is told in the report and, through MemoryFullIn,
// in the view's next prompts until it consolidates. Past the caps of each
// view, the whole memory is bounded by what the agent's document may
// store (memoryBytes). Each entry added records taskID, the task of the
// step that wrote it (AgentState.MemoryTasks). It returns what happened to
// each op, in the prompt set's language, for the step's result; the ops
// past maxMemoryOps are ignored, told in one line. a.mu must be held.
func (a *agent) applyMemoryLocked(taskID, view string, shown map[string]string, ops []MemoryOp) []string {
	var report []string
	pm := a.st.PersistentMemory
	if a.st.MemoryTasks == nil {
		a.st.MemoryTasks = map[string]string{}
	}
	// The tasks whose viewers see the memory change: the step's, and
	// those of the entries it deletes.
	tasks := []string{taskID}
	entries, chars := 0, 0 // of the view
	for k := range shown {
		if m, ok := pm[k]; ok {
			entries++
			chars += utf8.RuneCountInString(m)
		}
	}
	size, maxSize := a.memorySizeLocked(), a.sys.memoryBytes()
	maxEntries, maxChars := a.sys.cfg.MemoryMaxEntries, a.sys.cfg.MemoryMaxChars
	refused := false
	var added map[string]bool // the keys this block added
	// Past maxMemoryOps the ops are ignored, said in one line: a line per
	// op would make the step's result as long as the model's list.
	var ignored int
	if len(ops) > maxMemoryOps {
		ops, ignored = ops[:maxMemoryOps], len(ops)-maxMemoryOps
	}
	for _, op := range ops {
		switch {
		case strings.TrimSpace(op.Add) != "":
			text := demoteHeadings(strings.TrimSpace(op.Add))
			n := utf8.RuneCountInString(text)
			if entries+1 > maxEntries || chars+n > maxChars {
				refused = true
				report = append(report, a.sys.text("memory_refused", map[string]any{
					"Entries": entries, "MaxEntries": maxEntries, "Chars": chars, "MaxChars": maxChars, "Size": n}))
				continue
			}
			if size+memoryEntrySize(text, taskID) > maxSize {
				refused = true
				report = append(report, a.sys.text("memory_refused_total", map[string]any{"Size": n}))
				continue
			}
			t := a.sys.now()
			key := t.Format(memoryKeyLayout)
			for {
				if _, taken := pm[key]; !taken {
					break
				}
				t = t.Add(time.Second)
				key = t.Format(memoryKeyLayout)
			}
			pm[key] = text
			if added == nil {
				added = map[string]bool{}
			}
			added[key] = true
			a.st.MemoryTasks[key] = taskID
			entries++
			chars += n
			size += memoryEntrySize(text, taskID)
			report = append(report, a.sys.text("memory_added", map[string]any{"Key": key}))
		case op.Delete != "":
			key := strings.TrimSpace(op.Delete)
			_, seen := shown[key]
			if m, ok := pm[key]; ok && (seen || added[key]) {
				t := a.st.MemoryTasks[key]
				entries--
				chars -= utf8.RuneCountInString(m)
				size -= memoryEntrySize(m, t)
				if !slices.Contains(tasks, t) {
					tasks = append(tasks, t)
				}
				delete(pm, key)
				delete(a.st.MemoryTasks, key)
				report = append(report, a.sys.text("memory_deleted", map[string]any{"Key": key}))
			} else {
				report = append(report, a.sys.text("memory_no_key", map[string]any{"Key": key}))
			}
		default:
			report = append(report, a.sys.text("memory_ignored", nil))
		}
	}
	// The view is full until a block of ops is applied there without a
	// refusal (the agent deleted or merged entries, or added only what
	// fits).
	full := slices.Contains(a.st.MemoryFullIn, view)
	switch {
	case refused && !full:
		a.st.MemoryFullIn = append(slices.Clone(a.st.MemoryFullIn), view)
	case !refused && full:
		a.st.MemoryFullIn = slices.DeleteFunc(slices.Clone(a.st.MemoryFullIn), func(v string) bool { return v == view })
	}
	if len(a.st.MemoryFullIn) == 0 {
		a.st.MemoryFullIn = nil
	}
	a.st.MemoryFull = a.st.MemoryFullIn != nil
	for _, t := range tasks {
		a.changedLocked(Event{Detail: "persistent_memory", TaskID: t})
	}
	if ignored > 0 {
		report = append(report, a.sys.text("memory_ops_ignored", map[string]any{"N": ignored, "Max": maxMemoryOps}))
	}
	return report
}

// memoryBytes bounds the stored size of an agent's whole persistent memory
// (memorySizeLocked) to half the document bound, MaxDocumentBytes: the caps
// hold per view, and an agent shared by many operators has as many views;
// the other half is its steps', which boundLocked shortens. An add past it
// is refused whatever its view holds.
func (s *System) memoryBytes() int { return s.cfg.MaxDocumentBytes / 2 }

// memoryEntrySize is what an entry written in task taskID adds to the
// agent's document (agentSizeLocked counts it so).
func memoryEntrySize(text, taskID string) int {
	return storedLen(text) + 24 + len(taskID) + 24
}

// memorySizeLocked is the stored size of the agent's persistent memory and
// of the tasks its entries record. mu must be held.
func (a *agent) memorySizeLocked() int {
	n := 0
	for _, m := range a.st.PersistentMemory {
		n += storedLen(m) + 24
	}
	for _, id := range a.st.MemoryTasks {
		n += len(id) + 24
	}
	return n
}

// demoteHeadings turns level-1 and level-2 markdown headings into level 3:
// persistent memory may only use ### and lower (spec §2.3), since it is
// nested inside the prompt's own sections.
func demoteHeadings(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		switch {
		case strings.HasPrefix(t, "## "):
			lines[i] = "### " + t[3:]
		case strings.HasPrefix(t, "# "):
			lines[i] = "### " + t[2:]
		}
	}
	return strings.Join(lines, "\n")
}
