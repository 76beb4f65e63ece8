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

	// ErrRefused: the endpoint refused the request in a way no retry can
	// fix (a wrong or missing API key, no access, an unknown model, a
	// prompt over the model's context length). Such a call is never
	// retried, and its error also matches the specific sentinel below.
	ErrRefused = errors.New("refused")
	// ErrUnauthorized: HTTP 401, the API key is missing or wrong.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: HTTP 403, the key may not use this endpoint or model.
	ErrForbidden = errors.New("forbidden")
	// ErrModelNotFound: HTTP 404, the model (or the endpoint's path) does
	// not exist.
	ErrModelNotFound = errors.New("model not found")
	// ErrContextLength: HTTP 400, the prompt exceeds the model's context.
	ErrContextLength = errors.New("context length exceeded")

	// ErrUnavailable: the call waited out an outage (connection errors,
	// timeouts, 429, 5xx) for the whole outage window and gave up. The
	// error also matches the last failure's sentinel, if it had one.
	ErrUnavailable = errors.New("endpoint unavailable")
)

// refusal names, in plain words, why the endpoint refused a request that no
// retry can fix; ok is false for any other status.
func refusal(status int, msg string) (kind error, words string, ok bool) {
	switch status {
	case http.StatusUnauthorized:
		return ErrUnauthorized, "the LLM endpoint refused the API key (HTTP 401): check OPENAI_API_KEY", true
	case http.StatusForbidden:
		return ErrForbidden, "the LLM endpoint denied access with this API key (HTTP 403): check the key's permissions for this model", true
	case http.StatusNotFound:
		return ErrModelNotFound, "the LLM endpoint does not know the model or path (HTTP 404): check the model name and OPENAI_BASE_URL", true
	case http.StatusBadRequest:
		l := strings.ToLower(msg)
		for _, w := range []string{"context_length", "context length", "maximum context", "context window", "too many tokens", "prompt is too long"} {
			if strings.Contains(l, w) {
				return ErrContextLength, "the prompt is longer than the model's context (HTTP 400)", true
			}
		}
	}
	return nil, "", false
}

// redacted replaces a secret found in an error or log text.
const redacted = "[REDACTED]"

// maxDetail bounds how much of a non-JSON error body goes into a message
// (proxies answer with whole HTML pages).
const maxDetail = 300

// failure describes one failed attempt.
type failure struct {
	// ctxErr is the caller's context error: the call ends, never retried.
	ctxErr error
	// kind is ErrRateLimited, ErrServer, ErrTimeout, one of the refusal
	// sentinels, or nil.
	kind      error
	retryable bool
	// refused holds, in plain words, why the endpoint refused the request
	// (kind is then a refusal sentinel); "" otherwise.
	refused string
	status  int // HTTP status, 0 when no response was received
	// retryAfter is the server's wait hint, valid when hasRetry.
	retryAfter time.Duration
	hasRetry   bool
	// detail describes the failure for errors and logs, secrets redacted.
	detail string
	// gaveUp is set when the call waited the whole outage window.
	gaveUp bool
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

	if ex.cut {
		// A body past the limit: a runaway answer, or a page that does
		// not end. A successful one is not asked for again (the same
		// request would run away the same way); an error one is handled
		// by its status.
		detail := fmt.Sprintf("the endpoint's answer (HTTP %d) passed %d MiB and was cut (a runaway answer, or a proxy's page that does not end: check the endpoint and the model's max_tokens)", ex.status, ex.limit>>20)
		f := &failure{status: ex.status, detail: detail}
		f.byStatus(ex.status)
		return f
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
		if kind, words, ok := refusal(status, msg); ok {
			f.kind, f.refused = kind, words
			return f
		}
		f.byStatus(status)
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

// byStatus makes an error answer of the endpoint retryable by its status:
// 429 (rate limited) and 5xx (the server's fault) are.
func (f *failure) byStatus(status int) {
	switch {
	case status == http.StatusTooManyRequests:
		f.kind, f.retryable = ErrRateLimited, true
	case status >= 500:
		f.kind, f.retryable = ErrServer, true
	}
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
	// cause is the short name of a refusal ("HTTP 401"), "" otherwise.
	cause string
}

func (e *callError) Error() string   { return e.msg }
func (e *callError) Unwrap() []error { return e.errs }

// Refusal tells whether err is a refusal by the endpoint that no retry can
// fix (ErrRefused), and names its cause briefly ("HTTP 401"), the same for
// every call that meets it: callers report each cause once, not once per
// call.
func Refusal(err error) (cause string, ok bool) {
	var ce *callError
	if !errors.As(err, &ce) || ce.cause == "" {
		return "", false
	}
	return ce.cause, true
}

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
	case f.refused != "":
		return &callError{
			msg:   o.redact(fmt.Sprintf("llm: chat completion: %s; the endpoint said: %s %s", f.refused, f.detail, where)),
			errs:  []error{ErrRefused, f.kind},
			cause: fmt.Sprintf("HTTP %d", f.status),
		}
	case f.kind != nil:
		errs = []error{f.kind}
		msg = fmt.Sprintf("llm: chat completion: %v: %s %s", f.kind, f.detail, where)
	default:
		msg = fmt.Sprintf("llm: chat completion: %s %s", f.detail, where)
	}
	if f.gaveUp {
		errs = append(errs, ErrUnavailable)
	}
	return &callError{msg: o.redact(msg), errs: errs}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Unanswered reports whether err is the failure of a call that got no
// answer from the endpoint: a transient failure (connection, timeout, 429,
// 5xx), a give-up on the outage window, or its caller's end. A refusal is
// an answer (the endpoint is reachable), and so is any error that is not a
// call's failure: a step's own, after an answer (an output that does not
// parse). The engine resumes what an outage paused on an answer.
func Unanswered(err error) bool {
	var ce *callError
	if !errors.As(err, &ce) {
		return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	}
	return !errors.Is(err, ErrRefused)
}
