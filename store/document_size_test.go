package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
)

// markup is an operator's message of ordinary markup (HTML, XML, generics
// in code): 32,000 bytes, within the server's limit on a text
// (limits.text_bytes, 32 KiB). encoding/json writes each '<' and '>' as
// \u003c / \u003e, six bytes: 112,000 bytes once stored.
var markup = strings.Repeat("<br>", 8000)

// controls is an operator's message of binary-ish data: 32,000 control
// characters, each written as six bytes (\u0001) however the store
// encodes JSON: 192,000 bytes once stored.
var controls = strings.Repeat("\x01", 32_000)

// privateIDs lists the message IDs of an operator's conversations.
func privateIDs(a engine.AgentState) []string {
	var ids []string
	if a.ConversationPool == nil {
		return nil
	}
	for _, msgs := range a.ConversationPool.ConversationPrivates {
		for _, p := range msgs {
			ids = append(ids, p.MessageID)
		}
	}
	return ids
}

// TestMarkupKeepsOperatorDocumentWritable: an operator's document holding
// messages of markup stays within NATS's payload limit, so its writes are
// taken: what the operator sends is in its own conversation, and what
// another operator sends it reaches its inbox and the store. The store
// writes '<', '>' and '&' as they are, not as six bytes each (\u003c),
// which put a few pages of HTML past 1 MiB.
func TestMarkupKeepsOperatorDocumentWritable(t *testing.T) {
	operatorDocumentStaysWritable(t, markup)
}

// TestControlCharactersKeepOperatorDocumentWritable: as for markup, for
// messages of control characters, which JSON writes as six bytes each
// whatever the encoder: the engine bounds a document (MaxDocumentBytes,
// 640 KiB) by its texts' stored size, not their bytes.
func TestControlCharactersKeepOperatorDocumentWritable(t *testing.T) {
	operatorDocumentStaysWritable(t, controls)
}

// operatorDocumentStaysWritable has an operator send five messages of text
// to a worker and receive four from another operator.
func operatorDocumentStaysWritable(t *testing.T, text string) {
	st := open(t, t.TempDir())
	defer st.Close()
	sys := instantSystem(t, st, quickWorker(1), nil)
	defer sys.Close()
	op := sys.OperatorID()
	w, err := sys.CreateAgent(engine.AgentConfig{Template: "researcher", Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := sys.AddTask(op, engine.AddTaskRequest{TaskName: "review", TaskIntention: "review what the operators send"})
	if err != nil {
		t.Fatal(err)
	}
	op2, err := sys.AddOperator("second")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.AgentInstruction(op, engine.AgentInstruction{Action: "add_task_participant", TaskID: task, Agents: []string{w, op2}}); err != nil {
		t.Fatal(err)
	}

	// The operator sends five long texts to its worker; each send
	// succeeds. The newest one must be in its conversation (older ones
	// may be shed by the document's bound, never the newest).
	for i := range 5 {
		sent, err := sys.HumanSend(op, engine.HumanMessage{TaskID: task, Receiver: []string{w}, Content: text})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		a, _ := sys.Agent(op)
		if !slices.Contains(privateIDs(a), sent[0].MessageID) {
			t.Errorf("send %d: HumanSend succeeded and the message was delivered, but it is not in the operator's own conversation", i)
		}
	}

	// Another operator sends it four long texts: each is accepted,
	// so each must reach its inbox and be stored.
	for i := range 4 {
		sent, err := sys.HumanSend(op2, engine.HumanMessage{TaskID: task, Receiver: []string{op}, Content: text, NeedReply: true})
		if err != nil {
			t.Fatalf("op2's message %d: %v", i, err)
		}
		id := sent[0].MessageID
		inbox, err := sys.Inbox(op)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(inbox, func(e engine.InboxEntry) bool { return e.MessageID == id }) {
			t.Errorf("op2's message %d: accepted for the operator (HumanSend succeeded) but not in its inbox (%d entries)", i, len(inbox))
		}
		stored, err := st.ReadAgent(context.Background(), op)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(privateIDs(stored), id) {
			t.Errorf("op2's message %d: not in the operator's stored document, which is past NATS's payload limit", i)
		}
	}
}

// TestOversizedWritesAreTooLarge: a task document, an agent's head, a
// chunk of an agent's ended steps and a message past NATS's payload limit
// (1 MiB) are refused as an engine.TooLargeError naming the size and the
// limit — which the engine answers by bounding harder, never by writing
// the same document again — and the store's next write of the document,
// within the limit, is taken (the refused one left no revision unsure).
func TestOversizedWritesAreTooLarge(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	ctx := t.Context()
	huge := strings.Repeat("x", 1<<20+1)
	check := func(what string, err error) {
		t.Helper()
		tl, ok := errors.AsType[*engine.TooLargeError](err)
		switch {
		case !errors.Is(err, engine.ErrTooLarge) || !ok:
			t.Errorf("%s: error %v, want an engine.TooLargeError", what, err)
		case tl.Limit != 1<<20 || tl.Size <= tl.Limit || !strings.Contains(err.Error(), fmt.Sprint(tl.Size)) || !strings.Contains(err.Error(), "1048576"):
			t.Errorf("%s: %q (size %d, limit %d): want the size and NATS's limit of 1048576 bytes", what, err, tl.Size, tl.Limit)
		}
	}

	task := sampleTask("big")
	if err := st.PutTask(ctx, &task); err != nil {
		t.Fatal(err)
	}
	task.TaskIntention = huge
	check("a task", st.PutTask(ctx, &task))
	task.TaskIntention = "within the limit again"
	if err := st.PutTask(ctx, &task); err != nil {
		t.Errorf("the task's next write, within the limit: %v", err)
	}

	agent := engine.AgentState{AgentID: "head", Name: "h", AgentStep: engine.AgentStep{AgentID: "head"}, Profile: huge}
	check("an agent's head", st.PutAgent(ctx, &agent))
	agent.Profile = "short"
	if err := st.PutAgent(ctx, &agent); err != nil {
		t.Errorf("the agent's next write, within the limit: %v", err)
	}

	chunked := engine.AgentState{AgentID: "chunked", Name: "c", AgentStep: engine.AgentStep{AgentID: "chunked"}}
	for i := range 8 {
		chunked.AgentStep.StepList = append(chunked.AgentStep.StepList, engine.StepState{StepID: fmt.Sprint("s", i),
			Type: engine.StepSkill, Executor: "think", ExecutionState: engine.StateFinished, TextContent: "t"})
	}
	chunked.AgentStep.StepList[3].TextContent = huge
	check("a chunk of ended steps", st.PutAgent(ctx, &chunked))

	m := engine.Message{MessageID: "m-big", TaskID: "big", Message: huge}
	check("a message", st.PutMessage(ctx, &m))
}
