package fakellm

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	openai "github.com/sashabaranov/go-openai"
)

// TestOpenAIClientRoundTrip proves the wire format with the OpenAI client
// library that the llm package uses.
func TestOpenAIClientRoundTrip(t *testing.T) {
	s := New(t)
	content := Block("planned_step", JSON([]map[string]string{{"step_intention": "look", "type": "skill", "executor": "think"}}))
	s.Script(
		Rule{Skill: "planning", Agent: "Alice", Repair: new(false),
			Reply: Reply{Content: content, PromptTokens: 120, CompletionTokens: 30}},
		Rule{Skill: "planning", Reply: Reply{Status: 429, RetryAfter: "1", Content: "rate limit reached"}},
	)
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = s.BaseURL()
	client := openai.NewClientWithConfig(cfg)
	msgs := ask("a1", "Alice", "s1", "planning")
	req := openai.ChatCompletionRequest{Model: "gpt-test", Temperature: 0.2, MaxTokens: 256}
	for _, m := range msgs {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: m.Role, Content: m.Content})
	}

	resp, err := client.CreateChatCompletion(t.Context(), req)
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("%d choices, want 1", len(resp.Choices))
	}
	got := struct {
		Object, Model, Role, Content string
		Finish                       openai.FinishReason
		Usage                        openai.Usage
	}{resp.Object, resp.Model, resp.Choices[0].Message.Role, resp.Choices[0].Message.Content,
		resp.Choices[0].FinishReason, resp.Usage}
	want := got
	want.Object, want.Model, want.Role, want.Content = "chat.completion", "gpt-test", "assistant", content
	want.Finish = openai.FinishReasonStop
	want.Usage = openai.Usage{PromptTokens: 120, CompletionTokens: 30, TotalTokens: 150}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response mismatch (-want +got):\n%s", diff)
	}

	calls := s.Calls()
	temp := float32(0.2)
	wantCall := Call{N: 1, Skill: "planning", AgentID: "a1", AgentName: "Alice", StepID: "s1", Model: "gpt-test",
		Messages: msgs, Prompt: msgs[1].Content, Temperature: &temp, MaxTokens: 256}
	if diff := cmp.Diff([]Call{wantCall}, calls); diff != "" {
		t.Errorf("recorded call mismatch (-want +got):\n%s", diff)
	}

	_, err = client.CreateChatCompletion(t.Context(), req)
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T), want *openai.APIError", err, err)
	}
	gotErr := openai.APIError{Code: apiErr.Code, Message: apiErr.Message, Type: apiErr.Type, HTTPStatusCode: apiErr.HTTPStatusCode}
	wantErr := openai.APIError{Code: "rate_limit_exceeded", Message: "rate limit reached", Type: "rate_limit_error", HTTPStatusCode: 429}
	if diff := cmp.Diff(wantErr, gotErr); diff != "" {
		t.Errorf("API error mismatch (-want +got):\n%s", diff)
	}
	if p := s.Pending(); len(p) != 0 {
		t.Errorf("script not consumed: %v", p)
	}
}
