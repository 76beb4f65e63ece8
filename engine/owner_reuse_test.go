package engine

import (
	"sync"
	"sync/atomic"
	"testing"
)

// reuseState is an owner's state for TestSnapshotReuseNeverChangesWhatAReaderSees:
// a list whose elements a commit writes all at once.
type reuseState struct{ vals []int }

// A commit copies into the array of the snapshot it retired two commits
// ago (ownerMu.reusable) only when no reader can be using it: readers
// that run all the while never see a snapshot change under them (the race
// detector and the check that a snapshot's elements agree both say so),
// and the arrays are reused once readers stop.
func TestSnapshotReuseNeverChangesWhatAReaderSees(t *testing.T) {
	const n, commits = 256, 2000
	var m ownerMu[reuseState]
	live := make([]int, n)
	var reused atomic.Int32
	m.ops = ownerOps[reuseState]{
		copy: func(reuse *reuseState) reuseState {
			var into []int
			if reuse != nil {
				into = reuse.vals
				reused.Add(1)
			}
			if cap(into) < n {
				into = make([]int, n)
			}
			into = into[:n]
			copy(into, live)
			return reuseState{vals: into}
		},
		reuses:   true,
		put:      func(*reuseState) error { return nil },
		announce: func(Event) {},
		refused:  func(error) {},
	}
	first := reuseState{vals: make([]int, n)}
	m.snap.Store(&first)

	commit := func(i int) {
		m.Lock()
		for j := range live {
			live[j] = i
		}
		m.change(Event{}, true)
		m.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	var torn atomic.Value
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				m.peek(func(p *reuseState) {
					for _, v := range p.vals {
						if v != p.vals[0] {
							torn.Store([2]int{p.vals[0], v})
						}
					}
				})
				got := m.read(func(p *reuseState) reuseState { return reuseState{vals: append([]int(nil), p.vals...)} })
				if got.vals[n-1] != got.vals[0] {
					torn.Store([2]int{got.vals[0], got.vals[n-1]})
				}
				reads.Add(1)
			}
		})
	}
	// Commit while the readers read, until they have read a good many
	// times (so that commits and reads interleave however the scheduler
	// has them).
	i := 0
	for reads.Load() < 3*commits || i < commits {
		i++
		commit(i)
	}
	close(stop)
	wg.Wait()
	if v := torn.Load(); v != nil {
		t.Fatalf("a reader saw a snapshot change under it: elements %v", v)
	}
	// Without readers, every commit reuses the array of the one before
	// the last.
	before := reused.Load()
	for range 10 {
		i++
		commit(i)
	}
	if got := reused.Load() - before; got != 10 {
		t.Errorf("%d of 10 commits without readers reused a retired snapshot's array; want all", got)
	}
	if got := m.snap.Load().vals; got[0] != i || got[n-1] != i {
		t.Errorf("the snapshot holds %d…%d after commit %d", got[0], got[n-1], i)
	}
}
