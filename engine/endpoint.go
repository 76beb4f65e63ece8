package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// The LLM endpoint's health as agents meet it (beyond the spec). An outage
// (connection errors, timeouts, 429, 5xx) is waited out inside the step's
// LLM call: the step keeps running, consumes no budget, and the agent shows
// working_state "waiting" with the reason; the operators of the affected
// tasks get one notice when it begins and one when it ends. A refusal that
// no retry can fix (a wrong key, an unknown model) fails the step at once,
// is logged at error level once per cause, and each affected operator is
// told once per cause; a task whose manager meets it before the task has
// any stage fails with that reason.
//
// An outage longer than the call's window pauses, it does not destroy: a
// step whose call gave up (llm.ErrUnavailable) is put back unrun, first in
// its agent's queue, and its task is paused with PausedFor "llm_outage" and
// its operator told (holdOutage). No call of it is made meanwhile. Such a
// task resumes by itself, and its operator is told, as soon as any call
// gets an answer, or Config.ProbeLLM finds the endpoint answering again
// (every LLMProbeInterval while such a task exists, restarts included); its
// operator may resume it sooner (resume_task) or pause it as its own. The
// base task, which cannot be paused, is held instead (holdBase): its steps
// wait the same way, in this process only (a restart runs them again).

// stepOutage is a running step's llm.OutageObserver (and what shows its
// questions to the operator on the agent: showAsking).
type stepOutage struct {
	a    *agent
	step *StepState
}

// OutageBegan shows the agent waiting and tells the operator once.
func (o *stepOutage) OutageBegan(since time.Time, reason string) {
	a := o.a
	a.showOutage(o.step, since, reason)
	a.sys.outage.began(a.sys, o.step.TaskID, since, reason)
}

// OutageEnded shows the agent working again.
func (o *stepOutage) OutageEnded(end llm.OutageEnd) {
	a := o.a
	a.waitingOver(o.step, PausedOutage)
	a.sys.outage.ended(a.sys, o.step.TaskID, end)
}

// outageTracker counts the calls waiting out an outage and who was told.
type outageTracker struct {
	// notice orders the notices (began, gave up, over) as the changes
	// of told they report: an answer right after a call began waiting
	// cannot tell "available" before "unavailable".
	notice sync.Mutex
	mu     sync.Mutex
	// waitingOf counts the waiting calls by the operator of their task: a
	// give-up is told to an operator once none of its calls waits.
	waitingOf map[string]int
	since     time.Time
	told      []string // operators told that it began, in order
	// held is set while a task may be paused for the outage (holdOutage)
	// and probing while the probe runs (probeOutage).
	held, probing bool
	// holds counts watchOutage's calls: a probe that found nothing held
	// stops only if no hold came meanwhile.
	holds int
	// answers counts the calls that got an answer (endpointAnswered): a
	// hold sees one that came while it paused, before it watched.
	answers uint64
	// baseMu orders the base task's holds and their ends (holdBase,
	// releaseBase), so that its waits' deadlines move once.
	baseMu sync.Mutex
}

// PausedOutage is TaskState.PausedFor of a task whose steps gave up
// waiting for the LLM endpoint, and PausedBudget of one held for its
// budget (budget_tokens.go). They are also AgentState.WaitingOn.
const (
	PausedOutage = "llm_outage"
	PausedBudget = "budget"
)

// outagePausedHook, set by tests only, runs in holdOutage once the task is
// paused for the outage (before the rest of the hold).
var outagePausedHook func(s *System, taskID string)

// holdOutage takes back a step whose LLM call waited out the whole outage
// window and gave up: its task is paused for the outage (the base task
// held), and the step is put back unrun, its calls counted. It reports
// whether it did (not in an ended task: the step then fails as any).
func (s *System) holdOutage(a *agent, step *StepState, out *Output) bool {
	t, ok := s.task(step.TaskID)
	if !ok {
		return false
	}
	st := t.brief()
	answers := s.outage.answerCount()
	// Paused (held) before the step is queued again, so that the agent's
	// loop does not start it again at once.
	switch {
	case st.Base:
		s.holdBase(out.Err)
	case stateEnded(st.ExecutionState):
		return false
	default:
		// The notice is told with the pause: a resume coming at once
		// (the endpoint answers another call) tells its own after it.
		_, err := s.pauseTaskFor(t, SystemSender, true, true, PausedOutage, func() {
			s.log.Warn("task paused: its step gave up waiting for the LLM endpoint", "task", st.TaskID, "step", step.StepID, "err", out.Err)
			s.tellOperator(s.operatorOf(st.TaskID), "llm_outage_paused", map[string]any{
				"TaskID": st.TaskID, "TaskName": st.TaskName, "Reason": Truncate(out.Err.Error(), 300),
			})
		})
		if err != nil {
			s.log.Error("LLM endpoint unavailable: could not pause the task, its step fails", "task", st.TaskID, "err", err)
			return false
		}
		if hook := outagePausedHook; hook != nil {
			hook(s, st.TaskID)
		}
	}
	a.putBack(step, out.Usage)
	s.addTaskUsage(step.TaskID, out)
	// An answer that came since the pause began (before the watch, which
	// endpointAnswered reads) resumes now: it would be missed otherwise.
	if s.watchOutage() != answers {
		s.resumeOutage()
	}
	return true
}

// holdBase holds the base task's steps while the endpoint is down: the
// base task reads as paused to the agents' loops and wait timers (not in
// its stored state: it cannot be paused), until releaseBase. The default
// operator is told once per hold.
func (s *System) holdBase(cause error) {
	o := &s.outage
	o.baseMu.Lock()
	defer o.baseMu.Unlock()
	if _, held := s.paused.Load(s.baseTaskID); held {
		return
	}
	s.paused.Store(s.baseTaskID, s.now())
	s.log.Warn("base task held: its step gave up waiting for the LLM endpoint", "err", cause)
	s.tellOperator(s.operatorOf(s.baseTaskID), "llm_outage_base_held", map[string]any{"Reason": Truncate(cause.Error(), 300)})
}

// releaseBase lets the base task's steps run again after holdBase, its
// agents' waits there moved by the time it was held.
func (s *System) releaseBase() {
	o := &s.outage
	o.baseMu.Lock()
	defer o.baseMu.Unlock()
	v, held := s.paused.Load(s.baseTaskID)
	if !held {
		return
	}
	since, _ := v.(time.Time)
	agents := s.allAgents()
	for _, a := range agents {
		if a.kind == KindLLM {
			a.shiftWaits(s.baseTaskID, s.now().Sub(since))
		}
	}
	s.paused.Delete(s.baseTaskID)
	for _, a := range agents {
		if a.kind == KindLLM {
			a.taskPaused()
		}
	}
	s.log.Info("base task released: the LLM endpoint answers again")
}

// watchOutage records that a task may be paused for an outage and starts
// the probe, if there is one and it is not running. It returns the count
// of answers so far (answerCount): from now on endpointAnswered resumes.
func (s *System) watchOutage() uint64 {
	o := &s.outage
	o.mu.Lock()
	o.held = true
	o.holds++
	answers := o.answers
	start := !o.probing && s.cfg.ProbeLLM != nil && !s.isClosed()
	if start {
		o.probing = true
	}
	o.mu.Unlock()
	if start {
		s.goTracked(s.probeOutage)
	}
	return answers
}

// answerCount returns how many calls got an answer so far.
func (o *outageTracker) answerCount() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.answers
}

// rewatchOutage watches again, after a restart, the tasks stored paused
// for an outage.
func (s *System) rewatchOutage() {
	if s.outageHeld() {
		s.watchOutage()
	}
}

// outageHeld reports whether the base task is held or an open task is
// paused for an outage.
func (s *System) outageHeld() bool {
	if s.isPaused(s.baseTaskID) {
		return true
	}
	for _, t := range s.allTasks() {
		st := t.brief()
		if st.Paused && st.PausedFor == PausedOutage && st.ExecutionState != StateFinished && st.ExecutionState != StateFailed {
			return true
		}
	}
	return false
}

// probeOutage asks Config.ProbeLLM every LLMProbeInterval whether the
// endpoint answers again, while a task may be paused for an outage; when
// it does, those tasks resume.
func (s *System) probeOutage() {
	o := &s.outage
	timer := time.NewTimer(s.cfg.LLMProbeInterval)
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			o.mu.Lock()
			o.probing = false
			o.mu.Unlock()
			return
		case <-timer.C:
		}
		o.mu.Lock()
		holds := o.holds
		o.mu.Unlock()
		// An operator's resume or take-over, or the task's end, may have
		// left nothing held: the probe then stops.
		anyHeld := s.outageHeld()
		o.mu.Lock()
		if !anyHeld && o.holds == holds {
			o.held = false
		}
		if !o.held {
			o.probing = false
			o.mu.Unlock()
			s.log.Debug("LLM endpoint probe stops: no task is paused for an outage")
			return
		}
		o.mu.Unlock()
		ctx, cancel := context.WithTimeout(s.ctx, min(s.cfg.LLMProbeInterval, 30*time.Second))
		err := s.cfg.ProbeLLM(ctx)
		cancel()
		if err == nil {
			s.resumeOutage()
		} else {
			s.log.Debug("LLM endpoint still unavailable: paused tasks stay paused", "err", err)
		}
		timer.Reset(s.cfg.LLMProbeInterval)
	}
}

// endpointAnswered is told that an LLM call got an answer: the tasks
// paused for an outage resume, on a goroutine of their own.
func (s *System) endpointAnswered() {
	o := &s.outage
	o.mu.Lock()
	o.answers++
	held, told := o.held, len(o.told) > 0
	o.mu.Unlock()
	if told {
		o.over(s)
	}
	if held && !s.isClosed() {
		s.goTracked(s.resumeOutage)
	}
}

// resumeOutage resumes the tasks paused for an outage, each operator told.
// One whose resume the store refuses stays watched.
func (s *System) resumeOutage() {
	o := &s.outage
	o.mu.Lock()
	o.held = false
	o.mu.Unlock()
	s.releaseBase()
	for _, t := range s.allTasks() {
		st := t.brief()
		if !st.Paused || st.PausedFor != PausedOutage {
			continue
		}
		_, err := s.pauseTaskFor(t, SystemSender, true, false, PausedOutage, func() {
			s.log.Info("task resumed: the LLM endpoint answers again", "task", st.TaskID)
			s.tellOperator(s.operatorOf(st.TaskID), "llm_outage_resumed", map[string]any{"TaskID": st.TaskID, "TaskName": st.TaskName})
		})
		switch {
		case errors.Is(err, ErrEnded):
		case err != nil:
			s.log.Error("LLM endpoint available: could not resume a task paused for its outage", "task", st.TaskID, "err", err)
			s.watchOutage()
		}
	}
}

// began records one more call waiting; the operator of its task is told
// once per outage.
func (o *outageTracker) began(s *System, taskID string, since time.Time, reason string) {
	op := s.operatorOf(taskID)
	o.notice.Lock()
	defer o.notice.Unlock()
	o.mu.Lock()
	if (len(o.waitingOf) == 0 && len(o.told) == 0) || o.since.IsZero() {
		o.since = since
		s.log.Error("LLM endpoint unavailable: calls wait and retry", "since", since, "reason", reason)
	}
	if o.waitingOf == nil {
		o.waitingOf = map[string]int{}
	}
	o.waitingOf[op]++
	tell := op != "" && !slices.Contains(o.told, op)
	if tell {
		o.told = append(o.told, op)
	}
	first := o.since
	o.mu.Unlock()
	if tell {
		s.tellOperator(op, "llm_outage_began", map[string]any{
			"Since": first.Format(time.DateTime), "Reason": Truncate(reason, 300),
		})
	}
}

// ended records that a call of taskID no longer waits, and how its wait
// ended: an answer tells everyone told of the outage (and resumes what it
// paused, as any answer does); a give-up tells the task's operator once
// none of its calls waits any more; a call that left (an interrupt, a
// stop, a shutdown) tells nobody anything.
func (o *outageTracker) ended(s *System, taskID string, end llm.OutageEnd) {
	op := s.operatorOf(taskID)
	o.mu.Lock()
	if o.waitingOf[op]--; o.waitingOf[op] <= 0 {
		delete(o.waitingOf, op)
	}
	o.mu.Unlock()
	switch end {
	case llm.OutageRecovered:
		s.endpointAnswered()
	case llm.OutageGaveUp:
		o.gaveUp(s, op)
	}
}

// gaveUp tells op, once none of its calls waits any more, that the calls
// stopped waiting; op is then no longer among those told of the outage.
func (o *outageTracker) gaveUp(s *System, op string) {
	o.notice.Lock()
	defer o.notice.Unlock()
	o.mu.Lock()
	i := slices.Index(o.told, op)
	if i < 0 || o.waitingOf[op] > 0 {
		o.mu.Unlock()
		return
	}
	o.told = slices.Delete(o.told, i, i+1)
	since := o.since
	o.mu.Unlock()
	// The give-up ends what the operator was told of the outage, as an
	// answer would (it is among those told no longer): a promise a
	// restart stored (owedOutageNotice) is kept by it too.
	s.tellOperatorAs(s.owedOutageNotice(op), op, "llm_outage_gave_up", map[string]any{
		"Since": since.Format(time.DateTime), "Duration": s.now().Sub(since).Round(time.Second).String(),
	})
}

// over tells the operators told of the outage that the endpoint answers
// again, once: from any call answered (endpointAnswered) — the calls that
// waited may have left (an interrupt), or been lost with a restart
// (toldBeforeRestart).
func (o *outageTracker) over(s *System) {
	o.notice.Lock()
	defer o.notice.Unlock()
	o.mu.Lock()
	told, since := o.told, o.since
	o.told = nil
	o.mu.Unlock()
	if len(told) == 0 {
		return
	}
	s.log.Info("LLM endpoint available again", "since", since)
	key, data := "llm_outage_ended", map[string]any{
		"Since": since.Format(time.DateTime), "Duration": s.now().Sub(since).Round(time.Second).String(),
	}
	if since.IsZero() {
		key, data = "llm_outage_ended_restarted", nil // when it began died with the process
	}
	for _, op := range told {
		s.tellOperatorAs(s.owedOutageNotice(op), op, key, data)
	}
}

// toldBeforeRestart records, at a restore, that operator op was told of
// an outage a call of its tasks was waiting out when the process ended:
// it is told when the endpoint answers again, as it was promised, and not
// told again that it is unavailable. When the outage began is not known.
func (o *outageTracker) toldBeforeRestart(op string) {
	o.mu.Lock()
	if !slices.Contains(o.told, op) {
		o.told = append(o.told, op)
	}
	o.mu.Unlock()
}

// keepOutagePromises makes the restore's promises durable: an operator
// owed the notice that the endpoint answers again (toldBeforeRestart)
// gets, on its own document, the message ID that notice will have
// (OwedOutageNotice), written now, before the agents are enrolled (which
// writes their documents, no longer saying their calls waited): a crash
// before the endpoint answers would lose the promise otherwise. An
// operator whose document holds an ID from an earlier restart is owed the
// notice still when the store lacks that message; when it holds it, the
// notice was sent, and is delivered again if the operator had not taken
// it (which clears the ID). Called at a restore, with the operators'
// owners made and nothing running yet.
func (s *System) keepOutagePromises(agents []*agent, stored map[string]bool) {
	o := &s.outage
	for _, a := range agents {
		if a.kind != KindHuman {
			continue
		}
		o.mu.Lock()
		owed := slices.Contains(o.told, a.id)
		o.mu.Unlock()
		a.mu.Lock()
		switch id := a.st.OwedOutageNotice; {
		case id != "" && !stored[id]:
			o.toldBeforeRestart(a.id)
		case owed:
			a.st.OwedOutageNotice = newID()
			a.st.UpdatedAt = s.now()
			a.mu.change(Event{}, true)
			// Nobody could be told of a refusal: kept for the owner's
			// retries rather than withdrawn.
			a.mu.keepLocked()
			if err := a.mu.syncLocked(); err != nil {
				s.log.Error("store: the notice an operator is owed when the LLM endpoint answers is not stored yet: a crash before the retry loses it", "operator", a.id, "err", err)
			}
		case id != "":
			// Sent: owed no longer (enroll writes it so). A notice of a
			// later outage takes an ID of its own, never this stored one.
			a.st.OwedOutageNotice = ""
		}
		a.mu.Unlock()
	}
}

// owedOutageNotice is the message ID of the notice op is owed about the
// endpoint (OwedOutageNotice); "" when it is owed none across restarts,
// and the notice takes a new ID.
func (s *System) owedOutageNotice(op string) string {
	a, ok := s.agent(op)
	if !ok {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.OwedOutageNotice
}

// refusalTracker remembers the refusal causes reported since the endpoint
// last answered, and to whom.
type refusalTracker struct {
	mu     sync.Mutex
	causes map[string][]string // cause -> operators told
}

// refusal handles a step that failed because the endpoint refused it.
func (s *System) refusal(a *agent, step *StepState, failure error) {
	cause, ok := llm.Refusal(failure)
	if !ok {
		return
	}
	op := s.operatorOf(step.TaskID)
	r := &s.refused
	r.mu.Lock()
	if r.causes == nil {
		r.causes = map[string][]string{}
	}
	told, seen := r.causes[cause]
	if !seen {
		s.log.Error("LLM endpoint refuses requests: steps fail until this is fixed", "cause", cause, "err", failure)
	}
	tell := op != "" && !slices.Contains(told, op)
	if tell {
		r.causes[cause] = append(told, op)
	} else if !seen {
		r.causes[cause] = told
	}
	r.mu.Unlock()
	if tell {
		s.tellOperator(op, "llm_refused", map[string]any{"Reason": failure.Error()})
	}
	// A task its manager cannot even stage would otherwise wait for its
	// supervision: it fails now, with the cause.
	t, ok := s.task(step.TaskID)
	if !ok {
		return
	}
	st := t.brief()
	stages := t.stageCount()
	if st.Base || st.TaskManager != a.id || stages > 0 || stateEnded(st.ExecutionState) {
		return
	}
	if err := s.failTask(t, failure.Error()); err != nil && !errors.Is(err, ErrEnded) {
		s.log.Error("could not fail a task its manager cannot start", "task", st.TaskID, "err", err)
	}
}

// answered forgets the refusals once a call got an answer: a cause that
// comes back later is reported again.
func (r *refusalTracker) answered() {
	r.mu.Lock()
	if len(r.causes) > 0 {
		r.causes = nil
	}
	r.mu.Unlock()
}

// operatorOf returns the operator a task reports to.
func (s *System) operatorOf(taskID string) string {
	if t, ok := s.task(taskID); ok {
		if op := t.brief().Operator; op != "" {
			return op
		}
	}
	return s.operatorID
}

// tellOperator puts an engine notice into an operator's inbox, in the base
// task (which never ends, so the notice stays).
func (s *System) tellOperator(op, key string, data map[string]any) {
	s.tellOperatorAs("", op, key, data)
}

// tellOperatorAs is tellOperator with the notice's message ID (a new one
// when id is ""): a notice a restart may send again takes a derived one,
// and the operator takes it once.
func (s *System) tellOperatorAs(id, op, key string, data map[string]any) {
	s.deliver(s.newMessage(id, s.baseTaskID, SystemSender, []string{op}, s.text(key, data), NoRelative))
}
