package telemetry_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/mas-mcp/mas-mcp/internal/telemetry"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestSetupOff: without an exporter asked for, nothing starts and every
// hook is off.
func TestSetupOff(t *testing.T) {
	for name, vars := range map[string]map[string]string{
		"nothing set":       {},
		"service name only": {"OTEL_SERVICE_NAME": "mas"},
		"sdk disabled":      {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		"exporters none": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
			"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
	} {
		t.Run(name, func(t *testing.T) {
			tel, err := telemetry.Setup(context.Background(), telemetry.Config{Getenv: env(vars)})
			if err != nil || tel != nil {
				t.Fatalf("Setup = %v, %v; want nil, nil", tel, err)
			}
			if telemetry.Enabled() {
				t.Error("Enabled with telemetry off")
			}
			if tp := telemetry.StartTask("", "t", "n"); tp != "" {
				t.Errorf("StartTask gave %q with telemetry off", tp)
			}
		})
	}
}

// TestSetupRefuses: exporters and protocols we do not support are errors
// naming the variable, not a silent fallback ("console" would write to
// stdout, the MCP protocol under --stdio).
func TestSetupRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		vars map[string]string
		want string
	}{
		"console traces": {map[string]string{"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER"},
		"zipkin metrics": {map[string]string{"OTEL_METRICS_EXPORTER": "zipkin"}, "OTEL_METRICS_EXPORTER"},
		"http/json": {map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			"http/json"},
	} {
		t.Run(name, func(t *testing.T) {
			tel, err := telemetry.Setup(context.Background(), telemetry.Config{Getenv: env(c.vars)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				_ = tel.Shutdown(context.Background())
				t.Fatalf("Setup error = %v, want one naming %q", err, c.want)
			}
		})
	}
}

// traceService is an OTLP/gRPC receiver of spans. It implements Export,
// the service's one method; grpc-go's generated code requires embedding
// UnimplementedTraceServiceServer (forward compatibility), not a stub.
type traceService struct {
	colltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (s *traceService) Export(_ context.Context, req *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s.names = append(s.names, sp.Name)
			}
		}
	}
	return &colltrace.ExportTraceServiceResponse{}, nil
}

// TestSetupGRPC: OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over gRPC.
func TestSetupGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	svc := &traceService{}
	colltrace.RegisterTraceServiceServer(gs, svc)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{})
	if err != nil || tel == nil {
		t.Fatalf("Setup = %v, %v", tel, err)
	}
	tp := telemetry.StartTask("", "3f1c5b8e-0000-4000-8000-000000000001", "grpc task")
	if !strings.HasPrefix(tp, "00-") {
		t.Errorf("StartTask traceparent = %q", tp)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.names) != 1 || svc.names[0] != "invoke_workflow grpc task" {
		t.Errorf("received spans %q, want the task span", svc.names)
	}
	if telemetry.Enabled() {
		t.Error("Enabled after Shutdown")
	}
}
