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
// a block that deletes first makes room for its adds. An add that would
// take the memory past Config.MemoryMaxEntries or MemoryMaxChars is
// refused, never stored in part, and nothing else is dropped to make room:
// the agent is told in the report and, through MemoryFull, in its next
// prompts until it consolidates. Each entry added records taskID, the task of the step that
// wrote it (AgentState.MemoryTasks). It returns what happened to each op,
// in the prompt set's language, for the step's result. a.mu must be held.
func (a *agent) applyMemoryLocked(taskID string, shown map[string]string, ops []MemoryOp) []string {
	var report []string
	pm := a.st.PersistentMemory
	if a.st.MemoryTasks == nil {
		a.st.MemoryTasks = map[string]string{}
	}
	// The tasks whose viewers see the memory change: the step's, and
	// those of the entries it deletes.
	tasks := []string{taskID}
	chars := 0
	for _, m := range pm {
		chars += utf8.RuneCountInString(m)
	}
	maxEntries, maxChars := a.sys.cfg.MemoryMaxEntries, a.sys.cfg.MemoryMaxChars
	refused := false
	var added map[string]bool // the keys this block added
	for _, op := range ops {
		switch {
		case strings.TrimSpace(op.Add) != "":
			text := demoteHeadings(strings.TrimSpace(op.Add))
			n := utf8.RuneCountInString(text)
			if len(pm)+1 > maxEntries || chars+n > maxChars {
				refused = true
				report = append(report, a.sys.text("memory_refused", map[string]any{
					"Entries": len(pm), "MaxEntries": maxEntries, "Chars": chars, "MaxChars": maxChars, "Size": n}))
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
			chars += n
			report = append(report, a.sys.text("memory_added", map[string]any{"Key": key}))
		case op.Delete != "":
			key := strings.TrimSpace(op.Delete)
			_, seen := shown[key]
			if m, ok := pm[key]; ok && (seen || added[key]) {
				chars -= utf8.RuneCountInString(m)
				if t := a.st.MemoryTasks[key]; !slices.Contains(tasks, t) {
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
	// Full until a block of ops is applied without a refusal (the agent
	// deleted or merged entries, or added only what fits).
	a.st.MemoryFull = refused
	for _, t := range tasks {
		a.changedLocked(Event{Detail: "persistent_memory", TaskID: t})
	}
	return report
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
