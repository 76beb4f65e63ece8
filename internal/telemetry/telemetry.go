// Package telemetry exports OpenTelemetry traces and metrics of mas-mcp,
// following the GenAI and MCP semantic conventions.
//
// It is configured by the standard OTEL_* environment variables and is off
// unless one of them asks for an exporter: then every hook in the other
// packages is one atomic load that finds nothing to do (no SDK, no
// goroutine, no exporter).
//
// The state is process-wide (like the otel globals) but kept here rather
// than in otel.SetTracerProvider: the global delegating providers bind
// their instruments to the first provider ever set, so a second Setup (a
// restart in tests) would silently record into the first one.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mas-mcp/mas-mcp/llm"
)

// ScopeName names the instrumentation scope of every span and metric.
const ScopeName = "github.com/mas-mcp/mas-mcp"

// Environment variables read besides the ones the OTLP exporters read
// themselves (OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS, _TIMEOUT, _INSECURE …).
const (
	envSDKDisabled     = "OTEL_SDK_DISABLED"
	envTracesExporter  = "OTEL_TRACES_EXPORTER"
	envMetricsExporter = "OTEL_METRICS_EXPORTER"
	envEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	envProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envMetricsProtocol = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	// EnvCaptureContent turns on prompts, completions and tool arguments
	// and results in spans (off by default: they may hold anything).
	EnvCaptureContent = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
)

// Config tunes Setup. The zero value reads the environment only.
type Config struct {
	// ServiceVersion is the resource's service.version.
	ServiceVersion string
	// Prometheus serves metrics in the Prometheus text format from
	// Telemetry.MetricsHandler (mas-mcp's --metrics flag), whatever
	// OTEL_METRICS_EXPORTER says.
	Prometheus bool
	// Getenv reads the environment (nil: os.Getenv). The OTLP exporters
	// read their own variables from the process environment.
	Getenv func(string) string
	// SpanExporter and MetricReader, when set, are used instead of what
	// the environment asks for (tests and benchmarks).
	SpanExporter sdktrace.SpanExporter
	MetricReader sdkmetric.Reader
}

// Telemetry is what Setup started. Its methods are safe on a nil receiver
// (telemetry off).
type Telemetry struct {
	tp      *sdktrace.TracerProvider
	mp      *sdkmetric.MeterProvider
	metrics http.Handler
	st      *state
}

// state is what the hooks read; nil means off.
type state struct {
	tracer  trace.Tracer // nil when traces are off
	capture bool
	inst    *instruments // nil when metrics are off
}

var current atomic.Pointer[state]

func load() *state { return current.Load() }

// Enabled reports whether traces or metrics are being recorded.
func Enabled() bool { return load() != nil }

// Setup starts the exporters the environment (and cfg) asks for and makes
// them the ones every hook records into. With none asked for it returns
// (nil, nil) and nothing runs. Call Shutdown to flush and stop.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv(envSDKDisabled)); strings.EqualFold(v, "true") {
		return nil, nil
	}
	spanExp := cfg.SpanExporter
	if spanExp == nil {
		var err error
		if spanExp, err = tracesFromEnv(ctx, getenv); err != nil {
			return nil, err
		}
	}
	readers := []sdkmetric.Reader{}
	if cfg.MetricReader != nil {
		readers = append(readers, cfg.MetricReader)
	} else {
		r, err := metricsFromEnv(ctx, getenv)
		if err != nil {
			return nil, err
		}
		if r != nil {
			readers = append(readers, r)
		}
	}
	t := &Telemetry{}
	if cfg.Prometheus || strings.TrimSpace(getenv(envMetricsExporter)) == "prometheus" {
		reg := promclient.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		readers = append(readers, exp)
		t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if spanExp == nil && len(readers) == 0 {
		return nil, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "mas-mcp"), attribute.String("service.version", cfg.ServiceVersion)),
		// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the defaults above.
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	st := &state{capture: strings.EqualFold(strings.TrimSpace(getenv(EnvCaptureContent)), "true")}
	if spanExp != nil {
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(spanExp), sdktrace.WithResource(res))
		st.tracer = t.tp.Tracer(ScopeName)
	}
	if len(readers) > 0 {
		opts := []sdkmetric.Option{sdkmetric.WithResource(res)}
		for _, r := range readers {
			opts = append(opts, sdkmetric.WithReader(r))
		}
		t.mp = sdkmetric.NewMeterProvider(opts...)
		if st.inst, err = newInstruments(t.mp.Meter(ScopeName)); err != nil {
			_ = t.shutdownProviders(ctx)
			return nil, err
		}
	}
	t.st = st
	current.Store(st)
	llm.SetObserver(chatObserver{})
	return t, nil
}

// Shutdown flushes what is buffered and stops the exporters; the hooks are
// off again afterwards. Safe to call twice and on nil.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if current.CompareAndSwap(t.st, nil) {
		llm.SetObserver(nil)
	}
	return t.shutdownProviders(ctx)
}

func (t *Telemetry) shutdownProviders(ctx context.Context) error {
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Flush exports every finished span and the current metrics now.
func (t *Telemetry) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.ForceFlush(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.ForceFlush(ctx))
	}
	return errors.Join(errs...)
}

// MetricsHandler serves the metrics in the Prometheus text format, or is
// nil when Config.Prometheus was not set.
func (t *Telemetry) MetricsHandler() http.Handler {
	if t == nil {
		return nil
	}
	return t.metrics
}

// first returns the first non-empty value of the variables.
func first(getenv func(string) string, keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

// wanted decides from OTEL_{TRACES,METRICS}_EXPORTER and the endpoints
// whether OTLP export is asked for. Other exporters are refused: "console"
// would write to stdout, which is the MCP protocol under --stdio.
func wanted(getenv func(string) string, exporterVar, endpointVar string, allowed ...string) (bool, error) {
	switch v := strings.TrimSpace(getenv(exporterVar)); v {
	case "":
		return first(getenv, envEndpoint, endpointVar) != "", nil
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	default:
		for _, a := range allowed {
			if v == a {
				return false, nil
			}
		}
		return false, fmt.Errorf("telemetry: %s=%q: supported are otlp, none%s", exporterVar, v, strings.Join(append([]string{""}, allowed...), ", "))
	}
}

// protocol is OTLP's protocol for one signal: grpc or http/protobuf (the
// default, as the specification says).
func protocol(getenv func(string) string, signalVar string) (string, error) {
	switch p := first(getenv, signalVar, envProtocol); p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	default:
		return "", fmt.Errorf("telemetry: OTLP protocol %q: supported are grpc and http/protobuf", p)
	}
}

func tracesFromEnv(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	on, err := wanted(getenv, envTracesExporter, envTracesEndpoint)
	if err != nil || !on {
		return nil, err
	}
	p, err := protocol(getenv, envTracesProtocol)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if p == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter (%s): %w", p, err)
	}
	return exp, nil
}

func metricsFromEnv(ctx context.Context, getenv func(string) string) (sdkmetric.Reader, error) {
	on, err := wanted(getenv, envMetricsExporter, envMetricsEndpoint, "prometheus")
	if err != nil || !on {
		return nil, err
	}
	p, err := protocol(getenv, envMetricsProtocol)
	if err != nil {
		return nil, err
	}
	var exp sdkmetric.Exporter
	if p == "grpc" {
		exp, err = otlpmetricgrpc.New(ctx)
	} else {
		exp, err = otlpmetrichttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP metric exporter (%s): %w", p, err)
	}
	return sdkmetric.NewPeriodicReader(exp), nil
}
