package engine

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// waitGraph records which agent waits on which (beyond the spec) so a wait
// that would close a cycle — A waits on B while B, directly or through
// others, waits on A — is detected before it deadlocks both.
type waitGraph struct {
	mu    sync.Mutex
	edges map[string]map[string]int // waiter -> awaited -> number of waits
}

// add records that from waits on to, unless that closes a cycle: then it
// returns the cycle (from, to, …, from) and records nothing.
func (g *waitGraph) add(from, to string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if path := g.pathLocked(to, from, map[string]bool{}); path != nil {
		return append([]string{from}, path...)
	}
	g.edgeLocked(from, to)
	return nil
}

// edgeLocked records one wait of from on to. g.mu must be held.
func (g *waitGraph) edgeLocked(from, to string) {
	if g.edges == nil {
		g.edges = map[string]map[string]int{}
	}
	if g.edges[from] == nil {
		g.edges[from] = map[string]int{}
	}
	g.edges[from][to]++
}

// reset makes from's edges those of its waits (an agent that took back
// its stored document after a refused write: the waits it holds are no
// longer those the graph was told of).
func (g *waitGraph) reset(from string, waits []Wait) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.edges, from)
	for _, w := range waits {
		if w.For != SystemSender {
			g.edgeLocked(from, w.For)
		}
	}
}

// remove forgets one wait of from on to.
func (g *waitGraph) remove(from, to string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.edges[from] == nil {
		return
	}
	if g.edges[from][to]--; g.edges[from][to] <= 0 {
		delete(g.edges[from], to)
	}
}

// pathLocked finds a path from -> … -> to, returned without from.
func (g *waitGraph) pathLocked(from, to string, seen map[string]bool) []string {
	if from == to {
		return []string{to}
	}
	if seen[from] {
		return nil
	}
	seen[from] = true
	for next := range g.edges[from] {
		if p := g.pathLocked(next, to, seen); p != nil {
			return append([]string{from}, p...)
		}
	}
	return nil
}

// engageWaits adds the message's waiting IDs to the sender's step lock (spec
// §9.1.2), except for receivers that cannot block it: a HumanAgent never
// waits back, but a wait that would close a wait cycle is left out. It
// returns a note for the step's result when a wait was left out.
func (s *System) engageWaits(a *agent, m *Message) string {
	now := s.now()
	var ws []Wait
	var notes []string
	settled := s.engagedOrAnswered(a, m.TaskID, m.Waiting)
	// The graph learns of the waits under the agent's lock, with the
	// waits themselves: a refused write that takes back the agent's
	// stored document resets the agent's edges from its waits
	// (restoreLocked), which must not drop an edge whose wait is still
	// to be added. The graph's own lock is taken under no other.
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, r := range m.Receiver {
		if settled[m.Waiting[i]] {
			continue
		}
		if cycle := s.waits.add(a.id, r); cycle != nil {
			notes = append(notes, s.text("wait_cycle_text", map[string]any{
				"PeerID": r, "Cycle": strings.Join(cycle, " → "),
			}))
			s.log.Info("wait cycle broken", "agent", a.id, "peer", r, "cycle", strings.Join(cycle, " → "))
			continue
		}
		ws = append(ws, Wait{
			WaitingID: m.Waiting[i], For: r, TaskID: m.TaskID, StageID: m.StageRelative,
			MessageID: m.MessageID, Since: now, Deadline: now.Add(s.cfg.WaitTimeout),
		})
	}
	a.addWaitsLocked(ws)
	return strings.Join(notes, "\n")
}

// engagedOrAnswered returns which of the waiting IDs the agent holds
// already, got the answer to already, or was told can get no answer (its
// reply step ended without it: replyLost). A step that engaged them and was
// interrupted by a crash before it was marked finished runs again after
// the restart (with the same, derived, waiting IDs): it must neither wait
// twice (one answer releases one entry) nor wait again for an answer that
// came or can no longer come (none is sent again), or the agent stays
// blocked until the wait times out. The agent is read before the task (an
// answer is recorded in the task before it reaches the agent), each under
// its own mutex.
func (s *System) engagedOrAnswered(a *agent, taskID string, ids []string) map[string]bool {
	out := map[string]bool{}
	for _, id := range a.heldOrLost(ids) {
		out[id] = true
	}
	if t, ok := s.task(taskID); ok {
		for _, id := range t.answered(a.id, ids) {
			out[id] = true
		}
	}
	return out
}

// addWaitsLocked engages step-lock entries and arms the timeout.
func (a *agent) addWaitsLocked(ws []Wait) {
	if len(ws) == 0 {
		return
	}
	for _, w := range ws {
		a.st.StepLock = append(a.st.StepLock, w.WaitingID)
		a.st.Waits = append(a.st.Waits, w)
	}
	a.armTimerLocked()
	a.changedLocked(Event{TaskID: waitsTask(ws), Detail: "step_lock"})
}

// addWaits is addWaitsLocked with the agent's lock taken.
func (a *agent) addWaits(ws []Wait) {
	a.mu.Lock()
	a.addWaitsLocked(ws)
	a.mu.Unlock()
}

// releaseWaitLocked removes one waiting ID from the step lock (spec §9.1.3).
func (a *agent) releaseWaitLocked(id string) (Wait, bool) {
	i := slices.IndexFunc(a.st.Waits, func(w Wait) bool { return w.WaitingID == id })
	j := slices.Index(a.st.StepLock, id)
	if j >= 0 {
		a.st.StepLock = slices.Delete(a.st.StepLock, j, j+1)
	}
	if i < 0 {
		if j >= 0 {
			a.mu.wakeLocked() // the lock is lighter: the agent may run
		}
		return Wait{}, j >= 0
	}
	w := a.st.Waits[i]
	a.st.Waits = slices.Delete(a.st.Waits, i, i+1)
	// The graph forgets the wait with the agent, under its lock, so a
	// refused write that brings the wait back (restoreLocked) finds the
	// graph as the waits are.
	if w.For != SystemSender {
		a.sys.waits.remove(a.id, w.For)
	}
	a.armTimerLocked()
	a.mu.wakeLocked()
	return w, true
}

// armTimerLocked (re)schedules the wake-up for the earliest wait deadline.
func (a *agent) armTimerLocked() {
	if a.waitTimer != nil {
		a.waitTimer.Stop()
		a.waitTimer = nil
	}
	if len(a.st.Waits) == 0 || a.stopped {
		return
	}
	// Waits in paused tasks do not time out (their deadlines move on
	// resume).
	var earliest time.Time
	for _, w := range a.st.Waits {
		if !a.sys.isPaused(w.TaskID) && (earliest.IsZero() || w.Deadline.Before(earliest)) {
			earliest = w.Deadline
		}
	}
	if earliest.IsZero() {
		return
	}
	d := earliest.Sub(a.sys.now())
	if d < 0 {
		d = 0
	}
	a.waitTimer = time.AfterFunc(d, a.expireWaits)
}

// expireWaits releases the waits past their deadline and tells the agent no
// reply came, with a process_message step run next (beyond the spec).
func (a *agent) expireWaits() {
	now := a.sys.now()
	a.mu.Lock()
	var expired []Wait
	for _, w := range slices.Clone(a.st.Waits) {
		if !w.Deadline.After(now) && !a.sys.isPaused(w.TaskID) {
			if rw, ok := a.releaseWaitLocked(w.WaitingID); ok {
				expired = append(expired, rw)
			}
		}
	}
	// One step per message, listing who did not answer.
	byMsg := map[string][]Wait{}
	var order []string
	for _, w := range expired {
		if _, ok := byMsg[w.MessageID]; !ok {
			order = append(order, w.MessageID)
		}
		byMsg[w.MessageID] = append(byMsg[w.MessageID], w)
	}
	for _, id := range order {
		ws := byMsg[id]
		var who []string
		for _, w := range ws {
			who = append(who, w.For)
		}
		data := map[string]any{"ReceiverIDs": strings.Join(who, ", "), "Timeout": a.sys.cfg.WaitTimeout.String()}
		a.followStepsLocked(ws[0].TaskID, ws[0].StageID, []StepSpec{{
			StepIntention: a.sys.text("wait_timeout_intention", data),
			Type:          StepSkill,
			Executor:      SkillProcessMessage,
			TextContent:   a.sys.text("wait_timeout_text", data),
		}}, true, "")
	}
	if len(expired) > 0 {
		a.changedLocked(Event{TaskID: waitsTask(expired), Detail: "step_lock_timeout"})
		// Nobody could be told if the store refused this: kept through
		// an outage rather than withdrawn (owner.go), so the wait ends
		// once the store is back.
		a.mu.keepLocked()
	}
	a.armTimerLocked()
	a.mu.Unlock()
	for _, w := range expired {
		a.sys.log.Info("wait timed out", "agent", a.id, "for", w.For, "waiting_id", w.WaitingID)
	}
}

// releaseWaits releases, on every agent, the waits that match (the awaited
// task or stage ended). The released agents carry on with their next step.
func (s *System) releaseWaits(match func(Wait) bool) {
	for _, a := range s.allAgents() {
		a.releaseWaits(match)
	}
}

// unwait drops the waits the agent engaged for a message that was not
// sent after all: no answer can come.
func (a *agent) unwait(ids ...string) {
	a.releaseWaits(func(w Wait) bool { return slices.Contains(ids, w.WaitingID) })
}

// releaseWaits releases the agent's waits that match.
func (a *agent) releaseWaits(match func(Wait) bool) {
	a.mu.Lock()
	var released []Wait
	for _, w := range slices.Clone(a.st.Waits) {
		if match(w) {
			if rw, ok := a.releaseWaitLocked(w.WaitingID); ok {
				released = append(released, rw)
			}
		}
	}
	if len(released) > 0 {
		a.changedLocked(Event{TaskID: waitsTask(released), Detail: "step_lock_released"})
		// Whoever ended the awaited stage or task cannot be told that
		// this agent's document was refused: kept through an outage
		// rather than withdrawn (owner.go).
		a.mu.keepLocked()
	}
	a.mu.Unlock()
}

// lostReply is a wait whose reply can no longer come.
type lostReply struct {
	waiter    string
	waitingID string
	taskID    string // of the reply step
	reason    string
	// stageEnded: the reply step's stage ended before it sent. An agent's
	// wait for it is on that stage (Wait.StageID is the message's stage,
	// as the reply step's), and the stage's end releases it (stageEnded),
	// with no step in the stage that ended; only an operator is told.
	stageEnded bool
}

// reasonStageEnded is why a reply can no longer come when its stage ended
// before the reply step sent it.
const reasonStageEnded = "its stage ended before the reply was sent"

// dropStageStepsLocked removes the steps of a stage that ended (drop
// matches them: removeStepsLocked) and returns the waits the queued reply
// steps among them leave without an answer. A running one is left to its
// apply, which knows whether it sent its reply (droppedWhileRunning,
// finishStep). a.mu must be held.
func (a *agent) dropStageStepsLocked(drop func(*StepState) bool) []lostReply {
	var replies []StepState
	for i := range a.st.AgentStep.StepList {
		s := &a.st.AgentStep.StepList[i]
		if drop(s) && s.ReturnWaitingID != "" && s.ReplyTo != "" && !s.ended() && s.StepID != a.running {
			replies = append(replies, *s)
		}
	}
	a.removeStepsLocked(drop)
	var lost []lostReply
	for i := range replies {
		for _, l := range a.stageEndedReplyLocked(&replies[i]) {
			if !slices.ContainsFunc(lost, func(o lostReply) bool { return o.waitingID == l.waitingID }) {
				lost = append(lost, l) // a get_more_info copy of the step carries the same wait
			}
		}
	}
	return lost
}

// stageEndedReplyLocked is the wait a reply step leaves without an answer
// when its stage ended before it sent. a.mu must be held.
func (a *agent) stageEndedReplyLocked(step *StepState) []lostReply {
	lost := a.replyLostLocked(step, map[string]any{"error": reasonStageEnded})
	for i := range lost {
		lost[i].stageEnded = true
	}
	return lost
}

// replyLostLocked reports the wait a reply step leaves without an answer:
// the step (one carrying a return_waiting_id) ended without sending its
// message, and no other pending step of this agent still carries that
// waiting ID (get_more_info queues a copy). a.mu must be held.
func (a *agent) replyLostLocked(step *StepState, result map[string]any) []lostReply {
	if step.ReturnWaitingID == "" || step.ReplyTo == "" {
		return nil
	}
	if _, sent := result["message_id"]; sent {
		return nil
	}
	for _, id := range a.st.AgentStep.TodoList {
		if s := a.stepLocked(id); s != nil && s.ReturnWaitingID == step.ReturnWaitingID {
			return nil
		}
	}
	return []lostReply{lostReplyOf(step, result)}
}

// lostReplyOf is the wait a reply step that ended with result, without
// sending its message, leaves without an answer.
func lostReplyOf(step *StepState, result map[string]any) lostReply {
	reason, _ := result["error"].(string)
	if reason == "" {
		reason = "its reply step ended without sending a reply"
	}
	return lostReply{waiter: step.ReplyTo, waitingID: step.ReturnWaitingID, taskID: step.TaskID, reason: Truncate(reason, 300)}
}

// releaseLost releases at once the waits whose reply from replier can no
// longer come, each with a process_message step (run next) saying why:
// the waiter does not sit out its wait timeout. An operator who waits
// (a HumanAgent holds no step lock) is told in its inbox, by a notice
// whose ID derives from the waiting ID (a restart that sends it again
// sends the same one: releaseLostReplies).
func (s *System) releaseLost(replier *agent, lost ...lostReply) {
	if len(lost) == 0 {
		return
	}
	name := s.nameOf(replier.id) // read before taking another owner's mutex
	for _, l := range lost {
		w, ok := s.agent(l.waiter)
		if !ok {
			continue
		}
		if w.kind != KindLLM {
			s.tellOperatorAs(replyLostID(l.waitingID), w.id, "operator_reply_lost", map[string]any{"Replier": name, "TaskID": l.taskID, "Reason": l.reason})
			s.log.Info("operator told: the reply can no longer come", "operator", w.id, "for", replier.id, "waiting_id", l.waitingID, "reason", l.reason)
			continue
		}
		if l.stageEnded {
			continue // released by the stage's end
		}
		if w.replyLost(l, name) {
			s.log.Info("wait released: the reply can no longer come", "agent", w.id, "for", replier.id, "waiting_id", l.waitingID, "reason", l.reason)
		}
	}
}

// heldOrLost returns which of the waiting IDs the agent's step lock holds,
// or were released because their reply can no longer come (the step that
// told the agent so is there).
func (a *agent) heldOrLost(ids []string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var held []string
	for _, id := range ids {
		if slices.Contains(a.st.StepLock, id) || a.stepLocked(plannedStepID(replyLostID(id), 0)) != nil {
			held = append(held, id)
		}
	}
	return held
}

// replyLostID is the origin of what tells a waiter that the reply to its
// waiting ID can no longer come: an LLM agent's process_message step
// derives its ID from it (addStepsLocked), an operator's notice is it. A
// restart that tells the waiter again makes the same ID: it is told once.
func replyLostID(waitingID string) string {
	return derivedID(waitingID, "reply_lost")
}

// replyLost releases the agent's wait whose reply can no longer come, with
// a process_message step (run next) saying why; replier names who owed
// the reply. It reports whether the wait was engaged.
func (a *agent) replyLost(l lostReply, replier string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	rw, released := a.releaseWaitLocked(l.waitingID)
	if released && rw.WaitingID != "" {
		data := map[string]any{"ReceiverIDs": replier, "Reason": l.reason}
		a.followStepsLocked(rw.TaskID, rw.StageID, []StepSpec{{
			StepIntention: a.sys.text("reply_lost_intention", data),
			Type:          StepSkill,
			Executor:      SkillProcessMessage,
			TextContent:   a.sys.text("reply_lost_text", data),
		}}, true, replyLostID(l.waitingID))
		a.changedLocked(Event{TaskID: rw.TaskID, Detail: "step_lock_released"})
		// The replier's step is over and cannot be told: kept through an
		// outage rather than withdrawn (owner.go).
		a.mu.keepLocked()
	}
	return released
}

// waitsTask is the task of waits, named by the event of their change: an
// operator who does not see the task is not told of it. It is "" when they
// are of more than one task.
func waitsTask(ws []Wait) string {
	if len(ws) == 0 {
		return ""
	}
	for _, w := range ws[1:] {
		if w.TaskID != ws[0].TaskID {
			return ""
		}
	}
	return ws[0].TaskID
}
