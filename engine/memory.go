package engine

import (
	"fmt"
	"strings"
	"time"
)

// memoryKeyLayout is the persistent-memory key format, %Y%m%dT%H%M%S (spec §9.3.1).
const memoryKeyLayout = "20060102T150405"

// applyMemoryLocked applies persistent-memory ops (spec §5.10): add stores
// the text under a new timestamp key (made unique by stepping forward a
// second when taken), delete removes a key. It returns what happened to each
// op, for the step's result. a.mu must be held.
func (a *agent) applyMemoryLocked(ops []MemoryOp) []string {
	var report []string
	pm := a.st.PersistentMemory
	for _, op := range ops {
		switch {
		case strings.TrimSpace(op.Add) != "":
			t := a.sys.now()
			key := t.Format(memoryKeyLayout)
			for {
				if _, taken := pm[key]; !taken {
					break
				}
				t = t.Add(time.Second)
				key = t.Format(memoryKeyLayout)
			}
			pm[key] = demoteHeadings(strings.TrimSpace(op.Add))
			report = append(report, "added "+key)
		case op.Delete != "":
			key := strings.TrimSpace(op.Delete)
			if _, ok := pm[key]; ok {
				delete(pm, key)
				report = append(report, "deleted "+key)
			} else {
				report = append(report, fmt.Sprintf("delete %q: no such key", key))
			}
		default:
			report = append(report, "ignored an op with neither add nor delete")
		}
	}
	a.changedLocked(Event{Detail: "persistent_memory"})
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
