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
