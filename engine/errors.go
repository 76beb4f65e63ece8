package engine

import (
	"errors"
	"fmt"
)

// Sentinel errors callers test with errors.Is.
var (
	// ErrNotFound: a task, stage or agent ID that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: an instruction or request that is malformed or does not
	// fit the current state.
	ErrInvalid = errors.New("invalid")
	// ErrForbidden: the actor may not do this (not the task's manager, a
	// skill it lacks, a tool outside its tools).
	ErrForbidden = errors.New("forbidden")
	// ErrEnded: the task or stage has already ended.
	ErrEnded = errors.New("ended")
	// ErrNotAwaited: an answer to a question that no longer awaits one
	// (answered already, from any channel, or expired). It is an
	// ErrInvalid too.
	ErrNotAwaited = fmt.Errorf("%w: no longer awaits a reply", ErrInvalid)
	// ErrLimit: a configured limit was reached (stage retries).
	ErrLimit = errors.New("limit reached")
	// ErrClosed: the MAS is shut down.
	ErrClosed = errors.New("mas is closed")
	// ErrTooLarge: the store refused a document (or message) larger than
	// it takes in one write (NATS's max_payload). Written again as it is,
	// it would be refused again: the owner bounds it harder, or withdraws
	// the change (owner.go), never retries it as it is.
	ErrTooLarge = errors.New("too large for the store")
)

// TooLargeError is a store's refusal of a document too large for it: what
// was written, its size and the store's limit, in bytes. It wraps
// ErrTooLarge and the store's own error.
type TooLargeError struct {
	What        string // "agent <id>", "task <id>", "message <id>"
	Size, Limit int
	Err         error
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("store: %s: the document takes %d bytes, over the %d bytes the store takes in one write: %v", e.What, e.Size, e.Limit, e.Err)
}

// Unwrap returns ErrTooLarge and the store's error.
func (e *TooLargeError) Unwrap() []error { return []error{ErrTooLarge, e.Err} }

// Error is an engine error: a message for people (naming the field and the
// problem) that wraps one of the sentinels for code.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Kind }

func errf(kind error, format string, a ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, a...)}
}

// tooLargeAttrs are the log attributes of a document the store refused as
// too large: the owner, its size and the store's limit, and the error.
func tooLargeAttrs(kind, id string, err error) []any {
	attrs := []any{kind, id}
	if tl, ok := errors.AsType[*TooLargeError](err); ok {
		attrs = append(attrs, "size", tl.Size, "limit", tl.Limit)
	}
	return append(attrs, "err", err)
}
