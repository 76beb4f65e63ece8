// Package otlptest is an OTLP/HTTP receiver for tests: it accepts what
// OpenTelemetry exporters send to /v1/traces and /v1/metrics (protobuf,
// optionally gzip), decodes it with the collector's own message types and
// keeps it for the test to inspect.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is a running OTLP/HTTP receiver.
type Receiver struct {
	// URL is the endpoint to set as OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	mu      sync.Mutex
	spans   []Span                       // guarded by mu
	metrics []*metricspb.ResourceMetrics // guarded by mu
	raw     bytes.Buffer                 // every decoded body, guarded by mu
}

// Span is one received span with its ids in hex and its attributes
// flattened to strings.
type Span struct {
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string
	SpanID   string
	ParentID string
	Attrs    map[string]string
	Status   *tracepb.Status
	Links    []*tracepb.Span_Link
}

// Start starts a receiver, closed at the test's cleanup.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var msg colltrace.ExportTraceServiceRequest
		if !r.read(w, req, &msg) {
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, flatten(s))
				}
			}
		}
		r.mu.Unlock()
		reply(w, &colltrace.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var msg collmetrics.ExportMetricsServiceRequest
		if !r.read(w, req, &msg) {
			return
		}
		r.mu.Lock()
		r.metrics = append(r.metrics, msg.ResourceMetrics...)
		r.mu.Unlock()
		reply(w, &collmetrics.ExportMetricsServiceResponse{})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// read decodes a request body into msg, or answers 400.
func (r *Receiver) read(w http.ResponseWriter, req *http.Request, msg proto.Message) bool {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err == nil {
		err = proto.Unmarshal(b, msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	r.mu.Lock()
	r.raw.Write(b)
	r.mu.Unlock()
	return true
}

func reply(w http.ResponseWriter, msg proto.Message) {
	b, _ := proto.Marshal(msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func flatten(s *tracepb.Span) Span {
	out := Span{Name: s.Name, Kind: s.Kind, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
		ParentID: hex.EncodeToString(s.ParentSpanId), Attrs: map[string]string{}, Status: s.Status, Links: s.Links}
	for _, kv := range s.Attributes {
		out.Attrs[kv.Key] = valueString(kv.Value)
	}
	return out
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	default:
		return v.String()
	}
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Metrics returns the metric batches received so far.
func (r *Receiver) Metrics() []*metricspb.ResourceMetrics {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*metricspb.ResourceMetrics(nil), r.metrics...)
}

// Raw returns every body received, decoded from gzip, as bytes: strings
// are stored verbatim in protobuf, so a secret in any span or metric shows
// up here.
func (r *Receiver) Raw() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.raw.Bytes())
}
