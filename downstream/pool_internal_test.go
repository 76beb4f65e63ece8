package downstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestBroken(t *testing.T) {
	opErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		// The transport broke: the server died or the connection dropped.
		{mcp.ErrConnectionClosed, true},
		{fmt.Errorf("calling %q: %w", "tools/call", mcp.ErrConnectionClosed), true},
		{io.EOF, true},
		{fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{io.ErrClosedPipe, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{opErr(syscall.ECONNRESET), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{errors.New("write |1: broken pipe"), true},
		{errors.New("client is closing: EOF"), true},
		// Answers: the server is there and said no.
		{&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown tool \"x\""}, false},
		{&jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found"}, false},
		{fmt.Errorf("calling tools/call: %w", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "boom"}), false},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{errors.New(`mcp server "x": no answer within 1s`), false},
		{errors.New("validating arguments: /a: want number"), false},
	} {
		if got := broken(tc.err); got != tc.want {
			t.Errorf("broken(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestBrokenServerErrorMentioningEOF: a JSON-RPC error is an answer, whatever
// its text says.
func TestBrokenServerErrorMentioningEOF(t *testing.T) {
	for _, err := range []error{
		&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "fetch https://example.com: dial tcp: connection refused"},
		fmt.Errorf("calling tools/call: %w", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "parse config: unexpected EOF"}),
	} {
		if broken(err) {
			t.Errorf("broken(%v) = true, want false: the server answered", err)
		}
	}
}
