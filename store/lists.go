package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/mas-mcp/mas-mcp/engine"
)

// An agent's lists, stored in proportion to the change (issue 18).
//
// Besides its steps, an agent's document holds lists that grow with the
// work in flight: its working memory ({task: {stage: [step IDs]}}), the
// counts of its work in each stage, the IDs of the messages it received
// (up to 1024), its to-do list, and, once steps are in chunks, the order
// of all its steps. A manager with a hundred tasks in flight has ~90 KB of
// them and changed a few IDs at each of its ~35 commits per task: 80 KB
// written again for each.
//
// Once the lists pass listsInline bytes, the store writes them into a
// chunk of their own, the base (bucket mas_steps, like chunks of steps,
// with the same life: written before the head that refers to it, deleted
// after a head without it is written, swept at Load when nothing refers to
// it). The head then holds only how the lists differ from the base: the
// tasks of the working memory that changed or went, the stage counts that
// changed or went, and each other list as runs of the base's list and the
// IDs that are not in it. When that difference passes a sixteenth of the
// base (2 KiB at least), the lists are written again as a new base. A
// head is whole with its base, so a crash at any point leaves a head and a
// base that agree.

// listsInline is the size of an agent's lists (as estimated by listsSize)
// above which they go to a base; below listsInlineAgain, back in the head.
const (
	listsInline      = 8 << 10
	listsInlineAgain = 2 << 10
	rebaseMin        = 2 << 10
)

// headLists is a base's document: the lists as they were when written.
type headLists struct {
	WorkingMemory map[string]map[string][]string `json:"working_memory"`
	// StageCounts is sorted by task and stage (engine.CompareStageCounts).
	StageCounts []engine.StageCount `json:"stage_counts,omitempty"`
	Received    []string            `json:"received_messages"`
	TodoList    []string            `json:"todo_list"`
	Order       []string            `json:"step_order"`
}

// listsDelta is how a head's lists differ from its base.
type listsDelta struct {
	// WMSet holds the tasks of the working memory that are new or
	// changed, WMDel those the base has and the agent no longer.
	WMSet map[string]map[string][]string `json:"wm_set,omitempty"`
	WMDel []string                       `json:"wm_del,omitempty"`
	// CountSet holds the stage counts that are new or changed, CountDel
	// the (task, stage) of those the base has and the agent no longer.
	CountSet []engine.StageCount `json:"counts_set,omitempty"`
	CountDel [][2]string         `json:"counts_del,omitempty"`
	Received idRuns              `json:"received_messages"`
	TodoList idRuns              `json:"todo_list"`
	// Order is there when the head's steps are not all of the agent's
	// (some are in chunks).
	Order idRuns `json:"step_order,omitempty"`
}

// base is what the store keeps of an agent's current base.
type base struct {
	key   string
	lists headLists
	size  int
	// Where each ID is in the base's lists.
	received, todo, order map[string]int
}

func newBase(key string, l headLists) *base {
	index := func(ids []string) map[string]int {
		m := make(map[string]int, len(ids))
		for i, id := range ids {
			m[id] = i
		}
		return m
	}
	return &base{key: key, lists: l, size: listsSize(&l),
		received: index(l.Received), todo: index(l.TodoList), order: index(l.Order)}
}

// listsOf copies an agent's lists (the store keeps none of the engine's
// slices or maps; their strings, which never change, are shared).
func listsOf(a *engine.AgentState, order []string) headLists {
	var wm map[string]map[string][]string
	if a.WorkingMemory != nil {
		wm = make(map[string]map[string][]string, len(a.WorkingMemory))
		for task, stages := range a.WorkingMemory {
			wm[task] = cloneStages(stages)
		}
	}
	return headLists{WorkingMemory: wm, StageCounts: sortedCounts(a.StageCounts), Received: slices.Clone(a.Received),
		TodoList: slices.Clone(a.AgentStep.TodoList), Order: slices.Clone(order)}
}

// sortedCounts returns a copy of counts sorted as the engine keeps them (a
// list in another order is read back sorted: the engine looks counts up
// by task and stage, not by position).
func sortedCounts(counts []engine.StageCount) []engine.StageCount {
	out := slices.Clone(counts)
	if !slices.IsSortedFunc(out, engine.CompareStageCounts) {
		slices.SortFunc(out, engine.CompareStageCounts)
	}
	return out
}

// idBytes is about what an ID takes in JSON; countBytes what a stage
// count does.
const (
	idBytes    = 40
	countBytes = 2*idBytes + 40
)

// listsSize estimates what the lists take in JSON.
func listsSize(l *headLists) int {
	n := idBytes*(len(l.Received)+len(l.TodoList)+len(l.Order)) + countBytes*len(l.StageCounts)
	for _, stages := range l.WorkingMemory {
		n += idBytes
		for _, ids := range stages {
			n += idBytes * (1 + len(ids))
		}
	}
	return n
}

// deltaOf is how an agent's lists differ from b, and what that takes in
// JSON, roughly. order is nil when the head holds all the agent's steps.
func (b *base) deltaOf(a *engine.AgentState, order []string) (*listsDelta, int, bool) {
	wm := a.WorkingMemory
	if (wm == nil) != (b.lists.WorkingMemory == nil) {
		return nil, 0, false // nil and empty differ: a new base says which
	}
	d := &listsDelta{}
	size := 0
	for task, stages := range wm {
		if old, ok := b.lists.WorkingMemory[task]; ok && sameStages(old, stages) {
			continue
		}
		if d.WMSet == nil {
			d.WMSet = map[string]map[string][]string{}
		}
		d.WMSet[task] = stages
		size += idBytes
		for _, ids := range stages {
			size += idBytes * (1 + len(ids))
		}
	}
	for task := range b.lists.WorkingMemory {
		if _, ok := wm[task]; !ok {
			d.WMDel = append(d.WMDel, task)
			size += idBytes
		}
	}
	slices.Sort(d.WMDel)
	var n int
	d.CountSet, d.CountDel, n = countsDeltaOf(a.StageCounts, b.lists.StageCounts)
	size += n
	d.Received, n = runsOf(a.Received, b.lists.Received, b.received)
	size += n
	d.TodoList, n = runsOf(a.AgentStep.TodoList, b.lists.TodoList, b.todo)
	size += n
	if order != nil {
		d.Order, n = runsOf(order, b.lists.Order, b.order)
		size += n
	}
	return d, size, true
}

// countsDeltaOf tells the stage counts cur against the base's (sorted):
// the counts that are new or changed, the (task, stage) of those gone,
// and what that takes in JSON, roughly. Both lists are walked in order,
// once: a manager's hundred counts are not looked up one by one at each
// write.
func countsDeltaOf(cur, base []engine.StageCount) (set []engine.StageCount, del [][2]string, size int) {
	if !slices.IsSortedFunc(cur, engine.CompareStageCounts) {
		cur = sortedCounts(cur)
	}
	i, j := 0, 0
	for i < len(cur) || j < len(base) {
		c := 1 // cur[i] comes after base[j], or cur is done
		if i < len(cur) && j < len(base) {
			c = engine.CompareStageCounts(cur[i], base[j])
		} else if i < len(cur) {
			c = -1
		}
		switch {
		case c < 0:
			set = append(set, cur[i])
			size += countBytes
			i++
		case c > 0:
			del = append(del, [2]string{base[j].TaskID, base[j].StageID})
			size += 2 * idBytes
			j++
		default:
			if cur[i] != base[j] {
				set = append(set, cur[i])
				size += countBytes
			}
			i++
			j++
		}
	}
	return set, del, size
}

// applyCounts rebuilds the stage counts from the base's and a delta.
func applyCounts(base []engine.StageCount, set []engine.StageCount, del [][2]string) []engine.StageCount {
	gone := func(c engine.StageCount) bool {
		return slices.Contains(del, [2]string{c.TaskID, c.StageID}) ||
			slices.ContainsFunc(set, func(s engine.StageCount) bool { return engine.CompareStageCounts(s, c) == 0 })
	}
	var out []engine.StageCount
	for _, c := range base {
		if !gone(c) {
			out = append(out, c)
		}
	}
	out = append(out, set...)
	slices.SortFunc(out, engine.CompareStageCounts)
	return out
}

func cloneStages(stages map[string][]string) map[string][]string {
	if stages == nil {
		return nil
	}
	m := make(map[string][]string, len(stages))
	for stage, ids := range stages {
		m[stage] = slices.Clone(ids)
	}
	return m
}

func sameStages(a, b map[string][]string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for stage, ids := range a {
		other, ok := b[stage]
		if !ok || (ids == nil) != (other == nil) || !slices.Equal(ids, other) {
			return false
		}
	}
	return true
}

// apply rebuilds the lists from the base and a delta; order is nil when
// the delta has none.
func (b *headLists) apply(d *listsDelta) (l headLists, order []string, err error) {
	if b.WorkingMemory != nil {
		l.WorkingMemory = make(map[string]map[string][]string, len(b.WorkingMemory)+len(d.WMSet))
		for task, stages := range b.WorkingMemory {
			l.WorkingMemory[task] = cloneStages(stages) // the base stays the store's
		}
		for _, task := range d.WMDel {
			delete(l.WorkingMemory, task)
		}
		maps.Copy(l.WorkingMemory, d.WMSet)
	}
	l.StageCounts = applyCounts(b.StageCounts, d.CountSet, d.CountDel)
	if l.Received, err = d.Received.expand(b.Received); err != nil {
		return l, nil, fmt.Errorf("received messages: %w", err)
	}
	if l.TodoList, err = d.TodoList.expand(b.TodoList); err != nil {
		return l, nil, fmt.Errorf("to-do list: %w", err)
	}
	if d.Order != nil {
		if order, err = d.Order.expand(b.Order); err != nil {
			return l, nil, fmt.Errorf("step order: %w", err)
		}
	}
	return l, order, nil
}

// idRuns is a list of IDs told against a base list: runs of the base's
// IDs, [from, to), and IDs not in it. nil stands for a nil list.
type idRuns []idRun

type idRun struct {
	from, to int
	id       string // when lit
	lit      bool
}

// runsOf tells cur against the base list (index: where each of its IDs
// is), and what that takes in JSON, roughly. An ID that continues the
// run before it is found by comparing it with the base's next one: most
// of a list is the base's, in order, and its strings are the base's own,
// so this costs little.
func runsOf(cur, base []string, index map[string]int) (idRuns, int) {
	if cur == nil {
		return nil, 0
	}
	out := idRuns{}
	size := 0
	for _, id := range cur {
		if n := len(out); n > 0 && !out[n-1].lit && out[n-1].to < len(base) && base[out[n-1].to] == id {
			out[n-1].to++
			continue
		}
		if p, ok := index[id]; ok {
			out = append(out, idRun{from: p, to: p + 1})
			size += 12
			continue
		}
		out = append(out, idRun{id: id, lit: true})
		size += idBytes
	}
	return out, size
}

// expand rebuilds the list from the base list.
func (r idRuns) expand(base []string) ([]string, error) {
	if r == nil {
		return nil, nil
	}
	n := 0
	for _, run := range r {
		if run.lit {
			n++
			continue
		}
		if run.from < 0 || run.to > len(base) || run.from >= run.to {
			return nil, fmt.Errorf("run [%d, %d) outside the base's %d IDs", run.from, run.to, len(base))
		}
		n += run.to - run.from
	}
	out := make([]string, 0, n)
	for _, run := range r {
		if run.lit {
			out = append(out, run.id)
			continue
		}
		out = append(out, base[run.from:run.to]...)
	}
	return out, nil
}

// MarshalJSON writes an ID as a string and a run as [from, to].
func (r idRuns) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	out := []byte{'['}
	for i, run := range r {
		if i > 0 {
			out = append(out, ',')
		}
		if run.lit {
			b, err := marshal(run.id)
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
			continue
		}
		out = fmt.Appendf(out, "[%d,%d]", run.from, run.to)
	}
	return append(out, ']'), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *idRuns) UnmarshalJSON(b []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return err
	}
	if items == nil {
		*r = nil
		return nil
	}
	out := make(idRuns, 0, len(items))
	for _, item := range items {
		if len(item) > 0 && item[0] == '[' {
			var span [2]int
			if err := json.Unmarshal(item, &span); err != nil {
				return fmt.Errorf("a run of IDs: %w", err)
			}
			out = append(out, idRun{from: span[0], to: span[1]})
			continue
		}
		var id string
		if err := json.Unmarshal(item, &id); err != nil {
			return fmt.Errorf("an ID: %w", err)
		}
		out = append(out, idRun{id: id, lit: true})
	}
	*r = out
	return nil
}

// putLists puts the agent's lists into e: in the head while they are
// small (and order, when not nil, as the head's step order), or as how
// they differ from the agent's base, writing a new base first when the
// difference has grown. as.mu is held.
func (s *Store) putLists(ctx context.Context, a *engine.AgentState, as *agentSteps, e *envelope, order []string) error {
	size := listsSize(&headLists{WorkingMemory: a.WorkingMemory, StageCounts: a.StageCounts, Received: a.Received, TodoList: a.AgentStep.TodoList, Order: order})
	if (as.base == nil && size < listsInline) || (as.base != nil && size < listsInlineAgain) {
		// In the head. A base no longer referred to is deleted once
		// this head is written, like a chunk.
		as.base = nil
		e.StepOrder = order
		return nil
	}
	var d *listsDelta
	if b := as.base; b != nil {
		delta, n, ok := b.deltaOf(a, order)
		if ok && n <= max(rebaseMin, b.size/16) {
			d = delta
		}
	}
	if d == nil {
		l := listsOf(a, order)
		b, err := marshal(chunkEnvelope{Schema: SchemaVersion, Agent: a.AgentID, Lists: &l})
		if err != nil {
			return err
		}
		key, err := s.createChunk(ctx, a.AgentID, as, b)
		if err != nil {
			return fmt.Errorf("the base of its lists: %w", err)
		}
		as.chunks[key] = &chunkRec{key: key}
		as.base = newBase(key, l)
		d, _, _ = as.base.deltaOf(a, order) // one run per list
	}
	e.Base, e.Lists = as.base.key, d
	head := e.Agent
	head.WorkingMemory, head.StageCounts, head.Received, head.AgentStep.TodoList = nil, nil, nil, nil
	return nil
}
