package main

// Requirements on what a model's answer may put into the MAS: every text
// is bounded as it is taken in (engine.Config.MaxTextChars, 16,000
// characters, cut with a visible note), every list has a limit, and over
// a limit the step says so naming the field, rather than the store
// refusing a document past NATS's 1 MiB. Each test runs the real binary
// on its embedded NATS server and the scripted team on the fake LLM, and
// waits on events (the fake LLM's calls, the process's log lines), never
// on a timer. (From a review of 2026-12: each failed before its fix.)

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// intakeMaxText is the engine's MaxTextChars: every text an agent produces
// is cut there as it is taken in, with the note "[… N more characters
// dropped: texts are limited to 16000 characters]".
const intakeMaxText = 16000

// intakeClipNote is the start of that note.
const intakeClipNote = "more characters dropped"

// intakeRefusals counts the store's refusals of documents too large for
// NATS in a process's log.
func intakeRefusals(logs string) int { return strings.Count(logs, "maximum payload exceeded") }

// intakeSteps reads an agent's steps.
func intakeSteps(m *masInstance, agentID string) []engine.StepState {
	m.t.Helper()
	var steps engine.AgentStep
	m.mustRead("mas://agents/"+agentID+"/steps", &steps)
	return steps.StepList
}

// TestPlannedStepTextsAreBounded: a model answers alice's first planning
// (subtest "plan") or a process_message's react_action (subtest
// "react_action") with a step whose text_content is 2 MB, more than NATS
// takes in one message. The step is added with its text cut to
// MaxTextChars with the note, the step that planned it finishes, and
// alice goes on with her next step.
//
// Before the fix planned texts were not bounded: the agent's document
// passed 1 MiB and the write adding the step was refused, so the planned
// step was silently withdrawn while the planning step showed "finished",
// or the refused changes were retried every 5 s for ever and alice never
// started a step again.
func TestPlannedStepTextsAreBounded(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("plan ", 2_000_000/5)
	for _, tc := range []struct {
		name string
		// origin is the skill whose answer carries the huge step (its
		// first call whose step text holds body); answer answers it.
		origin, body string
		intention    string
		answer       func() fakellm.Reply
	}{{
		name: "plan", origin: "planning", body: "", intention: "think hard",
		answer: func() fakellm.Reply {
			return fakellm.Reply{Content: fakellm.Block("planned_step", fakellm.JSON([]map[string]string{
				{"step_intention": "think hard", "type": "skill", "executor": "think", "text_content": huge}}))}
		},
	}, {
		// The answer to her ask_info (AskOperator): she then asks the
		// operator and waits, so the stage (whose end would clean her
		// steps up) stays open.
		name: "react_action", origin: "process_message", body: "Result of ask_info", intention: "react to it",
		answer: func() fakellm.Reply {
			return fakellm.Reply{Content: fakellm.Block("process_message", "alice read the message.") +
				fakellm.Block("react_action", fakellm.JSON(map[string]string{"step_intention": "react to it", "text_content": huge}))}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			team := scripted.NewTeam()
			team.AskOperator = true
			type call struct{ agent, step string }
			var (
				mu     sync.Mutex
				origin call // alice's step that got the huge answer
			)
			next := make(chan call, 1) // alice's first LLM call for another step after it
			// That call is answered once the test has read alice's
			// steps: she stays in her stage meanwhile.
			release := make(chan struct{})
			defer close(release)
			llm := fakellm.New(t)
			llm.Handle(func(c *fakellm.Call) fakellm.Reply {
				if c.AgentName != "alice" {
					return team.Handle(c)
				}
				mu.Lock()
				switch {
				case origin.step == "" && c.Skill == tc.origin && strings.Contains(scripted.StepBody(c.Prompt), tc.body):
					origin = call{c.AgentID, c.StepID}
					mu.Unlock()
					return tc.answer()
				case origin.step != "" && c.StepID != origin.step:
					select {
					case next <- call{c.AgentID, c.StepID}:
						mu.Unlock()
						<-release
						return team.Handle(c)
					default:
					}
				}
				mu.Unlock()
				return team.Handle(c)
			})
			m := newMAS(t, masOptions{LLMURL: llm.BaseURL()})
			m.start()
			addTask(m)

			select {
			case <-next:
			case <-time.After(waitTimeout):
				mu.Lock()
				o := origin
				mu.Unlock()
				if o.step == "" {
					t.Fatalf("alice never ran a %s step\n%s", tc.origin, m.describeAgents())
				}
				t.Fatalf("alice made no LLM call in %s after her %s step %.8s got a step of 2 MB: she is stalled; the store refused %d writes "+
					"(maximum payload exceeded)\n%s",
					waitTimeout, tc.origin, o.step, intakeRefusals(m.logs()), m.describeAgents())
			}
			mu.Lock()
			o := origin
			mu.Unlock()
			steps := intakeSteps(m, o.agent)
			var from, added *engine.StepState
			for i := range steps {
				switch {
				case steps[i].StepID == o.step:
					from = &steps[i]
				case steps[i].StepIntention == tc.intention:
					added = &steps[i]
				}
			}
			if from == nil {
				t.Fatalf("alice's %s step %.8s is gone\n%s", tc.origin, o.step, m.describeAgents())
			}
			if added == nil {
				res, _ := json.Marshal(from.ExecuteResult)
				t.Fatalf("alice's %s step %.8s is %q (result %.300s…) but the step %q it planned does not exist "+
					"(the store refused %d writes: maximum payload exceeded)",
					tc.origin, o.step, from.ExecutionState, res, tc.intention, intakeRefusals(m.logs()))
			}
			if from.ExecutionState != engine.StateFinished {
				t.Errorf("alice's %s step %.8s is %q, want finished: %v", tc.origin, o.step, from.ExecutionState, from.ExecuteResult["error"])
			}
			if n := utf8.RuneCountInString(added.TextContent); n > intakeMaxText+200 || !strings.Contains(added.TextContent, intakeClipNote) {
				t.Errorf("the step %q holds a text_content of %d characters, past MaxTextChars (%d) or without the note", tc.intention, n, intakeMaxText)
			}
			if n := intakeRefusals(m.logs()); n > 0 {
				t.Errorf("the store refused %d writes (maximum payload exceeded)", n)
			}
		})
	}
}

// TestInstructionTextsFromAModelAreBounded: the manager's model answers
// its task_manager step (add_stage, subtest "stage_intention") or its
// agent_manager step (init_new_agent, subtest "profile") with a 2 MB
// stage_intention / agent_config.profile. The text is cut to MaxTextChars
// with the note as it is taken in, and the step finishes.
//
// Before the fix neither text was bounded: the write of the task (agent)
// document was refused and the step failed with "store: task …: nats:
// maximum payload exceeded", naming neither the field nor a limit.
func TestInstructionTextsFromAModelAreBounded(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("word ", 2_000_000/5)
	for _, tc := range []struct {
		name, skill, marker, old, new, field string
		// stored is the text as the MAS stored it.
		stored func(m *masInstance, taskID string) string
	}{
		{
			"stage_intention", "task_manager", "ADD_STAGES", `"stage_intention":"collect facts"`, `"stage_intention":"collect facts ` + huge + `"`, "stage_intention",
			func(m *masInstance, taskID string) string {
				for _, sg := range m.snapshot(taskID).task.StageList {
					if strings.HasPrefix(sg.StageIntention, "collect facts ") {
						return sg.StageIntention
					}
				}
				return ""
			},
		},
		{
			"profile", "agent_manager", "STAFF alice", `"name":"alice"`, `"name":"alice","profile":"` + huge + `"`, "profile",
			func(m *masInstance, _ string) string {
				var agents []engine.AgentBrief
				m.mustRead("mas://agents", &agents)
				for _, b := range agents {
					if b.Name == "alice" {
						var a engine.AgentState
						m.mustRead("mas://agents/"+b.AgentID, &a)
						return a.Profile
					}
				}
				return ""
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			team := scripted.NewTeam()
			step := make(chan string, 1)
			var done atomic.Bool
			llm := fakellm.New(t)
			llm.Handle(func(c *fakellm.Call) fakellm.Reply {
				r := team.Handle(c)
				if c.AgentName == "manager" && c.Skill == tc.skill && strings.HasPrefix(scripted.StepText(c.Prompt), tc.marker) && done.CompareAndSwap(false, true) {
					if !strings.Contains(r.Content, tc.old) {
						t.Errorf("the scripted answer lacks %s: %.200s", tc.old, r.Content)
					}
					r.Content = strings.Replace(r.Content, tc.old, tc.new, 1)
					step <- c.StepID + " " + c.AgentID
				}
				return r
			})
			m := newMAS(t, masOptions{LLMURL: llm.BaseURL()})
			m.start()
			taskID := addTask(m)
			var got string
			select {
			case got = <-step:
			case <-time.After(waitTimeout):
				t.Fatalf("the manager never ran its %s step\n%s", tc.skill, m.describeAgents())
			}
			stepID, manager, _ := strings.Cut(got, " ")
			waitLogLine(t, m, "the manager's "+tc.skill+" step to end", `"msg":"step done"`, stepID)
			var st *engine.StepState
			for _, s := range intakeSteps(m, manager) {
				if s.StepID == stepID {
					st = &s
				}
			}
			if st == nil {
				t.Fatalf("the manager's %s step %.8s is gone\n%s", tc.skill, stepID, m.describeAgents())
			}
			if st.ExecutionState != engine.StateFinished {
				t.Fatalf("the manager's %s step with a 2 MB %s is %s: %v (the text was not bounded as it was taken in; the store refused %d writes)",
					tc.skill, tc.field, st.ExecutionState, st.ExecuteResult["error"], intakeRefusals(m.logs()))
			}
			text := tc.stored(m, taskID)
			if n := utf8.RuneCountInString(text); n == 0 || n > intakeMaxText+200 || !strings.Contains(text, intakeClipNote) {
				t.Errorf("the %s stored holds %d characters (want at most MaxTextChars, %d, with the note): %.100q", tc.field, n, intakeMaxText, text)
			}
		})
	}
}

// TestPersistentMemoryOpsPerStepAreBounded: alice's model answers her
// think step with a thought and a persistent_memory block of 100,000 ops
// (a 2.2 MB answer), each deleting a key she does not have. The ops past
// the limit of one step are ignored and said so in one line naming
// persistent_memory and the limit; the step finishes with its thought,
// its result within the document bound.
//
// Before the fix the number of ops had no limit and the step's result held
// one report line per op (~8 MB): the store refused the step's outcome,
// and the step failed with "the step's outcome could not be stored: …
// nats: maximum payload exceeded", its thought lost.
func TestPersistentMemoryOpsPerStepAreBounded(t *testing.T) {
	t.Parallel()
	team := scripted.NewTeam()
	step := make(chan [2]string, 1)
	var done atomic.Bool
	llm := fakellm.New(t)
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		if c.AgentName == "alice" && c.Skill == "think" && done.CompareAndSwap(false, true) {
			ops := make([]map[string]string, 0, 100_000)
			for i := range 100_000 {
				ops = append(ops, map[string]string{"delete": fmt.Sprintf("20260101T%06d", i)})
			}
			step <- [2]string{c.StepID, c.AgentID}
			return fakellm.Reply{Content: fakellm.Block("_think", "alice thought it over.") + fakellm.Block("persistent_memory", fakellm.JSON(ops))}
		}
		return team.Handle(c)
	})
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL()})
	m.start()
	addTask(m)
	var got [2]string
	select {
	case got = <-step:
	case <-time.After(waitTimeout):
		t.Fatalf("alice never thought\n%s", m.describeAgents())
	}
	waitLogLine(t, m, "alice's think step to end", `"msg":"step done"`, got[0])
	for _, st := range intakeSteps(m, got[1]) {
		if st.StepID != got[0] {
			continue
		}
		if st.ExecutionState != engine.StateFinished {
			t.Fatalf("alice's think step, answered with a thought and 100,000 persistent_memory ops, is %s: %v",
				st.ExecutionState, st.ExecuteResult["error"])
		}
		if b, _ := json.Marshal(st.ExecuteResult); len(b) > 640<<10 {
			t.Errorf("alice's think step's result is %d bytes, past the document bound", len(b))
		}
		report, _ := json.Marshal(st.ExecuteResult["persistent_memory"])
		if !strings.Contains(string(report), "persistent_memory operations were ignored") {
			t.Errorf("alice's think step's persistent_memory report does not say that the ops past the limit were ignored: %.300s", report)
		}
		if thought, _ := st.ExecuteResult["think"].(string); thought != "alice thought it over." {
			t.Errorf("alice's think step lost its thought: %.300v", st.ExecuteResult)
		}
		return
	}
	t.Fatalf("alice's think step %.8s is gone\n%s", got[0], m.describeAgents())
}
