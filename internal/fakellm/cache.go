package fakellm

import "github.com/mas-mcp/mas-mcp/llm"

// Prompt caching as OpenAI does it (and DeepSeek, vLLM with prefix caching):
// a request whose beginning is byte-identical to the beginning of an earlier
// request reports that shared prefix as cached tokens, counted only from
// 1024 tokens on and in steps of 128 tokens. The fake counts four bytes per
// token, as its usage estimate does.
const (
	cacheMinTokens  = 1024
	cacheStepTokens = 128
	charsPerToken   = 4
	// cacheEntries bounds the prompts remembered (a provider's cache
	// expires after minutes; a test's last prompts are what matter).
	cacheEntries = 64
)

// prefixCache remembers the last prompts seen. It is not safe for
// concurrent use: playbook.mu guards it.
type prefixCache struct {
	prompts []string // oldest first, at most cacheEntries
	next    int      // where the next prompt goes once full
}

// serialize is the byte stream a provider would match prefixes on: every
// message's role and content, in order.
func serialize(msgs []llm.Message) string {
	n := 0
	for _, m := range msgs {
		n += len(m.Role) + len(m.Content) + 2
	}
	b := make([]byte, 0, n)
	for _, m := range msgs {
		b = append(b, m.Role...)
		b = append(b, '\n')
		b = append(b, m.Content...)
		b = append(b, '\n')
	}
	return string(b)
}

// lookup returns the cached tokens of prompt (the longest prefix it shares
// with a remembered prompt, rounded down to the caching granularity) and
// then remembers it.
func (pc *prefixCache) lookup(prompt string) int {
	best := 0
	for _, p := range pc.prompts {
		best = max(best, commonPrefix(p, prompt))
	}
	if len(pc.prompts) < cacheEntries {
		pc.prompts = append(pc.prompts, prompt)
	} else {
		pc.prompts[pc.next] = prompt
		pc.next = (pc.next + 1) % cacheEntries
	}
	return cachedTokens(best)
}

// cachedTokens rounds a shared prefix of n bytes to what a provider reports.
func cachedTokens(n int) int {
	t := n / charsPerToken
	if t < cacheMinTokens {
		return 0
	}
	return cacheMinTokens + (t-cacheMinTokens)/cacheStepTokens*cacheStepTokens
}

// commonPrefix is the length of the longest common prefix of a and b:
// whole chunks compared at memory speed, then bytes in the first chunk
// that differs.
func commonPrefix(a, b string) int {
	const chunk = 256
	n := min(len(a), len(b))
	i := 0
	for i+chunk <= n && a[i:i+chunk] == b[i:i+chunk] {
		i += chunk
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}
