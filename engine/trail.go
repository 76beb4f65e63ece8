package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mas-mcp/mas-mcp/internal/secret"
)

// The trail is a durable, append-only record per task of what every agent
// was asked, answered and did (ARCHITECTURE.md "Observability"): every LLM
// call (recorded by the skills), every tool call (the tool executor), every
// message and instruction and every operator action (the engine). Unlike
// step lists it outlives the end of stages and tasks.

// Kinds of trail entries.
const (
	TrailKindLLMCall        = "llm_call"
	TrailKindToolCall       = "tool_call"
	TrailKindMessage        = "message"
	TrailKindInstruction    = "instruction"
	TrailKindOperatorAction = "operator_action"
	// TrailKindStep is a step as it ended (state, result, usage): kept
	// after the step list drops it at the end of its stage. A step its
	// stage's or task's end drops while it runs has one too
	// (trailDroppedLocked); a step dropped before it ran has none.
	TrailKindStep = "step"
)

// TrailKinds lists every kind, for validating filters.
var TrailKinds = []string{TrailKindLLMCall, TrailKindToolCall, TrailKindMessage, TrailKindInstruction, TrailKindOperatorAction, TrailKindStep}

// Trail records entries. Append must not block on slow storage for long
// and must not fail the caller: an implementation logs what it could not
// keep. It must not retain e's pointers after returning.
type Trail interface {
	Append(ctx context.Context, e TrailEntry)
}

// TrailReader reads a task's trail in the order it was appended.
type TrailReader interface {
	// ReadTrail returns the page of entries after q.Cursor matching q's
	// filters, with every body's text filled in. Everything appended
	// before the call is readable by it. A page's NextCursor is
	// TrailCursor of its last entry's Seq, and TrailCursor(e.Seq) of any
	// entry e it returned continues after e (the server ends its pages
	// at the last entry a reader may see).
	ReadTrail(ctx context.Context, q TrailQuery) (TrailPage, error)
}

// TrailEntry is one record of the trail.
type TrailEntry struct {
	// Seq is the entry's position, set by the trail (increasing), across
	// every task: the server does not show it (server/trail_cursors.go).
	Seq uint64 `json:"seq,omitempty"`
	// ID, when set, makes the entry idempotent: an entry appended again
	// with the same ID (a message re-sent after a restart) is kept once.
	ID      string    `json:"id,omitempty"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	TaskID  string    `json:"task_id"`
	StageID string    `json:"stage_id,omitempty"`
	AgentID string    `json:"agent_id,omitempty"`
	StepID  string    `json:"step_id,omitempty"`
	// Skill is the step's executor (a skill name, or a tool server's).
	Skill string `json:"skill,omitempty"`

	LLM     *TrailLLM     `json:"llm,omitempty"`
	Tool    *TrailTool    `json:"tool,omitempty"`
	Message *TrailMessage `json:"message,omitempty"`
	Action  *TrailAction  `json:"action,omitempty"`
	Step    *StepState    `json:"step,omitempty"`
	// Note says what a store had to leave out (an entry over its size bound).
	Note string `json:"note,omitempty"`
}

// TrailBody is a text that may be large (a prompt, an answer, a tool's
// result). A durable trail keeps a large body once, by its hash (Ref), and
// fills Text back in when it is read.
type TrailBody struct {
	Text string `json:"text"`
	// Ref names the stored body ("sha256:…") when it is kept apart.
	Ref string `json:"ref,omitempty"`
	// Size is the text's length in bytes.
	Size int `json:"size"`
}

// Body returns a TrailBody holding s.
func Body(s string) TrailBody { return TrailBody{Text: s, Size: len(s)} }

// JSONBody returns a TrailBody holding v as JSON (empty for nil).
func JSONBody(v any) TrailBody {
	if v == nil {
		return TrailBody{}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Body(fmt.Sprintf("(not JSON: %v)", err))
	}
	return Body(string(b))
}

// TrailLLM is one LLM call of a skill step.
type TrailLLM struct {
	Model string `json:"model,omitempty"`
	// Round is 1 for the first answer, 2 for the repair round.
	Round int `json:"round"`
	// Request is every message sent, in order.
	Request []TrailChat `json:"request"`
	// Answer is the raw answer, reasoning included.
	Answer TrailBody `json:"answer"`
	// Parsed is what the answer became (the step's output, as JSON) when
	// it parsed; ParseError says why it did not.
	Parsed     *TrailBody `json:"parsed,omitempty"`
	ParseError string     `json:"parse_error,omitempty"`
	// Error is the call's failure (no answer).
	Error            string `json:"error,omitempty"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	CachedTokens     int    `json:"cached_tokens"`
	LatencyMS        int64  `json:"latency_ms"`
	// Attempts counts the HTTP requests the call made, retries included.
	Attempts int `json:"attempts"`
}

// TrailChat is one message of an LLM request.
type TrailChat struct {
	Role    string    `json:"role"`
	Content TrailBody `json:"content"`
}

// TrailTool is one call to a downstream MCP server.
type TrailTool struct {
	Server string `json:"server"`
	// Op is "call_tool", "read_resource", "get_prompt" or "describe".
	Op   string `json:"op"`
	Name string `json:"name,omitempty"`
	// Arguments and Result are JSON.
	Arguments  TrailBody      `json:"arguments"`
	Result     TrailBody      `json:"result"`
	IsError    bool           `json:"is_error,omitempty"`
	Error      string         `json:"error,omitempty"`
	DurationMS int64          `json:"duration_ms"`
	Approval   map[string]any `json:"approval,omitempty"`
}

// TrailMessage is a message or an engine instruction.
type TrailMessage struct {
	MessageID       string       `json:"message_id"`
	SenderID        string       `json:"sender_id"`
	Receiver        []string     `json:"receiver"`
	Text            TrailBody    `json:"text"`
	StageRelative   string       `json:"stage_relative,omitempty"`
	NeedReply       bool         `json:"need_reply,omitempty"`
	Waiting         []string     `json:"waiting,omitempty"`
	ReturnWaitingID string       `json:"return_waiting_id,omitempty"`
	Instruction     *Instruction `json:"instruction,omitempty"`
	Decision        *Decision    `json:"decision,omitempty"`
}

// TrailAction is an operator's action: a step of its HumanAgent (spec §7).
type TrailAction struct {
	// Action names it: "task_manager", "agent_manager", "send_message",
	// "interrupt", "cancel_step".
	Action string    `json:"action"`
	Input  TrailBody `json:"input"`
	Result TrailBody `json:"result"`
	Error  string    `json:"error,omitempty"`
}

// Clone returns a deep copy of e (texts are shared: strings are immutable),
// so a trail can keep it without marshalling it on the caller's goroutine.
func (e *TrailEntry) Clone() TrailEntry {
	c := *e
	if e.LLM != nil {
		l := *e.LLM
		l.Request = slices.Clone(l.Request)
		if l.Parsed != nil {
			p := *l.Parsed
			l.Parsed = &p
		}
		c.LLM = &l
	}
	if e.Tool != nil {
		t := *e.Tool
		t.Approval = cloneJSONMap(t.Approval)
		c.Tool = &t
	}
	if e.Message != nil {
		m := *e.Message
		m.Receiver, m.Waiting = slices.Clone(m.Receiver), slices.Clone(m.Waiting)
		m.Instruction, m.Decision = m.Instruction.clone(), cloneDecision(m.Decision)
		if m.Decision != nil {
			m.Decision.Arguments = cloneJSONMap(m.Decision.Arguments)
		}
		c.Message = &m
	}
	if e.Action != nil {
		a := *e.Action
		c.Action = &a
	}
	if e.Step != nil {
		st := e.Step.clone()
		c.Step = &st
	}
	return c
}

// Bodies returns pointers to every body of e, for stores that keep large
// bodies apart.
func (e *TrailEntry) Bodies() []*TrailBody {
	var out []*TrailBody
	if l := e.LLM; l != nil {
		for i := range l.Request {
			out = append(out, &l.Request[i].Content)
		}
		out = append(out, &l.Answer)
		if l.Parsed != nil {
			out = append(out, l.Parsed)
		}
	}
	if t := e.Tool; t != nil {
		out = append(out, &t.Arguments, &t.Result)
	}
	if m := e.Message; m != nil {
		out = append(out, &m.Text)
	}
	if a := e.Action; a != nil {
		out = append(out, &a.Input, &a.Result)
	}
	return out
}

// TrailSubjectToken makes s usable as one token of a NATS subject (and of
// similar keys): dots, wildcards and whitespace become "_", empty "-".
func TrailSubjectToken(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			return '_'
		}
		return r
	}, s)
}

// TrailQuery selects entries of one task's trail.
type TrailQuery struct {
	TaskID string
	// AgentID, StepID and Kind filter when non-empty.
	AgentID string
	StepID  string
	Kind    string
	// Cursor is a page's NextCursor ("" for the first page).
	Cursor string
	// Limit is the page size (0: DefaultTrailPage, at most MaxTrailPage).
	Limit int
}

// Page sizes of ReadTrail.
const (
	DefaultTrailPage = 50
	MaxTrailPage     = 500
)

// TrailPage is one page of a trail.
type TrailPage struct {
	Entries []TrailEntry `json:"entries"`
	// NextCursor continues after the last entry; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Check validates q and returns the sequence after which the page starts
// and the page size.
func (q TrailQuery) Check() (after uint64, limit int, err error) {
	if strings.TrimSpace(q.TaskID) == "" {
		return 0, 0, errf(ErrInvalid, "task_id: is empty")
	}
	if q.Kind != "" && !slices.Contains(TrailKinds, q.Kind) {
		return 0, 0, errf(ErrInvalid, "kind %q: must be one of %s", q.Kind, strings.Join(TrailKinds, ", "))
	}
	if q.Cursor != "" {
		after, err = strconv.ParseUint(q.Cursor, 10, 64)
		if err != nil {
			return 0, 0, errf(ErrInvalid, "cursor %q: is not a cursor this trail returned", q.Cursor)
		}
	}
	switch {
	case q.Limit < 0:
		return 0, 0, errf(ErrInvalid, "limit %d: must not be negative", q.Limit)
	case q.Limit == 0:
		limit = DefaultTrailPage
	default:
		limit = min(q.Limit, MaxTrailPage)
	}
	return after, limit, nil
}

// Matches reports whether e passes q's filters (its task included).
func (q TrailQuery) Matches(e *TrailEntry) bool {
	return e.TaskID == q.TaskID && (q.AgentID == "" || e.AgentID == q.AgentID) &&
		(q.StepID == "" || e.StepID == q.StepID) && (q.Kind == "" || e.Kind == q.Kind)
}

// Cursor is the cursor that continues after seq.
func TrailCursor(seq uint64) string { return strconv.FormatUint(seq, 10) }

// MemoryTrail keeps the trail in memory (in-memory mode and tests). It
// outlives the Systems it is given to, like a MemoryStore.
type MemoryTrail struct {
	mu      sync.Mutex
	entries []memEntry // in append order; entry i has Seq i+1
	ids     map[string]bool
	secrets *secret.List // scrubbed from every entry read (Scrub)
}

// Scrub makes the trail replace each secret (API keys, tokens, passwords)
// in every entry it returns, by internal/secret's rule (those under
// secret.MinLen bytes are ignored, as the engine ignores them).
func (m *MemoryTrail) Scrub(secrets ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.secrets = secret.New(Redacted, slices.Concat(m.secrets.All(), secrets)...)
}

// NewMemoryTrail returns an empty MemoryTrail.
func NewMemoryTrail() *MemoryTrail { return &MemoryTrail{ids: map[string]bool{}} }

// Append implements Trail. It keeps a deep copy of e.
func (m *MemoryTrail) Append(_ context.Context, e TrailEntry) {
	c := e.Clone()
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.ID != "" {
		if m.ids[c.ID] {
			return
		}
		m.ids[c.ID] = true
	}
	c.Seq = uint64(len(m.entries)) + 1
	m.entries = append(m.entries, memEntry{entry: &c})
}

// read returns a copy of an entry kept, scrubbed.
func (m *MemoryTrail) read(me *memEntry, secrets *secret.List) (TrailEntry, error) {
	if secrets.Len() == 0 {
		return me.entry.Clone(), nil
	}
	b, err := json.Marshal(me.entry)
	if err != nil {
		return TrailEntry{}, err
	}
	b = secrets.Bytes(b)
	var e TrailEntry
	err = json.Unmarshal(b, &e)
	return e, err
}

// memEntry is an entry of a MemoryTrail: its JSON, and what queries filter
// on (so a read decodes only what it returns).
type memEntry struct {
	entry *TrailEntry // never changed after Append
}

// ReadTrail implements TrailReader.
func (m *MemoryTrail) ReadTrail(_ context.Context, q TrailQuery) (TrailPage, error) {
	after, limit, err := q.Check()
	if err != nil {
		return TrailPage{}, err
	}
	m.mu.Lock()
	entries, secrets := m.entries, m.secrets
	m.mu.Unlock()
	page := TrailPage{Entries: []TrailEntry{}}
	for i := after; i < uint64(len(entries)); i++ {
		me := &entries[i]
		if !q.Matches(me.entry) {
			continue
		}
		if len(page.Entries) == limit {
			page.NextCursor = TrailCursor(page.Entries[limit-1].Seq)
			break
		}
		e, err := m.read(me, secrets)
		if err != nil {
			return TrailPage{}, fmt.Errorf("trail: entry %d: %w", i+1, err)
		}
		page.Entries = append(page.Entries, e)
	}
	return page, nil
}

// All returns every entry, in order (tests).
func (m *MemoryTrail) All() []TrailEntry {
	m.mu.Lock()
	entries, secrets := m.entries, m.secrets
	m.mu.Unlock()
	out := make([]TrailEntry, 0, len(entries))
	for i := range entries {
		e, _ := m.read(&entries[i], secrets)
		out = append(out, e)
	}
	return out
}

// ReadAllTrail reads every page of a task's trail matching q's filters.
func ReadAllTrail(ctx context.Context, r TrailReader, q TrailQuery, each func(TrailEntry) error) error {
	q.Limit = MaxTrailPage
	for {
		page, err := r.ReadTrail(ctx, q)
		if err != nil {
			return err
		}
		for _, e := range page.Entries {
			if err := each(e); err != nil {
				return err
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		q.Cursor = page.NextCursor
	}
}

// trail appends e when a trail is configured, stamping its time.
func (s *System) trail(e TrailEntry) {
	if s.cfg.Trail == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	s.cfg.Trail.Append(s.storeCtx, e)
}

// trailMessage records a message or an instruction as it is stored.
func (s *System) trailMessage(m *Message) {
	if s.cfg.Trail == nil {
		return
	}
	kind := TrailKindMessage
	if m.Instruction != nil {
		kind = TrailKindInstruction
	}
	stage := m.StageRelative
	if stage == NoRelative {
		stage = ""
	}
	s.trail(TrailEntry{
		ID: "msg/" + m.MessageID, Time: m.Timestamp, Kind: kind, TaskID: m.TaskID, StageID: stage, AgentID: m.SenderID,
		Message: &TrailMessage{
			MessageID: m.MessageID, SenderID: m.SenderID, Receiver: slices.Clone(m.Receiver), Text: Body(m.Message),
			StageRelative: m.StageRelative, NeedReply: m.NeedReply, Waiting: slices.Clone(m.Waiting),
			ReturnWaitingID: m.ReturnWaitingID, Instruction: m.Instruction.clone(), Decision: cloneDecision(m.Decision),
		},
	})
}

func cloneDecision(d *Decision) *Decision {
	if d == nil {
		return nil
	}
	c := *d
	return &c
}

// operatorAction records what an operator (a HumanAgent) did as a step of
// its HumanAgent (spec §7): it returns a function the action's results pass
// through, so a call site stays one line:
//
//	return operatorAction[TaskInstructionResult](s, actorID, taskID, "task_manager", ti)(s.taskInstruction(…))
//
// Actions of LLM agents are not recorded here (their steps' LLM calls are).
func operatorAction[T any](s *System, actorID, taskID, action string, input any) func(T, error) (T, error) {
	return func(res T, err error) (T, error) {
		a, ok := s.agent(actorID)
		if !ok || a.kind != KindHuman {
			return res, err
		}
		// What an operator did, and how it ended, is in the debug log
		// too: a trail may be off, and a reply that "did nothing" is
		// found there (the input is not: it may hold what an operator
		// typed).
		s.log.Debug("operator action", "operator", actorID, "action", action, "task", taskID, "err", err)
		if taskID == "" {
			// add_task: the task is the one it created.
			if r, ok := any(res).(TaskInstructionResult); ok && r.AddTask != nil {
				taskID = r.AddTask.TaskID
			}
		}
		stepID := ""
		if err == nil && action != "send_message" {
			// Spec §7: every human operation is a step of the HumanAgent
			// (send_message records its own): task management as a
			// task_manager step, the rest (agents, interrupt, cancel_step)
			// as agent_manager steps. A refused one changes no state: the
			// trail keeps it, with its error.
			stepID = s.humanStep(a, taskID, action, input, res)
		}
		if s.cfg.Trail == nil {
			return res, err
		}
		if stepID == "" {
			stepID = newID()
		}
		if taskID == "" {
			taskID = s.baseTaskID
		}
		ta := &TrailAction{Action: action, Input: JSONBody(input), Result: JSONBody(res)}
		if err != nil {
			ta.Error = err.Error()
		}
		s.trail(TrailEntry{Kind: TrailKindOperatorAction, TaskID: taskID, AgentID: actorID, StepID: stepID, Skill: action, Action: ta})
		return res, err
	}
}

// humanStep records an operator's task or agent management as a finished
// step of their HumanAgent, in the base task: the task it is about may end
// with it, and the base task keeps a bounded history (baseHistory). It
// returns the step's ID.
func (s *System) humanStep(h *agent, taskID, action string, input, res any) string {
	result := map[string]any{"instruction": input, "task_id": taskID, "result": res}
	what, executor := action, SkillAgentManager
	if action == SkillTaskManager {
		executor = SkillTaskManager
	} else if action != SkillAgentManager {
		result["action"] = action // interrupt, cancel_step
	}
	if taskID != "" {
		what += " (task " + taskID + ")"
	}
	return h.recordDone(s.baseTaskID, s.baseStageID, StepSpec{
		StepIntention: "Operator: " + what, Type: StepSkill, Executor: executor,
	}, result)
}

// stopInput is what an operator's interrupt or cancel_step asked.
type stopInput struct {
	AgentID     string `json:"agent_id"`
	StepID      string `json:"step_id,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Instruction string `json:"instruction,omitempty"`
}

// runningTask is the task of an agent's running step ("" when none).
func (s *System) runningTask(agentID string) string {
	if s.cfg.Trail == nil {
		return ""
	}
	a, ok := s.agent(agentID)
	if !ok {
		return ""
	}
	_, task := a.runningStep()
	return task
}

// trailStep records a step as it ended (the agent's mutex is held; the
// trail copies what it keeps before returning).
func (s *System) trailStep(st *StepState) {
	if s.cfg.Trail == nil {
		return
	}
	s.trail(TrailEntry{Time: st.FinishedAt, Kind: TrailKindStep, TaskID: st.TaskID, StageID: st.StageID,
		AgentID: st.AgentID, StepID: st.StepID, Skill: st.Executor, Step: st})
}
