package app

import (
	"testing"

	"github.com/mas-mcp/mas-mcp/skills"
)

// TestEconomyFlags: the prompt budget and the memory caps (issue 14) have
// defaults, flags that set them, and reject what is not positive.
func TestEconomyFlags(t *testing.T) {
	def, err := loadConfig(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if def.PromptBudget != skills.DefaultPromptBudget || def.MemoryMaxEntries != 30 || def.MemoryMaxChars != 6000 {
		t.Errorf("defaults: prompt_budget %d, memory_max_entries %d, memory_max_chars %d", def.PromptBudget, def.MemoryMaxEntries, def.MemoryMaxChars)
	}
	got, err := loadConfig([]string{"--prompt-budget", "9000", "--memory-max-entries", "5", "--memory-max-chars", "700"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got.PromptBudget != 9000 || got.MemoryMaxEntries != 5 || got.MemoryMaxChars != 700 {
		t.Errorf("flags: prompt_budget %d, memory_max_entries %d, memory_max_chars %d", got.PromptBudget, got.MemoryMaxEntries, got.MemoryMaxChars)
	}
	for _, args := range [][]string{{"--prompt-budget", "-1"}, {"--memory-max-entries", "-1"}, {"--memory-max-chars", "-5"}} {
		if _, err := loadConfig(args, env(nil)); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
