package main

// Requirements on documents at their bound (engine.Config.MaxDocumentBytes,
// 640 KiB, under NATS's 1 MiB payload limit), with the real binary on its
// embedded NATS server and the scripted team on the fake LLM: what an
// agent or operator sends or asks for is either stored within the bound
// and shown, or refused before anything is written with an error naming
// the field and the limit. Each test waits on events (the fake LLM's
// calls, the process's log lines), never on a timer.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// payloadRefusals counts the store's refusals of documents too large for
// NATS in a process's log.
func payloadRefusals(logs string) int { return strings.Count(logs, "maximum payload exceeded") }

// TestAddStageOverTheDocumentBoundNamesTheField: the operator adds 40
// stages in one manage_task add_stage, each stage_intention 32 KiB —
// every field within its configured limit (limits.list_items 64,
// limits.text_bytes 32768; the request 1.3 MB, under http.max_body_bytes'
// 4 MiB) but together twice the task document's bound.
//
// Required (README "Limits": "a clear message naming the field when
// reached"): the call is refused before anything is written, with an
// error that names the field (stages), the size the task's document would
// take and its limit; the task keeps its stages; nothing is refused by
// the store. 15 such stages fit and are added. (Found by review: the call
// failed with the store's own "nats: maximum payload exceeded", and 20
// such stages were accepted above the bound.)
func TestAddStageOverTheDocumentBoundNamesTheField(t *testing.T) {
	t.Parallel()
	user := &scripted.ToolUser{}
	llm := fakellm.New(t)
	llm.Handle(user.Handle)
	m := newMAS(t, masOptions{LLMURL: llm.BaseURL()})
	m.start()
	taskID := addTask(m)
	w := addWorker(m, taskID)

	stages := func(n int) []map[string]any {
		var list []map[string]any
		for i := range n {
			list = append(list, map[string]any{
				"stage_intention":  fmt.Sprintf("%03d ", i) + strings.Repeat("s", 32<<10-4), // 32768 bytes: at limits.text_bytes
				"agent_allocation": map[string]string{w: "do part " + fmt.Sprint(i)},
			})
		}
		return list
	}
	before := len(m.snapshot(taskID).task.StageList)
	for _, n := range []int{40, 20} {
		res, err := m.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "manage_task",
			Arguments: map[string]any{"action": "add_stage", "task_id": taskID, "stages": stages(n)}})
		if err != nil {
			t.Fatal(err)
		}
		msg := textOf(res)
		if !res.IsError {
			t.Errorf("add_stage of %d stages of 32 KiB (the task's document past its bound of 640 KiB) was accepted: %.300s", n, msg)
			continue
		}
		if !strings.Contains(msg, "stages") || !strings.Contains(msg, "655360") || strings.Contains(msg, "nats") {
			t.Errorf("add_stage of %d stages of 32 KiB refused with %q: the error must name the field (stages) and the limit (655360 bytes), not the store's refusal", n, msg)
		}
		if got := len(m.snapshot(taskID).task.StageList); got != before {
			t.Errorf("after the refused add_stage of %d stages the task has %d stages, %d before", n, got, before)
		}
	}
	m.callTool("manage_task", map[string]any{"action": "add_stage", "task_id": taskID, "stages": stages(15)}, nil)
	if got := len(m.snapshot(taskID).task.StageList); got != before+15 {
		t.Errorf("after adding 15 stages of 32 KiB the task has %d stages, %d before", got, before)
	}
	if n := payloadRefusals(m.logs()); n > 0 {
		t.Errorf("the store refused a document as too large %d times (maximum payload exceeded)", n)
	}
}
