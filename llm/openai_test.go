package llm

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestCompleteSuccess(t *testing.T) {
	tests := []struct {
		name      string
		reply     reply
		req       *Request
		wantResp  *Response
		wantCalls int
	}{
		{
			name: "usage reported",
			req: &Request{Messages: []Message{
				{Role: RoleSystem, Content: "be brief"},
				{Role: RoleUser, Content: "hi there"},
			}},
			wantResp: &Response{
				Attempts: 1,
				Content:  "hello",
				Model:    "test-model",
				Usage: Usage{
					PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18,
					Calls: 1, PromptChars: len("be brief") + len("hi there"), ResponseChars: len("hello"),
				},
			},
		},
		{
			name: "cached prompt tokens reported",
			reply: reply{body: `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":2048,"completion_tokens":1,"total_tokens":2049,"prompt_tokens_details":{"cached_tokens":1152}}}`},
			req: userRequest("abc"),
			wantResp: &Response{
				Attempts: 1,
				Content:  "ok",
				Model:    "m",
				Usage: Usage{PromptTokens: 2048, CompletionTokens: 1, TotalTokens: 2049, CachedTokens: 1152,
					Calls: 1, PromptChars: 3, ResponseChars: 2},
			},
		},
		{
			name:  "no usage from the endpoint",
			reply: reply{body: completionBody("served-model", "plain answer", nil)},
			req:   userRequest("héllo"),
			wantResp: &Response{
				Attempts: 1,
				Content:  "plain answer",
				Model:    "served-model",
				Usage:    Usage{Calls: 1, PromptChars: len("héllo"), ResponseChars: len("plain answer")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.reply)
			o, _ := newTestClient(t, api, OpenAIConfig{})
			got, err := o.Complete(t.Context(), tt.req)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if got.Latency <= 0 || got.Usage.LatencyMS != got.Latency.Milliseconds() {
				t.Errorf("Latency = %v, LatencyMS = %d; want positive and consistent", got.Latency, got.Usage.LatencyMS)
			}
			if diff := cmp.Diff(tt.wantResp, got, cmpopts.IgnoreFields(Response{}, "Latency"), cmpopts.IgnoreFields(Usage{}, "LatencyMS")); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"Bearer " + testKey}, api.authHeaders()); diff != "" {
				t.Errorf("Authorization mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompleteWithoutAPIKey(t *testing.T) {
	api := newFakeAPI(t)
	o, err := NewOpenAI(OpenAIConfig{BaseURL: api.URL, Model: "llama3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Complete(t.Context(), userRequest("hi")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if diff := cmp.Diff([]string{""}, api.authHeaders()); diff != "" {
		t.Errorf("Authorization mismatch (-want +got):\n%s", diff)
	}
}

func TestCompleteRequestBody(t *testing.T) {
	ptr := func(f float32) *float32 { return &f }
	iptr := func(n int) *int { return &n }
	fptr := func(f float64) *float64 { return &f }
	msgs := []Message{{Role: RoleSystem, Content: "sys"}, {Role: RoleUser, Content: "question"}}
	wantMsgs := []messageJSON{{Role: "system", Content: "sys"}, {Role: "user", Content: "question"}}

	tests := []struct {
		name string
		req  Request
		want requestJSON
	}{
		{
			name: "default model, nothing optional",
			req:  Request{Messages: msgs, Tag: "agent=a step=1"},
			want: requestJSON{Model: "test-model", Messages: wantMsgs},
		},
		{
			name: "model override",
			req:  Request{Model: "other-model", Messages: msgs},
			want: requestJSON{Model: "other-model", Messages: wantMsgs},
		},
		{
			name: "temperature and max tokens",
			req:  Request{Messages: msgs, Temperature: ptr(0.7), MaxTokens: 256},
			want: requestJSON{Model: "test-model", Messages: wantMsgs, Temperature: fptr(0.7), MaxTokens: iptr(256)},
		},
		{
			// go-openai would drop a plain 0 (omitempty).
			name: "temperature zero is still sent",
			req:  Request{Messages: msgs, Temperature: ptr(0)},
			want: requestJSON{Model: "test-model", Messages: wantMsgs, Temperature: fptr(0)},
		},
		{
			name: "negative max tokens not sent",
			req:  Request{Messages: msgs, MaxTokens: -1},
			want: requestJSON{Model: "test-model", Messages: wantMsgs},
		},
		{
			name: "reasoning model takes max_completion_tokens",
			req:  Request{Model: "o3-mini", Messages: msgs, MaxTokens: 100},
			want: requestJSON{Model: "o3-mini", Messages: wantMsgs, MaxCompletionTokens: iptr(100)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t)
			o, _ := newTestClient(t, api, OpenAIConfig{})
			resp, err := o.Complete(t.Context(), &tt.req)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Model != tt.want.Model {
				t.Errorf("Response.Model = %q, want %q", resp.Model, tt.want.Model)
			}
			got := api.received()
			if diff := cmp.Diff([]requestJSON{tt.want}, got, cmpopts.EquateApprox(0, 1e-6)); diff != "" {
				t.Errorf("request body mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompleteFailsWithoutRetry(t *testing.T) {
	tests := []struct {
		name      string
		reply     reply
		req       *Request
		wantSent  int
		wantUsage Usage
		wantIn    []string
	}{
		{
			name:      "empty choices",
			reply:     reply{body: `{"id":"x","object":"chat.completion","model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}`},
			req:       userRequest("abc"),
			wantSent:  1,
			wantUsage: Usage{PromptTokens: 3, TotalTokens: 3, Calls: 1, PromptChars: 3},
			wantIn:    []string{"llm: chat completion: ", "no choices", "1 attempt)"},
		},
		{
			name:      "invalid JSON",
			reply:     reply{body: `{"choices": nope}`},
			req:       userRequest("abc"),
			wantSent:  1,
			wantUsage: Usage{Calls: 1, PromptChars: 3},
			wantIn:    []string{"llm: chat completion: ", "1 attempt)"},
		},
		{
			name:      "nil request",
			wantUsage: Usage{Calls: 1},
			wantIn:    []string{"nil request"},
		},
		{
			name:      "no messages",
			req:       &Request{},
			wantUsage: Usage{Calls: 1},
			wantIn:    []string{"no messages"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.reply)
			o, sleeps := newTestClient(t, api, OpenAIConfig{})
			resp, err := o.Complete(t.Context(), tt.req)
			if err == nil {
				t.Fatal("Complete succeeded, want an error")
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if resp == nil {
				t.Fatal("Complete returned a nil *Response with its error")
			}
			if resp.Content != "" {
				t.Errorf("Content = %q, want empty", resp.Content)
			}
			if diff := cmp.Diff(tt.wantUsage, resp.Usage, cmpopts.IgnoreFields(Usage{}, "LatencyMS")); diff != "" {
				t.Errorf("usage mismatch (-want +got):\n%s", diff)
			}
			if n := len(api.received()); n != tt.wantSent {
				t.Errorf("server got %d requests, want %d", n, tt.wantSent)
			}
			if w := sleeps.got(); len(w) != 0 {
				t.Errorf("slept %v, want no retry", w)
			}
		})
	}
}

// TestSecretsRedacted makes the endpoint echo the Authorization header into
// its error message and checks that the key shows neither in the returned
// error (nor anything it wraps) nor in the log.
func TestSecretsRedacted(t *testing.T) {
	const prompt = "confidential prompt text"
	tests := []struct {
		name  string
		reply reply
	}{
		{name: "401 JSON error", reply: reply{status: http.StatusUnauthorized, echoAuth: true}},
		{name: "500 retried", reply: reply{status: http.StatusInternalServerError, echoAuth: true}},
		{name: "502 plain text", reply: reply{status: http.StatusBadGateway, body: "upstream refused Bearer " + testKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPI(t, tt.reply)
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			o, _ := newTestClient(t, api, OpenAIConfig{Logger: logger, MaxRetries: 1})
			_, err := o.Complete(t.Context(), userRequest(prompt))
			if err == nil {
				t.Fatal("Complete succeeded, want an error")
			}
			if !strings.Contains(err.Error(), redacted) {
				t.Errorf("error %q does not show the redaction marker; did the server echo the key?", err)
			}
			for e := range errorTree(err) {
				if strings.Contains(e.Error(), testKey) {
					t.Errorf("error %q (%T) contains the API key", e, e)
				}
			}
			if strings.Contains(logs.String(), testKey) {
				t.Errorf("log contains the API key:\n%s", logs.String())
			}
			if strings.Contains(logs.String(), prompt) {
				t.Errorf("log contains the prompt:\n%s", logs.String())
			}
			if logs.Len() == 0 {
				t.Error("nothing logged at debug level")
			}
		})
	}
}

// errorTree yields err and every error it wraps.
func errorTree(err error) func(yield func(error) bool) {
	return func(yield func(error) bool) {
		var walk func(error) bool
		walk = func(e error) bool {
			if e == nil {
				return true
			}
			if !yield(e) {
				return false
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				return walk(u.Unwrap())
			case interface{ Unwrap() []error }:
				for _, c := range u.Unwrap() {
					if !walk(c) {
						return false
					}
				}
			}
			return true
		}
		walk(err)
	}
}

func TestNewOpenAIConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     OpenAIConfig
		wantErr string // substring; empty means valid
	}{
		{name: "minimal", cfg: OpenAIConfig{Model: "m"}},
		{name: "no model", cfg: OpenAIConfig{}, wantErr: "Model"},
		{name: "negative Timeout", cfg: OpenAIConfig{Model: "m", Timeout: -time.Second}, wantErr: "Timeout is -1s"},
		{name: "negative Concurrency", cfg: OpenAIConfig{Model: "m", Concurrency: -2}, wantErr: "Concurrency is -2"},
		{name: "negative MaxRetryWait", cfg: OpenAIConfig{Model: "m", MaxRetryWait: -time.Millisecond}, wantErr: "MaxRetryWait is -1ms"},
		{name: "relative BaseURL", cfg: OpenAIConfig{Model: "m", BaseURL: "localhost:11434/v1"}, wantErr: "BaseURL"},
		{name: "ftp BaseURL", cfg: OpenAIConfig{Model: "m", BaseURL: "ftp://example.com/v1"}, wantErr: "BaseURL"},
		{name: "unparsable BaseURL", cfg: OpenAIConfig{Model: "m", BaseURL: "http://[::1"}, wantErr: "BaseURL"},
		{name: "BaseURL credentials not echoed", cfg: OpenAIConfig{Model: "m", BaseURL: "ftp://user:hunter2@example.com"}, wantErr: "BaseURL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := NewOpenAI(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("NewOpenAI: %v", err)
				}
				got := struct {
					Timeout, MaxRetryWait   time.Duration
					MaxRetries, Concurrency int
				}{o.timeout, o.maxWait, o.maxRetries, cap(o.sem)}
				want := struct {
					Timeout, MaxRetryWait   time.Duration
					MaxRetries, Concurrency int
				}{DefaultTimeout, DefaultMaxRetryWait, DefaultMaxRetries, DefaultConcurrency}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("defaults mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("NewOpenAI succeeded, want an error containing %q", tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "llm: openai config: ") || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q, want prefix %q and %q", err, "llm: openai config: ", tt.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password of BaseURL", err)
			}
		})
	}
}

// TestHTTPClientNotModified checks that the caller's client is copied.
func TestHTTPClientNotModified(t *testing.T) {
	api := newFakeAPI(t)
	hc := &http.Client{Timeout: time.Minute}
	o, _ := newTestClient(t, api, OpenAIConfig{HTTPClient: hc})
	if _, err := o.Complete(t.Context(), userRequest("hi")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if hc.Transport != nil {
		t.Errorf("caller's http.Client.Transport was replaced by %T", hc.Transport)
	}
}

func BenchmarkComplete(b *testing.B) {
	api := newFakeAPI(b)
	o, _ := newTestClient(b, api, OpenAIConfig{})
	req := &Request{Messages: []Message{
		{Role: RoleSystem, Content: strings.Repeat("system prompt ", 50)},
		{Role: RoleUser, Content: "question"},
	}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := o.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
