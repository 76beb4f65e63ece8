package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mas-mcp/mas-mcp/llm"
)

// gaveUp is the output of a step whose LLM call waited out the whole
// outage window, as the skills return it.
func gaveUp() *Output {
	return &Output{Err: fmt.Errorf("llm: chat completion: status 503: overloaded; the endpoint stayed unavailable for 10m0s: %w", llm.ErrUnavailable), Usage: Usage{Calls: 1}}
}

// waitOutLLM does what the LLM client does for a call that waits out an
// outage and gives up: the step's observer is told it began and ended.
func waitOutLLM(b *testbed, in *ExecInput) {
	a, _ := b.sys.agent(in.Agent.AgentID)
	step := in.Step
	o := &stepOutage{a: a, step: &step}
	o.OutageBegan(time.Now(), "status 503: overloaded")
	o.OutageEnded(llm.OutageGaveUp)
}

// TestOutagePutBackSurvivesARefusedWrite: a step put back after its call
// gave up on the endpoint stays queued when the store refuses that write
// (a store blip in the LLM outage): kept for the owner's retries, it runs
// again once the task resumes, as the operator was told.
func TestOutagePutBackSurvivesARefusedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var armed atomic.Bool
		st := &refuseAgentStore{MemoryStore: NewMemoryStore()}
		st.refuse = func(a *AgentState) bool {
			if !armed.Load() {
				return false
			}
			for _, s := range a.AgentStep.StepList {
				if s.TextContent == "hold me" && s.ExecutionState == StateInit {
					armed.Store(false) // this write only
					return true
				}
			}
			return false
		}
		b := bubbleBed(t, func(c *Config) { c.Store = st })
		alice := b.newAgent("alice")
		task := b.newTask("t", alice)
		var runs atomic.Int32
		b.sc.onText("hold me", func(_ context.Context, in *ExecInput) *Output {
			if runs.Add(1) == 1 {
				waitOutLLM(b, in)
				armed.Store(true)
				return gaveUp()
			}
			return &Output{Result: map[string]any{"think": "done"}}
		})
		id := b.inject(alice, task, NoRelative, false, spec(SkillThink, "hold me"))[0]
		synctest.Wait()
		if ts := b.task(task); !ts.Paused || ts.PausedFor != PausedOutage {
			t.Fatalf("task paused=%v for %q, want paused for the outage\n%s", ts.Paused, ts.PausedFor, b.dump())
		}
		letFakeTimePass(time.Minute) // the agent's commit retries
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionResumeTask, TaskID: task}); err != nil {
			t.Fatal(err)
		}
		letFakeTimePass(time.Minute)
		s, _ := b.step(alice, id)
		if s.ExecutionState != StateFinished || runs.Load() != 2 {
			t.Errorf("the put-back step is %q (in todo: %v) a minute after the task resumed, run %d times; want it run again and finished\n%s",
				s.ExecutionState, len(b.agent(alice).AgentStep.TodoList) > 0, runs.Load(), b.dump())
		}
	})
}

// TestOutageProbeStopsWhenNothingIsHeld: the endpoint's probe runs only
// while a task is paused for the outage: once the only such task ended
// (here cancelled), it stops asking, whether or not the endpoint is back.
func TestOutageProbeStopsWhenNothingIsHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var probes atomic.Int32
		b := bubbleBed(t, func(c *Config) {
			c.LLMProbeInterval = time.Minute
			c.ProbeLLM = func(context.Context) error {
				probes.Add(1)
				return fmt.Errorf("503 overloaded")
			}
		})
		alice := b.newAgent("alice")
		task := b.newTask("t", alice)
		b.sc.onText("hold me", func(context.Context, *ExecInput) *Output { return gaveUp() })
		b.inject(alice, task, NoRelative, false, spec(SkillThink, "hold me"))
		synctest.Wait()
		if ts := b.task(task); ts.PausedFor != PausedOutage {
			t.Fatalf("task not paused for the outage (%q)\n%s", ts.PausedFor, b.dump())
		}
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionCancelTask, TaskID: task}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !b.ended(task) {
			t.Fatalf("task not ended: %s", b.task(task).ExecutionState)
		}
		before := probes.Load()
		letFakeTimePass(30 * time.Minute)
		if n := probes.Load() - before; n > 1 {
			t.Errorf("the probe asked the endpoint %d times in the 30 minutes after the only task paused for the outage ended; want it stopped", n)
		}
	})
}

// TestOutageDoesNotRepeatAToolCall: a tool step whose executor reports
// that the LLM endpoint gave up (its server's sampling request waited out
// the window) after its call was made is not put back to run again: a
// tool call whose effect is unknown is not repeated. It fails as before.
func TestOutageDoesNotRepeatAToolCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		b := bubbleBed(t, func(c *Config) {
			c.Tools = toolCatalog{"pay": "bank"}
			c.Tool = ExecutorFunc(func(context.Context, *ExecInput) *Output {
				if calls.Add(1) == 1 {
					out := gaveUp()
					out.Err = fmt.Errorf("mcp server \"bank\": call pay: sampling with the MAS's LLM: %w", out.Err)
					out.Result = map[string]any{"mcp_server_result": "payment sent"}
					return out
				}
				return &Output{Result: map[string]any{"mcp_server_result": "payment sent again"}}
			})
		})
		id, err := b.sys.CreateAgent(AgentConfig{Name: "payer", Role: "r", Skills: []string{SkillThink}, Tools: []string{"pay"}})
		if err != nil {
			t.Fatal(err)
		}
		task := b.newTask("t", id)
		b.inject(id, task, NoRelative, false, StepSpec{StepIntention: "pay", Type: StepTool, Executor: "pay"})
		synctest.Wait()
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionResumeTask, TaskID: task}); err != nil {
			t.Fatal(err)
		}
		letFakeTimePass(time.Minute)
		if n := calls.Load(); n != 1 {
			t.Errorf("the tool call was made %d times: a tool step whose call was made is repeated after the outage pause\n%s", n, b.dump())
		}
	})
}

// TestOwnAskInfoKeepsTheChain: the engine's answer to an agent's own
// ask_info is not new input: it neither starts a new chain of messages nor
// gives the steps outside any stage their budget again, so two agents
// that ask the engine between their messages still stop at the limit.
func TestOwnAskInfoKeepsTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4
		b := bubbleBed(t, func(c *Config) { c.MessageChainLimit = limit })
		alice, bob := b.newAgent("alice"), b.newAgent("bob")
		task := b.newTask("t", alice, bob)
		var sent atomic.Int32
		send := func(to string) handler {
			return func(context.Context, *ExecInput) *Output {
				if sent.Add(1) > 10*limit {
					return &Output{} // the test's own bound
				}
				return &Output{SendMessage: &OutgoingMessage{Receiver: StringList{to}, Message: "more?"}}
			}
		}
		b.sc.onAgent("alice", SkillSendMessage, send(bob))
		b.sc.onAgent("bob", SkillSendMessage, send(alice))
		b.sc.onAgent("alice", SkillAskInfo, func(context.Context, *ExecInput) *Output {
			return &Output{AskInfo: &AskInfoQuery{Type: QueryAllAgents}}
		})
		b.sc.onAgent("alice", SkillProcessMessage, func(_ context.Context, in *ExecInput) *Output {
			if strings.Contains(in.Step.TextContent, "Result of ask_info") {
				return &Output{}
			}
			return &Output{AddSteps: []StepSpec{spec(SkillAskInfo, "check first"), spec(SkillSendMessage, "answer bob")}}
		})
		b.sc.onAgent("bob", SkillProcessMessage, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillSendMessage, "answer alice")}}
		})
		b.inject(alice, task, NoRelative, false, spec(SkillSendMessage, "start"))
		synctest.Wait()
		if n := sent.Load(); n > limit+1 {
			t.Errorf("the agents sent %d messages to each other with no operator's word (chain limit %d): alice's own ask_info answers restart the chain", n, limit)
		}
	})
}
