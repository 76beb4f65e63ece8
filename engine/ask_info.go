package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// DefaultTeamID names the MAS's one team: every agent (spec §1.1 Team; the
// spec leaves teams unimplemented, §3.11 7).
const DefaultTeamID = "default"

// QueryResult answers an ask_info query: markdown for a model, and the same
// facts as structured data for programs.
type QueryResult struct {
	Type     string `json:"type"`
	Markdown string `json:"markdown"`
	Data     any    `json:"data"`
}

// TaskInfo is a task as queries show it: its state without the full
// conversation log (its length is given instead).
type TaskInfo struct {
	TaskID             string       `json:"task_id"`
	TaskName           string       `json:"task_name"`
	TaskIntention      string       `json:"task_intention"`
	TaskManager        string       `json:"task_manager"`
	TaskGroup          []string     `json:"task_group"`
	ExecutionState     string       `json:"execution_state"`
	TaskSummary        string       `json:"task_summary"`
	StageList          []StageState `json:"stage_list"`
	SharedInfoPool     []SharedInfo `json:"shared_info_pool"`
	ConversationLength int          `json:"conversation_length"`
	// Conversation is the tail of the conversation the asker may see: the
	// newest conversationShown messages (engine instructions left out).
	Conversation []Message `json:"conversation,omitempty"`
	Base         bool      `json:"base,omitempty"`
	// Usage, Budget and BudgetLeft are what the task's LLM calls used and
	// may still use (budget_tokens.go).
	Usage      Usage       `json:"usage"`
	Budget     *TaskBudget `json:"budget,omitempty"`
	BudgetLeft *BudgetLeft `json:"budget_left,omitempty"`
}

// sharedInfoShown bounds the shared-info entries a query shows (the newest);
// conversationShown the messages of its conversation tail, each cut to
// messageShown characters.
const (
	sharedInfoShown   = 30
	conversationShown = 12
	messageShown      = 500
)

func taskInfo(t TaskState) TaskInfo {
	pool := t.SharedInfoPool
	if len(pool) > sharedInfoShown {
		pool = pool[len(pool)-sharedInfoShown:]
	}
	var tail []Message
	for i := len(t.SharedConversationPool) - 1; i >= 0 && len(tail) < conversationShown; i-- {
		m := t.SharedConversationPool[i]
		if m.Instruction != nil {
			continue
		}
		m.Message = Truncate(m.Message, messageShown)
		tail = append(tail, m)
	}
	slices.Reverse(tail)
	return TaskInfo{
		TaskID: t.TaskID, TaskName: t.TaskName, TaskIntention: t.TaskIntention,
		TaskManager: t.TaskManager, TaskGroup: t.TaskGroup, ExecutionState: t.ExecutionState,
		TaskSummary: t.TaskSummary, StageList: t.StageList, SharedInfoPool: pool,
		ConversationLength: len(t.SharedConversationPool), Conversation: tail, Base: t.Base,
		Usage: t.Usage, Budget: t.budgetShown(), BudgetLeft: t.BudgetLeft(),
	}
}

// Query answers an ask_info query for askerID from snapshots (spec §3.11,
// §2.5), with what askerID may see. It never blocks on a working agent.
func (s *System) Query(askerID string, q AskInfoQuery) (*QueryResult, error) {
	return s.query(askerID, []string{askerID}, q)
}

// query answers askerID's query with what every one of viewers may see:
// a task is shown only if each may see it, and of it, and of an agent,
// only what each may see (the rules of TaskFor and AgentFor). An
// operator's query is its own view; an agent's ask_info step is answered
// with its task's readers' (askFromAgent).
func (s *System) query(askerID string, viewers []string, q AskInfoQuery) (*QueryResult, error) {
	q = scrubbed(s.secrets, q)
	typ := strings.TrimSpace(q.Type)
	res := &QueryResult{Type: typ}
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", s.text("ask_info_result", map[string]any{"Type": typ}))
	switch typ {
	case QueryManagedTaskAndStageInfo, QueryAssignedTaskAndStageInfo:
		var out []TaskInfo
		for _, t := range s.allTasks() {
			ts := t.read()
			if !s.allowedAll(viewers, &ts) {
				continue
			}
			s.filterTaskAll(viewers, &ts)
			managed := ts.TaskManager == askerID
			if typ == QueryManagedTaskAndStageInfo && !managed {
				continue
			}
			if typ == QueryAssignedTaskAndStageInfo {
				if !slices.Contains(ts.TaskGroup, askerID) {
					continue
				}
				// Only the stages this agent works in (spec §3.11 2).
				ts.StageList = slices.DeleteFunc(ts.StageList, func(st StageState) bool {
					_, in := st.AgentAllocation[askerID]
					return !in
				})
			}
			out = append(out, taskInfo(ts))
		}
		if len(out) == 0 {
			b.WriteString(s.text("ask_info_none", nil) + "\n")
		}
		for _, ti := range out {
			s.writeTask(&b, ti)
		}
		res.Data = nonNil(out)
	case QueryTaskInfo:
		t, err := s.queryTask(viewers, q.TaskID)
		if err != nil {
			return nil, err
		}
		ts := t.read()
		s.filterTaskAll(viewers, &ts) // conversation_length counts what the viewers may see
		ti := taskInfo(ts)
		s.writeTask(&b, ti)
		res.Data = ti
	case QueryStageInfo:
		st, err := s.queryStage(viewers, q.TaskID, q.StageID)
		if err != nil {
			return nil, err
		}
		s.writeStage(&b, st)
		res.Data = st
	case QueryAvailableAgentsConfig:
		tpls := s.Templates()
		for _, tp := range tpls {
			b.WriteString(s.text("ask_info_template", map[string]any{"Template": tp.Template, "Role": tp.Role,
				"Skills": strings.Join(tp.Skills, ", "), "Tools": s.orNone(tp.Tools), "Profile": oneLine(tp.Profile)}) + "\n")
		}
		if len(tpls) == 0 {
			b.WriteString(s.text("ask_info_none", nil) + "\n")
		}
		b.WriteString("\n" + s.text("ask_info_template_hint", nil) + "\n")
		res.Data = nonNil(tpls)
	case QueryAllAgents, QueryTeamAgents:
		if typ == QueryTeamAgents && q.TeamID != "" && q.TeamID != DefaultTeamID {
			return nil, errf(ErrNotFound, "team_id %q: no such team (the MAS has one team, %q)", q.TeamID, DefaultTeamID)
		}
		var briefs []AgentBrief
		for _, a := range s.allAgents() {
			briefs = append(briefs, a.readBrief())
		}
		s.writeBriefs(&b, briefs, nil)
		res.Data = nonNil(briefs)
	case QueryTaskAgents:
		if _, err := s.queryTask(viewers, q.TaskID); err != nil {
			return nil, err
		}
		briefs := s.briefs(s.taskGroup(q.TaskID))
		s.writeBriefs(&b, briefs, nil)
		res.Data = nonNil(briefs)
	case QueryStageAgents:
		st, err := s.queryStage(viewers, q.TaskID, q.StageID)
		if err != nil {
			return nil, err
		}
		briefs := s.briefs(slices.Sorted(maps.Keys(st.AgentAllocation)))
		s.writeBriefs(&b, briefs, st.AgentAllocation)
		res.Data = nonNil(briefs)
	case QueryAgent:
		if len(q.AgentID) == 0 {
			return nil, errf(ErrInvalid, "agent_id: is empty; give one agent ID or a list")
		}
		var states []AgentState
		hidden := make([][]string, len(viewers))
		for i, v := range viewers {
			hidden[i] = s.hiddenContents(v)
		}
		for _, id := range q.AgentID {
			a, ok := s.agent(id)
			if !ok {
				return nil, errf(ErrNotFound, "agent_id %q: no such agent", id)
			}
			st := a.read()
			for i, v := range viewers {
				s.filterAgent(v, &st, hidden[i])
			}
			st.ConversationPool = nil // an operator's conversations are its own
			states = append(states, st)
			if step := strings.TrimSpace(q.StepID); step != "" {
				if err := s.writeStep(&b, st, step); err != nil {
					return nil, err
				}
				continue
			}
			s.writeAgent(&b, st)
		}
		res.Data = states
	case QuerySkillsAndTools:
		b.WriteString(s.text("ask_info_skills", nil) + "\n")
		for _, n := range SkillNames {
			fmt.Fprintf(&b, "- **%s**: %s\n", n, oneLine(s.cfg.SkillGuides[n]))
		}
		b.WriteString("\n" + s.text("ask_info_tools", nil) + "\n")
		tools := map[string]string{}
		if s.cfg.Tools != nil {
			tools = s.cfg.Tools.ToolGuides()
		}
		for _, n := range slices.Sorted(maps.Keys(tools)) {
			fmt.Fprintf(&b, "- **%s**: %s\n", n, oneLine(tools[n]))
		}
		if len(tools) == 0 {
			b.WriteString(s.text("ask_info_no_tools", nil) + "\n")
		}
		res.Data = map[string]any{"skills": maps.Clone(s.cfg.SkillGuides), "tools": tools}
	case "":
		return nil, errf(ErrInvalid, "type: is empty; one of %s", strings.Join(QueryTypes, ", "))
	default:
		return nil, errf(ErrInvalid, "type %q: must be one of %s", typ, strings.Join(QueryTypes, ", "))
	}
	res.Markdown = strings.TrimRight(b.String(), "\n")
	return res, nil
}

// askFromAgent runs an ask_info step's query and answers it with a message
// that releases the wait it engaged (spec §3.11): the answer is digested by
// a process_message step that runs next. A bad query fails the step instead.
//
// The answer is a message of the step's task, and the step's result and
// the answer's step are the agent's steps in it: whoever reads the task
// reads them. So the query is answered with what every operator who may
// read the task may see (readers), not with the agent's own rights: an
// agent working for several operators must not carry one's tasks, or what
// it did and learnt in them, into another's (a confused deputy). A task the
// readers may not see is refused as their own ask_info would refuse it.
func (s *System) askFromAgent(a *agent, step *StepState, q AskInfoQuery) error {
	res, err := s.query(a.id, s.readers(step.TaskID), q)
	if err != nil {
		return err
	}
	waitID := derivedID(step.StepID, "ask_wait")
	now := s.now()
	if !s.engagedOrAnswered(a, step.TaskID, []string{waitID})[waitID] {
		a.addWaits([]Wait{{
			WaitingID: waitID, For: SystemSender, TaskID: step.TaskID, StageID: step.StageID,
			Since: now, Deadline: now.Add(s.cfg.WaitTimeout),
		}})
	}
	// The answer belongs to the asking step's stage (the spec says
	// no_relative), so the stage's later steps see it in their history.
	m := s.newMessage(derivedID(step.StepID, "ask_answer"), step.TaskID, SystemSender, []string{a.id}, res.Markdown, step.StageID)
	m.ReturnWaitingID = waitID
	m.NotNewInput = true
	if err := s.post(m); err != nil {
		a.unwait(waitID)
		return err
	}
	return nil
}

func (s *System) queryTask(viewers []string, id string) (*task, error) {
	if strings.TrimSpace(id) == "" {
		return nil, errf(ErrInvalid, "task_id: is empty")
	}
	t, ok := s.task(id)
	if !ok {
		return nil, errf(ErrNotFound, "task_id %q: no such task", id)
	}
	for _, v := range viewers {
		if !s.Visible(v, id) {
			return nil, notVisible(id, v)
		}
	}
	return t, nil
}

func (s *System) queryStage(viewers []string, taskID, id string) (StageState, error) {
	t, err := s.queryTask(viewers, taskID)
	if err != nil {
		return StageState{}, err
	}
	if strings.TrimSpace(id) == "" {
		return StageState{}, errf(ErrInvalid, "stage_id: is empty")
	}
	st, ok := t.storedStage(id)
	if !ok {
		return StageState{}, errf(ErrNotFound, "stage_id %q: no such stage in task %s", id, t.id())
	}
	return st, nil
}

func (s *System) briefs(ids []string) []AgentBrief {
	var out []AgentBrief
	for _, id := range ids {
		if a, ok := s.agent(id); ok {
			out = append(out, a.readBrief())
		}
	}
	return out
}

func (s *System) writeTask(b *strings.Builder, t TaskInfo) {
	fmt.Fprintf(b, "#### task %s — %s\n", t.TaskID, t.TaskName)
	fmt.Fprintf(b, "- task_intention: %s\n- task_manager: %s\n- task_group: %s\n- execution_state: %s\n",
		oneLine(t.TaskIntention), t.TaskManager, strings.Join(t.TaskGroup, ", "), t.ExecutionState)
	if t.TaskSummary != "" {
		fmt.Fprintf(b, "- task_summary: %s\n", t.TaskSummary)
	}
	writeBudget(b, t)
	for _, st := range t.StageList {
		s.writeStage(b, st)
	}
	if len(t.SharedInfoPool) > 0 {
		b.WriteString(s.text("ask_info_pool", nil) + "\n")
		for _, si := range t.SharedInfoPool {
			fmt.Fprintf(b, "  - [%s] %s (%s): %s\n", si.Timestamp.Format("15:04:05"), si.AgentID, si.Role, oneLine(si.Content))
		}
	}
	if len(t.Conversation) > 0 {
		b.WriteString(s.text("ask_info_conversation", map[string]any{"N": len(t.Conversation), "Total": t.ConversationLength}) + "\n")
		for _, m := range t.Conversation {
			fmt.Fprintf(b, "  - [%s] %s → %s: %s\n", m.Timestamp.Format("15:04:05"), m.SenderID, strings.Join(m.Receiver, ", "),
				strings.ReplaceAll(m.Message, "\n", "\n    "))
		}
	}
	b.WriteString("\n")
}

func (s *System) writeStage(b *strings.Builder, st StageState) {
	fmt.Fprintf(b, "- stage %s [%s]: %s\n", st.StageID, st.ExecutionState, oneLine(st.StageIntention))
	for _, id := range slices.Sorted(maps.Keys(st.AgentAllocation)) {
		fmt.Fprintf(b, "  - %s (%s): %s\n", id, orDash(st.EveryAgentState[id]), oneLine(st.AgentAllocation[id]))
		if c, ok := st.CompletionSummary[id]; ok {
			fmt.Fprintf(b, "    completion_summary: %s\n", oneLine(c))
		}
	}
}

func (s *System) writeBriefs(b *strings.Builder, briefs []AgentBrief, goals map[string]string) {
	if len(briefs) == 0 {
		b.WriteString(s.text("ask_info_none", nil) + "\n")
	}
	for _, a := range briefs {
		fmt.Fprintf(b, "- %s: %s — %s (%s, %s)\n", a.AgentID, a.Name, a.Role, a.Kind, a.WorkingState)
		if a.Profile != "" {
			fmt.Fprintf(b, "  profile: %s\n", oneLine(a.Profile))
		}
		fmt.Fprintf(b, "  skills: %s; tools: %s\n", strings.Join(a.Skills, ", "), s.orNone(a.Tools))
		if g, ok := goals[a.AgentID]; ok {
			b.WriteString("  " + s.text("ask_info_stage_goal", map[string]any{"Goal": oneLine(g)}) + "\n")
		}
	}
}

// writeStep writes one step of an agent with its full result (bounded
// only by MaxTextChars, as it was stored).
func (s *System) writeStep(b *strings.Builder, st AgentState, stepID string) error {
	i := slices.IndexFunc(st.AgentStep.StepList, func(sp StepState) bool { return sp.StepID == stepID })
	if i < 0 {
		return errf(ErrNotFound, "step_id %q: agent %s has no such step (finished tasks' and stages' steps are cleaned up)", stepID, st.AgentID)
	}
	sp := st.AgentStep.StepList[i]
	res, _ := json.MarshalIndent(sp.ExecuteResult, "", "  ")
	b.WriteString(s.text("ask_info_step", map[string]any{"StepID": sp.StepID, "AgentName": st.Name,
		"StepIntention": sp.StepIntention, "Executor": sp.Executor, "Type": sp.Type, "State": sp.ExecutionState,
		"TaskID": sp.TaskID, "StageID": sp.StageID, "TextContent": sp.TextContent}))
	fmt.Fprintf(b, "\n```json\n%s\n```\n\n", s.clipText(string(res)))
	return nil
}

// stepLine is one step on one line: state, executor, intention and the
// first words of its result or error.
func stepLine(sp *StepState) string {
	var res string
	if e, ok := sp.ExecuteResult["error"].(string); ok {
		res = "error: " + e
	} else if len(sp.ExecuteResult) > 0 {
		b, _ := json.Marshal(sp.ExecuteResult)
		res = string(b)
	}
	line := fmt.Sprintf("%s [%s] %s: %s", sp.StepID, sp.ExecutionState, sp.Executor, oneLine(sp.StepIntention))
	if res != "" {
		line += " → " + Truncate(strings.Join(strings.Fields(res), " "), 200)
	}
	return line
}

func (s *System) writeAgent(b *strings.Builder, st AgentState) {
	b.WriteString(s.text("ask_info_agent", map[string]any{"AgentID": st.AgentID, "Name": st.Name, "Role": st.Role,
		"Profile": oneLine(st.Profile), "Kind": st.Kind, "WorkingState": st.WorkingState,
		"Skills": strings.Join(st.Skills, ", "), "Tools": s.orNone(st.Tools),
		"Waits": len(st.StepLock), "Pending": len(st.AgentStep.TodoList)}) + "\n")
	wm, _ := json.Marshal(st.WorkingMemory)
	fmt.Fprintf(b, "- working_memory: %s\n", wm)
	for _, k := range slices.Sorted(maps.Keys(st.PersistentMemory)) {
		fmt.Fprintf(b, "- persistent_memory %s: %s\n", k, oneLine(st.PersistentMemory[k]))
	}
	if len(st.AgentStep.StepList) > 0 {
		b.WriteString(s.text("ask_info_steps", nil) + "\n")
		for i := range st.AgentStep.StepList {
			fmt.Fprintf(b, "  - %s\n", stepLine(&st.AgentStep.StepList[i]))
		}
	}
	b.WriteString("\n")
}

func (s *System) orNone(l []string) string {
	if len(l) == 0 {
		return s.text("ask_info_none", nil)
	}
	return strings.Join(l, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// nonNil keeps empty lists as [] in JSON.
func nonNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}
