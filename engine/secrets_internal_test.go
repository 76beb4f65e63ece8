package engine

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/internal/secret"
)

func TestSecretListText(t *testing.T) {
	l := secret.New(Redacted, "hunter2", "sk-LONG-secret", "sk-LONG-secret-and-more", "", "sk-LONG-secret")
	for _, tc := range []struct{ in, want string }{
		{"no secret here", "no secret here"},
		{"key sk-LONG-secret!", "key [redacted]!"},
		{"twice sk-LONG-secret sk-LONG-secret", "twice [redacted] [redacted]"},
		{"a secret that holds another: sk-LONG-secret-and-more", "a secret that holds another: [redacted]"},
		{"short ones are kept: hunter2", "short ones are kept: hunter2"},
	} {
		if got := l.Text(tc.in); got != tc.want {
			t.Errorf("text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestScrubbedCopiesWhatHoldsASecret(t *testing.T) {
	const key = "sk-SECRET-12345"
	l := secret.New(Redacted, key)
	args := map[string]any{"token": key, "n": 1.0, "list": []any{"x", "with " + key}}
	in := HumanMessage{TaskID: "t", Receiver: []string{"a", key}, Content: "say " + key, Decision: &Decision{Note: key, Arguments: args}}
	got := scrubbed(l, in)
	want := HumanMessage{TaskID: "t", Receiver: []string{"a", Redacted}, Content: "say " + Redacted, Decision: &Decision{Note: Redacted,
		Arguments: map[string]any{"token": Redacted, "n": 1.0, "list": []any{"x", "with " + Redacted}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scrubbed mismatch (-want +got):\n%s", diff)
	}
	// What the caller passed is left as it was.
	if in.Content != "say "+key || in.Receiver[1] != key || in.Decision.Note != key || args["token"] != key || args["list"].([]any)[1] != "with "+key {
		t.Errorf("the caller's value was changed in place: %+v %v", in, args)
	}
	// What holds none is returned as it is.
	clean := HumanMessage{Content: "nothing", Decision: &Decision{Note: "fine"}}
	if got := scrubbed(l, clean); got.Decision != clean.Decision {
		t.Error("a value without secrets was copied")
	}
	if got := scrubbed(nil, in); got.Content != in.Content {
		t.Error("no secrets configured: the value was changed")
	}
}

func TestScrubOutput(t *testing.T) {
	const key = "sk-SECRET-12345"
	s := &System{secrets: secret.New(Redacted, key)}
	completion := "done with " + key
	cause := errors.New("tool said " + key)
	out := s.scrubOutput(&Output{
		Result: map[string]any{"text": key}, Err: cause, Completion: &completion,
		Memory:          []MemoryOp{{Add: "remember " + key}},
		AddSteps:        []StepSpec{{StepIntention: "use " + key}},
		ToolInstruction: &ToolInstruction{Instruction: &ToolCall{Arguments: map[string]any{"auth": key}}},
		TaskInstruction: &TaskInstruction{Stages: []StageSpec{{AgentAllocation: map[string]string{"a": key}}}},
	})
	if !errors.Is(out.Err, cause) || out.Err.Error() != "tool said "+Redacted {
		t.Errorf("error %q (wraps the cause: %v), want its text scrubbed and the cause kept", out.Err, errors.Is(out.Err, cause))
	}
	for name, got := range map[string][2]string{
		"result":     {out.Result["text"].(string), Redacted},
		"completion": {*out.Completion, "done with " + Redacted},
		"memory":     {out.Memory[0].Add, "remember " + Redacted},
		"step":       {out.AddSteps[0].StepIntention, "use " + Redacted},
		"tool call":  {out.ToolInstruction.Instruction.Arguments["auth"].(string), Redacted},
		"allocation": {out.TaskInstruction.Stages[0].AgentAllocation["a"], Redacted},
	} {
		if got[0] != got[1] {
			t.Errorf("%s = %q, want %q", name, got[0], got[1])
		}
	}
	if completion != "done with "+key {
		t.Error("the executor's completion was changed in place")
	}
}

func TestScrubbedArraysAndInterfaces(t *testing.T) {
	const key = "sk-SECRET-12345"
	l := secret.New(Redacted, key)
	type inner struct{ Text string }
	in := struct {
		Pair [2]string
		Any  any
		Ptrs []*inner
	}{Pair: [2]string{"a", key}, Any: inner{Text: key}, Ptrs: []*inner{{Text: "b"}, {Text: key}}}
	got := scrubbed(l, in)
	if got.Pair[1] != Redacted || got.Any.(inner).Text != Redacted || got.Ptrs[1].Text != Redacted || got.Ptrs[0] != in.Ptrs[0] {
		t.Errorf("scrubbed = %+v (%+v), want the secrets redacted and the rest shared", got, got.Ptrs[1])
	}
	if in.Pair[1] != key || in.Ptrs[1].Text != key {
		t.Error("the caller's value was changed in place")
	}
}
