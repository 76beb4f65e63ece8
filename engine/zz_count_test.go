package engine

import (
	"context"
	"testing"
)

func TestZZCountWrites(t *testing.T) {
	store := NewMemoryStore()
	b := newTestbed(t, func(c *Config) { c.Store = store })
	w := b.newAgent("w")
	task := b.newTask("count", w)
	b.settle()
	b.sc.onText("x", func(context.Context, *ExecInput) *Output { return &Output{} })
	before := store.Writes()
	var specs []StepSpec
	for range 50 {
		specs = append(specs, spec(SkillThink, "x"))
	}
	ids := b.inject(w, task, NoRelative, false, specs...)
	b.waitFor("steps", func() bool { return b.stepDone(w, ids[len(ids)-1]) })
	b.settle()
	t.Logf("writes per step: %.2f", float64(store.Writes()-before)/50)
}
