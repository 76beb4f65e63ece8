package main

// Process-level acceptance tests of durability (ARCHITECTURE.md
// "Durability", "Crash semantics"): the real mas-mcp binary, on a data
// directory, is killed with SIGKILL (or stopped with SIGTERM) while it
// works, restarted on the same data directory, and must finish the task
// with nothing acknowledged lost and no effect doubled. Each scenario runs
// twice: on the embedded NATS server and on an external nats-server
// (--nats-url).

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// shutdownDeadline is how long SIGTERM may take: a functional requirement
// (service managers kill what outlives their stop timeout), not a
// performance figure.
const shutdownDeadline = 5 * time.Second

// heldDelay keeps a held LLM request open for longer than any test: it
// ends when the process that made it goes away.
const heldDelay = 10 * time.Minute

// onBothStores runs a scenario on the embedded NATS server and on an
// external nats-server, in parallel.
func onBothStores(t *testing.T, scenario func(t *testing.T, natsURL string)) {
	t.Parallel()
	for _, store := range []string{"embedded", "external"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			url := ""
			if store == "external" {
				url = startNATS(t)
			}
			scenario(t, url)
		})
	}
}

func TestCrashKillDuringLLMCall(t *testing.T)      { onBothStores(t, killDuringLLMCall) }
func TestCrashKillDuringMessageBurst(t *testing.T) { onBothStores(t, killDuringMessageBurst) }
func TestCrashKillDuringToolCall(t *testing.T)     { onBothStores(t, killDuringToolCall) }
func TestCrashSIGTERMWhileWorking(t *testing.T)    { onBothStores(t, sigtermWhileWorking) }

// killDuringLLMCall: SIGKILL while bob's first summary request is held in
// the LLM; after a restart the interrupted step runs again (same step ID)
// and the task finishes with every effect once.
func killDuringLLMCall(t *testing.T, natsURL string) {
	h, llm, m, taskID := startHeldTeam(t, natsURL, func(c *fakellm.Call) bool { return c.AgentName == "bob" && c.Skill == "summary" })

	held := h.wait(t)
	before := m.snapshot(taskID)
	m.kill()

	m.start()
	m.checkKept(before, m.snapshot(taskID))
	after := m.waitTaskEnded(taskID)
	m.checkKept(before, after)
	m.checkNoDoubles(after)
	m.checkTeam(after)
	m.checkCleanedUp(taskID)
	checkRerun(t, llm, held)
	checkStepsRanOnce(t, llm, m.started)
	checkEachProcessAsked(t, llm, m.started)
}

// burstSize is how many messages alice sends bob in a row (no reply
// needed, no waiting) in the first stage.
const burstSize = 25

// killDuringMessageBurst: alice sends bob burstSize messages in a row; the
// process is killed while they flow (when alice asks the LLM for the
// tenth, with the fifteenth held so the kill cannot come after all are
// out). After a restart every message exists once, and bob processed each
// once.
func killDuringMessageBurst(t *testing.T, natsURL string) {
	brain := &burstBrain{team: scripted.NewTeam(), trigger: 10, held: 15, triggered: make(chan struct{}, 1)}
	llm := fakellm.New(t)
	llm.Handle(brain.handle)
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL(), NATSURL: natsURL, Args: []string{"--stage-step-budget", "200"}})
	m.start()
	taskID := addTask(m)

	select {
	case <-brain.triggered:
	case <-time.After(waitTimeout):
		t.Fatalf("alice never reached message %d of the burst", brain.trigger)
	}
	before := m.snapshot(taskID)
	m.kill()
	brain.hung.Store(true) // hold nothing in the next process
	visible := burstMessages(before.conv)
	if len(visible) < brain.trigger-1 || len(visible) >= brain.held {
		t.Fatalf("%d burst messages visible at the kill, want %d to %d", len(visible), brain.trigger-1, brain.held-1)
	}
	t.Logf("killed with %d of %d burst messages visible", len(visible), burstSize)

	m.start()
	m.checkKept(before, m.snapshot(taskID))
	after := m.waitTaskEnded(taskID)
	m.checkKept(before, after)
	m.checkNoDoubles(after)
	m.checkTeam(after)
	m.checkCleanedUp(taskID)

	got := burstMessages(after.conv)
	for i := 1; i <= burstSize; i++ {
		if n := got[i]; n != 1 {
			t.Errorf("burst message %d appears %d times in the conversation, want once", i, n)
		}
	}
	// Bob took each burst message once: one process_message step, asked
	// of the LLM once, or twice when the kill cut the first request off
	// (the same step, run again by the next process).
	type seen struct {
		steps        map[string]bool
		before, next int
	}
	took := map[int]*seen{}
	for _, c := range llm.CallsFor("process_message", "bob") {
		f := burstRE.FindStringSubmatch(scripted.StepBody(c.Prompt))
		if f == nil || c.Repair {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		if took[n] == nil {
			took[n] = &seen{steps: map[string]bool{}}
		}
		took[n].steps[c.StepID] = true
		if c.Model == runModel(1) {
			took[n].before++
		} else {
			took[n].next++
		}
	}
	for i := 1; i <= burstSize; i++ {
		s := took[i]
		if s == nil || len(s.steps) != 1 || s.before > 1 || s.next > 1 {
			t.Errorf("burst message %d: bob's process_message %+v, want one step asked once (or once per process when the kill cut it off)", i, s)
		}
	}
	checkStepsRanOnce(t, llm, m.started)
	checkEachProcessAsked(t, llm, m.started)
}

// killDuringToolCall: a worker calls two tools of the real
// server-everything (through a stdio proxy that withholds chosen answers,
// so the server did the call and mas-mcp never learned the outcome). A
// SIGKILL during the read-only, idempotent trigger-long-running-operation
// makes the restarted MAS call it again; a SIGKILL during the
// non-idempotent toggle-simulated-logging makes it fail the step with a
// reason the worker's next reflection sees, without calling again.
func killDuringToolCall(t *testing.T, natsURL string) {
	const (
		rerunTool = "trigger-long-running-operation" // readOnlyHint, idempotentHint
		onceTool  = "toggle-simulated-logging"       // neither
	)
	dir := t.TempDir()
	logPath, holdPath := filepath.Join(dir, "proxy.log"), filepath.Join(dir, "hold")
	writeFile(t, holdPath, rerunTool)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"mcpServers": map[string]any{"everything": map[string]any{
		"command":     self,
		"env":         map[string]string{proxyServerEnv: everythingBin(t), proxyLogEnv: logPath, proxyHoldEnv: holdPath},
		"description": "Exercises every MCP feature.",
	}}}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "mcp.json")
	writeFile(t, cfgPath, string(b))

	user := &scripted.ToolUser{Calls: []scripted.Call{
		{Server: "everything", Tool: rerunTool, Args: map[string]any{"duration": 0.1, "steps": 1}},
		{Server: "everything", Tool: onceTool, Args: map[string]any{}},
	}}
	llm := fakellm.New(t)
	llm.Handle(user.Handle)
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL(), NATSURL: natsURL, MCPConfig: cfgPath})
	m.start()

	// The operator staffs and stages the task (ToolUser's manager only
	// acknowledges).
	taskID := addTask(m)
	w := addWorker(m, taskID, "everything")
	m.callTool("manage_task", map[string]any{"action": "add_stage", "task_id": taskID,
		"stages": []map[string]any{{"stage_intention": "use the tools", "agent_allocation": map[string]string{w: "make the calls"}}}}, nil)

	withheld := func(tool string, n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("the server's answer #%d to %s to be withheld", n, tool), func() (bool, string) {
			lines := proxyLog(t, logPath)
			return countLines(lines, "withheld "+tool) >= n, strings.Join(lines, " | ")
		})
	}
	withheld(rerunTool, 1)
	before := m.snapshot(taskID)
	m.kill()

	writeFile(t, holdPath, onceTool)
	m.start()
	m.checkKept(before, m.snapshot(taskID))
	withheld(onceTool, 1)
	before = m.snapshot(taskID)
	m.kill()

	if err := os.Remove(holdPath); err != nil {
		t.Fatal(err)
	}
	m.start()
	m.checkKept(before, m.snapshot(taskID))
	waitFor(t, "the worker's summary", func() (bool, string) {
		var task engine.TaskState
		if err := m.read("mas://tasks/"+taskID, &task); err != nil {
			return false, err.Error()
		}
		_, ok := task.StageList[0].CompletionSummary[w]
		return ok, fmt.Sprint(task.StageList[0].CompletionSummary)
	})

	// Before the stage ends (which clears its steps): the tool steps.
	var steps engine.AgentStep
	m.mustRead("mas://agents/"+w+"/steps", &steps)
	var tools []engine.StepState
	for _, st := range steps.StepList {
		if st.Type == engine.StepTool {
			tools = append(tools, st)
		}
	}
	if len(tools) != 2 {
		t.Fatalf("worker's tool steps: %d, want 2: %s", len(tools), jsonOf(steps.StepList))
	}
	if st := tools[0]; st.ExecutionState != engine.StateFinished || !strings.Contains(jsonOf(st.ExecuteResult), "Long running operation completed") {
		t.Errorf("%s step (interrupted, safe to repeat): %s %s, want finished by the call made again", rerunTool, st.ExecutionState, jsonOf(st.ExecuteResult))
	}
	reason, _ := tools[1].ExecuteResult["error"].(string)
	if st := tools[1]; st.ExecutionState != engine.StateFailed || !strings.Contains(reason, "interrupted by a restart") || !strings.Contains(reason, "idempotentHint") {
		t.Errorf("%s step (interrupted, not safe to repeat): %s %s, want failed with the reason", onceTool, st.ExecutionState, jsonOf(st.ExecuteResult))
	}
	seen := false
	for _, c := range llm.CallsFor("reflection", "worker") {
		if strings.Contains(c.Prompt, "interrupted by a restart") {
			seen = true
		}
	}
	if !seen {
		t.Error("no reflection of the worker saw why the interrupted tool step failed")
	}
	lines := proxyLog(t, logPath)
	if n := countLines(lines, "call "+rerunTool); n != 2 {
		t.Errorf("%s called %d times, want 2 (the interrupted call, made again after the restart): %q", rerunTool, n, lines)
	}
	if n := countLines(lines, "call "+onceTool); n != 1 {
		t.Errorf("%s called %d times, want once (never repeated after the restart): %q", onceTool, n, lines)
	}

	var task engine.TaskState
	m.mustRead("mas://tasks/"+taskID, &task)
	stage := task.StageList[0].StageID
	m.callTool("manage_task", map[string]any{"action": "finish_stage", "task_id": taskID, "stage_id": stage}, nil)
	m.callTool("manage_task", map[string]any{"action": "finish_task", "task_id": taskID, "summary": "calls made"}, nil)
	after := m.waitTaskEnded(taskID)
	m.checkKept(before, after)
	m.checkNoDoubles(after)
	m.checkCleanedUp(taskID)
	checkStepsRanOnce(t, llm, m.started)
	checkEachProcessAsked(t, llm, m.started)
}

// sigtermWhileWorking: SIGTERM while alice's think is in the LLM and the
// others work: the process exits with code 0 within shutdownDeadline;
// restarted, it has everything it had, runs the interrupted step again and
// finishes the task.
func sigtermWhileWorking(t *testing.T, natsURL string) {
	h, llm, m, taskID := startHeldTeam(t, natsURL, func(c *fakellm.Call) bool { return c.AgentName == "alice" && c.Skill == "think" })

	held := h.wait(t)
	before := m.snapshot(taskID)
	if len(before.task.StageList) != 2 || len(before.task.TaskGroup) < 3 {
		t.Fatalf("at the SIGTERM: %d stages, group %v; want the task staffed and staged", len(before.task.StageList), before.task.TaskGroup)
	}
	code, took := m.terminate(shutdownDeadline)
	if code != 0 {
		t.Fatalf("SIGTERM: exit code %d after %s, want 0 within %s", code, took.Round(time.Millisecond), shutdownDeadline)
	}
	if !strings.Contains(m.logs(), "shutting down") {
		t.Error("no shutdown line in the logs")
	}

	m.start()
	restarted := m.snapshot(taskID)
	m.checkKept(before, restarted)
	for i, st := range before.task.StageList {
		if got := restarted.task.StageList[i]; got.StageID != st.StageID || got.StageIntention != st.StageIntention || !maps.Equal(got.AgentAllocation, st.AgentAllocation) {
			t.Errorf("stage %d after the restart: %s %q %v, want %s %q %v", i, got.StageID, got.StageIntention, got.AgentAllocation, st.StageID, st.StageIntention, st.AgentAllocation)
		}
	}
	after := m.waitTaskEnded(taskID)
	m.checkKept(before, after)
	m.checkNoDoubles(after)
	m.checkTeam(after)
	m.checkCleanedUp(taskID)
	checkRerun(t, llm, held)
	checkStepsRanOnce(t, llm, m.started)
	checkEachProcessAsked(t, llm, m.started)
}

// TestCrashKillBetweenWrites kills the process between two writes that
// belong together, the worst moments for a restart: a step's effects are
// durable (a message in the stream, an agent or a stage created, a report
// in the task) but the write that marks the step done never happened; or
// a task's new state is durable (a stage finished, the next one running,
// all summaries in, the task ended) but the instructions and notices it
// implies are not. The restarted MAS must run the step again with its
// effects applied once, and send what was lost, so that the task
// finishes. One subtest per kind of step and notice of the scripted team.
// Only on an external NATS server, where a proxy can freeze mas-mcp's
// writes at a chosen one (the embedded server is reached in process).
func TestCrashKillBetweenWrites(t *testing.T) {
	t.Parallel()
	// The steps: frozen at the write of the step's agent in which the step
	// (the first LLM request that matches) is done.
	for _, tc := range []struct {
		name, agent, skill, text string
		// gone: the step's own effect (finish_stage, finish_task) removes
		// it; the restart delivers that effect again instead of running it.
		gone bool
	}{
		{name: "question that waits", agent: "alice", skill: "send_message", text: "ASK_PEER"},
		{name: "answer that releases a wait", agent: "bob", skill: "send_message", text: "Agent alice"},
		{name: "ask_info", agent: "manager", skill: "ask_info"},
		{name: "agent creation", agent: "manager", skill: "agent_manager", text: "STAFF alice"},
		{name: "task participants", agent: "manager", skill: "agent_manager", text: "JOIN_TEAM"},
		{name: "stages added", agent: "manager", skill: "task_manager", text: "ADD_STAGES"},
		{name: "stage summary", agent: "bob", skill: "summary"},
		{name: "stage finished", agent: "manager", skill: "task_manager", text: "FINISH_STAGE", gone: true},
		{name: "task finished", agent: "manager", skill: "task_manager", text: "FINISH_TASK", gone: true},
	} {
		t.Run("step "+tc.name, func(t *testing.T) {
			t.Parallel()
			target := func(c *fakellm.Call) bool {
				return c.AgentName == tc.agent && c.Skill == tc.skill && strings.HasPrefix(scripted.StepText(c.Prompt), tc.text)
			}
			var first atomic.Value // the target step's first LLM request
			killBetweenWrites(t, func(c *fakellm.Call) {
				if !c.Repair && target(c) {
					first.CompareAndSwap(nil, *c)
				}
			}, func(subject string, payload []byte) bool {
				// The step's agent, with the step done, or gone.
				c, ok := first.Load().(fakellm.Call)
				if !ok || subject != "$KV.mas_agents."+c.AgentID {
					return false
				}
				var doc struct {
					Agent engine.AgentState `json:"agent"`
				}
				if json.Unmarshal(payload, &doc) != nil {
					return false
				}
				for _, st := range doc.Agent.AgentStep.StepList {
					if st.StepID == c.StepID {
						return st.ExecutionState == engine.StateFinished || st.ExecutionState == engine.StateFailed
					}
				}
				return true
			}, func(llm *fakellm.Server) {
				if !tc.gone {
					checkRerun(t, llm, first.Load().(fakellm.Call))
				}
			})
		})
	}
	// The messages: frozen at the publish of the first message that
	// matches, after the document that implies it was written (a task's,
	// or the agent's with its wait engaged).
	for _, tc := range []struct {
		name  string
		match func(engine.Message) bool
	}{
		{"question that waits", func(m engine.Message) bool { return m.Message == "QUESTION from alice" }},
		{"ask_info answer", func(m engine.Message) bool {
			return m.SenderID == engine.SystemSender && strings.HasPrefix(m.Message, "### Result of ask_info")
		}},
		{"next stage's start", func(m engine.Message) bool {
			return m.Instruction != nil && m.Instruction.StartStage != nil && strings.Contains(m.Instruction.StartStage.StageIntention, scripted.NewTeam().Stages[1])
		}},
		{"stage complete notice", func(m engine.Message) bool {
			return m.SenderID == engine.SystemSender && strings.HasPrefix(m.Message, "[TaskState] All agents allocated to stage")
		}},
		{"judge notice", func(m engine.Message) bool {
			return m.SenderID == engine.SystemSender && strings.HasPrefix(m.Message, "[TaskState] The last stage of task")
		}},
		{"finish_task instructions", func(m engine.Message) bool {
			return m.Instruction != nil && m.Instruction.FinishTask != nil
		}},
	} {
		t.Run("message "+tc.name, func(t *testing.T) {
			t.Parallel()
			killBetweenWrites(t, nil, func(subject string, payload []byte) bool {
				var doc struct {
					Message *engine.Message `json:"message"`
				}
				return strings.HasPrefix(subject, "mas.msg.") && json.Unmarshal(payload, &doc) == nil && doc.Message != nil && tc.match(*doc.Message)
			}, nil)
		})
	}
}

// killBetweenWrites runs the scripted team's task on an external NATS
// server through a proxy that freezes mas-mcp's writes at the first
// publish freeze matches (see is called with every LLM request), kills
// the process there, restarts it on the server directly and checks that
// the task finishes as it does without a crash; more checks what is
// particular to the case.
func killBetweenWrites(t *testing.T, see func(*fakellm.Call), freeze func(subject string, payload []byte) bool, more func(*fakellm.Server)) {
	natsURL := startNATS(t)
	team := scripted.NewTeam()
	llm := fakellm.New(t)
	// No step runs before add_task has answered: the freeze may come at
	// the task's first steps, and would otherwise hold add_task's own
	// last write (the operator's record of it) when the machine is slow.
	added := make(chan struct{})
	release := sync.OnceFunc(func() { close(added) })
	defer release()
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		<-added
		if see != nil {
			see(c)
		}
		return team.Handle(c)
	})
	proxy := startNATSFreezer(t, natsURL, freeze)
	// Many short runs: the binary without the race detector (the
	// scenarios above run the other).
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL(), NATSURL: proxy.url, NoRace: true})
	m.start()
	taskID := addTask(m)
	release()

	// A frozen write is never visible (its owner publishes only what the
	// store holds): what was visible is what a reader saw last before the
	// kill, and it reads once more after the freeze, which may come before
	// its first read.
	seen := m.pollSnapshots(taskID)
	proxy.wait(t)
	seen.fresh(t)
	m.kill()
	before := seen.last(t)

	// Straight to NATS from now on. The dead process's lease is dropped
	// rather than waited out (the takeover after a crash is the other
	// tests' part; here it would only cost time).
	m.opts.NATSURL = natsURL
	dropLease(t, natsURL)
	m.start()
	m.checkKept(before, m.snapshot(taskID))
	after := m.waitTaskEnded(taskID)
	m.checkKept(before, after)
	m.checkNoDoubles(after)
	m.checkTeam(after)
	m.checkCleanedUp(taskID)
	checkStepsRanOnce(t, llm, m.started)
	if more != nil {
		more(llm)
	}
}

// --- the task and what the tests read

// addTask hands the MAS the scripted team's task through MCP.
func addTask(m *masInstance) string {
	m.t.Helper()
	var out struct {
		TaskID string `json:"task_id"`
	}
	m.callTool("add_task", map[string]any{"task_name": "report", "task_intention": "Research a topic and write a report."}, &out)
	if out.TaskID == "" {
		m.t.Fatal("add_task returned no task_id")
	}
	return out.TaskID
}

// snapshot is what an operator sees of a task: its state and its
// conversation.
type snapshot struct {
	task engine.TaskState
	conv []engine.Message
}

func (m *masInstance) snapshot(taskID string) snapshot {
	m.t.Helper()
	var s snapshot
	m.mustRead("mas://tasks/"+taskID, &s.task)
	var conv struct {
		Messages []engine.Message `json:"messages"`
	}
	m.mustRead("mas://tasks/"+taskID+"/conversation", &conv)
	s.conv = conv.Messages
	return s
}

// snapshots polls a task's snapshot over its own MCP session until the
// process is gone; last returns the last one it completed.
type snapshots struct {
	done chan struct{}

	mu       sync.Mutex
	snap     *snapshot     // the last complete one
	begun    int           // reads begun
	finished int           // the number of the last read completed
	changed  chan struct{} // closed (and replaced) when a read completes
}

func (m *masInstance) pollSnapshots(taskID string) *snapshots {
	m.t.Helper()
	transport := &http.Transport{}
	cs, err := dial(m.addr, transport)
	if err != nil {
		m.t.Fatal(err)
	}
	p := &snapshots{done: make(chan struct{}), changed: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer transport.CloseIdleConnections()
		defer cs.Close()
		for {
			p.mu.Lock()
			p.begun++
			n := p.begun
			p.mu.Unlock()
			var s snapshot
			var conv struct {
				Messages []engine.Message `json:"messages"`
			}
			if readWith(cs, "mas://tasks/"+taskID, &s.task) != nil || readWith(cs, "mas://tasks/"+taskID+"/conversation", &conv) != nil {
				return // the process is gone
			}
			s.conv = conv.Messages
			p.mu.Lock()
			p.snap, p.finished = &s, n
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return p
}

// fresh waits until a read begun after the call has completed, so that
// the last snapshot shows what was visible at (or after) that moment,
// even when the moment came before the first read. Reads are served from
// the owners' published snapshots and never wait on a frozen write.
func (p *snapshots) fresh(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	want := p.begun + 1
	for p.finished < want {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.done:
			t.Fatal("the process was gone before a snapshot was read after the frozen write")
		case <-time.After(waitTimeout):
			t.Fatal("no snapshot was read after the frozen write")
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
}

// last waits until the polling ended (the process is gone) and returns
// the last complete snapshot.
func (p *snapshots) last(t *testing.T) snapshot {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		t.Fatal("the snapshots did not stop with the process")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.snap == nil {
		t.Fatal("no snapshot was read before the process was gone")
	}
	return *p.snap
}

// waitTaskEnded waits until the task and all its stages are finished.
func (m *masInstance) waitTaskEnded(taskID string) snapshot {
	m.t.Helper()
	ok, saw := poll(func() (bool, string) {
		var task engine.TaskState
		if err := m.read("mas://tasks/"+taskID, &task); err != nil {
			return false, err.Error()
		}
		saw := "task " + task.ExecutionState
		done := task.ExecutionState == engine.StateFinished && len(task.StageList) > 0
		for _, st := range task.StageList {
			saw += ", stage " + st.ExecutionState
			done = done && st.ExecutionState == engine.StateFinished
		}
		return done, saw
	})
	if !ok {
		m.t.Fatalf("timed out after %s waiting for the task and its stages to finish; last seen: %s\n%s", waitTimeout, saw, m.describeAgents())
	}
	return m.snapshot(taskID)
}

// checkKept: every message visible before is still there, unchanged, and
// the task's group and stages are still there.
func (m *masInstance) checkKept(before, after snapshot) {
	t := m.t
	t.Helper()
	now := map[string]engine.Message{}
	for _, msg := range after.conv {
		now[msg.MessageID] = msg
	}
	lost := 0
	for _, msg := range before.conv {
		got, ok := now[msg.MessageID]
		switch {
		case !ok:
			lost++
			t.Errorf("message %s (%q from %s) was visible before and is gone", msg.MessageID, short(msg.Message), msg.SenderID)
		case got.Message != msg.Message || got.SenderID != msg.SenderID || !slices.Equal(got.Receiver, msg.Receiver):
			t.Errorf("message %s changed: %q from %s to %v, was %q from %s to %v", msg.MessageID, short(got.Message), got.SenderID, got.Receiver, short(msg.Message), msg.SenderID, msg.Receiver)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged messages lost", lost, len(before.conv))
	}
	for _, a := range before.task.TaskGroup {
		if !slices.Contains(after.task.TaskGroup, a) {
			t.Errorf("agent %s left the task group", a)
		}
	}
	ids := map[string]bool{}
	for _, st := range after.task.StageList {
		ids[st.StageID] = true
	}
	for _, st := range before.task.StageList {
		if !ids[st.StageID] {
			t.Errorf("stage %s (%q) is gone", st.StageID, st.StageIntention)
		}
	}
}

// checkNoDoubles: no message twice in the conversation, no step's report
// twice in the shared info pool, no agent twice, no step lock left.
func (m *masInstance) checkNoDoubles(s snapshot) {
	t := m.t
	t.Helper()
	seen := map[string]int{}
	for _, msg := range s.conv {
		if seen[msg.MessageID]++; seen[msg.MessageID] == 2 {
			t.Errorf("message %s (%q) appears twice in the conversation", msg.MessageID, short(msg.Message))
		}
	}
	steps := map[string]int{}
	for _, si := range s.task.SharedInfoPool {
		if si.StepID == "" {
			continue
		}
		if steps[si.StepID]++; steps[si.StepID] == 2 {
			t.Errorf("step %s reported twice in the shared info pool (%q)", si.StepID, si.Content)
		}
	}
	var agents []engine.AgentBrief
	m.mustRead("mas://agents", &agents)
	names := map[string]int{}
	for _, a := range agents {
		if names[a.Name]++; names[a.Name] == 2 {
			t.Errorf("two agents named %s", a.Name)
		}
		if a.Kind != engine.KindLLM {
			continue
		}
		var doc engine.AgentState
		m.mustRead("mas://agents/"+a.AgentID, &doc)
		if len(doc.StepLock) != 0 {
			t.Errorf("%s: step lock %v left engaged", a.Name, doc.StepLock)
		}
	}
}

// checkCleanedUp: once the task ended, every agent drops its steps of it
// (the finish_task instructions), soon.
func (m *masInstance) checkCleanedUp(taskID string) {
	m.t.Helper()
	waitFor(m.t, "the agents to drop the ended task's steps", func() (bool, string) {
		var agents []engine.AgentBrief
		if err := m.read("mas://agents", &agents); err != nil {
			return false, err.Error()
		}
		var left []string
		for _, a := range agents {
			if a.Kind != engine.KindLLM {
				continue
			}
			var steps engine.AgentStep
			if err := m.read("mas://agents/"+a.AgentID+"/steps", &steps); err != nil {
				return false, err.Error()
			}
			for _, st := range steps.StepList {
				if st.TaskID == taskID {
					left = append(left, fmt.Sprintf("%s's %s step %.8s (%s)", a.Name, st.Executor, st.StepID, st.ExecutionState))
				}
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// checkTeam: the scripted team's task came out as it does without a
// crash: its summary, two stages with both workers' summaries, each
// question and answer once per stage.
func (m *masInstance) checkTeam(s snapshot) {
	t := m.t
	t.Helper()
	if s.task.TaskSummary != scripted.TaskSummary {
		t.Errorf("task summary %q, want %q", s.task.TaskSummary, scripted.TaskSummary)
	}
	if len(s.task.StageList) != 2 {
		t.Fatalf("%d stages, want 2", len(s.task.StageList))
	}
	for _, st := range s.task.StageList {
		if len(st.CompletionSummary) != 2 {
			t.Errorf("stage %s: completion summaries %v, want alice's and bob's", st.StageID, st.CompletionSummary)
		}
		for _, prefix := range []string{"QUESTION from alice", "QUESTION from bob", "ANSWER from alice", "ANSWER from bob"} {
			n := 0
			for _, msg := range s.conv {
				if msg.StageRelative == st.StageID && strings.HasPrefix(msg.Message, prefix) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("stage %s: %d messages %q, want 1", st.StageID, n, prefix)
			}
		}
	}
}

// checkRerun: the step whose LLM request was cut off by the process's end
// asked the LLM again after the restart, as the same step.
func checkRerun(t *testing.T, llm *fakellm.Server, held fakellm.Call) {
	t.Helper()
	for _, c := range llm.CallsFor(held.Skill, held.AgentName) {
		if c.N > held.N && c.StepID == held.StepID && c.Model != held.Model {
			return
		}
	}
	t.Errorf("%s's %s step %s, interrupted, was not run again after the restart", held.AgentName, held.Skill, held.StepID)
}

// checkStepsRanOnce: no step asked the LLM twice in one process (repair
// rounds aside). Each process asks for its own model (runModel), which is
// how the calls are told apart.
func checkStepsRanOnce(t *testing.T, llm *fakellm.Server, processes int) {
	t.Helper()
	type key struct{ model, step string }
	n := map[key]int{}
	models := map[string]int{}
	for _, c := range llm.Calls() {
		models[c.Model]++
		if c.Repair || c.StepID == "" {
			continue
		}
		k := key{c.Model, c.StepID}
		if n[k]++; n[k] == 2 {
			t.Errorf("%s: %s's %s step %s asked the LLM twice", c.Model, c.AgentName, c.Skill, c.StepID)
		}
	}
	for model := range models {
		if !knownModel(model, processes) {
			t.Errorf("LLM calls for model %s, not one of the %d processes' (calls per model: %v)", model, processes, models)
		}
	}
}

func knownModel(model string, processes int) bool {
	for i := 1; i <= processes; i++ {
		if model == runModel(i) {
			return true
		}
	}
	return false
}

// checkEachProcessAsked: each of the processes asked the LLM something
// (so the calls' models tell the processes apart, and each had work).
func checkEachProcessAsked(t *testing.T, llm *fakellm.Server, processes int) {
	t.Helper()
	models := map[string]int{}
	for _, c := range llm.Calls() {
		models[c.Model]++
	}
	for i := 1; i <= processes; i++ {
		if models[runModel(i)] == 0 {
			t.Errorf("process %d made no LLM call (calls per model: %v)", i, models)
		}
	}
}

// --- LLM brains

// hold holds the first LLM request it matches until the process that made
// it goes away; later ones go on to the brain.
type hold struct {
	match func(*fakellm.Call) bool
	done  atomic.Bool
	held  chan fakellm.Call
}

// startHeldTeam starts a MAS whose scripted team's first LLM request that
// match accepts is held, and hands it the team's task.
func startHeldTeam(t *testing.T, natsURL string, match func(*fakellm.Call) bool) (*hold, *fakellm.Server, *masInstance, string) {
	team := scripted.NewTeam()
	h := holdFirst(match)
	llm := fakellm.New(t)
	llm.Handle(h.wrap(team.Handle))
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL(), NATSURL: natsURL})
	m.start()
	return h, llm, m, addTask(m)
}

func holdFirst(match func(*fakellm.Call) bool) *hold {
	return &hold{match: match, held: make(chan fakellm.Call, 1)}
}

func (h *hold) wrap(next func(*fakellm.Call) fakellm.Reply) func(*fakellm.Call) fakellm.Reply {
	return func(c *fakellm.Call) fakellm.Reply {
		if h.match(c) && h.done.CompareAndSwap(false, true) {
			h.held <- *c
			return fakellm.Reply{Content: "never sent", Delay: heldDelay}
		}
		return next(c)
	}
}

// wait waits until the request is held and returns it.
func (h *hold) wait(t *testing.T) fakellm.Call {
	t.Helper()
	select {
	case c := <-h.held:
		return c
	case <-time.After(waitTimeout):
		t.Fatal("the LLM request to hold never came")
	}
	return fakellm.Call{}
}

var (
	peerRE  = regexp.MustCompile(`- ([0-9a-f-]{36}): bob's part`)
	burstRE = regexp.MustCompile(`BURST (\d+) from alice`)
)

// burstBrain is the scripted team, but in the first stage alice sends bob
// burstSize messages (no reply needed, no waiting) before asking him her
// question. The request for message trigger signals triggered; the one for
// message held is held until its process goes away.
type burstBrain struct {
	team          *scripted.Team
	trigger, held int
	triggered     chan struct{}
	fired, hung   atomic.Bool
}

func (b *burstBrain) handle(c *fakellm.Call) fakellm.Reply {
	if c.AgentName != "alice" {
		return b.team.Handle(c)
	}
	switch c.Skill {
	case "planning":
		peer := peerRE.FindStringSubmatch(c.Prompt)
		if peer == nil || !strings.Contains(scripted.Field(c.Prompt, "stage_goal"), b.team.Stages[0]) {
			break
		}
		plan := []map[string]string{planned("think", "think about the goal")}
		for i := 1; i <= burstSize; i++ {
			plan = append(plan, planned("send_message", fmt.Sprintf("BURST %d %s", i, peer[1])))
		}
		plan = append(plan, planned("send_message", "ASK_PEER "+peer[1]))
		return fakellm.Reply{Content: fakellm.Block("planned_step", fakellm.JSON(plan))}
	case "send_message":
		f := strings.Fields(scripted.StepText(c.Prompt))
		if len(f) != 3 || f[0] != "BURST" {
			break
		}
		n, _ := strconv.Atoi(f[1])
		if n == b.held && b.hung.CompareAndSwap(false, true) {
			return fakellm.Reply{Content: "never sent", Delay: heldDelay}
		}
		if n == b.trigger && b.fired.CompareAndSwap(false, true) {
			b.triggered <- struct{}{}
		}
		return fakellm.Reply{Content: fakellm.Block("send_message", fakellm.JSON(map[string]any{
			"receiver": []string{f[2]}, "message": fmt.Sprintf("BURST %d from alice", n),
			"stage_relative": scripted.Field(c.Prompt, "stage_id"), "need_reply": false, "waiting": false}))}
	}
	return b.team.Handle(c)
}

func planned(executor, text string) map[string]string {
	return map[string]string{"step_intention": executor + ": " + text, "type": "skill", "executor": executor, "text_content": text}
}

// burstMessages counts the burst messages in a conversation, by number.
func burstMessages(conv []engine.Message) map[int]int {
	out := map[int]int{}
	for _, msg := range conv {
		if f := burstRE.FindStringSubmatch(msg.Message); f != nil {
			n, _ := strconv.Atoi(f[1])
			out[n]++
		}
	}
	return out
}

// --- small helpers

// everythingBin is the installed @modelcontextprotocol/server-everything.
func everythingBin(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "downstream", "testdata", "servers", "node_modules", ".bin", "mcp-server-everything"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("server-everything is not installed: run `make test` (it runs npm ci in downstream/testdata/servers): %v", err)
	}
	return p
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func short(s string) string {
	if r := []rune(s); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return s
}
