package fakellm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/mas-mcp/mas-mcp/llm"
)

func TestInstant(t *testing.T) {
	planA := ask("a1", "Alice", "s1", "planning")
	chars := promptChars(planA)
	tests := []struct {
		name     string
		rules    []Rule
		fallback func(*Call) Reply
		req      *llm.Request
		want     *llm.Response
		wantErr  string
		is       error // errors.Is target, when set
		status   int   // StatusError status, when set
	}{
		{
			name:  "rule with explicit usage",
			rules: []Rule{{Skill: "planning", Agent: "Alice", Reply: Reply{Content: "<x>", PromptTokens: 5, CompletionTokens: 2}}},
			req:   &llm.Request{Model: "m", Messages: planA},
			want: &llm.Response{Content: "<x>", Model: "m", Usage: llm.Usage{
				PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7, Calls: 1, PromptChars: chars, ResponseChars: 3}},
		},
		{
			name:     "fallback with estimated usage",
			rules:    []Rule{{Skill: "summary"}},
			fallback: func(c *Call) Reply { return Reply{Content: c.Skill + " of " + c.AgentID} },
			req:      &llm.Request{Messages: planA},
			want: &llm.Response{Content: "planning of a1", Model: "fakellm", Usage: llm.Usage{
				PromptTokens: chars / 4, CompletionTokens: 3, TotalTokens: chars/4 + 3, Calls: 1,
				PromptChars: chars, ResponseChars: 14}},
		},
		{
			name:    "rate limited",
			rules:   []Rule{{Reply: Reply{Status: 429, RetryAfter: "2", Content: "slow down"}}},
			req:     &llm.Request{Messages: planA},
			want:    &llm.Response{Model: "fakellm", Usage: llm.Usage{Calls: 1, PromptChars: chars}},
			wantErr: "fakellm: status 429: slow down",
			is:      llm.ErrRateLimited,
			status:  429,
		},
		{
			name:    "unmatched",
			req:     &llm.Request{Messages: planA},
			want:    &llm.Response{Model: "fakellm", Usage: llm.Usage{Calls: 1, PromptChars: chars}},
			wantErr: "fakellm: status 500: fakellm: no script for skill=planning agent=a1 (Alice) step=s1 repair=false",
			is:      llm.ErrServer,
			status:  500,
		},
		{
			name:    "client error",
			rules:   []Rule{{Reply: Reply{Status: 400}}},
			req:     &llm.Request{Messages: planA},
			want:    &llm.Response{Model: "fakellm", Usage: llm.Usage{Calls: 1, PromptChars: chars}},
			wantErr: "fakellm: status 400: fakellm: scripted error 400 Bad Request",
			status:  400,
		},
		{
			name:    "invalid reply",
			rules:   []Rule{{Reply: Reply{Status: 99}}},
			req:     &llm.Request{Messages: planA},
			want:    &llm.Response{Model: "fakellm", Usage: llm.Usage{Calls: 1, PromptChars: chars}},
			wantErr: "fakellm: reply status 99: want 0, 200 or an error status 400-599",
		},
		{
			name:    "nil request",
			want:    &llm.Response{Model: "fakellm", Usage: llm.Usage{Calls: 1}},
			wantErr: "fakellm: complete: nil request",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInstant(tt.fallback)
			in.Script(tt.rules...)
			got, err := in.Complete(t.Context(), tt.req)
			if gotErr := errString(err); gotErr != tt.wantErr {
				t.Errorf("error = %q, want %q", gotErr, tt.wantErr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
			var se *StatusError
			if errors.As(err, &se) != (tt.status != 0) || (se != nil && se.Status != tt.status) {
				t.Errorf("StatusError = %+v, want status %d", se, tt.status)
			}
			// Wall time depends on how busy the machine is.
			ignoreTime := cmp.Options{cmpopts.IgnoreFields(llm.Response{}, "Latency"), cmpopts.IgnoreFields(llm.Usage{}, "LatencyMS")}
			if diff := cmp.Diff(tt.want, got, ignoreTime); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestInstantRecordsLikeServer(t *testing.T) {
	in := NewInstant(nil)
	in.Script(Rule{Skill: "planning", Repair: new(true), Reply: Reply{Content: "fixed"}})
	first := ask("a1", "Alice", "s1", "planning")
	temp := float32(0.5)
	if _, err := in.Complete(t.Context(), &llm.Request{Model: "m", Messages: first, Temperature: &temp, MaxTokens: 9}); err == nil {
		t.Error("first attempt answered, want unmatched")
	}
	resp, err := in.Complete(t.Context(), &llm.Request{Messages: repair(first, Garbage)})
	if err != nil || resp.Content != "fixed" {
		t.Errorf("repair round = %+v, %v; want fixed", resp, err)
	}
	want := []Call{
		{N: 1, Skill: "planning", AgentID: "a1", AgentName: "Alice", StepID: "s1", Model: "m",
			Messages: first, Prompt: first[1].Content, Temperature: &temp, MaxTokens: 9},
		{N: 2, Skill: "planning", AgentID: "a1", AgentName: "Alice", StepID: "s1",
			Messages: repair(first, Garbage), Prompt: first[1].Content, Repair: true},
	}
	if diff := cmp.Diff(want, in.CallsFor("planning", "a1")); diff != "" {
		t.Errorf("CallsFor mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[:1], in.Unmatched()); diff != "" {
		t.Errorf("Unmatched mismatch (-want +got):\n%s", diff)
	}
	if p := in.Pending(); len(p) != 0 {
		t.Errorf("Pending() = %v, want none", p)
	}

	// A request whose context is already done never reaches the script.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := in.Complete(ctx, &llm.Request{Messages: first}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled request: error %v, want context.Canceled", err)
	}
	if n := len(in.Calls()); n != 2 {
		t.Errorf("%d calls recorded, want 2", n)
	}
}

func TestInstantScriptRejectsTimes(t *testing.T) {
	in := NewInstant(nil)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "Times -5") {
			t.Errorf("recovered %v, want a panic naming Times -5", r)
		}
	}()
	in.Script(Rule{Times: -5})
}

func TestInstantDelay(t *testing.T) {
	req := &llm.Request{Messages: ask("a1", "Alice", "s1", "think")}
	synctest.Test(t, func(t *testing.T) {
		in := NewInstant(func(*Call) Reply { return Reply{Content: "late", Delay: time.Hour} })

		start := time.Now()
		resp, err := in.Complete(t.Context(), req)
		if err != nil || resp.Content != "late" || time.Since(start) != time.Hour ||
			resp.Latency != time.Hour || resp.Usage.LatencyMS != time.Hour.Milliseconds() {
			t.Errorf("got %+v, %v after %s; want late after exactly 1h", resp, err, time.Since(start))
		}

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		resp, err = in.Complete(ctx, req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error = %v, want deadline exceeded", err)
		}
		want := &llm.Response{Model: "fakellm", Latency: time.Minute, Usage: llm.Usage{
			Calls: 1, LatencyMS: time.Minute.Milliseconds(), PromptChars: promptChars(req.Messages)}}
		if diff := cmp.Diff(want, resp); diff != "" {
			t.Errorf("cancelled response mismatch (-want +got):\n%s", diff)
		}
	})
}

func BenchmarkInstant(b *testing.B) {
	in := NewInstant(func(*Call) Reply { return Reply{Content: Block("_think", "ok")} })
	req := &llm.Request{Messages: ask("a1", "Alice", "s1", "think")}
	for b.Loop() {
		if _, err := in.Complete(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}
