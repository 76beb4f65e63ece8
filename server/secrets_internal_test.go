package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestScrubAnswersKeepsTheCause: a request's error whose text holds a
// secret is answered scrubbed, and still wraps what it wrapped, so that
// errors.Is and errors.As see what they saw (a cancelled request stays
// one).
func TestScrubAnswersKeepsTheCause(t *testing.T) {
	s := &Server{sys: teststack.New(t, teststack.Options{}).Sys}
	key := teststack.SentinelKey
	h := s.scrubAnswers(func(context.Context, string, mcp.Request) (mcp.Result, error) {
		return nil, fmt.Errorf("read mas://tasks/%s: %w", key, context.Canceled)
	})
	_, err := h(t.Context(), "resources/read", nil)
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("error %v: want the key replaced with [redacted]", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v no longer wraps context.Canceled", err)
	}
}
