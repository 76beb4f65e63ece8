package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/engine"
)

type trail interface {
	engine.Trail
	engine.TrailReader
}

const trailSecret = "pw-SENTINEL-trail-0042"

// trailEntries appends a small scripted trail: two tasks, two agents, every
// kind, a large body repeated, a secret, an entry appended twice.
func trailEntries(tr engine.Trail, big string) {
	ctx := context.Background()
	at := time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)
	for i := range 6 {
		agent := []string{"a1", "a2"}[i%2]
		tr.Append(ctx, engine.TrailEntry{
			Time: at, Kind: engine.TrailKindLLMCall, TaskID: "t1", AgentID: agent, StepID: fmt.Sprintf("s%d", i), Skill: "think",
			LLM: &engine.TrailLLM{Round: 1, Request: []engine.TrailChat{
				{Role: "system", Content: engine.Body(big)},
				{Role: "user", Content: engine.Body(fmt.Sprintf("step %d", i))},
			}, Answer: engine.Body("<think_result>ok " + trailSecret + "</think_result>"), PromptTokens: 10 + i},
		})
		tr.Append(ctx, engine.TrailEntry{Kind: engine.TrailKindMessage, TaskID: "t2", AgentID: agent,
			Message: &engine.TrailMessage{MessageID: fmt.Sprint(i), Text: engine.Body("other task")}})
	}
	for range 2 {
		tr.Append(ctx, engine.TrailEntry{ID: "msg/m1", Kind: engine.TrailKindInstruction, TaskID: "t1", AgentID: "system",
			Message: &engine.TrailMessage{MessageID: "m1", Text: engine.Body("start the stage")}})
	}
	tr.Append(ctx, engine.TrailEntry{Kind: engine.TrailKindToolCall, TaskID: "t1", AgentID: "a1", StepID: "s9",
		Tool: &engine.TrailTool{Server: "fs", Op: "call_tool", Name: "read", Arguments: engine.JSONBody(map[string]any{"path": "/x"}),
			Result: engine.Body(big + "!"), DurationMS: 3}})
}

// readAll pages through q with the given page size, checking that every
// page but the last carries a next_cursor.
func readAll(t *testing.T, r engine.TrailReader, q engine.TrailQuery) []engine.TrailEntry {
	t.Helper()
	var out []engine.TrailEntry
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("more than 100 pages")
		}
		p, err := r.ReadTrail(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Entries...)
		if p.NextCursor == "" {
			return out
		}
		if len(p.Entries) != q.Limit {
			t.Fatalf("page of %d entries (limit %d) with next_cursor %q", len(p.Entries), q.Limit, p.NextCursor)
		}
		q.Cursor = p.NextCursor
	}
}

type brief struct{ Kind, Agent, Step string }

func briefs(es []engine.TrailEntry) []brief {
	var out []brief
	for _, e := range es {
		out = append(out, brief{e.Kind, e.AgentID, e.StepID})
	}
	return out
}

func checkTrail(t *testing.T, tr trail, scrubbed bool) {
	big := strings.Repeat("You are an agent of a multi-agent system. ", 200)
	trailEntries(tr, big)
	all := readAll(t, tr, engine.TrailQuery{TaskID: "t1", Limit: 2})
	want := []brief{
		{"llm_call", "a1", "s0"}, {"llm_call", "a2", "s1"}, {"llm_call", "a1", "s2"},
		{"llm_call", "a2", "s3"}, {"llm_call", "a1", "s4"}, {"llm_call", "a2", "s5"},
		{"instruction", "system", ""}, {"tool_call", "a1", "s9"},
	}
	if diff := cmp.Diff(want, briefs(all)); diff != "" {
		t.Fatalf("task t1's trail mismatch (-want +got):\n%s", diff)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Errorf("entry %d: seq %d after %d", i, all[i].Seq, all[i-1].Seq)
		}
	}
	if got := all[0].LLM.Request[0].Content.Text; got != big {
		t.Errorf("the system prompt came back with %d bytes, want %d", len(got), len(big))
	}
	if got := all[7].Tool.Result.Text; got != big+"!" {
		t.Errorf("the tool result came back with %d bytes, want %d", len(got), len(big)+1)
	}
	if got := all[3].LLM.PromptTokens; got != 13 {
		t.Errorf("prompt tokens %d, want 13", got)
	}
	if scrubbed && strings.Contains(all[0].LLM.Answer.Text, trailSecret) {
		t.Errorf("the secret is in the trail: %q", all[0].LLM.Answer.Text)
	}

	for _, c := range []struct {
		q    engine.TrailQuery
		want []brief
	}{
		{engine.TrailQuery{TaskID: "t1", AgentID: "a2", Limit: 1}, []brief{{"llm_call", "a2", "s1"}, {"llm_call", "a2", "s3"}, {"llm_call", "a2", "s5"}}},
		{engine.TrailQuery{TaskID: "t1", Kind: "tool_call"}, []brief{{"tool_call", "a1", "s9"}}},
		{engine.TrailQuery{TaskID: "t1", StepID: "s4", Limit: 1}, []brief{{"llm_call", "a1", "s4"}}},
		{engine.TrailQuery{TaskID: "t1", AgentID: "a1", Kind: "llm_call", Limit: 2}, []brief{{"llm_call", "a1", "s0"}, {"llm_call", "a1", "s2"}, {"llm_call", "a1", "s4"}}},
		{engine.TrailQuery{TaskID: "nope"}, nil},
	} {
		if diff := cmp.Diff(c.want, briefs(readAll(t, tr, c.q))); diff != "" {
			t.Errorf("%+v: mismatch (-want +got):\n%s", c.q, diff)
		}
	}
	if got := len(readAll(t, tr, engine.TrailQuery{TaskID: "t2", Limit: 4})); got != 6 {
		t.Errorf("task t2 has %d entries, want 6", got)
	}
	for _, q := range []engine.TrailQuery{{}, {TaskID: "t1", Kind: "bogus"}, {TaskID: "t1", Cursor: "x"}, {TaskID: "t1", Limit: -1}} {
		if _, err := tr.ReadTrail(context.Background(), q); err == nil {
			t.Errorf("%+v: no error", q)
		}
	}
}

func TestMemoryTrail(t *testing.T) {
	checkTrail(t, engine.NewMemoryTrail(), false)
}

func TestTrailDurable(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	tr, err := s.OpenTrail(context.Background(), TrailOptions{Secrets: []string{trailSecret}})
	if err != nil {
		t.Fatal(err)
	}
	checkTrail(t, tr, true)
	// The repeated system prompt is kept once; with the tool result, two bodies.
	keys, err := tr.bodies.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	if n != 2 {
		t.Errorf("%d bodies kept, want 2", n)
	}
	// Appended, closed, reopened: every entry is there.
	tr.Append(context.Background(), engine.TrailEntry{Kind: engine.TrailKindMessage, TaskID: "t1", AgentID: "a1",
		Message: &engine.TrailMessage{MessageID: "last", Text: engine.Body("written before the close")}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	tr, err = s.OpenTrail(context.Background(), TrailOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	all := readAll(t, tr, engine.TrailQuery{TaskID: "t1", Limit: 3})
	if len(all) != 9 || all[8].Message == nil || all[8].Message.MessageID != "last" {
		t.Fatalf("after a restart: %d entries, last %+v; want 9, the last one the message \"last\"", len(all), all[len(all)-1])
	}
	if got := all[0].LLM.Request[0].Content.Text; !strings.HasPrefix(got, "You are an agent") {
		t.Errorf("after a restart the system prompt reads %.40q", got)
	}
}

func TestTrailCutsLargeBodies(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	tr, err := s.OpenTrail(context.Background(), TrailOptions{MaxBody: 1000})
	if err != nil {
		t.Fatal(err)
	}
	tr.Append(context.Background(), engine.TrailEntry{Kind: engine.TrailKindToolCall, TaskID: "t", Tool: &engine.TrailTool{
		Result: engine.Body(strings.Repeat("x", 5000))}})
	p, err := tr.ReadTrail(context.Background(), engine.TrailQuery{TaskID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 1 {
		t.Fatalf("%d entries, want 1", len(p.Entries))
	}
	if got := p.Entries[0].Tool.Result.Text; !strings.HasPrefix(got, strings.Repeat("x", 1000)+"…[4000 bytes cut]") {
		t.Errorf("cut body: %.60q… (%d bytes)", got, len(got))
	}
}

// TestTrailScrubRule: both trails scrub by the engine's rule
// (internal/secret): a secret is replaced wherever it appears, in a body
// and in the entry's own fields, also when JSON spells it escaped (a
// password with a quote, an ampersand or angle brackets); one shorter than
// secret.MinLen (a local endpoint's dummy key "ollama") is left, as the
// state leaves it.
func TestTrailScrubRule(t *testing.T) {
	const pw, short = `pw"SENTINEL&trail<42>`, "ollama"
	durable := func() trail {
		s := open(t, t.TempDir())
		t.Cleanup(func() { s.Close() })
		tr, err := s.OpenTrail(context.Background(), TrailOptions{Secrets: []string{pw, short}})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	memory := func() trail {
		m := engine.NewMemoryTrail()
		m.Scrub(pw, short)
		return m
	}
	for name, mk := range map[string]func() trail{"durable": durable, "memory": memory} {
		t.Run(name, func(t *testing.T) {
			tr := mk()
			tr.Append(context.Background(), engine.TrailEntry{Kind: engine.TrailKindMessage, TaskID: "t1", AgentID: "a1",
				Message: &engine.TrailMessage{MessageID: "m1", Text: engine.Body("ask " + short + " with " + pw)},
				Note:    "note " + pw + " " + short})
			all := readAll(t, tr, engine.TrailQuery{TaskID: "t1"})
			if len(all) != 1 || all[0].Message == nil {
				t.Fatalf("read %+v, want the one message", all)
			}
			got := []string{all[0].Message.Text.Text, all[0].Note}
			want := []string{"ask " + short + " with [redacted]", "note [redacted] " + short}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("scrubbed texts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
