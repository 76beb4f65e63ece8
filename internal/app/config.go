package app

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/server"
	"github.com/mas-mcp/mas-mcp/skills"
	"github.com/mas-mcp/mas-mcp/store"
)

// Config is everything mas-mcp is configured with: defaults, then the config
// file, then environment variables, then flags (each overriding the one
// before). The API key comes only from the environment, never from a file
// or a flag, so it cannot end up in a shell history or a shared config.
type Config struct {
	// Lang selects the prompt set: "en" or "zh".
	Lang string `yaml:"lang"`
	// PromptsDir overrides embedded prompts and agent templates.
	PromptsDir string `yaml:"prompts_dir"`

	LLM LLMConfig `yaml:"llm"`

	// DataDir holds the durable state (the embedded NATS server's files).
	DataDir string `yaml:"data_dir"`
	// NATSURL uses an existing NATS server or cluster instead of the
	// embedded one.
	NATSURL string `yaml:"nats_url"`
	// NATS authenticates to the server of NATSURL.
	NATS NATSConfig `yaml:"nats"`
	// SyncInterval, when positive, fsyncs every interval instead of on
	// every write (an OS crash may then lose up to that interval).
	SyncInterval time.Duration `yaml:"sync_interval"`
	// Memory keeps state in memory only (nothing survives a restart).
	Memory bool `yaml:"memory"`
	// Trail is the audit trail's retention (trail.go).
	Trail TrailConfig `yaml:"trail"`

	// MCPConfig is the downstream MCP servers file, in the mcpServers shape
	// hosts such as Claude Desktop use.
	MCPConfig string `yaml:"mcp_config"`
	// ConfirmTimeout bounds the wait for the operator's approval of a risky
	// tool call.
	ConfirmTimeout time.Duration `yaml:"confirm_timeout"`

	// Operator names the operator's HumanAgent.
	Operator string `yaml:"operator"`
	// WaitTimeout bounds how long an agent waits for a reply.
	WaitTimeout time.Duration `yaml:"wait_timeout"`
	// StageStepBudget and StageReflectionBudget bound an agent's work in a stage.
	StageStepBudget       int `yaml:"stage_step_budget"`
	StageReflectionBudget int `yaml:"stage_reflection_budget"`
	// UnstagedStepBudget bounds the steps an agent runs in a row outside
	// any stage (the base task) without a new message.
	UnstagedStepBudget int `yaml:"unstaged_step_budget"`
	// MessageChainLimit bounds the messages between agents that may
	// follow one another with no word from an operator or the engine.
	MessageChainLimit int `yaml:"message_chain_limit"`
	// RetryStageLimit bounds the retries of one stage (retry_stage).
	RetryStageLimit int `yaml:"retry_stage_limit"`
	// StallTimeout is how long a task may stay quiet before its manager is
	// told; after StallNotices notices without progress it fails.
	StallTimeout time.Duration `yaml:"stall_timeout"`
	StallNotices int           `yaml:"stall_notices"`
	// PromptBudget caps each prompt's variable sections (history, tool
	// history, memory, the current step and its message) in characters:
	// older history folds and the longest parts of the current step are cut
	// to stay within it.
	PromptBudget int `yaml:"prompt_budget"`
	// MemoryMaxEntries and MemoryMaxChars cap each agent's persistent
	// memory in each operator's view (engine.Config).
	MemoryMaxEntries int `yaml:"memory_max_entries"`
	MemoryMaxChars   int `yaml:"memory_max_chars"`
	// Budgets limits what tasks' LLM calls may spend (0: no limit).
	Budgets BudgetsConfig `yaml:"budgets"`

	// Stdio serves MCP over stdin/stdout instead of HTTP.
	Stdio bool `yaml:"stdio"`
	// StdioHTTP (--stdio with --http) serves HTTP too: the web monitor and
	// MCP over HTTP, beside stdio, from the same process.
	StdioHTTP bool `yaml:"-"`
	// HTTP configures the HTTP transports (streamable HTTP at /mcp, SSE at /sse).
	HTTP HTTPConfig `yaml:"http"`
	// Limits bound what clients may hold open and send; zero values mean
	// server.Limits' defaults.
	Limits LimitsConfig `yaml:"limits"`

	// LogFormat is "text" (human-readable, colour on a terminal) or "json".
	LogFormat string `yaml:"log_format"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level"`

	// Logs receives the log lines (nil: os.Stderr). Never stdout: that is
	// the MCP stdio protocol's.
	Logs io.Writer `yaml:"-"`
	// Version is mas-mcp's version as set at build time ("": read from the
	// build information); --version, --help and serverInfo show it.
	Version string `yaml:"-"`

	// getenv is the environment LoadConfig read (nil: the process's);
	// bearer tokens and passwords are read from it at start.
	getenv func(string) string

	// apiKey is read from OPENAI_API_KEY; never printed.
	apiKey string
	// natsPassword and natsToken are read from the environment
	// (MAS_NATS_PASSWORD, MAS_NATS_TOKEN, or the variables nats.password_env
	// and nats.token_env name); never printed.
	natsPassword, natsToken string
}

// NATSConfig holds how mas-mcp authenticates to an external NATS server
// (nats.go's standard options). Secrets come from the environment only.
type NATSConfig struct {
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string `yaml:"creds_file"`
	// User, with the password from PasswordEnv (default MAS_NATS_PASSWORD).
	User        string `yaml:"user"`
	PasswordEnv string `yaml:"password_env"`
	// TokenEnv names the variable holding a token (default MAS_NATS_TOKEN).
	TokenEnv string `yaml:"token_env"`
	// TLSCA verifies the server's certificate; TLSCert and TLSKey are a
	// client certificate. Any of them requires TLS.
	TLSCA   string `yaml:"tls_ca"`
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
}

// env reads the environment LoadConfig read (the process's without it).
func (c Config) env(key string) string {
	if c.getenv == nil {
		return os.Getenv(key)
	}
	return c.getenv(key)
}

func (n NATSConfig) set() bool { return n != NATSConfig{} }

// HTTPConfig configures the HTTP transports.
type HTTPConfig struct {
	// Addr is the listen address.
	Addr string `yaml:"addr"`
	// Tokens bind bearer tokens to operators; required beyond loopback.
	Tokens []TokenConfig `yaml:"tokens"`
	// Passwords let operators bind the web monitor with their ID and a
	// password (spec §7.4.1).
	Passwords []PasswordConfig `yaml:"passwords"`
	// Admins names operators (as in tokens) who may manage and see every
	// task; the others act only on their own tasks and those shared with
	// them.
	Admins []string `yaml:"admins"`
	// AllowedOrigins and AllowedHosts extend the browser-origin and Host
	// allowlists.
	AllowedOrigins []string      `yaml:"allowed_origins"`
	AllowedHosts   []string      `yaml:"allowed_hosts"`
	SessionTimeout time.Duration `yaml:"session_timeout"`
	MaxBodyBytes   int64         `yaml:"max_body_bytes"`
	// Metrics serves Prometheus metrics at /metrics, behind /api's auth.
	Metrics bool `yaml:"metrics"`
}

// LimitsConfig is server.Limits in the config file (the README's table
// lists the defaults).
type LimitsConfig struct {
	Sessions                   int           `yaml:"sessions"`
	SessionsPerOperator        int           `yaml:"sessions_per_operator"`
	EventStreams               int           `yaml:"event_streams"`
	EventStreamsPerOperator    int           `yaml:"event_streams_per_operator"`
	SSEStreams                 int           `yaml:"sse_streams"`
	SSEStreamsPerOperator      int           `yaml:"sse_streams_per_operator"`
	LongRequests               int           `yaml:"long_requests"`
	LongRequestsPerOperator    int           `yaml:"long_requests_per_operator"`
	SubscriptionsPerSession    int           `yaml:"subscriptions_per_session"`
	BodyTimeout                time.Duration `yaml:"body_timeout"`
	IdleTimeout                time.Duration `yaml:"idle_timeout"`
	StuckSessionTimeout        time.Duration `yaml:"stuck_session_timeout"`
	MonitorSessionTTL          time.Duration `yaml:"monitor_session_ttl"`
	MonitorSessionsPerOperator int           `yaml:"monitor_sessions_per_operator"`
	PasswordFailures           int           `yaml:"password_failures"`
	PasswordBackoff            time.Duration `yaml:"password_backoff"`
	PasswordBackoffMax         time.Duration `yaml:"password_backoff_max"`
	NameBytes                  int           `yaml:"name_bytes"`
	TextBytes                  int           `yaml:"text_bytes"`
	ListItems                  int           `yaml:"list_items"`
	RunningTasksPerOperator    int           `yaml:"running_tasks_per_operator"`
	TasksPerMinute             int           `yaml:"tasks_per_minute"`
}

// server maps the limits onto the server's.
func (l LimitsConfig) server() server.Limits {
	return server.Limits{
		Sessions: l.Sessions, SessionsPerOperator: l.SessionsPerOperator,
		EventStreams: l.EventStreams, EventStreamsPerOperator: l.EventStreamsPerOperator,
		SSEStreams: l.SSEStreams, SSEStreamsPerOperator: l.SSEStreamsPerOperator,
		LongRequests: l.LongRequests, LongRequestsPerOperator: l.LongRequestsPerOperator,
		SubscriptionsPerSession: l.SubscriptionsPerSession,
		BodyTimeout:             l.BodyTimeout, IdleTimeout: l.IdleTimeout, StuckSession: l.StuckSessionTimeout,
		MonitorSessionTTL: l.MonitorSessionTTL, MonitorSessionsPerOperator: l.MonitorSessionsPerOperator,
		PasswordFailures: l.PasswordFailures, PasswordBackoff: l.PasswordBackoff, PasswordBackoffMax: l.PasswordBackoffMax,
		NameBytes: l.NameBytes, TextBytes: l.TextBytes, ListItems: l.ListItems,
		RunningTasksPerOperator: l.RunningTasksPerOperator, TasksPerMinute: l.TasksPerMinute,
	}
}

// PasswordConfig gives an operator a password for the web monitor's
// bind_human_agent (spec §7.4.1), read from the environment variable
// PasswordEnv.
type PasswordConfig struct {
	Operator    string `yaml:"operator"`
	PasswordEnv string `yaml:"password_env"`
}

// TokenConfig binds one bearer token to an operator (a HumanAgent, created
// at start-up if it does not exist). The token is read from the environment
// variable TokenEnv, or (discouraged: files get shared) given as Token.
type TokenConfig struct {
	Operator string `yaml:"operator"`
	TokenEnv string `yaml:"token_env"`
	Token    string `yaml:"token"`
}

// LLMConfig configures the OpenAI-compatible endpoint.
// BudgetsConfig is the budgets section (engine/budget_tokens.go); 0 means
// no limit. Prices are per million tokens, per model ("*": the others).
type BudgetsConfig struct {
	TaskTokens          int                     `yaml:"task_tokens"`
	AgentTokens         int                     `yaml:"agent_tokens"`
	TaskCost            float64                 `yaml:"task_cost"`
	OperatorDailyTokens int                     `yaml:"operator_daily_tokens"`
	RaiseTokens         int                     `yaml:"raise_tokens"`
	RaiseCost           float64                 `yaml:"raise_cost"`
	Prices              map[string]engine.Price `yaml:"prices"`
}

// engine is the section as the engine takes it; model prices calls of
// agents without a model of their own.
func (b BudgetsConfig) engine(model string) engine.BudgetConfig {
	return engine.BudgetConfig{
		TaskTokens: b.TaskTokens, AgentTokens: b.AgentTokens, TaskCost: b.TaskCost,
		OperatorDailyTokens: b.OperatorDailyTokens, RaiseTokens: b.RaiseTokens, RaiseCost: b.RaiseCost,
		Prices: b.Prices, DefaultModel: model,
	}
}

type LLMConfig struct {
	BaseURL     string        `yaml:"base_url"`
	Model       string        `yaml:"model"`
	Timeout     time.Duration `yaml:"timeout"`
	MaxRetries  int           `yaml:"max_retries"`
	Concurrency int           `yaml:"concurrency"`
	// OutageWindow is how long a call waits out an unavailable endpoint
	// (connection errors, timeouts, 429, 5xx) after its quick retries; 0:
	// not at all.
	OutageWindow time.Duration `yaml:"outage_window"`
}

func defaultConfig() Config {
	return Config{
		Lang:                  "en",
		LLM:                   LLMConfig{BaseURL: "https://api.openai.com/v1", Model: "gpt-4o-mini", Timeout: 120 * time.Second, MaxRetries: 3, Concurrency: 8, OutageWindow: 10 * time.Minute},
		Operator:              "operator",
		WaitTimeout:           10 * time.Minute,
		ConfirmTimeout:        10 * time.Minute,
		StageStepBudget:       60,
		StageReflectionBudget: 6,
		UnstagedStepBudget:    100,
		MessageChainLimit:     100,
		RetryStageLimit:       3,
		StallTimeout:          3 * time.Minute,
		StallNotices:          2,
		PromptBudget:          skills.DefaultPromptBudget,
		MemoryMaxEntries:      30,
		MemoryMaxChars:        6000,
		HTTP:                  HTTPConfig{Addr: "127.0.0.1:7777"},
		LogFormat:             "text",
		LogLevel:              "info",
	}
}

// envVars are the environment variables mas-mcp reads, for --help.
const envVars = `Environment (flags override it; it overrides the config file):
  OPENAI_API_KEY     the LLM endpoint's API key (only from the environment, never a flag or file)
  OPENAI_BASE_URL    the OpenAI-compatible endpoint (as --llm-base-url)
  MAS_MODEL          the default model (as --model)
  MAS_LANG           the prompt language, en or zh (as --lang)
  MAS_CONFIG         the YAML config file (as --config)
  MAS_DATA_DIR       the directory of the durable state (as --data-dir)
  MAS_MCP_CONFIG     the downstream MCP servers file (as --mcp-config)
  MAS_NATS_URL, MAS_NATS_CREDS, MAS_NATS_USER, MAS_NATS_PASSWORD, MAS_NATS_TOKEN
                     an external NATS server and its credentials (as --nats-*)
  OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL (grpc or http/protobuf), OTEL_TRACES_EXPORTER,
  OTEL_METRICS_EXPORTER, OTEL_SERVICE_NAME, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT …
                     OpenTelemetry traces and metrics (off unless an exporter is asked for)
`

// LoadConfig builds the Config from the command line's args and the
// environment (getenv), for a binary of the given version (see
// Config.Version). Every flag shows its default in --help; a flag
// overrides the file and the environment only when it is given. --help
// and flag errors are written to usage; --help and --version return
// flag.ErrHelp (the caller exits 0).
func LoadConfig(args []string, getenv func(string) string, usage io.Writer, version string) (Config, error) {
	cfg := defaultConfig()
	cfg.Version, cfg.getenv = version, getenv
	d := defaultConfig()
	moduleVersion := func() string { return moduleVersion(version) }

	fs := flag.NewFlagSet("mas-mcp", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: mas-mcp [flags]\n\nmas-mcp %s runs a team of LLM agents behind an MCP server (HTTP by default; --stdio for hosts such as Claude Desktop).\n\nFlags:\n", moduleVersion())
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\n%s", envVars)
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	configPath := fs.String("config", getenv("MAS_CONFIG"), "YAML config file (env MAS_CONFIG)")
	lang := fs.String("lang", d.Lang, `prompt language: "en" or "zh" (env MAS_LANG)`)
	promptsDir := fs.String("prompts-dir", "", "directory overriding the embedded prompts and agent templates (default: the embedded ones)")
	baseURL := fs.String("llm-base-url", d.LLM.BaseURL, "OpenAI-compatible endpoint (env OPENAI_BASE_URL; e.g. http://localhost:11434/v1 for Ollama)")
	model := fs.String("model", d.LLM.Model, "default model (env MAS_MODEL)")
	timeout := fs.Duration("llm-timeout", d.LLM.Timeout, "timeout of one LLM request attempt")
	retries := fs.Int("llm-retries", d.LLM.MaxRetries, "quick retries of a failed LLM request (429, 5xx, timeouts); 0: none, and no outage waiting either")
	outage := fs.Duration("llm-outage-window", d.LLM.OutageWindow, "how long an LLM call waits out an unavailable endpoint after its quick retries, the agent shown waiting; 0: not at all")
	stall := fs.Duration("stall-timeout", d.StallTimeout, "how long a task may stay quiet (nothing running, nothing to run, no wait) before its manager is told what is outstanding")
	stallNotices := fs.Int("stall-notices", d.StallNotices, "notices a quiet task gets without progress before it is marked failed")
	retryLimit := fs.Int("retry-stage-limit", d.RetryStageLimit, "how many times one stage may be retried")
	conc := fs.Int("llm-concurrency", d.LLM.Concurrency, "LLM requests in flight at once, across all agents")
	operator := fs.String("operator", d.Operator, "name of the operator's HumanAgent")
	wait := fs.Duration("wait-timeout", d.WaitTimeout, "how long an agent waits for a reply before carrying on")
	steps := fs.Int("stage-step-budget", d.StageStepBudget, "steps an agent may run in one stage before it must summarise")
	refl := fs.Int("stage-reflection-budget", d.StageReflectionBudget, "reflections an agent may run in one stage before it must summarise")
	chain := fs.Int("message-chain-limit", d.MessageChainLimit, "messages between agents that may follow one another with no word from an operator or the engine; past it a message is not sent and its step fails saying so")
	unstaged := fs.Int("unstaged-step-budget", d.UnstagedStepBudget, "steps an agent may run in a row outside any stage (the base task) without a new message; past them its steps there are skipped")
	promptBudget := fs.Int("prompt-budget", d.PromptBudget, "cap on the characters of a prompt's variable sections (history, memory, the current step and its message): the current step's longest parts are cut to leave the history a quarter, and older history folds to fit the rest")
	memEntries := fs.Int("memory-max-entries", d.MemoryMaxEntries, "entries an agent's persistent memory may hold in each operator's view before adds are refused")
	memChars := fs.Int("memory-max-chars", d.MemoryMaxChars, "characters an agent's persistent memory may hold in each operator's view before adds are refused")
	taskTokens := fs.Int("task-token-budget", d.Budgets.TaskTokens, "a new task's token budget unless add_task sets one: it pauses there and its operator is asked to raise it; 0: none (more budgets in the config file's budgets section)")
	dataDir := fs.String("data-dir", "", "directory of the durable state (env MAS_DATA_DIR; default: the user's config directory/mas-mcp)")
	natsURL := fs.String("nats-url", "", "use this NATS server or cluster for the durable state instead of the embedded one (env MAS_NATS_URL; default: embedded)")
	natsCreds := fs.String("nats-creds", "", "NATS credentials file for --nats-url (env MAS_NATS_CREDS)")
	natsUser := fs.String("nats-user", "", "NATS user for --nats-url; the password comes from MAS_NATS_PASSWORD (env MAS_NATS_USER)")
	natsCA := fs.String("nats-tls-ca", "", "CA file verifying the --nats-url server's TLS certificate")
	natsCert := fs.String("nats-tls-cert", "", "client certificate file for --nats-url (with --nats-tls-key)")
	natsKey := fs.String("nats-tls-key", "", "client certificate key file for --nats-url")
	syncInterval := fs.Duration("sync-interval", d.SyncInterval, "fsync every interval instead of on every write (an OS crash may lose up to the interval); 0: on every write")
	memory := fs.Bool("memory", false, "keep state in memory only: nothing survives a restart")
	mcpConfig := fs.String("mcp-config", "", "downstream MCP servers file ({\"mcpServers\": …}, as Claude Desktop's) (env MAS_MCP_CONFIG; default: none)")
	confirm := fs.Duration("confirm-timeout", d.ConfirmTimeout, "how long a risky tool call waits for the operator's approval")
	stdio := fs.Bool("stdio", false, "serve MCP over stdin/stdout (for hosts such as Claude Desktop); with --http, also serve HTTP (the web monitor)")
	httpAddr := fs.String("http", d.HTTP.Addr, "serve MCP over HTTP on this address: streamable HTTP at /mcp, SSE at /sse, the web monitor at /")
	metrics := fs.Bool("metrics", false, "serve Prometheus-format metrics at /metrics on the HTTP server (same auth as /api); traces and OTLP metrics follow the OTEL_* variables")
	logFormat := fs.String("log-format", d.LogFormat, `log format on stderr: "text" or "json"`)
	logLevel := fs.String("log-level", d.LogLevel, "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0))
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, "mas-mcp", moduleVersion())
		return cfg, flag.ErrHelp
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if *configPath != "" {
		data, err := os.ReadFile(*configPath)
		if err != nil {
			return cfg, fmt.Errorf("config file: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config file %s: %w", *configPath, err)
		}
		// One document: settings after a "---" would be ignored silently.
		var more yaml.Node
		if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config file %s: holds more than one YAML document (a \"---\" line); put every setting in one", *configPath)
		}
	}

	if v := getenv("OPENAI_BASE_URL"); v != "" {
		cfg.LLM.BaseURL = v
	}
	if v := getenv("MAS_MODEL"); v != "" {
		cfg.LLM.Model = v
	}
	if v := getenv("MAS_LANG"); v != "" {
		cfg.Lang = v
	}
	if v := getenv("MAS_MCP_CONFIG"); v != "" {
		cfg.MCPConfig = v
	}
	if v := getenv("MAS_DATA_DIR"); v != "" {
		cfg.DataDir = v
	}
	if v := getenv("MAS_NATS_URL"); v != "" {
		cfg.NATSURL = v
	}
	if v := getenv("MAS_NATS_CREDS"); v != "" {
		cfg.NATS.CredsFile = v
	}
	if v := getenv("MAS_NATS_USER"); v != "" {
		cfg.NATS.User = v
	}
	cfg.apiKey = getenv("OPENAI_API_KEY")

	// Flags given on the command line override the rest.
	for name, apply := range map[string]func(){
		"lang": func() { cfg.Lang = *lang }, "prompts-dir": func() { cfg.PromptsDir = *promptsDir },
		"llm-base-url": func() { cfg.LLM.BaseURL = *baseURL }, "model": func() { cfg.LLM.Model = *model },
		"operator": func() { cfg.Operator = *operator }, "log-format": func() { cfg.LogFormat = *logFormat },
		"log-level": func() { cfg.LogLevel = *logLevel }, "http": func() { cfg.HTTP.Addr = *httpAddr },
		"mcp-config": func() { cfg.MCPConfig = *mcpConfig }, "data-dir": func() { cfg.DataDir = *dataDir },
		"nats-url": func() { cfg.NATSURL = *natsURL }, "nats-creds": func() { cfg.NATS.CredsFile = *natsCreds },
		"nats-user": func() { cfg.NATS.User = *natsUser }, "nats-tls-ca": func() { cfg.NATS.TLSCA = *natsCA },
		"nats-tls-cert": func() { cfg.NATS.TLSCert = *natsCert }, "nats-tls-key": func() { cfg.NATS.TLSKey = *natsKey },
		"sync-interval": func() { cfg.SyncInterval = *syncInterval }, "memory": func() { cfg.Memory = *memory },
		"confirm-timeout": func() { cfg.ConfirmTimeout = *confirm }, "stdio": func() { cfg.Stdio = *stdio },
		"metrics":     func() { cfg.HTTP.Metrics = *metrics },
		"llm-timeout": func() { cfg.LLM.Timeout = *timeout }, "llm-retries": func() { cfg.LLM.MaxRetries = *retries },
		"llm-outage-window": func() { cfg.LLM.OutageWindow = *outage }, "stall-timeout": func() { cfg.StallTimeout = *stall },
		"stall-notices": func() { cfg.StallNotices = *stallNotices }, "retry-stage-limit": func() { cfg.RetryStageLimit = *retryLimit },
		"llm-concurrency": func() { cfg.LLM.Concurrency = *conc }, "wait-timeout": func() { cfg.WaitTimeout = *wait },
		"stage-step-budget": func() { cfg.StageStepBudget = *steps }, "stage-reflection-budget": func() { cfg.StageReflectionBudget = *refl },
		"unstaged-step-budget": func() { cfg.UnstagedStepBudget = *unstaged },
		"message-chain-limit":  func() { cfg.MessageChainLimit = *chain },
		"prompt-budget":        func() { cfg.PromptBudget = *promptBudget }, "memory-max-entries": func() { cfg.MemoryMaxEntries = *memEntries },
		"memory-max-chars": func() { cfg.MemoryMaxChars = *memChars }, "task-token-budget": func() { cfg.Budgets.TaskTokens = *taskTokens },
	} {
		if set[name] {
			apply()
		}
	}
	cfg.natsPassword = getenv(cmp.Or(cfg.NATS.PasswordEnv, "MAS_NATS_PASSWORD"))
	cfg.natsToken = getenv(cmp.Or(cfg.NATS.TokenEnv, "MAS_NATS_TOKEN"))
	// --stdio with --http serves both from one process.
	cfg.StdioHTTP = cfg.Stdio && set["http"]
	return cfg, cfg.validate()
}

func (c Config) validate() error {
	switch {
	case c.Lang != "en" && c.Lang != "zh":
		return fmt.Errorf("lang %q: must be en or zh", c.Lang)
	case c.LLM.Model == "":
		return errors.New("llm.model: is empty")
	case c.LLM.BaseURL == "":
		return errors.New("llm.base_url: is empty")
	case c.LLM.Timeout <= 0:
		return fmt.Errorf("llm.timeout %s: must be positive", c.LLM.Timeout)
	case c.LLM.MaxRetries < 0:
		return fmt.Errorf("llm.max_retries %d: must not be negative", c.LLM.MaxRetries)
	case c.LLM.OutageWindow < 0:
		return fmt.Errorf("llm.outage_window %s: must not be negative", c.LLM.OutageWindow)
	case c.RetryStageLimit <= 0:
		return fmt.Errorf("retry_stage_limit %d: must be positive", c.RetryStageLimit)
	case c.StallTimeout <= 0:
		return fmt.Errorf("stall_timeout %s: must be positive", c.StallTimeout)
	case c.StallNotices <= 0:
		return fmt.Errorf("stall_notices %d: must be positive", c.StallNotices)
	case c.LLM.Concurrency <= 0:
		return fmt.Errorf("llm.concurrency %d: must be positive", c.LLM.Concurrency)
	case c.SyncInterval < 0:
		return fmt.Errorf("sync_interval %s: must not be negative", c.SyncInterval)
	case c.NATSURL == "" && c.NATS.set():
		return errors.New("nats: authentication options are for an external server: set nats_url (--nats-url) too, or leave them out")
	case c.NATS.User != "" && c.natsPassword == "":
		return fmt.Errorf("nats.user %s: no password: set %s", c.NATS.User, cmp.Or(c.NATS.PasswordEnv, "MAS_NATS_PASSWORD"))
	case c.Memory && (c.NATSURL != "" || c.DataDir != ""):
		return errors.New("memory: keeps nothing on disk; leave out data_dir and nats_url")
	case c.ConfirmTimeout <= 0:
		return fmt.Errorf("confirm_timeout %s: must be positive", c.ConfirmTimeout)
	case c.WaitTimeout <= 0:
		return fmt.Errorf("wait_timeout %s: must be positive", c.WaitTimeout)
	case c.StageStepBudget <= 0:
		return fmt.Errorf("stage_step_budget %d: must be positive", c.StageStepBudget)
	case c.StageReflectionBudget <= 0:
		return fmt.Errorf("stage_reflection_budget %d: must be positive", c.StageReflectionBudget)
	case c.UnstagedStepBudget <= 0:
		return fmt.Errorf("unstaged_step_budget %d: must be positive", c.UnstagedStepBudget)
	case c.MessageChainLimit <= 0:
		return fmt.Errorf("message_chain_limit %d: must be positive", c.MessageChainLimit)
	case c.PromptBudget <= 0:
		return fmt.Errorf("prompt_budget %d: must be positive", c.PromptBudget)
	case c.MemoryMaxEntries <= 0:
		return fmt.Errorf("memory_max_entries %d: must be positive", c.MemoryMaxEntries)
	case c.MemoryMaxChars <= 0:
		return fmt.Errorf("memory_max_chars %d: must be positive", c.MemoryMaxChars)
	case c.Budgets.TaskTokens < 0:
		return fmt.Errorf("budgets.task_tokens %d (--task-token-budget): must not be negative (0: no limit)", c.Budgets.TaskTokens)
	case c.Budgets.AgentTokens < 0:
		return fmt.Errorf("budgets.agent_tokens %d: must not be negative (0: no limit)", c.Budgets.AgentTokens)
	case c.Budgets.OperatorDailyTokens < 0:
		return fmt.Errorf("budgets.operator_daily_tokens %d: must not be negative (0: no limit)", c.Budgets.OperatorDailyTokens)
	case c.Budgets.TaskCost < 0:
		return fmt.Errorf("budgets.task_cost %v: must not be negative (0: no limit)", c.Budgets.TaskCost)
	case c.Budgets.TaskCost > 0 && len(c.Budgets.Prices) == 0:
		return errors.New("budgets.task_cost: a cost budget needs budgets.prices (per model, per million tokens)")
	case c.Budgets.RaiseTokens < 0:
		return fmt.Errorf("budgets.raise_tokens %d: must not be negative (0: the limit itself)", c.Budgets.RaiseTokens)
	case c.Budgets.RaiseCost < 0:
		return fmt.Errorf("budgets.raise_cost %v: must not be negative (0: the limit itself)", c.Budgets.RaiseCost)
	case c.Trail.MaxAge < 0:
		return fmt.Errorf("trail.max_age %s: must not be negative (0: the default, 90 days)", c.Trail.MaxAge)
	case c.HTTP.SessionTimeout < 0:
		return fmt.Errorf("http.session_timeout %s: must not be negative (0: the default, 10m)", c.HTTP.SessionTimeout)
	case c.HTTP.MaxBodyBytes < 0:
		return fmt.Errorf("http.max_body_bytes %d: must not be negative (0: the default)", c.HTTP.MaxBodyBytes)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("log_format %q: must be text or json", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	// Operator names go into prompts and the monitor's lists: one line.
	names := map[string]string{"operator": c.Operator}
	for i, t := range c.HTTP.Tokens {
		names[fmt.Sprintf("http.tokens[%d].operator", i)] = t.Operator
	}
	for i, p := range c.HTTP.Passwords {
		names[fmt.Sprintf("http.passwords[%d].operator", i)] = p.Operator
	}
	for key, name := range names {
		if i := strings.IndexFunc(name, unicode.IsControl); i >= 0 {
			return fmt.Errorf("%s %q: has a control character at byte %d; an operator's name is one line of printable text", key, name, i)
		}
	}
	for i, t := range c.HTTP.Tokens {
		switch {
		case strings.TrimSpace(t.Operator) == "":
			return fmt.Errorf("http.tokens[%d].operator: is empty", i)
		case t.TokenEnv == "" && t.Token == "":
			return fmt.Errorf("http.tokens[%d] (operator %s): set token_env (an environment variable holding the token)", i, t.Operator)
		case t.TokenEnv != "" && t.Token != "":
			return fmt.Errorf("http.tokens[%d] (operator %s): set token_env or token, not both", i, t.Operator)
		}
	}
	return nil
}

// passwords resolves the configured operator passwords: operator name ->
// password.
func (c Config) passwords(getenv func(string) string) (map[string]string, error) {
	out := map[string]string{}
	for i, p := range c.HTTP.Passwords {
		name := strings.TrimSpace(p.Operator)
		switch {
		case name == "":
			return nil, fmt.Errorf("http.passwords[%d].operator: is empty", i)
		case p.PasswordEnv == "":
			return nil, fmt.Errorf("http.passwords[%d] (operator %s): password_env is empty", i, name)
		case getenv(p.PasswordEnv) == "":
			return nil, fmt.Errorf("http.passwords[%d] (operator %s): environment variable %s is empty", i, name, p.PasswordEnv)
		}
		out[name] = getenv(p.PasswordEnv)
	}
	return out, nil
}

// tokens resolves the configured bearer tokens: token -> operator name.
func (c Config) tokens(getenv func(string) string) (map[string]string, error) {
	out := map[string]string{}
	for i, t := range c.HTTP.Tokens {
		tok := t.Token
		if t.TokenEnv != "" {
			tok = getenv(t.TokenEnv)
			if tok == "" {
				return nil, fmt.Errorf("http.tokens[%d] (operator %s): environment variable %s is empty", i, t.Operator, t.TokenEnv)
			}
		}
		if prev, dup := out[tok]; dup && prev != t.Operator {
			return nil, fmt.Errorf("http.tokens[%d] (operator %s): the same token is also bound to operator %s", i, t.Operator, prev)
		}
		out[tok] = strings.TrimSpace(t.Operator)
	}
	return out, nil
}

func parseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log_level %q: must be debug, info, warn or error", s)
}

// natsAuth is how the store authenticates to the external NATS server.
func (c Config) natsAuth() store.NATSAuth {
	return store.NATSAuth{
		CredsFile: c.NATS.CredsFile, User: c.NATS.User, Password: c.natsPassword, Token: c.natsToken,
		CAFile: c.NATS.TLSCA, CertFile: c.NATS.TLSCert, KeyFile: c.NATS.TLSKey,
	}
}
