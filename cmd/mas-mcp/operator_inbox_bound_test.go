package main

// The operator's document at its bound (document_bound_test.go): questions
// awaiting its reply pass it, and each is still shown.

import (
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// operatorLineRE finds the operator in an ask_info task_agents answer.
var operatorLineRE = regexp.MustCompile(`- ([0-9a-f-]{36}): [^\n]*\(human,`)

// TestOperatorSeesEveryQuestionPastTheDocumentBound: in her first stage
// alice asks the operator 20 questions that need a reply, each a model's
// answer of 20,000 emoji (cut to 16,000 characters, 64 KB, as it is taken
// in); on the last one she waits. Sixteen such questions awaiting a reply
// would pass NATS's 1 MiB in the operator's document.
//
// Required ("nothing is shown to a client before the store holds it";
// liveness: a task waits only on someone told): each question the task's
// conversation shows as sent to the operator is in the operator's inbox,
// the one alice waits on above all, and the store never refuses the
// operator's document as too large; after a kill -9 and a restart too.
// (Found by review: questions awaiting a reply were never shed, so from
// the 17th on the operator's writes were refused and retried for ever,
// and the inbox showed 16 of the 20.)
func TestOperatorSeesEveryQuestionPastTheDocumentBound(t *testing.T) {
	t.Parallel()
	const questions = 20
	team := scripted.NewTeam()
	var (
		opID atomic.Value // the operator's agent ID, as alice read it
		last = make(chan string, 1)
	)
	llm := fakellm.New(t)
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		if c.AgentName != "alice" {
			return team.Handle(c)
		}
		if op := operatorLineRE.FindStringSubmatch(c.Prompt); op != nil {
			opID.Store(op[1])
		}
		switch c.Skill {
		case "planning":
			peer := peerRE.FindStringSubmatch(c.Prompt)
			if peer == nil || !strings.Contains(scripted.Field(c.Prompt, "stage_goal"), team.Stages[0]) {
				break
			}
			plan := []map[string]string{planned("ask_info", "FIND_OPERATOR")}
			for i := 1; i <= questions; i++ {
				plan = append(plan, planned("send_message", fmt.Sprintf("ASK_BIG %d", i)))
			}
			plan = append(plan, planned("send_message", "ASK_PEER "+peer[1]))
			return fakellm.Reply{Content: fakellm.Block("planned_step", fakellm.JSON(plan))}
		case "send_message":
			f := strings.Fields(scripted.StepText(c.Prompt))
			if len(f) != 2 || f[0] != "ASK_BIG" {
				break
			}
			op, _ := opID.Load().(string)
			if op == "" {
				return fakellm.Reply{Status: 500}
			}
			if f[1] == fmt.Sprint(questions) {
				select {
				case last <- c.StepID:
				default:
				}
			}
			return fakellm.Reply{Content: fakellm.Block("send_message", fakellm.JSON(map[string]any{
				"receiver": []string{op}, "message": "BIG QUESTION " + f[1] + " " + strings.Repeat("😀", 20000),
				"stage_relative": scripted.Field(c.Prompt, "stage_id"), "need_reply": true, "waiting": f[1] == fmt.Sprint(questions)}))}
		}
		return team.Handle(c)
	})
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL()})
	m.start()
	taskID := addTask(m)

	var lastStep string
	select {
	case lastStep = <-last:
	case <-time.After(waitTimeout):
		t.Fatalf("alice never came to her last question\n%s", m.describeAgents())
	}
	// The message is stored, recorded in the conversation and handed to
	// the operator (synchronously) before the step's end is logged.
	waitLogLine(t, m, "alice's last question to be sent", `"msg":"step done"`, lastStep)

	check := func(when string) {
		t.Helper()
		s := m.snapshot(taskID)
		shown := map[string]bool{}
		for _, msg := range s.conv {
			if strings.HasPrefix(msg.Message, "BIG QUESTION ") {
				shown[strings.Fields(msg.Message)[2]] = true
			}
		}
		var inbox struct {
			Messages []engine.InboxEntry `json:"messages"`
		}
		m.callTool("get_inbox", map[string]any{"limit": 100}, &inbox)
		in := map[string]bool{}
		for _, e := range inbox.Messages {
			if strings.HasPrefix(e.Content, "BIG QUESTION ") {
				in[strings.Fields(e.Content)[2]] = true
			}
		}
		var missing []string
		for n := 1; n <= questions; n++ {
			if k := fmt.Sprint(n); !shown[k] || !in[k] {
				missing = append(missing, k)
			}
		}
		var alice engine.AgentState
		for _, a := range s.task.TaskGroup {
			var doc engine.AgentState
			m.mustRead("mas://agents/"+a, &doc)
			if doc.Name == "alice" {
				alice = doc
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s: the task's conversation shows %d questions to the operator, its inbox %d: questions %s are missing "+
				"(alice's step lock %v waits on the operator for question %d); the store refused the operator's document %d times (maximum payload exceeded)",
				when, len(shown), len(in), strings.Join(missing, ", "), alice.StepLock, questions, payloadRefusals(m.logs()))
		}
		if n := payloadRefusals(m.logs()); n > 0 {
			t.Errorf("%s: the store refused a document as too large %d times (maximum payload exceeded)", when, n)
		}
	}
	check("before the kill")
	m.kill()
	m.start()
	check("after kill -9 and a restart")
}
