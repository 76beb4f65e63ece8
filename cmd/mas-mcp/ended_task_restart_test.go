package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
)

// kill -9 during cancel_task, after the task's document (failed) was
// stored and before its finish_task instructions were (a NATS proxy
// freezes mas-mcp's writes at the first of them). The restart sends the
// instructions again (task.implied) after the agents' loops run again:
// the worker and the manager must start no step of the cancelled task
// meanwhile (no LLM call for work the operator cancelled). On the restart
// the proxy holds mas-mcp's write of the first finish_task instruction
// until an LLM call of the cancelled task came (at most holdGuard), so the
// outcome does not depend on which goroutine the machine runs first.
func TestNoStepOfACancelledTaskRunsAfterAKillDuringTheCancel(t *testing.T) {
	natsURL := startNATS(t)
	llm := fakellm.New(t)
	var mu sync.Mutex
	var calls []fakellm.Call
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		mu.Lock()
		calls = append(calls, *c)
		mu.Unlock()
		// Every step's call lasts until its step is cancelled.
		return fakellm.Reply{Delay: time.Hour}
	})
	proxy := startNATSFreezer(t, natsURL, isFinishTask)
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL(), NATSURL: proxy.url, NoRace: true})
	m.start()
	taskID := addTask(m)
	w := addWorker(m, taskID)
	m.callTool("manage_task", map[string]any{"action": "add_stage", "task_id": taskID,
		"stages": []map[string]any{{"stage_intention": "work", "agent_allocation": map[string]string{w: "do the work"}}}}, nil)
	waitFor(t, "the worker's call", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range calls {
			if c.AgentID == w {
				return true, ""
			}
		}
		return false, "no call of the worker yet"
	})
	// The cancel hangs at the frozen write: it is not waited for.
	cs := m.cs
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "manage_task", Arguments: map[string]any{"action": "cancel_task", "task_id": taskID, "summary": "stop"}})
	}()
	proxy.wait(t)
	m.kill()

	mu.Lock()
	before := len(calls)
	mu.Unlock()
	came := make(chan struct{})
	var once sync.Once
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		mu.Lock()
		calls = append(calls, *c)
		mu.Unlock()
		if strings.Contains(c.Prompt, taskID) {
			once.Do(func() { close(came) })
		}
		return fakellm.Reply{Delay: time.Hour}
	})
	holder := startNATSHolder(t, natsURL, isFinishTask, came, holdGuard)
	m.opts.NATSURL = holder
	dropLease(t, natsURL)
	m.start()
	waitFor(t, "the cancelled task and the worker without its steps", func() (bool, string) {
		var ts engine.TaskState
		if err := m.read("mas://tasks/"+taskID, &ts); err != nil {
			return false, err.Error()
		}
		var a engine.AgentState
		if err := m.read("mas://agents/"+w, &a); err != nil {
			return false, err.Error()
		}
		for _, s := range a.AgentStep.StepList {
			if s.TaskID == taskID {
				return false, "the worker still has steps of the task"
			}
		}
		return ts.ExecutionState == engine.StateFailed, "task " + ts.ExecutionState
	})
	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls[before:] {
		if strings.Contains(c.Prompt, taskID) {
			t.Errorf("after the restart, %s (%s) made an LLM call (%s, step %s) for task %s, cancelled before the kill", c.AgentName, c.AgentID, c.Skill, c.StepID, taskID)
		}
	}
}

// isFinishTask matches mas-mcp's publish of a finish_task instruction.
func isFinishTask(subject string, payload []byte) bool {
	var doc struct {
		Message *engine.Message `json:"message"`
	}
	return strings.HasPrefix(subject, "mas.msg.") && json.Unmarshal(payload, &doc) == nil && doc.Message != nil &&
		doc.Message.Instruction != nil && doc.Message.Instruction.FinishTask != nil
}

// holdGuard bounds how long startNATSHolder holds a write: well within
// readyTimeout (the restart's StartFrom sends the instructions before it
// serves, and its write of the held one is tried again meanwhile).
const holdGuard = 15 * time.Second

// startNATSHolder is a NATS proxy (startNATSProxy) that forwards
// mas-mcp's protocol as it is, but holds the first publish match accepts
// until release is closed or guard passed: a slow write (what the
// connection sends after it goes on meanwhile: the store's lease, the
// other writes). It returns its URL.
func startNATSHolder(t *testing.T, natsURL string, match func(subject string, payload []byte) bool, release <-chan struct{}, guard time.Duration) string {
	t.Helper()
	var held atomic.Bool
	var holding sync.WaitGroup
	stop := make(chan struct{})
	url := startNATSProxy(t, natsURL, func(subject string, payload []byte, send func()) bool {
		if !match(subject, payload) || !held.CompareAndSwap(false, true) {
			send()
			return true
		}
		holding.Add(1)
		go func() {
			defer holding.Done()
			select {
			case <-release:
			case <-time.After(guard):
			case <-stop:
				return
			}
			send()
		}()
		return true
	})
	// Runs before the proxy's own cleanup (registered earlier): the held
	// write is let go of before its connection closes.
	t.Cleanup(func() {
		close(stop)
		holding.Wait()
	})
	return url
}
