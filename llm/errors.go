package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Sentinels for the failures callers may want to tell apart with errors.Is.
// Each is reported only once the retries are exhausted.
var (
	// ErrRateLimited: the endpoint answered 429 Too Many Requests.
	ErrRateLimited = errors.New("rate limited")
	// ErrServer: the endpoint answered with a 5xx status.
	ErrServer = errors.New("server error")
	// ErrTimeout: no answer within the per-attempt timeout.
	ErrTimeout = errors.New("timeout")
)

// redacted replaces a secret found in an error or log text.
const redacted = "[REDACTED]"

// maxDetail bounds how much of a non-JSON error body goes into a message
// (proxies answer with whole HTML pages).
const maxDetail = 300

// failure describes one failed attempt.
type failure struct {
	// ctxErr is the caller's context error: the call ends, never retried.
	ctxErr error
	// kind is ErrRateLimited, ErrServer, ErrTimeout or nil.
	kind      error
	retryable bool
	status    int // HTTP status, 0 when no response was received
	// retryAfter is the server's wait hint, valid when hasRetry.
	retryAfter time.Duration
	hasRetry   bool
	// detail describes the failure for errors and logs, secrets redacted.
	detail string
}

// classify turns the error of one CreateChatCompletion attempt into a
// failure. ctx is the caller's context, actx the attempt's (with timeout).
func (o *OpenAI) classify(ctx, actx context.Context, ex *exchange, err error) *failure {
	if ctx.Err() != nil {
		return &failure{ctxErr: ctx.Err(), status: ex.status}
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) {
		return &failure{
			kind:      ErrTimeout,
			retryable: true,
			status:    ex.status,
			detail:    fmt.Sprintf("no answer within %s", o.timeout),
		}
	}

	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	status, msg := 0, ""
	switch {
	case errors.As(err, &apiErr):
		status, msg = apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr):
		status, msg = reqErr.HTTPStatusCode, string(reqErr.Body)
		if strings.TrimSpace(msg) == "" && reqErr.Err != nil {
			msg = reqErr.Err.Error()
		}
	}
	if status != 0 {
		f := &failure{status: status, detail: o.redact(statusDetail(status, msg))}
		switch {
		case status == http.StatusTooManyRequests:
			f.kind, f.retryable = ErrRateLimited, true
		case status >= 500:
			f.kind, f.retryable = ErrServer, true
		}
		if f.retryable && ex.status == status {
			f.retryAfter, f.hasRetry = ex.retryAfter, ex.hasRetry
		}
		return f
	}

	f := &failure{status: ex.status, detail: o.redact(err.Error())}
	if ex.transportErr || transient(err) {
		f.retryable = true
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// The caller's http.Client.Timeout, or a dial/TLS timeout.
			f.kind = ErrTimeout
		}
	}
	return f
}

// transient reports whether err looks like a connection that broke while the
// response was being read (the round trip itself having succeeded).
func transient(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED)
}

// statusDetail renders an HTTP failure as "status 429: <endpoint message>".
func statusDetail(status int, msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > maxDetail {
		msg = msg[:maxDetail] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return fmt.Sprintf("status %d: %s", status, msg)
}

// redact removes the API key, anything derived from it and the base URL's
// secrets from s (see scrubber). Endpoints and proxies have been seen to
// echo the Authorization header, masked or not, in error bodies.
func (o *OpenAI) redact(s string) string {
	return o.secrets.scrub(s)
}

// callError is what Complete returns on failure. Its message is built and
// redacted once, and it wraps only errors that cannot carry a secret
// (the sentinels above and context errors) — never go-openai's errors, whose
// text may hold an echoed key — so neither Error nor errors.Unwrap can leak.
type callError struct {
	msg  string
	errs []error
}

func (e *callError) Error() string   { return e.msg }
func (e *callError) Unwrap() []error { return e.errs }

// fail builds the error for a call that ended with f after attempts tries.
func (o *OpenAI) fail(f *failure, model string, attempts int) error {
	where := fmt.Sprintf("(model %q, %d attempt%s)", model, attempts, plural(attempts))
	var msg string
	var errs []error
	switch {
	case f.ctxErr != nil:
		errs = []error{f.ctxErr}
		msg = fmt.Sprintf("llm: chat completion: %v %s", f.ctxErr, where)
		if f.detail != "" {
			msg += "; last failure: " + f.detail
		}
	case f.kind != nil:
		errs = []error{f.kind}
		msg = fmt.Sprintf("llm: chat completion: %v: %s %s", f.kind, f.detail, where)
	default:
		msg = fmt.Sprintf("llm: chat completion: %s %s", f.detail, where)
	}
	return &callError{msg: o.redact(msg), errs: errs}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
