package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/store"
)

// TestExport: `mas-mcp export --task ID` writes the task's whole trail as
// JSON Lines, in order, bodies filled in, secrets scrubbed — beside the
// running owner of the data directory, and with the directory not in use.
func TestExport(t *testing.T) {
	const secret = "sk-SENTINEL-export-5150"
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	tr, err := st.OpenTrail(ctx, store.TrailOptions{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("a long system prompt ", 500)
	for i, task := range []string{"T", "U", "T", "T"} {
		tr.Append(ctx, engine.TrailEntry{Kind: engine.TrailKindLLMCall, TaskID: task, StepID: string(rune('a' + i)), LLM: &engine.TrailLLM{
			Round: 1, Request: []engine.TrailChat{{Role: "system", Content: engine.Body(big)}}, Answer: engine.Body("key " + secret)}})
	}
	// Written by the owner's writer before another process reads.
	if _, err := tr.ReadTrail(ctx, engine.TrailQuery{TaskID: "T"}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		var out, errs bytes.Buffer
		getenv := func(string) string { return "" }
		if err := Export(ctx, []string{"--task", "T", "--data-dir", dir}, getenv, &out, &errs); err != nil {
			t.Fatalf("%s: %v (%s)", when, err, errs.String())
		}
		if strings.Contains(out.String(), secret) {
			t.Errorf("%s: the secret is in the export", when)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		var steps []string
		for _, l := range lines {
			var e engine.TrailEntry
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("%s: line %q: %v", when, l, err)
			}
			if e.TaskID != "T" || e.LLM.Request[0].Content.Text != big {
				t.Errorf("%s: entry of task %s, system prompt of %d bytes", when, e.TaskID, len(e.LLM.Request[0].Content.Text))
			}
			steps = append(steps, e.StepID)
		}
		if got := strings.Join(steps, ","); got != "a,c,d" {
			t.Errorf("%s: exported steps %s, want a,c,d", when, got)
		}
	}
	check("beside the running owner")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	check("with the directory not in use")

	var out, errs bytes.Buffer
	if err := Export(ctx, []string{"--data-dir", dir}, func(string) string { return "" }, &out, &errs); err == nil || !strings.Contains(err.Error(), "--task") {
		t.Errorf("without --task: %v", err)
	}
}
