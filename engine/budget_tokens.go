package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// Budgets (beyond the spec): limits on what a task's LLM calls may spend.
//
// A task has a token budget (all its calls' total tokens), a budget per
// agent in it, and a cost budget (from the price table), each optional; an
// operator has a daily token budget over all their tasks. Usage is metered
// after every step that called the LLM, before the agent can start its next
// step: when a task reaches a limit it is paused (pause.go: no new step of
// it starts, so no new LLM call; steps already running finish) and its
// operator is asked, in the inbox, to raise the budget or to end the task.
// "approve" raises every reached limit (by the given amount, or by the
// configured step, or else by the limit itself) and the task resumes;
// "deny" ends it as failed with the reason. manage_task set_budget sets the
// limits directly, and resumes a task held for its budget once none is
// reached. A reached daily budget holds every open task of the operator
// with one question; "deny" leaves them paused (resume_task works again on
// the next day, UTC). The base task is metered but never held.

// ActionSetBudget is the operator's manage_task action that sets a task's
// budget limits (beyond the spec).
const ActionSetBudget = "set_budget"

// Kinds of budget hold (TaskBudget.HeldFor).
const (
	holdTask  = "task"
	holdDaily = "daily"
)

// HeldForDaily is TaskBudget.HeldFor of a task held for its operator's
// daily budget: it waits on the operator's one daily question
// (DailyQuestion), which may be asked in another of their tasks.
const HeldForDaily = holdDaily

// BudgetConfig sets the MAS's budgets. Zero values mean no limit.
type BudgetConfig struct {
	// TaskTokens is a new task's token budget (the total tokens of all its
	// LLM calls) unless add_task sets one.
	TaskTokens int
	// AgentTokens is a new task's budget per agent in it.
	AgentTokens int
	// TaskCost is a new task's cost budget, in the currency of Prices.
	TaskCost float64
	// OperatorDailyTokens bounds the tokens of each operator's tasks (the
	// base task included) per UTC day.
	OperatorDailyTokens int
	// RaiseTokens and RaiseCost are how much an operator's plain "approve"
	// adds to a reached limit (to what was used when it is past it); 0:
	// the limit's own size (it doubles).
	RaiseTokens int
	RaiseCost   float64
	// Prices maps model names to their prices; "*" prices the models not
	// listed. Without prices no cost is computed.
	Prices map[string]Price
	// DefaultModel is the model of agents without llm_config.model, for
	// the price table.
	DefaultModel string
}

// Price is what a model's tokens cost, per million tokens.
type Price struct {
	Prompt     float64 `json:"prompt"`
	Completion float64 `json:"completion"`
	// Cached prices the cached part of the prompt; 0: as Prompt.
	Cached float64 `json:"cached,omitempty"`
}

// check validates the budgets and fills in defaults.
func (c *BudgetConfig) check() error {
	bad := func(v float64) bool { return v < 0 || math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case c.TaskTokens < 0:
		return fmt.Errorf("engine: config: Budgets.TaskTokens %d: must not be negative (0: no limit)", c.TaskTokens)
	case c.AgentTokens < 0:
		return fmt.Errorf("engine: config: Budgets.AgentTokens %d: must not be negative (0: no limit)", c.AgentTokens)
	case bad(c.TaskCost):
		return fmt.Errorf("engine: config: Budgets.TaskCost %v: must be a number not below 0 (0: no limit)", c.TaskCost)
	case c.OperatorDailyTokens < 0:
		return fmt.Errorf("engine: config: Budgets.OperatorDailyTokens %d: must not be negative (0: no limit)", c.OperatorDailyTokens)
	case c.RaiseTokens < 0:
		return fmt.Errorf("engine: config: Budgets.RaiseTokens %d: must not be negative", c.RaiseTokens)
	case bad(c.RaiseCost):
		return fmt.Errorf("engine: config: Budgets.RaiseCost %v: must be a number not below 0", c.RaiseCost)
	}
	for _, m := range slices.Sorted(maps.Keys(c.Prices)) {
		p := c.Prices[m]
		if bad(p.Prompt) || bad(p.Completion) || bad(p.Cached) {
			return fmt.Errorf("engine: config: Budgets.Prices[%q]: prompt, completion and cached must be numbers not below 0", m)
		}
	}
	if c.TaskCost > 0 && len(c.Prices) == 0 {
		return errors.New("engine: config: Budgets.TaskCost: a cost budget needs Budgets.Prices (the price of each model)")
	}
	return nil
}

// cost is what a call's usage cost with the given model; 0 without a price.
func (c *BudgetConfig) cost(model string, u Usage) float64 {
	p, ok := c.Prices[cmp.Or(model, c.DefaultModel)]
	if !ok {
		if p, ok = c.Prices["*"]; !ok {
			return 0
		}
	}
	cached := min(u.CachedTokens, u.PromptTokens)
	return (float64(u.PromptTokens-cached)*p.Prompt + float64(cached)*cmp.Or(p.Cached, p.Prompt) +
		float64(u.CompletionTokens)*p.Completion) / 1e6
}

// BudgetLimits sets a task's limits (add_task, set_budget): a field left out
// keeps its value (the MAS's default for a new task); 0 means no limit.
type BudgetLimits struct {
	Tokens      *int     `json:"tokens,omitempty" jsonschema:"the task's token budget: total tokens of all its LLM calls; 0: no limit"`
	AgentTokens *int     `json:"agent_tokens,omitempty" jsonschema:"the token budget of each agent in the task; 0: no limit"`
	Cost        *float64 `json:"cost,omitempty" jsonschema:"the task's cost budget in the price table's currency (needs the server's price table); 0: no limit"`
}

// check names the field and the problem of a bad limit.
func (l *BudgetLimits) check(field string, prices bool) error {
	if l == nil {
		return nil
	}
	switch {
	case l.Tokens != nil && *l.Tokens < 0:
		return errf(ErrInvalid, "%s.tokens: %d: must not be negative (0: no limit)", field, *l.Tokens)
	case l.AgentTokens != nil && *l.AgentTokens < 0:
		return errf(ErrInvalid, "%s.agent_tokens: %d: must not be negative (0: no limit)", field, *l.AgentTokens)
	case l.Cost != nil && (*l.Cost < 0 || math.IsNaN(*l.Cost) || math.IsInf(*l.Cost, 0)):
		return errf(ErrInvalid, "%s.cost: %v: must be a number not below 0 (0: no limit)", field, *l.Cost)
	case l.Cost != nil && *l.Cost > 0 && !prices:
		return errf(ErrInvalid, "%s.cost: no price table is configured, so no cost can be counted; set a token budget instead", field)
	}
	return nil
}

func (l *BudgetLimits) applyTo(b *TaskBudget) {
	if l == nil {
		return
	}
	if l.Tokens != nil {
		b.Tokens = *l.Tokens
	}
	if l.AgentTokens != nil {
		b.AgentTokens = *l.AgentTokens
	}
	if l.Cost != nil {
		b.Cost = *l.Cost
	}
}

// TaskBudget is a task's limits and what counts against them (beyond the
// spec). The task's own tokens are its usage.total_tokens.
type TaskBudget struct {
	// Tokens, AgentTokens and Cost are the limits; 0: none.
	Tokens      int     `json:"tokens,omitempty"`
	AgentTokens int     `json:"agent_tokens,omitempty"`
	Cost        float64 `json:"cost,omitempty"`
	// AgentUsed is the tokens each agent used in the task, CostUsed what
	// its calls cost (metered while any budget or price is set).
	AgentUsed map[string]int `json:"agent_tokens_used,omitempty"`
	CostUsed  float64        `json:"cost_used,omitempty"`
	// Day and DayTokens are the task's tokens on that UTC day (for its
	// operator's daily budget).
	Day       string `json:"day,omitempty"`
	DayTokens int    `json:"day_tokens,omitempty"`
	// Held says why the task is paused for its budget; HeldFor is "task"
	// (its own limits) or "daily" (its operator's).
	Held    string    `json:"held,omitempty"`
	HeldFor string    `json:"held_for,omitempty"`
	HeldAt  time.Time `json:"held_at,omitzero"`
}

func (b TaskBudget) clone() TaskBudget {
	c := b
	if b.AgentUsed != nil {
		c.AgentUsed = make(map[string]int, len(b.AgentUsed))
		for k, v := range b.AgentUsed {
			c.AgentUsed[k] = v
		}
	}
	return c
}

// BudgetDay is an operator's raise of their daily budget, for one day.
type BudgetDay struct {
	Day    string `json:"day"`
	Tokens int    `json:"raised_tokens"`
}

// budgetQuestions tracks the open budget questions: task ID -> the cancel
// of the goroutine waiting for its answer.
type budgetQuestions struct {
	mu   sync.Mutex
	open map[string]context.CancelFunc
	// held maps each task held for its budget to a channel closed when
	// the hold ends: LLM calls of its steps already running wait on it.
	held map[string]chan struct{}
	// daily serialises the holds of the daily budget, and asking marks
	// the operators with an open daily question: an operator gets one
	// question however many tasks reach it, or are added past it.
	daily  sync.Mutex
	asking map[string]string // operator -> task of its daily question; guarded by daily
	// asked maps each task whose budget question is being asked to the
	// question's message ID; guarded by mu.
	asked map[string]string
}

// setAsked records the message of the task's budget question.
func (q *budgetQuestions) setAsked(taskID, messageID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.asked == nil {
		q.asked = map[string]string{}
	}
	q.asked[taskID] = messageID
}

// forgetAsked forgets the task's budget question messageID, unless a
// question asked since (askBudget asks anew) took its place.
func (q *budgetQuestions) forgetAsked(taskID, messageID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.asked[taskID] == messageID {
		delete(q.asked, taskID)
	}
}

// DailyQuestion returns the question that asks the operator op about
// their daily budget, while it is asked: the task it is asked in and its
// message ID. Every task the daily budget holds waits on its answer.
func (s *System) DailyQuestion(op string) (taskID, messageID string, ok bool) {
	s.budgets.daily.Lock()
	taskID = s.budgets.asking[op]
	s.budgets.daily.Unlock()
	if taskID == "" {
		return "", "", false
	}
	s.budgets.mu.Lock()
	messageID = s.budgets.asked[taskID]
	s.budgets.mu.Unlock()
	return taskID, messageID, messageID != ""
}

func (q *budgetQuestions) set(taskID string, cancel context.CancelFunc) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.open == nil {
		q.open = map[string]context.CancelFunc{}
	}
	if old := q.open[taskID]; old != nil {
		old()
	}
	q.open[taskID] = cancel
}

// drop cancels the task's open question, if any, and lets its held calls
// go (the hold is over, or the task ended).
func (q *budgetQuestions) drop(taskID string) {
	q.mu.Lock()
	c := q.open[taskID]
	delete(q.open, taskID)
	q.mu.Unlock()
	if c != nil {
		c()
	}
	q.unblock(taskID)
}

// block makes the task's LLM calls wait until unblock.
func (q *budgetQuestions) block(taskID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held == nil {
		q.held = map[string]chan struct{}{}
	}
	if q.held[taskID] == nil {
		q.held[taskID] = make(chan struct{})
	}
}

func (q *budgetQuestions) unblock(taskID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ch := q.held[taskID]; ch != nil {
		close(ch)
		delete(q.held, taskID)
	}
}

// blocked returns the channel a call of the task waits on (nil: none).
func (q *budgetQuestions) blocked(taskID string) chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held[taskID]
}

// BeforeCall implements llm.CallGate for a running step: an LLM call of a
// task held for its budget (a step that was already running when the hold
// began, or its repair round) waits until the hold ends, the agent shown
// waiting meanwhile. So no LLM call of a held task starts.
func (o *stepOutage) BeforeCall(ctx context.Context) error {
	a, s := o.a, o.a.sys
	ch := s.budgets.blocked(o.step.TaskID)
	if ch == nil {
		return nil
	}
	t, ok := s.task(o.step.TaskID)
	reason := ""
	if ok {
		t.mu.Lock()
		reason = t.st.Budget.Held
		t.mu.Unlock()
	}
	a.showWaiting(o.step, PausedBudget, s.text("budget_waiting", map[string]any{"TaskID": o.step.TaskID, "Reason": reason}))
	select {
	case <-ch:
	case <-ctx.Done():
	}
	a.waitingOver(o.step, PausedBudget)
	if ok {
		t.mu.Lock()
		ended := t.endedLocked()
		t.mu.Unlock()
		if ended {
			return errf(ErrEnded, "task_id %q: ended while the call waited for its budget", o.step.TaskID)
		}
	}
	return ctx.Err()
}

// spent is a usage's tokens (total_tokens, or prompt + completion where an
// endpoint leaves the total out).
func spent(u Usage) int { return max(u.TotalTokens, u.PromptTokens+u.CompletionTokens) }

func (s *System) day() string { return s.now().UTC().Format(time.DateOnly) }

// newTaskBudget is a new task's budget: the MAS's defaults, overridden by
// the request's limits — an operator's only: an agent's add_task gets the
// defaults, or it could lift them.
func (s *System) newTaskBudget(l *BudgetLimits, human bool) (TaskBudget, error) {
	if l != nil && !human {
		return TaskBudget{}, errf(ErrForbidden, "budget: only an operator sets a task's budget; leave it out (the task gets the MAS's default budget)")
	}
	if err := l.check("budget", len(s.cfg.Budgets.Prices) > 0); err != nil {
		return TaskBudget{}, err
	}
	c := &s.cfg.Budgets
	b := TaskBudget{Tokens: c.TaskTokens, AgentTokens: c.AgentTokens, Cost: c.TaskCost}
	l.applyTo(&b)
	return b, nil
}

// BudgetLeft is what remains of a task's limits; nil where it has none.
type BudgetLeft struct {
	Tokens *int     `json:"tokens,omitempty"`
	Cost   *float64 `json:"cost,omitempty"`
}

// BudgetLeft returns what remains of the task's token and cost limits
// (nil when it has neither).
func (t *TaskState) BudgetLeft() *BudgetLeft {
	b := &t.Budget
	if b.Tokens == 0 && b.Cost == 0 {
		return nil
	}
	var l BudgetLeft
	if b.Tokens > 0 {
		n := max(b.Tokens-spent(t.Usage), 0)
		l.Tokens = &n
	}
	if b.Cost > 0 {
		c := max(b.Cost-b.CostUsed, 0)
		l.Cost = &c
	}
	return &l
}

// metered reports whether the task's usage is counted against budgets.
func (s *System) metered(b *TaskBudget) bool {
	c := &s.cfg.Budgets
	return b.Tokens > 0 || b.AgentTokens > 0 || b.Cost > 0 || c.OperatorDailyTokens > 0 || len(c.Prices) > 0
}

// meter counts a finished step's LLM usage against its task's budgets and
// holds the task (or its operator's tasks) when a limit is reached. It runs
// on the agent's goroutine after the step is applied and before the agent
// can start another step.
func (s *System) meter(agentID string, step *StepState, view *AgentState, out *Output) {
	if out == nil || out.Usage.Calls == 0 {
		return
	}
	t, ok := s.task(step.TaskID)
	if !ok {
		return
	}
	model := ""
	if view.LLMConfig != nil {
		model = view.LLMConfig.Model
	}
	tokens, cost, day := spent(out.Usage), s.cfg.Budgets.cost(model, out.Usage), s.day()
	t.mu.lockToRead()
	metered := s.metered(&t.st.Budget)
	t.mu.unlockRead()
	if !metered {
		// Nothing to count: the step goes on without waiting for the
		// task's write in flight (its report's).
		s.enforceBudgets(t)
		return
	}
	t.mu.Lock()
	b := &t.st.Budget
	if s.metered(b) {
		if b.AgentUsed == nil {
			b.AgentUsed = map[string]int{}
		}
		b.AgentUsed[agentID] += tokens
		b.CostUsed += cost
		if b.Day != day {
			b.Day, b.DayTokens = day, 0
		}
		b.DayTokens += tokens
		// Committed as the lock is released. The tokens are spent
		// whatever the store says: a refused write keeps the count in
		// memory, to be stored by the next write (retried), not withdrawn
		// and forgotten by the budget.
		t.changedLocked(Event{Kind: EventLLMCall, AgentID: agentID, StepID: step.StepID, Detail: "budget"})
		t.mu.keepLocked()
	}
	t.mu.Unlock()
	s.enforceBudgets(t)
}

// enforceBudgets holds the task when a limit of its own or its operator's
// daily budget is reached.
func (s *System) enforceBudgets(t *task) {
	// Read without waiting for the task's write in flight (its last
	// step's report): what is read decides a hold, which is stored
	// before anyone is told.
	t.mu.lockToRead()
	op := cmp.Or(t.st.Operator, s.operatorID)
	t.mu.unlockRead()
	if reason := s.dailyReached(op); reason != "" {
		s.holdOperator(op, reason, t)
		return
	}
	t.mu.lockToRead()
	reason := s.reachedLocked(t)
	t.mu.unlockRead()
	if reason != "" {
		s.hold(t, holdTask, reason, true)
	}
}

func (t *task) id() string {
	t.mu.lockToRead()
	defer t.mu.unlockRead()
	return t.st.TaskID
}

// reachedLocked says which of the task's own limits its usage has reached
// ("" when none). t.mu must be held.
func (s *System) reachedLocked(t *task) string {
	b := &t.st.Budget
	if used := spent(t.st.Usage); b.Tokens > 0 && used >= b.Tokens {
		return s.text("budget_reached", map[string]any{"Kind": "tokens", "Used": used, "Limit": b.Tokens})
	}
	if b.Cost > 0 && b.CostUsed >= b.Cost {
		return s.text("budget_reached", map[string]any{"Kind": "cost", "Used": fmt.Sprintf("%.4f", b.CostUsed), "Limit": fmt.Sprintf("%.4f", b.Cost)})
	}
	if b.AgentTokens > 0 {
		for _, id := range slices.Sorted(maps.Keys(b.AgentUsed)) {
			if used := b.AgentUsed[id]; used >= b.AgentTokens {
				return s.text("budget_reached", map[string]any{"Kind": "agent", "Agent": id, "Used": used, "Limit": b.AgentTokens})
			}
		}
	}
	return ""
}

// dayUsed is the tokens an operator's tasks used today.
func (s *System) dayUsed(op, day string) int {
	n := 0
	for _, t := range s.allTasks() {
		t.mu.lockToRead()
		if cmp.Or(t.st.Operator, s.operatorID) == op && t.st.Budget.Day == day {
			n += t.st.Budget.DayTokens
		}
		t.mu.unlockRead()
	}
	return n
}

// dayLimit is an operator's daily budget today (0: none).
func (s *System) dayLimit(op, day string) int {
	limit := s.cfg.Budgets.OperatorDailyTokens
	if limit == 0 {
		return 0
	}
	if h, ok := s.agent(op); ok {
		h.mu.Lock()
		if d := h.st.BudgetDay; d != nil && d.Day == day {
			limit += d.Tokens
		}
		h.mu.Unlock()
	}
	return limit
}

// dailyReached says why an operator's daily budget is reached ("" when it
// is not, or there is none).
func (s *System) dailyReached(op string) string {
	day := s.day()
	limit := s.dayLimit(op, day)
	if limit == 0 {
		return ""
	}
	if used := s.dayUsed(op, day); used >= limit {
		return s.text("budget_reached", map[string]any{"Kind": "daily", "Used": used, "Limit": limit, "Day": day})
	}
	return ""
}

// holdOperator holds every open task of the operator for the daily
// budget; one question goes to the operator, in the task that reached it
// (or the first one held).
func (s *System) holdOperator(op, reason string, trigger *task) {
	s.budgets.daily.Lock()
	defer s.budgets.daily.Unlock()
	// The reason was read before this lock: a raise of today's budget
	// since (raiseBudget, under the same lock) must win over it.
	if reason = s.dailyReached(op); reason == "" {
		return
	}
	var held []*task
	for _, t := range s.allTasks() {
		t.mu.Lock()
		mine := cmp.Or(t.st.Operator, s.operatorID) == op
		t.mu.Unlock()
		if mine && s.hold(t, holdDaily, reason, false) {
			held = append(held, t)
		}
	}
	if len(held) == 0 || s.budgets.asking[op] != "" {
		return
	}
	ask := held[0]
	for _, t := range held {
		if t == trigger {
			ask = t
		}
	}
	s.askDailyLocked(op, ask)
}

// askDailyLocked asks the operator's daily question in task t: the one
// question of all its tasks held for the daily budget.
// s.budgets.daily must be held.
func (s *System) askDailyLocked(op string, t *task) {
	if s.budgets.asking == nil {
		s.budgets.asking = map[string]string{}
	}
	s.budgets.asking[op] = t.id()
	s.askBudget(t)
}

// reaskDailyLocked asks the operator's daily question again, in the first
// of its tasks still held for the daily budget (none: nobody is asked):
// the task it was asked in ended unanswered, and its question went with
// it. s.budgets.daily must be held.
func (s *System) reaskDailyLocked(op string) {
	for _, t := range s.allTasks() {
		t.mu.Lock()
		held := cmp.Or(t.st.Operator, s.operatorID) == op && t.st.Budget.HeldFor == holdDaily && !t.endedLocked()
		t.mu.Unlock()
		if held {
			s.askDailyLocked(op, t)
			return
		}
	}
}

// hold pauses a task for its budget and, with ask, asks its operator. It
// reports whether the task was held now (not the base task, not an ended
// one, not one held already).
func (s *System) hold(t *task, kind, reason string, ask bool) bool {
	// A hold the store refuses must not be kept and stored later, with
	// nobody held: what is on its way is stored first (lockDurable), and
	// a refusal leaves the task as it was, to be held at its next step.
	if err := t.mu.lockDurable(); err != nil {
		s.log.Error("budget: could not hold a task", "task", t.id(), "err", err)
		return false
	}
	if t.st.Base || t.endedLocked() || t.st.Budget.Held != "" {
		t.mu.Unlock()
		return false
	}
	if kind == holdTask {
		// The reason was read before this lock: a set_budget since may
		// have raised or removed the limit (the hold would then ask about
		// a limit that no longer exists), or another step's usage changed
		// which one is reached.
		if reason = s.reachedLocked(t); reason == "" {
			t.mu.Unlock()
			return false
		}
	}
	b := &t.st.Budget
	b.Held, b.HeldFor, b.HeldAt = reason, kind, s.now()
	id := t.st.TaskID
	t.changedLocked(Event{Detail: "budget_reached"})
	err := t.mu.syncLocked()
	t.mu.Unlock()
	if err != nil {
		s.log.Error("budget: could not hold a task", "task", id, "err", err)
		return false
	}
	s.budgets.block(id)
	if _, err := s.pauseTaskFor(t, SystemSender, true, true, PausedBudget, nil); err != nil {
		s.log.Error("budget: could not pause a task", "task", id, "err", err)
	}
	s.log.Warn("task paused: budget reached", "task", id, "reason", reason)
	if ask {
		s.askBudget(t)
	}
	return true
}

// askBudget asks the task's operator, on a goroutine of its own, to raise
// the budget or end the task, and acts on the answer.
func (s *System) askBudget(t *task) {
	if s.isClosed() {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	id := t.id()
	s.budgets.set(id, cancel)
	s.goTracked(func() {
		defer cancel()
		s.budgetQuestion(ctx, t)
		// A daily question that was answered, or whose task is no longer
		// held for the daily budget, is settled: the next task past the
		// daily budget asks anew. One whose task ended (cancelled, its
		// question withdrawn with it) was not answered: the operator's
		// other tasks held for the daily budget still wait on it, so it is
		// asked again in one of them.
		t.mu.Lock()
		ended := t.endedLocked()
		settled := ctx.Err() == nil || ended || t.st.Budget.HeldFor != holdDaily
		t.mu.Unlock()
		s.budgets.daily.Lock()
		defer s.budgets.daily.Unlock()
		if op := s.operatorOf(id); settled && s.budgets.asking[op] == id {
			delete(s.budgets.asking, op)
			if ended {
				s.reaskDailyLocked(op)
			}
		}
	})
}

// budgetQuestion asks until the operator's answer settles the hold: a
// raise that leaves a limit reached is asked about again. A question the
// store refuses (an outage) is asked again, with a growing jittered
// backoff, until the store takes it, the hold lifts or the task ends: the
// held task waits on it, and nothing else would ask it before a restart.
func (s *System) budgetQuestion(ctx context.Context, t *task) {
	refused := 0
	// wait waits out a refusal of the store's, longer each time; false:
	// the question is over meanwhile (ctx).
	wait := func() bool {
		refused++
		return llm.Sleep(ctx, llm.Backoff(refused, retryFirst, retryMax)) == nil
	}
	for ctx.Err() == nil {
		t.mu.Lock()
		st := t.st
		b := st.Budget
		t.mu.Unlock()
		if b.Held == "" || stateEnded(st.ExecutionState) {
			return
		}
		op := cmp.Or(st.Operator, s.operatorID)
		if b.HeldFor == holdDaily {
			// Worked out again, not read from the hold: a question asked
			// again (its task ended, a restart) may come on a new day,
			// when the daily spend starts again, or with another limit.
			if b.Held = s.dailyReached(op); b.Held == "" {
				if !s.liftDaily(op, t) && !wait() {
					// The store refused the release (logged): tried
					// again after a while, not in a busy loop.
					return
				}
				continue
			}
			s.heldFor(t, b.Held)
		}
		data := map[string]any{
			"TaskID": st.TaskID, "TaskName": st.TaskName, "Reason": b.Held, "Daily": b.HeldFor == holdDaily,
			"Used": spent(st.Usage),
		}
		maps.Copy(data, s.raises(&b))
		q := s.text("budget_question", data)
		// The question does not time out: the hold waits for its answer
		// however long the operator is away. It ends with the answer, the
		// hold's release (set_budget) or the task's end (ctx).
		var asked string
		posted := withPosted(ctx, func(messageID string) {
			asked = messageID
			s.budgets.setAsked(st.TaskID, messageID)
		})
		ans, err := s.Ask(posted, OperatorQuestion{TaskID: st.TaskID, StageID: NoRelative, AgentID: st.TaskManager, Question: q, Timeout: NoQuestionTimeout})
		s.budgets.forgetAsked(st.TaskID, asked)
		if err != nil {
			if ctx.Err() != nil || !refusedByStore(err) {
				return
			}
			s.log.Error("budget: the store refused the budget question: the task stays held, and the question is asked again",
				"task", st.TaskID, "tries", refused+1, "err", err)
			if !wait() {
				return
			}
			continue
		}
		if refused > 0 {
			s.log.Info("budget: the question the store refused was asked once it took it", "task", st.TaskID, "tries", refused+1)
			refused = 0
		}
		approve, tokens, ok := readBudgetAnswer(ans)
		switch {
		case !ok:
			s.log.Info("budget answer not understood: asking again", "task", st.TaskID, "answer", ans.Text)
			continue
		case !approve:
			s.declineBudget(t, op, b)
			return
		}
		if err := s.raiseBudget(t, op, tokens); err != nil {
			s.log.Error("budget: raise failed", "task", st.TaskID, "err", err)
			return
		}
	}
}

// refusedByStore reports whether Ask's error is the store's refusal of the
// question (an outage, to be waited out), not the engine's (the task
// ended or is gone, the MAS closed).
func refusedByStore(err error) bool {
	_, engine := errors.AsType[*Error](err)
	return !engine && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrTooLarge)
}

// liftDaily releases the operator's tasks held for a daily budget no
// longer reached (a new day began since the hold: the daily spend starts
// again), as an answer that raised it would: nobody is asked about it. It
// reports whether t is no longer held for the daily budget (false: the
// store refused its release).
func (s *System) liftDaily(op string, t *task) bool {
	s.budgets.daily.Lock()
	defer s.budgets.daily.Unlock()
	s.log.Info("budget: the daily budget no longer holds (a new day): the operator's tasks are released, not asked about", "operator", op, "day", s.day())
	s.releaseOperator(op)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.Budget.HeldFor != holdDaily || t.endedLocked()
}

// heldFor records the reason a task held for its budget is held now (the
// one its question gives).
func (s *System) heldFor(t *task, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := &t.st.Budget; b.Held != "" && b.Held != reason && !t.endedLocked() {
		b.Held = reason
		t.changedLocked(Event{Detail: "budget_reached"})
	}
}

// raises tells the operator how much "approve" adds to each limit
// (RaiseTokens, RaiseAgent, RaiseCost; "" where there is no such limit).
func (s *System) raises(b *TaskBudget) map[string]any {
	c := &s.cfg.Budgets
	out := map[string]any{"RaiseTokens": "", "RaiseAgent": "", "RaiseCost": ""}
	if b.HeldFor == holdDaily {
		out["RaiseTokens"] = strconv.Itoa(cmp.Or(c.RaiseTokens, c.OperatorDailyTokens))
		return out
	}
	if b.Tokens > 0 {
		out["RaiseTokens"] = strconv.Itoa(cmp.Or(c.RaiseTokens, b.Tokens))
	}
	if b.AgentTokens > 0 {
		out["RaiseAgent"] = strconv.Itoa(cmp.Or(c.RaiseTokens, b.AgentTokens))
	}
	if b.Cost > 0 {
		out["RaiseCost"] = fmt.Sprintf("%.4f", cmp.Or(c.RaiseCost, b.Cost))
	}
	return out
}

var firstNumber = regexp.MustCompile(`\d[\d_,]*`)

// readBudgetAnswer reads an operator's answer to a budget question: a
// decision (answer_approval: approve, with arguments {"tokens": N} or a
// number in the note), or free text ("yes 50000", "no"). ok is false when
// it says neither.
func readBudgetAnswer(a Answer) (approve bool, tokens int, ok bool) {
	text := a.Text
	if d := a.Decision; d != nil {
		if v, found := d.Arguments["tokens"]; found {
			switch n := v.(type) {
			case float64:
				tokens = int(n)
			case int:
				tokens = n
			case string:
				tokens, _ = strconv.Atoi(strings.TrimSpace(n))
			}
		}
		if tokens <= 0 {
			tokens = number(d.Note)
		}
		return d.Approve, max(tokens, 0), true
	}
	low := strings.ToLower(strings.TrimSpace(text))
	for _, w := range []string{"no", "deny", "finish", "stop", "end", "cancel", "否", "不", "拒绝", "结束"} {
		if strings.HasPrefix(low, w) {
			return false, 0, true
		}
	}
	tokens = number(low)
	for _, w := range []string{"yes", "y", "ok", "approve", "raise", "是", "好", "同意", "提高"} {
		if strings.HasPrefix(low, w) {
			return true, tokens, true
		}
	}
	return tokens > 0, tokens, tokens > 0
}

func number(s string) int {
	m := firstNumber.FindString(s)
	n, err := strconv.Atoi(strings.NewReplacer(",", "", "_", "").Replace(m))
	if err != nil {
		return 0
	}
	return n
}

// raiseBudget raises every reached limit of a held task (for a daily hold:
// the operator's budget today) by tokens, or by the default step, and
// releases what no longer needs holding.
func (s *System) raiseBudget(t *task, op string, tokens int) error {
	c := &s.cfg.Budgets
	t.mu.Lock()
	daily := t.st.Budget.HeldFor == holdDaily
	t.mu.Unlock()
	if daily {
		day := s.day()
		used, limit := s.dayUsed(op, day), s.dayLimit(op, day)
		raised := max(limit, used) + cmp.Or(tokens, c.RaiseTokens, c.OperatorDailyTokens) - c.OperatorDailyTokens
		h, ok := s.agent(op)
		if !ok {
			return errf(ErrNotFound, "operator %q: no such agent", op)
		}
		// Under the daily lock: the raise and its releases happen between
		// two holdOperator calls, not during one (which would hold a task
		// the raise has just released).
		s.budgets.daily.Lock()
		defer s.budgets.daily.Unlock()
		h.mu.Lock()
		h.st.BudgetDay = &BudgetDay{Day: day, Tokens: raised}
		h.changedLocked(Event{Detail: "daily_budget"})
		err := h.mu.syncLocked()
		h.mu.Unlock()
		if err != nil {
			return err
		}
		s.releaseOperator(op)
		return nil
	}
	t.mu.Lock()
	b := &t.st.Budget
	if used := spent(t.st.Usage); b.Tokens > 0 && used >= b.Tokens {
		b.Tokens = max(b.Tokens, used) + cmp.Or(tokens, c.RaiseTokens, b.Tokens)
	}
	if b.AgentTokens > 0 {
		most := 0
		for _, n := range b.AgentUsed {
			most = max(most, n)
		}
		if most >= b.AgentTokens {
			b.AgentTokens = max(b.AgentTokens, most) + cmp.Or(tokens, c.RaiseTokens, b.AgentTokens)
		}
	}
	if b.Cost > 0 && b.CostUsed >= b.Cost {
		b.Cost = max(b.Cost, b.CostUsed) + cmp.Or(c.RaiseCost, b.Cost)
	}
	t.changedLocked(Event{Detail: "budget_raised"})
	err := t.mu.syncLocked()
	t.mu.Unlock()
	if err != nil {
		return err
	}
	s.release(t)
	return nil
}

// release lets a held task go when none of its limits (nor its operator's
// daily budget) is reached any more. It reports whether it did.
func (s *System) release(t *task) bool {
	op := s.operatorOf(t.id())
	daily := s.dailyReached(op)
	t.mu.Lock()
	b := &t.st.Budget
	if b.Held == "" || t.endedLocked() {
		t.mu.Unlock()
		return false
	}
	if reason := s.reachedLocked(t); reason != "" || daily != "" {
		// Still reached: the reason is the current one, and a task held
		// for the daily budget that holds it no more is held for its own.
		b.Held = cmp.Or(reason, daily)
		if daily == "" {
			b.HeldFor = holdTask
		}
		t.changedLocked(Event{Detail: "budget_reached"})
		t.mu.Unlock()
		return false
	}
	b.Held, b.HeldFor, b.HeldAt = "", "", time.Time{}
	id := t.st.TaskID
	t.changedLocked(Event{Detail: "budget_released"})
	err := t.mu.syncLocked()
	t.mu.Unlock()
	if err != nil {
		s.log.Error("budget: could not release a task", "task", id, "err", err)
		return false
	}
	s.budgets.unblock(id)
	// Its own pause only: one an operator took over stays.
	if _, err := s.pauseTaskFor(t, SystemSender, true, false, PausedBudget, nil); err != nil {
		s.log.Error("budget: could not resume a task", "task", id, "err", err)
	}
	s.log.Info("task resumed: budget raised", "task", id)
	return true
}

// releaseOperator releases the operator's tasks held for the daily budget.
// One that a limit of its own still holds is asked about that limit: the
// daily question no longer settles it.
func (s *System) releaseOperator(op string) {
	for _, t := range s.allTasks() {
		t.mu.Lock()
		mine := cmp.Or(t.st.Operator, s.operatorID) == op && t.st.Budget.HeldFor == holdDaily
		t.mu.Unlock()
		if !mine || s.release(t) {
			continue
		}
		t.mu.Lock()
		own := t.st.Budget.HeldFor == holdTask && t.st.Budget.Held != "" && !t.endedLocked()
		t.mu.Unlock()
		if own {
			s.askBudget(t)
		}
	}
}

// declineBudget acts on an operator's "no": a task held for its own budget
// ends as failed with the reason; tasks held for the daily budget stay
// paused (resume_task works again the next day).
func (s *System) declineBudget(t *task, op string, b TaskBudget) {
	if b.HeldFor == holdDaily {
		s.log.Info("daily budget not raised: the operator's tasks stay paused", "operator", op)
		return
	}
	reason := s.text("budget_declined", map[string]any{"Reason": b.Held})
	if _, err := s.endTask(t, op, true, StateFailed, reason, op); err != nil && !errors.Is(err, ErrEnded) {
		s.log.Error("budget: could not end a task whose operator declined", "task", t.id(), "err", err)
	}
}

// setBudget is manage_task set_budget: an operator sets a task's limits.
// A task held for its budget resumes once none is reached; one that now
// reaches a limit is held.
func (s *System) setBudget(t *task, human bool, l *BudgetLimits) (*SetBudgetResult, error) {
	if !human {
		return nil, errf(ErrForbidden, "set_budget is for operators: an agent cannot raise its own budget")
	}
	if l == nil || (l.Tokens == nil && l.AgentTokens == nil && l.Cost == nil) {
		return nil, errf(ErrInvalid, "budget: is empty; give tokens, agent_tokens or cost (0: no limit)")
	}
	if err := l.check("budget", len(s.cfg.Budgets.Prices) > 0); err != nil {
		return nil, err
	}
	t.mu.Lock()
	id := t.st.TaskID
	switch {
	case t.st.Base:
		t.mu.Unlock()
		return nil, errf(ErrInvalid, "task_id %q: the base task has no budget of its own (the operator's daily budget counts it)", id)
	case t.endedLocked():
		t.mu.Unlock()
		return nil, errf(ErrEnded, "task_id %q: has already ended (%s)", id, t.st.ExecutionState)
	}
	b := &t.st.Budget
	l.applyTo(b)
	t.changedLocked(Event{Detail: "budget_set"})
	if err := t.mu.syncLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	held := b.Held != ""
	t.mu.Unlock()
	if held {
		if s.release(t) {
			s.budgets.drop(id)
		}
	} else {
		s.enforceBudgets(t)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return &SetBudgetResult{Budget: t.st.Budget.clone(), Held: t.st.Budget.Held, Paused: t.st.Paused, TaskID: id}, nil
}

// mayResume refuses resume_task while the task's budget is reached, and
// ends a hold that no longer applies (a new day for the daily budget).
func (s *System) mayResume(t *task) error {
	op := s.operatorOf(t.id())
	daily := s.dailyReached(op)
	t.mu.Lock()
	reason := cmp.Or(s.reachedLocked(t), daily)
	held := t.st.Budget.Held != ""
	id, base := t.st.TaskID, t.st.Base
	t.mu.Unlock()
	if base {
		return nil
	}
	if reason != "" {
		return errf(ErrInvalid, "task_id %q: its budget is reached (%s): raise it first (manage_task set_budget, or answer the budget question in your inbox)", id, reason)
	}
	if held {
		t.mu.Lock()
		t.st.Budget.Held, t.st.Budget.HeldFor, t.st.Budget.HeldAt = "", "", time.Time{}
		t.changedLocked(Event{Detail: "budget_released"})
		err := t.mu.syncLocked()
		t.mu.Unlock()
		if err != nil {
			return err
		}
		s.budgets.drop(id)
	}
	return nil
}

// reaskBudgets asks again, after a restart, about the tasks held for their
// budget (the questions asked before it expired with the process).
func (s *System) reaskBudgets() {
	asked := map[string]bool{}
	for _, t := range s.allTasks() {
		t.mu.Lock()
		b, ended, op := t.st.Budget, t.endedLocked(), cmp.Or(t.st.Operator, s.operatorID)
		t.mu.Unlock()
		if b.Held == "" || ended || (b.HeldFor == holdDaily && asked[op]) {
			continue
		}
		s.budgets.block(t.id())
		if b.HeldFor == holdDaily {
			asked[op] = true
			s.budgets.daily.Lock()
			s.askDailyLocked(op, t)
			s.budgets.daily.Unlock()
			continue
		}
		s.askBudget(t)
	}
}

// resumeReleased resumes, at a restore, the tasks paused for a budget that
// no longer holds them: a crash came between the release's write and the
// resume's. Nothing else would resume them (supervision passes paused
// tasks by), and their operator was told the budget was raised.
func (s *System) resumeReleased() {
	for _, t := range s.allTasks() {
		st := t.brief()
		ended := stateEnded(st.ExecutionState)
		if !st.Paused || st.PausedFor != PausedBudget || st.Budget.Held != "" || ended {
			continue
		}
		if _, err := s.pauseTaskFor(t, SystemSender, true, false, PausedBudget, nil); err != nil {
			s.log.Error("budget: restore: could not resume a task whose budget was raised", "task", st.TaskID, "err", err)
			continue
		}
		s.log.Info("task resumed: its budget was raised before the restart", "task", st.TaskID)
	}
}

// budgetShown is the task's budget for ask_info (nil when it has none and
// nothing was metered).
func (t *TaskState) budgetShown() *TaskBudget {
	if t.Budget.Tokens == 0 && t.Budget.AgentTokens == 0 && t.Budget.Cost == 0 && len(t.Budget.AgentUsed) == 0 {
		return nil
	}
	b := t.Budget.clone()
	return &b
}

// writeBudget writes a task's usage and budget lines for ask_info.
func writeBudget(b *strings.Builder, t TaskInfo) {
	if t.Usage.Calls > 0 {
		fmt.Fprintf(b, "- usage: %d tokens (%d prompt, %d cached, %d completion) in %d LLM calls\n",
			spent(t.Usage), t.Usage.PromptTokens, t.Usage.CachedTokens, t.Usage.CompletionTokens, t.Usage.Calls)
	}
	bu := t.Budget
	if bu == nil {
		return
	}
	var parts []string
	if bu.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens (%d left)", bu.Tokens, *t.BudgetLeft.Tokens))
	}
	if bu.AgentTokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens per agent", bu.AgentTokens))
	}
	if bu.Cost > 0 {
		parts = append(parts, fmt.Sprintf("cost %.4f (%.4f used, %.4f left)", bu.Cost, bu.CostUsed, *t.BudgetLeft.Cost))
	}
	if len(parts) > 0 {
		fmt.Fprintf(b, "- budget: %s\n", strings.Join(parts, "; "))
	}
	if len(bu.AgentUsed) > 0 {
		var used []string
		for _, id := range slices.Sorted(maps.Keys(bu.AgentUsed)) {
			used = append(used, fmt.Sprintf("%s %d", id, bu.AgentUsed[id]))
		}
		fmt.Fprintf(b, "- tokens per agent: %s\n", strings.Join(used, ", "))
	}
	if bu.Held != "" {
		fmt.Fprintf(b, "- paused for its budget: %s\n", bu.Held)
	}
}
