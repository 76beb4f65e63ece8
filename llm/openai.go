package llm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Defaults of OpenAIConfig.
const (
	DefaultBaseURL      = "https://api.openai.com/v1"
	DefaultTimeout      = 120 * time.Second
	DefaultMaxRetries   = 3
	DefaultConcurrency  = 8
	DefaultMaxRetryWait = 60 * time.Second
	// DefaultMaxAnswerBytes bounds one HTTP answer of the endpoint: a chat
	// answer is a few KB to a few hundred KB; past this the answer is a
	// runaway (or a proxy's page that does not end) and is cut.
	DefaultMaxAnswerBytes = 16 << 20
)

// OpenAIConfig configures an OpenAI-compatible backend. Zero values mean the
// defaults; negative values are rejected by NewOpenAI.
type OpenAIConfig struct {
	// BaseURL is the API root, up to and excluding "/chat/completions"
	// (default DefaultBaseURL; Ollama: "http://localhost:11434/v1"). A
	// query is sent with every request ("…/v1?api-key=K" requests
	// "…/v1/chat/completions?api-key=K"); a fragment is ignored. Its user
	// information and query values are secrets: errors and logs never show
	// them (RedactURL).
	BaseURL string
	// APIKey is sent as a bearer token when non-empty. Neither it, nor a
	// run of 8 or more of its characters, nor a masked form of it appears
	// in an error or a log line.
	APIKey string
	// Model is used when Request.Model is empty. Required.
	Model string
	// Timeout bounds each attempt (default DefaultTimeout).
	Timeout time.Duration
	// MaxRetries is the number of quick retries after the first attempt
	// (default DefaultMaxRetries; negative: none, and no outage waiting
	// either: every failure fails the call at once).
	MaxRetries int
	// OutageWindow is how long a call keeps trying, after its quick
	// retries, while the endpoint is unavailable (connection errors,
	// timeouts, 429, 5xx), with backoff capped by MaxRetryWait; the
	// context's OutageObserver is told meanwhile (default
	// DefaultOutageWindow; negative: no outage waiting).
	OutageWindow time.Duration
	// Concurrency limits the requests in flight across all callers of this
	// client (default DefaultConcurrency).
	Concurrency int
	// MaxRetryWait caps any single wait between attempts, whether from
	// backoff or from the server's Retry-After (default DefaultMaxRetryWait).
	MaxRetryWait time.Duration
	// MaxAnswerBytes bounds the bytes read of one HTTP answer (default
	// DefaultMaxAnswerBytes). A successful answer past it fails the call,
	// not retried; an error answer past it is cut and handled by its
	// status.
	MaxAnswerBytes int64
	// HTTPClient sends the requests (default: a client on
	// http.DefaultTransport). It is copied, not modified. Its Timeout, if
	// set, applies on top of the per-attempt Timeout.
	HTTPClient *http.Client
	// Logger receives a debug record per attempt and an info record per
	// retry (nil: discard). Records never hold the key or the prompt.
	Logger *slog.Logger
}

// OpenAI is a Client for any OpenAI-compatible chat completions endpoint.
// It retries 429, 5xx, timeouts and broken connections with backoff, and
// limits its requests in flight. It is safe for concurrent use.
type OpenAI struct {
	// Fixed at creation.
	client     *openai.Client
	model      string
	apiKey     string // as configured; secrets scrubs it (and what derives from it)
	secrets    *scrubber
	timeout    time.Duration
	maxRetries int // negative: none
	window     time.Duration
	maxWait    time.Duration
	log        *slog.Logger
	// sem holds one token per request in flight; an attempt takes one and
	// gives it back before any backoff.
	sem chan struct{}
	// sleep waits between attempts and now reads the clock that measures
	// the outage window; both are replaced in tests.
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time
}

var _ Client = (*OpenAI)(nil)

// NewOpenAI checks cfg, applies its defaults and returns the client.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.Model == "" {
		return nil, errors.New("llm: openai config: Model is required")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", cfg.Timeout}, {"MaxRetryWait", cfg.MaxRetryWait}} {
		if d.v < 0 {
			return nil, fmt.Errorf("llm: openai config: %s is %s, must not be negative", d.name, d.v)
		}
	}
	if cfg.MaxAnswerBytes < 0 {
		return nil, fmt.Errorf("llm: openai config: MaxAnswerBytes is %d, must not be negative", cfg.MaxAnswerBytes)
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"Concurrency", cfg.Concurrency}} {
		if n.v < 0 {
			return nil, fmt.Errorf("llm: openai config: %s is %d, must not be negative", n.name, n.v)
		}
	}
	baseURL := cmp.Or(cfg.BaseURL, DefaultBaseURL)
	u, err := url.Parse(baseURL)
	if err != nil {
		// url.Error quotes the input, which might hold credentials.
		return nil, errors.New("llm: openai config: BaseURL is not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("llm: openai config: BaseURL %q must be an absolute http or https URL", RedactURL(baseURL))
	}

	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		hc = &c
	}
	var rt http.RoundTripper = cmp.Or[http.RoundTripper](hc.Transport, http.DefaultTransport)
	// go-openai appends "/chat/completions" to the base URL as a string: a
	// query (Azure's ?api-version=, a gateway's ?api-key=) would end up in
	// front of the path. The query goes onto each request instead.
	if u.RawQuery != "" {
		rt = &queryTransport{base: rt, query: u.RawQuery}
	}
	hc.Transport = &recordingTransport{base: rt, limit: cmp.Or(cfg.MaxAnswerBytes, DefaultMaxAnswerBytes)}
	path := *u
	path.RawQuery, path.ForceQuery, path.Fragment, path.RawFragment = "", false, "", ""

	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = path.String()
	oc.HTTPClient = hc

	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &OpenAI{
		client:     openai.NewClientWithConfig(oc),
		model:      cfg.Model,
		apiKey:     cfg.APIKey,
		secrets:    newScrubber(cfg.APIKey, u),
		timeout:    cmp.Or(cfg.Timeout, DefaultTimeout),
		maxRetries: cmp.Or(cfg.MaxRetries, DefaultMaxRetries),
		window:     cmp.Or(cfg.OutageWindow, DefaultOutageWindow),
		maxWait:    cmp.Or(cfg.MaxRetryWait, DefaultMaxRetryWait),
		log:        log,
		sem:        make(chan struct{}, cmp.Or(cfg.Concurrency, DefaultConcurrency)),
		sleep:      Sleep,
		now:        time.Now,
	}
	if o.maxRetries < 0 {
		o.window = -1
	}
	return o, nil
}

// complete sends req, retrying transient failures (Complete, in
// observe.go, lets an Observer watch it).
func (o *OpenAI) complete(ctx context.Context, req *Request) (*Response, error) {
	start := time.Now()
	resp := &Response{Usage: Usage{Calls: 1}}
	done := func(err error) (*Response, error) {
		resp.Latency = time.Since(start)
		resp.Usage.LatencyMS = resp.Latency.Milliseconds()
		return resp, err
	}
	if req == nil {
		return done(errors.New("llm: chat completion: nil request"))
	}
	model := cmp.Or(req.Model, o.model)
	resp.Model = model
	for _, m := range req.Messages {
		resp.Usage.PromptChars += len(m.Content)
	}
	if len(req.Messages) == 0 {
		return done(fmt.Errorf("llm: chat completion: request has no messages (model %q)", model))
	}
	creq := chatRequest(model, req)

	if g, ok := ctx.Value(observerKey{}).(CallGate); ok {
		if err := g.BeforeCall(ctx); err != nil {
			resp.Usage.Calls = 0 // nothing was sent
			return done(err)
		}
	}
	outage := newOutageWait(ctx)
	for attempt := 1; ; attempt++ {
		resp.Attempts = attempt
		cres, f := o.attempt(ctx, creq, req.Tag, attempt)
		if f == nil {
			outage.end(OutageRecovered)
			resp.Usage.PromptTokens = cres.Usage.PromptTokens
			resp.Usage.CompletionTokens = cres.Usage.CompletionTokens
			resp.Usage.TotalTokens = cres.Usage.TotalTokens
			if d := cres.Usage.PromptTokensDetails; d != nil {
				resp.Usage.CachedTokens = d.CachedTokens
			}
			resp.Model = cmp.Or(cres.Model, model)
			if len(cres.Choices) == 0 {
				f = &failure{status: http.StatusOK, detail: "status 200: response has no choices"}
				return done(o.fail(f, model, attempt))
			}
			resp.Content = cres.Choices[0].Message.Content
			resp.Usage.ResponseChars = len(resp.Content)
			return done(nil)
		}
		if !f.retryable || o.maxRetries < 0 {
			// An HTTP answer (a refusal) says the endpoint is back; a
			// context that ended, or a failure with no answer, says
			// nothing of it.
			how := OutageLeft
			if f.ctxErr == nil && f.status > 0 {
				how = OutageRecovered
			}
			outage.end(how)
			return done(o.fail(f, model, attempt))
		}
		now := o.now()
		outage.failed(now)
		if attempt > o.maxRetries {
			// The quick retries are spent: wait the outage out, within
			// the window.
			left := o.window - now.Sub(outage.first)
			if o.window <= 0 || left <= 0 {
				outage.end(OutageGaveUp)
				if o.window > 0 {
					f.detail += fmt.Sprintf("; the endpoint stayed unavailable for %s", now.Sub(outage.first).Round(time.Second))
					f.gaveUp = true
				}
				return done(o.fail(f, model, attempt))
			}
			outage.begin(f.detail)
		}

		wait := Backoff(attempt, baseBackoff, o.maxWait)
		if f.hasRetry {
			wait = min(f.retryAfter, o.maxWait)
		}
		if outage.waiting {
			wait = min(wait, max(o.window-now.Sub(outage.first), 0))
		}
		o.log.LogAttrs(ctx, slog.LevelInfo, "llm retry",
			slog.String("tag", req.Tag), slog.String("model", model),
			slog.Int("attempt", attempt), slog.Int("status", f.status),
			slog.Duration("wait", wait), slog.String("reason", f.detail))
		if err := o.sleep(ctx, wait); err != nil {
			outage.end(OutageLeft)
			return done(o.fail(&failure{ctxErr: err, detail: f.detail}, model, attempt))
		}
	}
}

// attempt makes one request under the concurrency limit and the per-attempt
// timeout. A nil failure means the endpoint answered 200 with a decodable body.
func (o *OpenAI) attempt(ctx context.Context, creq openai.ChatCompletionRequest, tag string, n int) (openai.ChatCompletionResponse, *failure) {
	if err := ctx.Err(); err != nil {
		return openai.ChatCompletionResponse{}, &failure{ctxErr: err}
	}
	select {
	case o.sem <- struct{}{}:
	case <-ctx.Done():
		return openai.ChatCompletionResponse{}, &failure{ctxErr: ctx.Err()}
	}
	defer func() { <-o.sem }()

	actx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	ex := &exchange{}
	start := time.Now()
	cres, err := o.client.CreateChatCompletion(context.WithValue(actx, exchangeKey{}, ex), creq)
	var f *failure
	if err != nil {
		f = o.classify(ctx, actx, ex, err)
	}

	attrs := []slog.Attr{
		slog.String("tag", tag), slog.String("model", creq.Model),
		slog.Int("attempt", n), slog.Int("status", ex.status),
		slog.Duration("elapsed", time.Since(start)),
	}
	if f != nil {
		attrs = append(attrs, slog.String("error", cmp.Or(f.detail, fmt.Sprint(f.ctxErr))))
	}
	o.log.LogAttrs(ctx, slog.LevelDebug, "llm attempt", attrs...)
	return cres, f
}

// chatRequest maps req onto go-openai's request.
func chatRequest(model string, req *Request) openai.ChatCompletionRequest {
	creq := openai.ChatCompletionRequest{
		Model:    model,
		Messages: make([]openai.ChatCompletionMessage, len(req.Messages)),
	}
	for i, m := range req.Messages {
		creq.Messages[i] = openai.ChatCompletionMessage{Role: m.Role, Content: m.Content}
	}
	if req.Temperature != nil {
		creq.Temperature = *req.Temperature
		if creq.Temperature == 0 {
			// go-openai tags temperature omitempty, so 0 would not be sent
			// and the server default (often 1) would apply. The smallest
			// positive float32 is sent instead: 0 for every practical purpose.
			creq.Temperature = math.SmallestNonzeroFloat32
		}
	}
	if req.MaxTokens > 0 {
		creq.MaxTokens = req.MaxTokens
		// go-openai refuses max_tokens for reasoning models (o1, o3, gpt-5 …)
		// before sending; those take max_completion_tokens instead.
		// Other OpenAI-compatible servers (Ollama, older vLLM) only know
		// max_tokens, so it stays the default.
		if errors.Is(openai.NewReasoningValidator().Validate(creq), openai.ErrReasoningModelMaxTokensDeprecated) {
			creq.MaxTokens, creq.MaxCompletionTokens = 0, req.MaxTokens
		}
	}
	return creq
}

// queryTransport adds the base URL's query to each request's (go-openai
// builds request URLs by appending the path to the base URL as a string).
type queryTransport struct {
	base  http.RoundTripper
	query string
}

func (t *queryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change its request
	if r.URL.RawQuery == "" {
		r.URL.RawQuery = t.query
	} else {
		r.URL.RawQuery = t.query + "&" + r.URL.RawQuery
	}
	return t.base.RoundTrip(r)
}
