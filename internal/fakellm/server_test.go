package fakellm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mas-mcp/mas-mcp/llm"
)

// Answer is what a client got back: the content, or the error message.
type Answer struct {
	Status int
	Text   string
}

// result is a decoded response of the fake.
type result struct {
	Answer
	RetryAfter string
	ErrType    string
	Body       wireResponse
}

func wireOf(msgs []llm.Message) []wireMessage {
	out := make([]wireMessage, len(msgs))
	for i, m := range msgs {
		out[i] = wireMessage{Role: m.Role, Content: m.Content}
	}
	return out
}

// send posts body (marshalled unless it is a string) to url.
func send(ctx context.Context, method, url string, body any) (result, error) {
	raw, ok := body.(string)
	if !ok {
		b, err := json.Marshal(body)
		if err != nil {
			return result{}, err
		}
		raw = string(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(raw))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	r := result{Answer: Answer{Status: resp.StatusCode}, RetryAfter: resp.Header.Get("Retry-After")}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return r, fmt.Errorf("Content-Type %q, want application/json", ct)
	}
	var out struct {
		wireResponse
		Error *wireError `json:"error"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&out); err != nil {
		return r, fmt.Errorf("decode %s: %w", data, err)
	}
	r.Body = out.wireResponse
	switch {
	case out.Error != nil:
		r.Text, r.ErrType = out.Error.Message, out.Error.Type
	case len(out.Choices) == 1:
		r.Text = out.Choices[0].Message.Content
	default:
		return r, fmt.Errorf("no error and %d choices in %s", len(out.Choices), data)
	}
	return r, nil
}

// complete sends msgs to s as a chat completion.
func complete(t testing.TB, s *Server, msgs []llm.Message) result {
	t.Helper()
	r, err := send(t.Context(), http.MethodPost, s.BaseURL()+"/chat/completions",
		wireRequest{Model: "test-model", Messages: wireOf(msgs)})
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	return r
}

func TestServerScript(t *testing.T) {
	planA := ask("a1", "Alice", "s1", "planning")
	planB := ask("b1", "Bob", "s2", "planning")
	sumA := ask("a1", "Alice", "s3", "summary")
	ok := func(text string) Answer { return Answer{http.StatusOK, text} }
	noScript := func(msgs []llm.Message) Answer {
		c := newCall("", msgs, nil, 0)
		return Answer{http.StatusInternalServerError, noScript(&c)}
	}
	tests := []struct {
		name      string
		rules     []Rule
		fallback  func(*Call) Reply
		requests  [][]llm.Message
		want      []Answer
		pending   []string
		unmatched []int // N of unmatched calls
	}{
		{
			name: "first unexhausted matching rule answers",
			rules: []Rule{
				{Skill: "planning", Reply: Reply{Content: "A"}},
				{Reply: Reply{Content: "B"}},
			},
			requests:  [][]llm.Message{sumA, planA, planA},
			want:      []Answer{ok("B"), ok("A"), noScript(planA)},
			unmatched: []int{3},
		},
		{
			name: "Times counts, -1 never runs out",
			rules: []Rule{
				{Skill: "planning", Times: 2, Reply: Reply{Content: "A"}},
				{Skill: "planning", Times: -1, Reply: Reply{Content: "B"}},
				{Skill: "planning", Times: 3, Reply: Reply{Content: "never"}},
			},
			requests: [][]llm.Message{planA, planB, planA, planB},
			want:     []Answer{ok("A"), ok("A"), ok("B"), ok("B")},
			pending:  []string{`rule{skill="planning" times=unlimited}`, `rule{skill="planning" times=3}`},
		},
		{
			name: "agent by id or name",
			rules: []Rule{
				{Agent: "Bob", Reply: Reply{Content: "to Bob"}},
				{Agent: "a1", Times: -1, Reply: Reply{Content: "to a1"}},
			},
			requests:  [][]llm.Message{planA, planB, sumA, planB},
			want:      []Answer{ok("to a1"), ok("to Bob"), ok("to a1"), noScript(planB)},
			pending:   []string{`rule{agent="a1" times=unlimited}`},
			unmatched: []int{4},
		},
		{
			name: "Contains",
			rules: []Rule{
				{Contains: "- step_id: s2", Reply: Reply{Content: "s2"}},
				{Contains: "- step_id: s1", Reply: Reply{Content: "s1"}},
			},
			requests: [][]llm.Message{planA, planB},
			want:     []Answer{ok("s1"), ok("s2")},
		},
		{
			name: "repair round",
			rules: []Rule{
				{Skill: "planning", Repair: new(true), Reply: Reply{Content: Block("planned_step", "[]")}},
				{Skill: "planning", Repair: new(false), Reply: Reply{Content: Garbage}},
			},
			requests: [][]llm.Message{planA, repair(planA, Garbage)},
			want:     []Answer{ok(Garbage), ok("<planned_step>\n[]\n</planned_step>")},
		},
		{
			name:  "fallback when no rule matches",
			rules: []Rule{{Skill: "summary", Reply: Reply{Content: "rule"}}},
			fallback: func(c *Call) Reply {
				return Reply{Content: fmt.Sprintf("fallback %d %s %s %s %t", c.N, c.Skill, c.AgentName, c.StepID, c.Repair)}
			},
			requests: [][]llm.Message{sumA, sumA, repair(planB, "x")},
			want:     []Answer{ok("rule"), ok("fallback 2 summary Alice s3 false"), ok("fallback 3 planning Bob s2 true")},
		},
		{
			name: "Func computes the reply",
			rules: []Rule{{Times: -1, Func: func(c *Call) Reply {
				return Reply{Content: c.AgentID + "/" + c.StepID, Status: map[bool]int{true: 503}[c.Skill == "summary"]}
			}}},
			requests: [][]llm.Message{planB, sumA},
			want:     []Answer{ok("b1/s2"), {503, "a1/s3"}},
			pending:  []string{"rule{times=unlimited}"},
		},
		{
			name:      "no script at all",
			requests:  [][]llm.Message{planB},
			want:      []Answer{noScript(planB)},
			unmatched: []int{1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t)
			s.Script(tt.rules...)
			s.Handle(tt.fallback)
			var got []Answer
			for _, msgs := range tt.requests {
				got = append(got, complete(t, s, msgs).Answer)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("answers mismatch (-want +got):\n%s", diff)
			}
			var pending []string
			for _, r := range s.Pending() {
				pending = append(pending, r.String())
			}
			if diff := cmp.Diff(tt.pending, pending); diff != "" {
				t.Errorf("Pending mismatch (-want +got):\n%s", diff)
			}
			var unmatched []int
			for _, c := range s.Unmatched() {
				unmatched = append(unmatched, c.N)
			}
			if diff := cmp.Diff(tt.unmatched, unmatched); diff != "" {
				t.Errorf("Unmatched mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServerRecordsCalls(t *testing.T) {
	s := New(t)
	s.Handle(func(*Call) Reply { return Reply{Content: "ok"} })
	temp := float32(0.25)
	planA := ask("a1", "Alice", "s1", "planning")
	for _, req := range []wireRequest{
		{Model: "m1", Messages: wireOf(planA), Temperature: &temp, MaxTokens: 100},
		{Model: "m2", Messages: wireOf(ask("b1", "Bob", "s2", "planning")), MaxCompletionTokens: 50},
		{Model: "m3", Messages: wireOf(repair(planA, Garbage))},
	} {
		if r, err := send(t.Context(), http.MethodPost, s.BaseURL()+"/chat/completions", req); err != nil || r.Status != http.StatusOK {
			t.Fatalf("request: %+v, %v", r, err)
		}
	}
	want := []Call{
		{N: 1, Skill: "planning", AgentID: "a1", AgentName: "Alice", StepID: "s1", Model: "m1",
			Messages: planA, Prompt: planA[1].Content, Temperature: &temp, MaxTokens: 100},
		{N: 3, Skill: "planning", AgentID: "a1", AgentName: "Alice", StepID: "s1", Model: "m3",
			Messages: repair(planA, Garbage), Prompt: planA[1].Content, Repair: true},
	}
	got := s.CallsFor("planning", "Alice")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CallsFor(planning, Alice) mismatch (-want +got):\n%s", diff)
	}
	calls := s.Calls()
	if len(calls) != 3 || calls[1].N != 2 || calls[1].AgentID != "b1" || calls[1].MaxTokens != 50 {
		t.Fatalf("Calls() = %+v, want 3 calls, the second from b1 with MaxTokens 50", calls)
	}
	// Copies: changing what Calls returned changes nothing recorded.
	calls[0].Messages[0].Content = "changed"
	*calls[0].Temperature = 9
	if again := s.Calls()[0]; again.Messages[0].Content == "changed" || *again.Temperature != temp {
		t.Errorf("Calls() shares memory with the record: %+v", again)
	}
	if got := s.CallsFor("", ""); len(got) != 3 {
		t.Errorf("CallsFor(\"\", \"\") returned %d calls, want 3", len(got))
	}
}

func TestServerErrorReplies(t *testing.T) {
	tests := []struct {
		name  string
		reply Reply
		want  result
	}{
		{
			name:  "rate limited with Retry-After",
			reply: Reply{Status: 429, RetryAfter: "3", Content: "slow down"},
			want:  result{Answer: Answer{429, "slow down"}, RetryAfter: "3", ErrType: "rate_limit_error"},
		},
		{
			name:  "server error with default message",
			reply: Reply{Status: 503},
			want:  result{Answer: Answer{503, "fakellm: scripted error 503 Service Unavailable"}, ErrType: "server_error"},
		},
		{
			name:  "client error",
			reply: Reply{Status: 400, Content: "context too long"},
			want:  result{Answer: Answer{400, "context too long"}, ErrType: "invalid_request_error"},
		},
		{
			name:  "Retry-After on a success",
			reply: Reply{Status: 200, Content: "fine", RetryAfter: "1"},
			want:  result{Answer: Answer{200, "fine"}, RetryAfter: "1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t)
			s.Script(Rule{Reply: tt.reply})
			got := complete(t, s, ask("a1", "Alice", "s1", "think"))
			got.Body = wireResponse{}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServerWire(t *testing.T) {
	s := New(t)
	s.Script(Rule{Times: -1, Reply: Reply{Content: "hello", PromptTokens: 11, CompletionTokens: 7}})
	base := strings.TrimSuffix(s.BaseURL(), "/v1")
	good := wireRequest{Model: "m", Messages: wireOf(ask("a1", "Alice", "s1", "think"))}
	tests := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		text   string
	}{
		{"with /v1", http.MethodPost, "/v1/chat/completions", good, 200, "hello"},
		{"without /v1", http.MethodPost, "/chat/completions", good, 200, "hello"},
		{"unknown path", http.MethodPost, "/v1/completions", good, 404, "fakellm: unknown path /v1/completions"},
		{"wrong method", http.MethodGet, "/v1/chat/completions", "", 405, "fakellm: method GET not allowed"},
		{"stream", http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`, 400,
			"fakellm: stream: streaming is not supported"},
		{"not JSON", http.MethodPost, "/v1/chat/completions", "{", 400, "fakellm: bad request body: unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := send(t.Context(), tt.method, base+tt.path, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Answer{tt.status, tt.text}, r.Answer); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if n := len(s.Calls()); n != 2 {
		t.Errorf("%d calls recorded, want 2 (only well-formed requests)", n)
	}

	r := complete(t, s, ask("a1", "Alice", "s1", "think"))
	if r.Body.Created == 0 {
		t.Error("created is 0")
	}
	r.Body.Created = 0
	want := wireResponse{
		ID: "chatcmpl-fakellm-3", Object: "chat.completion", Model: "test-model",
		Choices: []wireChoice{{Message: wireMessage{Role: "assistant", Content: "hello"}, FinishReason: "stop"}},
		Usage:   wireUsage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18},
	}
	if diff := cmp.Diff(want, r.Body); diff != "" {
		t.Errorf("response body mismatch (-want +got):\n%s", diff)
	}
}

func TestServerEstimatesUsage(t *testing.T) {
	s := New(t)
	s.Script(Rule{Times: -1, Reply: Reply{Content: "0123456789"}})
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: strings.Repeat("s", 40)}, {Role: llm.RoleUser, Content: "u"}}
	r := complete(t, s, msgs)
	if want := (wireUsage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}); r.Body.Usage != want {
		t.Errorf("usage = %+v, want %+v", r.Body.Usage, want)
	}
	r, err := send(t.Context(), http.MethodPost, s.BaseURL()+"/chat/completions", wireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (wireUsage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}); r.Body.Usage != want || r.Body.Model != "fakellm" {
		t.Errorf("empty request: usage = %+v, model %q; want %+v, fakellm", r.Body.Usage, r.Body.Model, want)
	}
}

func TestServerDelay(t *testing.T) {
	msgs := ask("a1", "Alice", "s1", "planning")

	t.Run("honoured", func(t *testing.T) {
		s := New(t)
		const delay = 150 * time.Millisecond
		s.Script(Rule{Reply: Reply{Content: "late", Delay: delay}})
		start := time.Now()
		r := complete(t, s, msgs)
		if elapsed := time.Since(start); elapsed < delay || r.Text != "late" {
			t.Errorf("got %+v after %s, want late after at least %s", r.Answer, elapsed, delay)
		}
	})

	t.Run("aborted when the client gives up", func(t *testing.T) {
		ended := make(chan error, 1)
		s := newServer(t, func(err error) { ended <- err })
		s.Script(Rule{Reply: Reply{Content: "never", Delay: time.Hour}})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := send(ctx, http.MethodPost, s.BaseURL()+"/chat/completions", wireRequest{Messages: wireOf(msgs)})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("client error = %v, want deadline exceeded", err)
		}
		select {
		case err := <-ended:
			if err == nil || !strings.Contains(err.Error(), "client gone") {
				t.Errorf("delay ended with %v, want client gone", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("handler still waiting 10s after the client left")
		}
		if n := len(s.Calls()); n != 1 || len(s.Pending()) != 0 {
			t.Errorf("%d calls, pending %v; want the call recorded and the rule consumed", n, s.Pending())
		}
	})

	t.Run("aborted when the test ends", func(t *testing.T) {
		ended := make(chan error, 1)
		got := make(chan result, 1)
		t.Run("inner", func(t *testing.T) {
			s := newServer(t, func(err error) { ended <- err })
			started := make(chan struct{})
			s.Script(Rule{Func: func(*Call) Reply {
				close(started)
				return Reply{Content: "never", Delay: time.Hour}
			}})
			url := s.BaseURL() + "/chat/completions"
			go func() {
				r, _ := send(context.Background(), http.MethodPost, url, wireRequest{Messages: wireOf(msgs)})
				got <- r
			}()
			<-started
		}) // cleanup closes the server: it must not wait an hour
		if err := <-ended; err == nil || !strings.Contains(err.Error(), "server closed") {
			t.Errorf("delay ended with %v, want server closed", err)
		}
		if r := <-got; r.Status != http.StatusServiceUnavailable {
			t.Errorf("client got %+v, want 503", r.Answer)
		}
	})
}

// tbRecorder records the errors a Server reports to its test.
type tbRecorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *tbRecorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *tbRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestServerReportsBadScripts(t *testing.T) {
	rec := &tbRecorder{TB: t}
	s := New(rec)
	s.Script(
		Rule{Skill: "planning", Times: -2},
		Rule{Skill: "planning", Reply: Reply{Status: 302}},
		Rule{Skill: "planning", Reply: Reply{CompletionTokens: -1}},
	)
	if got := len(s.Pending()); got != 2 {
		t.Errorf("%d rules pending, want 2 (Times -2 rejected)", got)
	}
	for range 2 {
		if r := complete(t, s, ask("a1", "Alice", "s1", "planning")); r.Status != 500 {
			t.Errorf("bad reply answered %+v, want status 500", r.Answer)
		}
	}
	want := []string{
		`fakellm: Script: rule{skill="planning" times=-2}: Times -2: want -1 (unlimited), 0 (once) or a positive count`,
		"fakellm: reply status 302: want 0, 200 or an error status 400-599 (request #1, planning)",
		"fakellm: reply tokens 0/-1: must not be negative (request #2, planning)",
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if diff := cmp.Diff(want, rec.errs); diff != "" {
		t.Errorf("reported errors mismatch (-want +got):\n%s", diff)
	}
}

func TestServerConcurrent(t *testing.T) {
	s := New(t)
	const agents, steps, limited = 8, 25, 100
	s.Script(
		Rule{Skill: "planning", Times: limited, Reply: Reply{Content: "A"}},
		Rule{Times: -1, Reply: Reply{Content: "B"}},
	)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		counts = map[string]int{}
	)
	for a := range agents {
		wg.Go(func() {
			for i := range steps {
				r := complete(t, s, ask(fmt.Sprint("a", a), "agent", fmt.Sprint("s", i), "planning"))
				mu.Lock()
				counts[r.Text]++
				mu.Unlock()
			}
		})
	}
	wg.Go(func() { // readers run while requests are served
		for range 50 {
			_ = s.Calls()
			_ = s.Pending()
			_ = s.CallsFor("planning", "a1")
		}
	})
	wg.Wait()
	if want := map[string]int{"A": limited, "B": agents*steps - limited}; !cmp.Equal(want, counts) {
		t.Errorf("answers %v, want %v", counts, want)
	}
	for i, c := range s.Calls() {
		if c.N != i+1 {
			t.Fatalf("call %d has N %d", i, c.N)
		}
	}
	if p := s.Pending(); len(p) != 1 || p[0].Times != -1 {
		t.Errorf("Pending() = %v, want only the unlimited rule", p)
	}
}
