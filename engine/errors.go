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
	// ErrLimit: a configured limit was reached (stage retries).
	ErrLimit = errors.New("limit reached")
	// ErrClosed: the MAS is shut down.
	ErrClosed = errors.New("mas is closed")
)

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
