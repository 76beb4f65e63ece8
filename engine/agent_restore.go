package engine

import (
	"fmt"
	"slices"
	"time"
)

// recoverStepsLocked deals with the steps a crash caught running; stored
// holds the IDs of the messages the store has. Steps run again come first
// in the todo list, in the order they ran (an agent runs one step at a
// time, but a store written by an older mas-mcp may hold several).
// Called before the agent's goroutine starts.
func (a *agent) recoverStepsLocked(rerun Rerunner, stored map[string]bool) {
	// What the agent waited for was said by its running step's LLM call
	// (an outage or a budget waited out inside it): no call runs now. An
	// outage's operator was told it would hear when the endpoint answers.
	// The promise is made durable on the operator's own document before
	// this one is written without the wait (keepOutagePromises).
	if a.st.WaitingOn == PausedOutage && a.st.WaitingIn != "" {
		a.sys.outage.toldBeforeRestart(a.sys.operatorOf(a.st.WaitingIn))
	}
	a.st.WaitingFor, a.st.WaitingOn, a.st.WaitingIn = "", "", ""
	var again []string
	for i := range a.st.AgentStep.StepList {
		step := &a.st.AgentStep.StepList[i]
		if step.ExecutionState != StateRunning {
			continue
		}
		// A tool step whose call waited for the operator's answer (the
		// risk gate's approval, missing arguments: CallWaitsOn) made no
		// call: it runs again, and asks again (the question the dead
		// process waited on is expired, settleQuestionsLocked).
		if step.Type == StepTool && a.st.CallWaitsOn == "" && (rerun == nil || !rerun.SafeToRerun(*step)) {
			step.ExecutionState = StateFailed
			step.FinishedAt = a.sys.now()
			step.ExecuteResult = map[string]any{"error": fmt.Sprintf(
				"interrupted by a restart while calling %s: the call may or may not have taken effect, and the tool is not declared safe to repeat (readOnlyHint or idempotentHint); check its effect before calling it again", step.Executor)}
			continue
		}
		// Run it again, next.
		step.ExecutionState = StateInit
		step.StartedAt = time.Time{}
		again = append(again, step.StepID)
		a.dropLostWaitsLocked(step.StepID, stored)
	}
	a.st.CallWaitsOn = ""
	if len(again) > 0 {
		rest := slices.DeleteFunc(a.st.AgentStep.TodoList, func(id string) bool { return slices.Contains(again, id) })
		a.st.AgentStep.TodoList = append(again, rest...)
	}
}

// dropLostWaitsLocked releases the waits an interrupted step engaged on a
// message the crash lost (its send_message's, or its ask_info's answer):
// no answer can come, and the wait would block the step's own re-run,
// which alone can send that message (and waits again). A wait on a stored
// message stays: its answer comes, and the re-run after it does not wait
// again (engagedOrAnswered). Called before the wait graph and the timers
// are set up.
func (a *agent) dropLostWaitsLocked(stepID string, stored map[string]bool) {
	sent, ask, answer := derivedID(stepID, "send"), derivedID(stepID, "ask_wait"), derivedID(stepID, "ask_answer")
	var kept []Wait
	for _, w := range a.st.Waits {
		if (w.MessageID == sent && !stored[sent]) || (w.WaitingID == ask && !stored[answer]) {
			a.st.StepLock = slices.DeleteFunc(a.st.StepLock, func(id string) bool { return id == w.WaitingID })
			continue
		}
		kept = append(kept, w)
	}
	a.st.Waits = kept
}

// takenBefore returns whether the agent took a message already, as the
// store left it (pos: each stored message's position). The agent's received
// list keeps only the newest IDs: a message it does not list was taken
// long ago if it comes before the oldest one it lists, and only then.
func (a *agent) takenBefore(pos map[string]int) func(Message) bool {
	a.mu.Lock()
	received := make(map[string]bool, len(a.st.Received))
	for _, id := range a.st.Received {
		received[id] = true
	}
	oldest := -1
	if len(a.st.Received) >= receivedKept {
		if p, ok := pos[a.st.Received[0]]; ok {
			oldest = p
		}
	}
	a.mu.Unlock()
	return func(m Message) bool {
		if received[m.MessageID] {
			return true
		}
		return oldest >= 0 && pos[m.MessageID] < oldest
	}
}

// rejoinWaits puts the restored agent's waits back into the wait graph and
// arms their timer.
func (a *agent) rejoinWaits() {
	a.mu.Lock()
	// A step-lock entry without its wait (a damaged document) could never
	// time out or be told its reply cannot come: the agent would wait for
	// ever. It is dropped; a reply that comes is then an ordinary message.
	for _, id := range slices.Clone(a.st.StepLock) {
		if !slices.ContainsFunc(a.st.Waits, func(w Wait) bool { return w.WaitingID == id }) {
			a.sys.log.Warn("restore: dropped a step-lock entry without its wait", "agent", a.id, "waiting_id", id)
			a.releaseWaitLocked(id)
			a.changedLocked(Event{Detail: "step lock repaired"})
		}
	}
	for _, w := range a.st.Waits {
		if w.For != SystemSender {
			a.sys.waits.add(a.id, w.For)
		}
	}
	a.armTimerLocked()
	a.mu.Unlock()
}

// awaitedReply is a restored wait of an LLM agent on another agent's reply.
type awaitedReply struct{ waiter, replier string }

// releaseLostReplies tells the waiters of the replies that can no longer
// come what a crash kept them from being told: the replier's reply step is
// stored ended without sending it, but the crash came before the release
// or the notice was (releaseLost). A restored wait of an LLM agent is
// released as the live path does, with its process_message step, instead
// of sitting out its wait timeout. An operator, who holds no step lock, is
// sent the notice the store lacks (stored: the IDs of the stored messages;
// a notice it holds was sent, and is delivered again if not taken). The
// agents' waits and steps are read once each: linear in them, whatever the
// number of messages. Called with the waits rejoined, before the agents'
// loops run.
func (s *System) releaseLostReplies(agents []*agent, stored map[string]bool) {
	waits := map[string]awaitedReply{} // waiting ID ->
	operators := map[string]bool{}
	for _, a := range agents {
		if a.kind != KindLLM {
			operators[a.id] = true
			continue
		}
		a.mu.Lock()
		for _, w := range a.st.Waits {
			if w.For != SystemSender {
				waits[w.WaitingID] = awaitedReply{waiter: a.id, replier: w.For}
			}
		}
		a.mu.Unlock()
	}
	for _, a := range agents {
		owed := func(step *StepState) bool {
			if operators[step.ReplyTo] {
				return true
			}
			w, ok := waits[step.ReturnWaitingID]
			return ok && w.replier == a.id && w.waiter == step.ReplyTo
		}
		a.mu.Lock()
		lost := a.lostRepliesLocked(owed)
		a.mu.Unlock()
		lost = slices.DeleteFunc(lost, func(l lostReply) bool { return operators[l.waiter] && stored[replyLostID(l.waitingID)] })
		s.releaseLost(a, lost...)
	}
}

// lostRepliesLocked returns the waits this agent owes a reply to (its
// steps carrying their waiting ID that owed says so of) whose last reply
// step ended without sending it, with no step carrying the same waiting
// ID that is still to run or that sent it (get_more_info queues a copy):
// replyLostLocked's judgement, on the stored steps. a.mu must be held.
func (a *agent) lostRepliesLocked(owed func(*StepState) bool) []lostReply {
	settled := map[string]bool{}
	ended := map[string]*StepState{} // waiting ID -> its last reply step
	var order []string
	for i := range a.st.AgentStep.StepList {
		step := &a.st.AgentStep.StepList[i]
		if step.ReturnWaitingID == "" || step.ReplyTo == "" || !owed(step) {
			continue
		}
		_, sent := step.ExecuteResult["message_id"]
		if sent || (step.ExecutionState != StateFinished && step.ExecutionState != StateFailed) {
			settled[step.ReturnWaitingID] = true
			continue
		}
		if _, ok := ended[step.ReturnWaitingID]; !ok {
			order = append(order, step.ReturnWaitingID)
		}
		ended[step.ReturnWaitingID] = step
	}
	var lost []lostReply
	for _, id := range order {
		if !settled[id] { // one release per wait
			lost = append(lost, lostReplyOf(ended[id], ended[id].ExecuteResult))
		}
	}
	return lost
}
