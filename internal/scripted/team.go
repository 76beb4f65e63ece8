// Package scripted holds scripted "brains" for the fake LLM: they answer
// every skill's request of a whole task, reading all they need (IDs, stage,
// what a message says) from the prompts alone, so they drive the real
// mas-mcp binary from another process as well as an in-process MAS.
//
// It is test infrastructure (used by tests of several packages), written
// against the English prompt set.
package scripted

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
)

// Markers the brain writes into the steps it plans, to recognise them later.
const (
	mkStaff       = "STAFF"
	mkJoin        = "JOIN_TEAM"
	mkAddStages   = "ADD_STAGES"
	mkAskPeer     = "ASK_PEER"
	mkFindOp      = "FIND_OPERATOR"
	mkAskOp       = "ASK_OPERATOR"
	mkFinishStage = "FINISH_STAGE"
	mkFinishTask  = "FINISH_TASK"
)

// OperatorQuestion is what alice asks the operator when AskOperator is set.
const OperatorQuestion = "QUESTION for the operator: which format should the report use?"

// TaskSummary is the manager's finish_task summary.
const TaskSummary = "Both stages done: facts collected and report written."

// Team scripts a manager that staffs a task with alice (a researcher) and
// bob (a writer) and two stages, and workers that think, ask each other
// with need_reply and waiting, reflect and summarise. With AskOperator,
// alice also asks the operator a waiting question in the first stage.
type Team struct {
	// Stages are the stage intentions (default: two).
	Stages []string
	// AskOperator makes alice ask the operator in the first stage and wait.
	AskOperator bool

	mu           sync.Mutex
	operatorSaid []string // what alice read from the operator
}

// NewTeam returns the two-stage team.
func NewTeam() *Team {
	return &Team{Stages: []string{"collect facts", "write the report"}}
}

// OperatorAnswers returns the operator's messages alice has read.
func (t *Team) OperatorAnswers() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.operatorSaid...)
}

// Handle answers one LLM request.
func (t *Team) Handle(c *fakellm.Call) fakellm.Reply {
	switch c.AgentName {
	case "manager":
		return t.manager(c)
	case "alice", "bob":
		return t.worker(c)
	}
	return fakellm.Reply{Status: 500}
}

var (
	uuidRE = `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`
	// created agents, from agent_manager results in the history
	createdRE = regexp.MustCompile(`"agent_id":"(` + uuidRE + `)","name":"(\w+)"`)
	// the operator, from an ask_info task_agents answer in the history
	operatorRE = regexp.MustCompile(`- (` + uuidRE + `): [^\n]*\(human,`)
)

func (t *Team) manager(c *fakellm.Call) fakellm.Reply {
	text := StepText(c.Prompt)
	taskID := Field(c.Prompt, "task_id")
	switch c.Skill {
	case "planning":
		return jsonReply("planned_step", []step{
			skill("ask_info", "See which agents can be created", "ask available_agents_config"),
			skill("agent_manager", "Create the researcher", mkStaff+" alice researcher"),
			skill("agent_manager", "Create the writer", mkStaff+" bob writer"),
			skill("agent_manager", "Add both to the task", mkJoin),
			skill("task_manager", "Split the task into stages", mkAddStages),
		})
	case "ask_info":
		return jsonReply("ask_info", map[string]any{"type": "available_agents_config"})
	case "agent_manager":
		if f := strings.Fields(text); len(f) == 3 && f[0] == mkStaff {
			return jsonReply("agent_instruction", map[string]any{"action": "init_new_agent",
				"agent_config": map[string]any{"template": f[2], "name": f[1]}})
		}
		ids := created(c.Prompt)
		return jsonReply("agent_instruction", map[string]any{"action": "add_task_participant",
			"task_id": taskID, "agents": []string{ids["alice"], ids["bob"]}})
	case "task_manager":
		switch f := strings.Fields(text); {
		case strings.HasPrefix(text, mkAddStages):
			ids := created(c.Prompt)
			var stages []map[string]any
			for _, g := range t.Stages {
				stages = append(stages, map[string]any{"stage_intention": g, "agent_allocation": map[string]string{
					ids["alice"]: "alice's part: " + g, ids["bob"]: "bob's part: " + g}})
			}
			return jsonReply("task_instruction", map[string]any{"action": "add_stage", "task_id": taskID, "stages": stages})
		case len(f) == 2 && f[0] == mkFinishStage:
			return jsonReply("task_instruction", map[string]any{"action": "finish_stage", "task_id": taskID, "stage_id": f[1]})
		case strings.HasPrefix(text, mkFinishTask):
			return jsonReply("task_instruction", map[string]any{"action": "finish_task", "task_id": taskID, "summary": TaskSummary})
		}
	case "process_message":
		msg := StepBody(c.Prompt)
		react := ""
		switch {
		case strings.Contains(msg, "[TaskState] All agents allocated to stage"):
			react = mkFinishStage + " " + Field(c.Prompt, "stage_id")
		case strings.Contains(msg, "[TaskState] The last stage of task"):
			react = mkFinishTask
		}
		if react == "" {
			return text1("process_message", "Noted.")
		}
		return fakellm.Reply{Content: fakellm.Block("process_message", "Judged: "+react) +
			fakellm.Block("react_action", fakellm.JSON(map[string]string{"step_intention": "Carry out my judgement", "text_content": react}))}
	case "decision":
		if strings.HasPrefix(text, mkFinishStage) || strings.HasPrefix(text, mkFinishTask) {
			return jsonReply("decision_step", []step{skill("task_manager", "Manage the task", text)})
		}
		return jsonReply("decision_step", []step{})
	case "reflection":
		return jsonReply("reflection_step", []step{})
	case "summary":
		return text1("summary", "Staffed and staged the task.")
	}
	return fakellm.Reply{Status: 500}
}

func (t *Team) worker(c *fakellm.Call) fakellm.Reply {
	me := c.AgentName
	peer := map[string]string{"alice": "bob", "bob": "alice"}[me]
	text := StepText(c.Prompt)
	switch c.Skill {
	case "planning":
		peerID := regexp.MustCompile(`- (` + uuidRE + `): ` + peer + `'s part`).FindStringSubmatch(c.Prompt)
		if peerID == nil {
			return fakellm.Reply{Status: 500}
		}
		plan := []step{skill("think", "Think about my part", "think about the goal")}
		if t.AskOperator && me == "alice" && strings.Contains(Field(c.Prompt, "stage_goal"), t.Stages[0]) {
			plan = append(plan,
				skill("ask_info", "Find the operator", mkFindOp),
				skill("send_message", "Ask the operator", mkAskOp))
		}
		plan = append(plan, skill("send_message", "Ask my peer", mkAskPeer+" "+peerID[1]))
		return jsonReply("planned_step", plan)
	case "think":
		return text1("_think", me+" thought about it.")
	case "ask_info":
		return jsonReply("ask_info", map[string]any{"type": "task_agents", "task_id": Field(c.Prompt, "task_id")})
	case "send_message":
		stage := Field(c.Prompt, "stage_id")
		switch f := strings.Fields(text); {
		case len(f) == 2 && f[0] == mkAskPeer:
			return jsonReply("send_message", map[string]any{"receiver": []string{f[1]}, "message": "QUESTION from " + me,
				"stage_relative": stage, "need_reply": true, "waiting": true})
		case strings.HasPrefix(text, mkAskOp):
			op := operatorRE.FindStringSubmatch(c.Prompt)
			if op == nil {
				return fakellm.Reply{Status: 500}
			}
			return jsonReply("send_message", map[string]any{"receiver": []string{op[1]}, "message": OperatorQuestion,
				"stage_relative": stage, "need_reply": true, "waiting": true})
		}
		// A reply: the engine sends it to the agent it answers.
		return jsonReply("send_message", map[string]any{"message": "ANSWER from " + me, "stage_relative": stage,
			"need_reply": false, "waiting": false})
	case "process_message":
		body := StepBody(c.Prompt)
		if me == "alice" && !strings.Contains(body, "ANSWER from") && !strings.Contains(body, "Result of ask_info") {
			t.mu.Lock()
			t.operatorSaid = append(t.operatorSaid, body)
			t.mu.Unlock()
		}
		return text1("process_message", me+" read the message.")
	case "reflection":
		return jsonReply("reflection_step", []step{skill("summary", "Summarise", "summarise my part")})
	case "summary":
		return text1("summary", me+" did its part of "+Field(c.Prompt, "stage_id"))
	}
	return fakellm.Reply{Status: 500}
}

// created maps agent names to the IDs agent_manager results reported.
func created(prompt string) map[string]string {
	out := map[string]string{}
	for _, m := range createdRE.FindAllStringSubmatch(prompt, -1) {
		out[m[2]] = m[1]
	}
	return out
}

// StepText is the first line of the current step's text_content.
func StepText(prompt string) string {
	line, _, _ := strings.Cut(StepBody(prompt), "\n")
	return strings.TrimSpace(line)
}

// StepBody is the current step's whole text_content: from the
// "- text_content:" line of the current-step section to the skill's rules
// (which start with "You are").
func StepBody(prompt string) string {
	_, after, ok := strings.Cut(prompt, "- text_content:\n\n")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(after, "\n\nYou are ")
	return strings.TrimSpace(body)
}

// Field extracts "- name: value" (the first such line) from a prompt.
func Field(prompt, name string) string {
	for _, l := range strings.Split(prompt, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "- "+name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// step is a planned step as the brain writes it.
type step struct {
	StepIntention string `json:"step_intention"`
	Type          string `json:"type"`
	Executor      string `json:"executor"`
	TextContent   string `json:"text_content"`
}

func skill(exec, intention, text string) step {
	return step{StepIntention: intention, Type: "skill", Executor: exec, TextContent: text}
}

func text1(tag, body string) fakellm.Reply { return fakellm.Reply{Content: fakellm.Block(tag, body)} }

func jsonReply(tag string, v any) fakellm.Reply {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("scripted: %v", err))
	}
	return fakellm.Reply{Content: "Here is my answer.\n" + fakellm.Block(tag, string(b))}
}
