package fakellm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mas-mcp/mas-mcp/llm"
)

func TestCachedTokens(t *testing.T) {
	tests := []struct {
		bytes, want int
	}{
		{0, 0},
		{4*1024 - 1, 0},    // 1023 tokens: below the minimum
		{4 * 1024, 1024},   // exactly the minimum
		{4*1151 + 3, 1024}, // 1151 tokens: not yet one more step
		{4 * 1152, 1152},
		{4 * 5000, 4992},
	}
	for _, tt := range tests {
		if got := cachedTokens(tt.bytes); got != tt.want {
			t.Errorf("cachedTokens(%d) = %d, want %d", tt.bytes, got, tt.want)
		}
	}
}

// TestPrefixCacheOverHTTP sends requests through the llm package's OpenAI
// client: the first is not cached, a second sharing a long prefix reports
// the shared part as usage.prompt_tokens_details.cached_tokens, and a short
// prompt reports nothing.
func TestPrefixCacheOverHTTP(t *testing.T) {
	s := New(t)
	s.CachePrefixes()
	s.Handle(func(*Call) Reply { return Reply{Content: "ok"} })
	client, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: s.BaseURL(), Model: "m", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	fixed := strings.Repeat("f", 8000) // 2000 tokens with the "system\n" role line
	send := func(system, user string) llm.Usage {
		t.Helper()
		resp, err := client.Complete(t.Context(), &llm.Request{Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: system}, {Role: llm.RoleUser, Content: user}}})
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		return resp.Usage
	}
	var got []int
	got = append(got, send(fixed, "first question").CachedTokens)
	got = append(got, send(fixed, "second question").CachedTokens)
	got = append(got, send("short", "prompt").CachedTokens)
	got = append(got, send(fixed, "first question").CachedTokens)
	// "system\n" + 8000 bytes + "\nuser\n" = 8013 shared bytes = 2003 tokens
	// → 1024 + 7×128 = 1920; an identical request shares all 8029 bytes
	// (2007 tokens) → 1920 too; the whole prompt is 2007 tokens.
	want := []int{0, 1920, 0, 1920}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cached tokens per call mismatch (-want +got):\n%s", diff)
	}
	for _, c := range s.Calls() {
		if c.CachedTokens > promptChars(c.Messages)/4 {
			t.Errorf("call %d: cached %d tokens of a %d-byte prompt", c.N, c.CachedTokens, promptChars(c.Messages))
		}
	}
}
