package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mas-mcp/mas-mcp/internal/secret"
)

// Config configures a System. Zero values mean the documented defaults.
type Config struct {
	// Texts renders the engine's own texts. Required.
	Texts Texts
	// Skills maps skill names to their executors. A step whose skill has no
	// executor fails with a reason.
	Skills map[string]Executor
	// Tool runs every step of type "tool" (spec §4.2). Nil: tool steps fail
	// with a reason saying no downstream MCP servers are configured.
	Tool Executor
	// Tools describes the downstream MCP servers (nil: none).
	Tools ToolCatalog
	// SkillGuides maps skill names to the use guide shown by ask_info
	// skills_and_tools.
	SkillGuides map[string]string
	// Templates are the agent configurations that can be instantiated
	// directly (spec §3.11 available_agents_config). Each needs Template set
	// to its name.
	Templates []AgentConfig
	// ManagerTemplate names the template of the MAS's first manager agent
	// (spec §1.3.1). Default "manager".
	ManagerTemplate string
	// OperatorName names the operator's HumanAgent. Default "operator".
	OperatorName string
	// BaseTaskName and BaseTaskIntention describe the base task (spec §1.1).
	BaseTaskName      string
	BaseTaskIntention string
	// BaseStageGoal is the manager's goal in the base task's one stage.
	BaseStageGoal string

	// WaitTimeout bounds how long an agent waits for a reply before its step
	// lock is released (beyond the spec). Default 10 minutes.
	WaitTimeout time.Duration
	// StageStepBudget is how many steps an agent may run in one stage before
	// it is led to its summary. Default 60.
	StageStepBudget int
	// StageReflectionBudget is how many reflections an agent may run in one
	// stage before its next reflection becomes a summary. Default 6.
	StageReflectionBudget int
	// UnstagedStepBudget is how many steps an agent may run in a row
	// outside any stage (the base task, no_relative steps) without new
	// input (a message, an operator's interrupt). Default 100.
	UnstagedStepBudget int
	// MessageChainLimit is how many messages between agents may follow
	// one another (each sent after the one its sender last took, in the
	// same task and stage) with no message from an operator or the engine
	// (Message.Chain); a message past it is not sent, and its step fails
	// saying so. Default 100.
	MessageChainLimit int
	// MaxStageCounts bounds each agent's stage counts (AgentState.
	// StageCounts: what it ran in each stage and the chain of the last
	// message it took there, for the budgets above). Making one more at
	// the bound sheds those of ended stages and tasks first; only when
	// none is left does a live one go, with a warning (stage_counts.go).
	// Default 256.
	MaxStageCounts int
	// SummaryAttempts is how many failed summary steps make an agent
	// "failed" in a stage (so the stage can still complete). Default 2.
	SummaryAttempts int
	// RetryStageLimit is how many times one stage may be retried
	// (retry_stage, spec §2.2.2), counting retries of its retries.
	// Default 3.
	RetryStageLimit int

	// ProbeLLM, when set, asks the LLM endpoint once whether it answers
	// (nil: it does). While a task is paused because its steps gave up
	// waiting for the endpoint, it is asked every LLMProbeInterval
	// (default 1 minute), and the task resumes when it answers
	// (endpoint.go). Without it such a task resumes when any other call
	// gets an answer, or by resume_task.
	ProbeLLM         func(context.Context) error
	LLMProbeInterval time.Duration

	// StallTimeout is how long a task that has not ended may stay quiet —
	// no step to run or running, no LLM or tool call in flight, no wait a
	// timeout will release — before its manager is told what is
	// outstanding (supervision, beyond the spec). Default 3 minutes.
	StallTimeout time.Duration
	// StallNotices is how many such notices a task gets without progress
	// before it is marked failed. Default 2. The base task is never
	// failed; its manager is told instead.
	StallNotices int

	// MaxTextChars bounds every text an agent produces as it is taken in
	// (an LLM's summary or message, a tool's result, each string of a
	// step's result): what is longer is cut there with a visible note.
	// Default 16,000 characters.
	MaxTextChars int
	// MaxDocumentBytes bounds the stored size of an agent or task
	// document: past it, the oldest finished steps' results (and the
	// oldest shared-info entries) are shortened. It must stay below the
	// store's message limit (1 MiB on NATS). Default 640 KiB.
	MaxDocumentBytes int
	// MemoryMaxEntries and MemoryMaxChars cap each agent's persistent
	// memory (spec §9.3) in each view, the entries a step sees (its task
	// owner's, applyMemoryLocked): an add past either is refused and the
	// agent is told to consolidate; nothing is dropped. Defaults 30
	// entries and 6,000 characters (every entry of a view is in every
	// prompt of the agent there). The whole memory is bounded by half of
	// MaxDocumentBytes.
	MemoryMaxEntries int
	MemoryMaxChars   int
	// Budgets limits what tasks' LLM calls may spend (budget_tokens.go).
	Budgets BudgetConfig
	// Secrets are the MAS's own secrets (the LLM API key, the store's
	// credentials, operators' tokens and passwords): every text taken in
	// — from operators, models and tools — is scrubbed of them, each
	// replaced with Redacted, so that none enters a task, an agent, a
	// message, the store, a log line or a prompt (secrets.go). Secrets
	// shorter than secret.MinLen (8 bytes) are ignored, here as in every
	// layer: they would redact common words (internal/secret).
	Secrets []string

	// Store persists every change (nil: memory only).
	Store Store
	// Trail records messages, instructions and operator actions (nil: off; trail.go).
	Trail Trail
	// Logger receives the engine's logs (nil: discarded).
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	if cfg.Texts == nil {
		return cfg, errors.New("engine: config: Texts is required")
	}
	if cfg.ManagerTemplate == "" {
		cfg.ManagerTemplate = "manager"
	}
	if cfg.OperatorName == "" {
		cfg.OperatorName = "operator"
	}
	// The base task's texts come from the prompt set, so that they are in
	// its language and its name is the one its system prompt uses.
	if cfg.BaseTaskName == "" {
		cfg.BaseTaskName = cfg.Texts.Text("base_task_name", nil)
	}
	if cfg.BaseTaskIntention == "" {
		cfg.BaseTaskIntention = cfg.Texts.Text("base_task_intention", nil)
	}
	if cfg.BaseStageGoal == "" {
		cfg.BaseStageGoal = cfg.Texts.Text("base_stage_goal", nil)
	}
	if cfg.WaitTimeout < 0 || cfg.StageStepBudget < 0 || cfg.StageReflectionBudget < 0 || cfg.UnstagedStepBudget < 0 || cfg.SummaryAttempts < 0 ||
		cfg.RetryStageLimit < 0 || cfg.StallTimeout < 0 || cfg.StallNotices < 0 || cfg.MaxTextChars < 0 || cfg.MaxDocumentBytes < 0 ||
		cfg.MemoryMaxEntries < 0 || cfg.MemoryMaxChars < 0 || cfg.LLMProbeInterval < 0 || cfg.MessageChainLimit < 0 || cfg.MaxStageCounts < 0 {
		return cfg, errors.New("engine: config: WaitTimeout, StageStepBudget, StageReflectionBudget, UnstagedStepBudget, SummaryAttempts, RetryStageLimit, StallTimeout, StallNotices, MaxTextChars, MaxDocumentBytes, MemoryMaxEntries, MemoryMaxChars, LLMProbeInterval, MessageChainLimit and MaxStageCounts must not be negative")
	}
	if err := cfg.Budgets.check(); err != nil {
		return cfg, err
	}
	cfg.RetryStageLimit = cmp.Or(cfg.RetryStageLimit, 3)
	cfg.UnstagedStepBudget = cmp.Or(cfg.UnstagedStepBudget, 100)
	cfg.MessageChainLimit = cmp.Or(cfg.MessageChainLimit, 100)
	cfg.MaxStageCounts = cmp.Or(cfg.MaxStageCounts, 256)
	cfg.StallTimeout = cmp.Or(cfg.StallTimeout, 3*time.Minute)
	cfg.StallNotices = cmp.Or(cfg.StallNotices, 2)
	cfg.LLMProbeInterval = cmp.Or(cfg.LLMProbeInterval, time.Minute)
	cfg.MaxTextChars = cmp.Or(cfg.MaxTextChars, 16000)
	cfg.MaxDocumentBytes = cmp.Or(cfg.MaxDocumentBytes, 640<<10)
	cfg.MemoryMaxEntries = cmp.Or(cfg.MemoryMaxEntries, 30)
	cfg.MemoryMaxChars = cmp.Or(cfg.MemoryMaxChars, 6000)
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = 10 * time.Minute
	}
	if cfg.StageStepBudget == 0 {
		cfg.StageStepBudget = 60
	}
	if cfg.StageReflectionBudget == 0 {
		cfg.StageReflectionBudget = 6
	}
	if cfg.SummaryAttempts == 0 {
		cfg.SummaryAttempts = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for i, t := range cfg.Templates {
		if t.Template == "" {
			return cfg, fmt.Errorf("engine: config: Templates[%d]: Template (its name) is empty", i)
		}
	}
	return cfg, nil
}

// System is the MAS (spec §1.3): it owns every task and agent, applies
// executors' outputs (SyncState) and delivers messages (Message Dispatcher).
type System struct {
	cfg     Config
	log     *slog.Logger
	bus     Bus
	secrets *secret.List // from cfg.Secrets (secrets.go)

	// fixed at Start
	baseTaskID  string
	baseStageID string
	managerID   string
	operatorID  string

	ctx    context.Context
	cancel context.CancelFunc
	// reportsOnTheirWay counts the step reports tasks are storing
	// (storeReport).
	reportsOnTheirWay atomic.Int64
	// storeRefusing holds the tasks whose operator was told the store
	// refuses their writes (storeReport), until one of their reports is
	// stored.
	storeRefusing sync.Map
	// storeCtx is for store writes: not cancelled with ctx, so the writes
	// of the steps Close interrupts still land (the store is closed after
	// the System; its client bounds each call). Close cancels it last
	// (storeCancel), once every goroutine it tracks has ended, to end the
	// writes of retries still under way.
	storeCtx    context.Context
	storeCancel context.CancelFunc
	wg          sync.WaitGroup

	waits waitGraph
	// paused holds the IDs of paused tasks (a copy of their Paused flag
	// that agents read without taking the task's mutex).
	paused sync.Map
	// ended holds the IDs of ended tasks (a copy of their ended state,
	// marked once it is stored and before their finish_task instructions
	// are sent): agents read it without taking the task's mutex, and
	// start no step of an ended task and take no message of it but its
	// instructions, whichever comes first, the instruction or the work.
	// It holds only tasks of the registry (tasks), which keeps every task
	// for the process's life, so it grows no further than the registry
	// (TestEndedSetStaysWithinTheRegistry). Should tasks ever leave the
	// registry, their marks must go with them, and isEnded must then read
	// a task it no longer knows as ended (today, an unknown task is one
	// not registered yet, and reads as not ended).
	ended sync.Map
	// stagesEnded holds the ended stages (stageKey) of the tasks that
	// have not ended, marked before the stage end's pass over the
	// operators' inboxes (stageEnded): an operator reads it under its own
	// mutex, without the task's, and takes a question of an ended stage
	// as expired (receiveHuman). A task's end drops its stages (ended
	// covers them).
	stagesEnded sync.Map
	sup         supervisor
	outage      outageTracker
	refused     refusalTracker
	budgets     budgetQuestions
	// servers tracks the outages of downstream MCP servers that tool
	// calls wait out (tool_outage.go).
	servers serverOutages

	confirmMu sync.Mutex
	confirms  map[string]chan Message // waiting ID -> AskOperator call waiting on it
	// questionForms holds the forms of the questions Ask is asking, by
	// message ID (operator_questions.go).
	questionForms sync.Map

	access access // the admins (visibility.go)

	mu         sync.RWMutex // guards the fields below
	started    bool
	closed     bool
	tasks      map[string]*task
	taskOrder  []string
	agents     map[string]*agent
	agentOrder []string
	// operatorOrder lists the operators (HumanAgents) among agentOrder,
	// in its order: who may read a task is asked at every step's start
	// (readers), which must not walk every agent of the MAS. Agents are
	// never deleted, so it is only appended to, with agentOrder (enroll;
	// a restore enrolls every stored agent).
	operatorOrder []string
}

// New checks cfg and returns a System that is not started yet.
func New(cfg Config) (*System, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	storeCtx, storeCancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &System{
		cfg:         c,
		log:         c.Logger,
		secrets:     secret.New(Redacted, c.Secrets...),
		ctx:         ctx,
		cancel:      cancel,
		storeCtx:    storeCtx,
		storeCancel: storeCancel,
		tasks:       map[string]*task{},
		agents:      map[string]*agent{},
	}
	s.sup.sys = s
	return s, nil
}

// begin marks the System started, once, unless it is closed.
func (s *System) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return errors.New("engine: already started")
	}
	s.started = true
	s.observeQueue()
	return nil
}

// Start brings the MAS up (spec §1.3.1): the operator's HumanAgent, the first
// manager agent from its template, and the base task that never ends.
// Nothing in it calls an LLM: the manager acts when it gets work.
func (s *System) Start() error {
	if err := s.begin(); err != nil {
		return err
	}

	// The base task's IDs are fixed before any agent goroutine can read them.
	s.baseTaskID, s.baseStageID = newID(), newID()
	op, err := s.AddOperator(s.cfg.OperatorName)
	if err != nil {
		return fmt.Errorf("engine: start: operator: %w", err)
	}
	s.operatorID = op
	mgr, err := s.createAgent(AgentConfig{Template: s.cfg.ManagerTemplate}, "")
	if err != nil {
		return fmt.Errorf("engine: start: manager from template %q: %w", s.cfg.ManagerTemplate, err)
	}
	s.managerID = mgr

	now := s.cfg.Now()
	stageID := s.baseStageID
	t := newTaskOwner(s, TaskState{
		TaskID:        s.baseTaskID,
		TaskName:      s.cfg.BaseTaskName,
		TaskIntention: s.cfg.BaseTaskIntention,
		TaskManager:   mgr,
		TaskGroup:     []string{mgr, op},
		StageList: []StageState{{
			StageID:           stageID,
			StageIntention:    s.cfg.BaseTaskIntention,
			AgentAllocation:   map[string]string{mgr: s.cfg.BaseStageGoal},
			ExecutionState:    StateRunning,
			EveryAgentState:   map[string]string{mgr: AgentIdle},
			CompletionSummary: map[string]string{},
			StartedAt:         now,
		}},
		SharedInfoPool:         []SharedInfo{},
		CommunicationQueue:     []Message{},
		SharedConversationPool: []Message{},
		ExecutionState:         StateRunning,
		Base:                   true,
		Operator:               op,
		CreatedAt:              now,
		UpdatedAt:              now,
	})
	t.st.StageList[0].TaskID = t.st.TaskID
	if err := s.registerTask(t); err != nil {
		return fmt.Errorf("engine: start: base task: %w", err)
	}
	for _, id := range []string{mgr, op} {
		s.deliver(s.instruction("", t.st.TaskID, stageID, id, "", &Instruction{
			UpdateWorkingMemory: &StageRef{TaskID: t.st.TaskID, StageID: stageID},
		}))
	}
	s.log.Info("mas ready", "base_task", t.st.TaskID, "manager", mgr, "operator", op,
		"templates", len(s.cfg.Templates), "skills", len(s.cfg.Skills))
	return nil
}

// Close stops every agent and waits for their goroutines. A step in flight is
// cancelled. Close is safe to call more than once.
func (s *System) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	agents := make([]*agent, 0, len(s.agents))
	for _, a := range s.agents {
		agents = append(agents, a)
	}
	s.mu.Unlock()
	// Agents stop before the MAS's context is cancelled: a loop that saw the
	// cancelled context first would pop its next steps, fail to run them
	// and leave them all "running", to be re-run at the next start.
	s.sup.stop()
	for _, a := range agents {
		a.stop()
	}
	tasks := s.allTasks()
	for _, t := range tasks {
		t.stop()
	}
	s.cancel()
	s.wg.Wait()
	// The retries of refused commits are stopped; one already under way
	// ends with its write, which cancelling the store's context ends:
	// nothing is written after Close.
	s.storeCancel()
	for _, a := range agents {
		a.mu.waitRetries()
	}
	for _, t := range tasks {
		t.mu.waitRetries()
	}
	return nil
}

// BaseTaskID is the base task's ID.
func (s *System) BaseTaskID() string { return s.baseTaskID }

// BaseStageID is the base task's one stage.
func (s *System) BaseStageID() string { return s.baseStageID }

// ManagerID is the first manager agent's ID.
func (s *System) ManagerID() string { return s.managerID }

// OperatorID is the default operator's HumanAgent ID.
func (s *System) OperatorID() string { return s.operatorID }

// Subscribe returns a subscription to change events (see Bus).
func (s *System) Subscribe(buf int) *Subscription { return s.bus.Subscribe(buf) }

// EventSeq is the sequence number of the last event.
func (s *System) EventSeq() uint64 { return s.bus.Seq() }

func (s *System) now() time.Time { return s.cfg.Now() }

func (s *System) text(key string, data any) string { return s.cfg.Texts.Text(key, data) }

func (s *System) task(id string) (*task, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tasks[id]
	return t, ok
}

func (s *System) agent(id string) (*agent, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.agents[id]
	return a, ok
}

// registerTask stores a task and adds it to the MAS. A task the store
// refuses does not exist. Its EventTaskAdded follows its registration: a
// subscriber that looks the task up when told (who may see it, its name)
// finds it.
func (s *System) registerTask(t *task) error {
	if err := t.added(); err != nil {
		// The task does not exist: nothing may write it later (its
		// retries stop with it).
		t.stop()
		return fmt.Errorf("task %s: %w", t.st.TaskID, err)
	}
	s.mu.Lock()
	s.tasks[t.st.TaskID] = t
	s.taskOrder = append(s.taskOrder, t.st.TaskID)
	closing := s.closed
	s.mu.Unlock()
	if closing {
		// Close may have stopped the tasks it found already: this one
		// stops its retries itself.
		t.stop()
	}
	s.publish(Event{Kind: EventTaskAdded, TaskID: t.st.TaskID})
	return nil
}

func (s *System) allTasks() []*task {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*task, 0, len(s.taskOrder))
	for _, id := range s.taskOrder {
		out = append(out, s.tasks[id])
	}
	return out
}

func (s *System) allAgents() []*agent {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*agent, 0, len(s.agentOrder))
	for _, id := range s.agentOrder {
		out = append(out, s.agents[id])
	}
	return out
}

// isClosed reports whether Close was called.
func (s *System) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// template returns the template of that name.
func (s *System) template(name string) (AgentConfig, bool) {
	i := slices.IndexFunc(s.cfg.Templates, func(t AgentConfig) bool { return t.Template == name })
	if i < 0 {
		return AgentConfig{}, false
	}
	return s.cfg.Templates[i], true
}

// Templates returns copies of the agent templates (available_agents_config).
func (s *System) Templates() []AgentConfig {
	out := make([]AgentConfig, len(s.cfg.Templates))
	for i, t := range s.cfg.Templates {
		out[i] = t.clone()
	}
	return out
}

// go starts a goroutine tracked by Close.
func (s *System) goTracked(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}
