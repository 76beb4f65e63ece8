package engine

import "context"

// QuestionForm is the form an operator question (Ask) can be answered
// with besides free text: what an MCP client shows as an elicitation. The
// MCP server puts it to clients that cannot take server requests (protocol
// 2026-07-28: a task's inputRequests, a tool's input_required result).
type QuestionForm struct {
	// Message is the form's text.
	Message string
	// Schema is the JSON Schema of the answer's content (an elicitation's
	// requestedSchema).
	Schema map[string]any
	// Arguments: the content is the values asked for (Decision.Arguments,
	// approve true; declining denies). Otherwise the form is an approval:
	// content {approve, note}.
	Arguments bool
}

type questionFormKey struct{}

// WithQuestionForm returns ctx carrying f: the question Ask posts with it
// can be answered with f while Ask waits (System.QuestionForm).
func WithQuestionForm(ctx context.Context, f QuestionForm) context.Context {
	return context.WithValue(ctx, questionFormKey{}, f)
}

type postedKey struct{}

// withPosted returns ctx carrying f, which Ask calls with its question's
// message ID before posting it (the budget's questions keep theirs).
func withPosted(ctx context.Context, f func(messageID string)) context.Context {
	return context.WithValue(ctx, postedKey{}, f)
}

// noteQuestion records the form ctx carries (if any) for the question
// messageID until the returned func is called, and hands messageID to
// withPosted's func (if any): Ask calls it before posting the question, so
// a reader who sees the question sees its form too.
func (s *System) noteQuestion(ctx context.Context, messageID string) (forget func()) {
	if posted, ok := ctx.Value(postedKey{}).(func(string)); ok {
		posted(messageID)
	}
	f, ok := ctx.Value(questionFormKey{}).(QuestionForm)
	if !ok {
		return func() {}
	}
	s.questionForms.Store(messageID, f)
	return func() { s.questionForms.Delete(messageID) }
}

// QuestionForm returns the form of the operator question messageID while
// it is asked; false when it has none (it is then an approval, or a plain
// question answered with text).
func (s *System) QuestionForm(messageID string) (QuestionForm, bool) {
	v, ok := s.questionForms.Load(messageID)
	if !ok {
		return QuestionForm{}, false
	}
	return v.(QuestionForm), true
}
