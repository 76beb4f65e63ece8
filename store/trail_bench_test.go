package store

import (
	"context"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
)

// BenchmarkTrailAppend is what recording one LLM call (a 24 KB prompt, a
// 1 KB answer) costs the agent's goroutine: Append only (the copy and the
// queue; the writer encodes and stores it on its own goroutine). Once the
// queue (64Ki entries here) is full, Append waits on the writer, and the
// durable case measures the writer's throughput instead (about 1 ms an
// entry with an fsync each, on this machine): run it with
// -benchtime=20000x to see Append's own cost.
func BenchmarkTrailAppend(b *testing.B) {
	prompt := strings.Repeat("You are an agent of a multi-agent system. ", 560)
	entry := engine.TrailEntry{Kind: engine.TrailKindLLMCall, TaskID: "t", AgentID: "a", StepID: "s", Skill: "think",
		LLM: &engine.TrailLLM{Round: 1, Request: []engine.TrailChat{
			{Role: "system", Content: engine.Body(prompt[:4000])}, {Role: "user", Content: engine.Body(prompt)},
		}, Answer: engine.Body(strings.Repeat("<think_result>ok</think_result>", 32))}}
	b.Run("memory", func(b *testing.B) {
		tr := engine.NewMemoryTrail()
		for b.Loop() {
			tr.Append(context.Background(), entry)
		}
	})
	b.Run("durable", func(b *testing.B) {
		s, err := Open(context.Background(), Options{DataDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		tr, err := s.OpenTrail(context.Background(), TrailOptions{Queue: 1 << 16})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			tr.Append(context.Background(), entry)
		}
		b.StopTimer()
		// Everything appended lands (not measured).
		if _, err := tr.ReadTrail(context.Background(), engine.TrailQuery{TaskID: "t", Limit: 1}); err != nil {
			b.Fatal(err)
		}
	})
}
