package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestSDKLogsQuietOnDisconnect: the SDK's warning about a notification a
// disconnected client did not take is not logged; its other warnings are.
func TestSDKLogsQuietOnDisconnect(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(minLevel{slog.NewTextHandler(&buf, nil), slog.LevelWarn})
	// As go-sdk v1.8.0 words them (mcp/shared.go, mcp/server.go).
	log.Warn("calling notifications/resources/list_changed: rejected by transport: undelivered message: write to closed stream")
	log.Warn("calling notifications/resources/updated: rejected by transport: write to closed stream")
	log.Info("an info record")
	log.Warn("keepalive ping failed; tolerating below threshold")
	got := buf.String()
	if strings.Contains(got, "rejected by transport") || strings.Contains(got, "an info record") {
		t.Errorf("logged what it should drop:\n%s", got)
	}
	if !strings.Contains(got, "keepalive ping failed") {
		t.Errorf("dropped another warning:\n%s", got)
	}
}

// TestSDKLogsUndeliveredAtDebug: with debug logging on, the SDK's message
// about an undelivered notification is logged, at debug level.
func TestSDKLogsUndeliveredAtDebug(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(minLevel{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelWarn})
	log.Warn("calling notifications/progress: rejected by transport: write to closed stream")
	log.Info("an info record")
	got := buf.String()
	if !strings.Contains(got, "level=DEBUG") || !strings.Contains(got, "rejected by transport") {
		t.Errorf("want the SDK's message at debug level, got:\n%s", got)
	}
	if strings.Contains(got, "an info record") {
		t.Errorf("logged an SDK info record:\n%s", got)
	}
}
