package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// TestBudgetConfig: --task-token-budget sets the default task budget, the
// budgets section the rest (prices per model), and bad values are refused
// naming the field.
func TestBudgetConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mas.yaml")
	if err := os.WriteFile(file, []byte(`
budgets:
  task_tokens: 50000
  agent_tokens: 20000
  operator_daily_tokens: 1000000
  task_cost: 2.5
  prices:
    gpt-4o-mini: {prompt: 0.15, completion: 0.6, cached: 0.075}
    "*": {prompt: 1, completion: 4}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig([]string{"--config", file, "--task-token-budget", "80000"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := engine.BudgetConfig{
		TaskTokens: 80000, AgentTokens: 20000, OperatorDailyTokens: 1000000, TaskCost: 2.5, DefaultModel: cfg.LLM.Model,
		Prices: map[string]engine.Price{"gpt-4o-mini": {Prompt: 0.15, Completion: 0.6, Cached: 0.075}, "*": {Prompt: 1, Completion: 4}},
	}
	if diff := cmp.Diff(want, cfg.Budgets.engine(cfg.LLM.Model)); diff != "" {
		t.Errorf("budgets mismatch (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--task-token-budget", "-1"}, "budgets.task_tokens -1 (--task-token-budget): must not be negative"},
	} {
		if _, err := loadConfig(c.args, env(nil)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	if err := os.WriteFile(file, []byte("budgets:\n  task_cost: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig([]string{"--config", file}, env(nil)); err == nil || !strings.Contains(err.Error(), "budgets.task_cost: a cost budget needs budgets.prices") {
		t.Errorf("a cost budget without prices: %v", err)
	}
}
