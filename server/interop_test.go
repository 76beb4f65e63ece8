package server_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// The interop tests drive the real mas-mcp binary, over real transports,
// with real MCP clients from npm (versions pinned in testdata/interop):
// the official TypeScript SDK (operator.mjs plays the operator through a
// whole task, as TestOperatorRunsATaskThroughMCP does in process) and the
// MCP Inspector's CLI. `make test` installs them from the lockfile first.

// interopAnswer is what the operator answers alice's question.
const interopAnswer = "Use markdown with one section per finding."

// tsToolSchemaBug: server/tools.go's AskInfoOut.Data and
// ReadResourceOut.Document are typed any, for which go-sdk infers the JSON
// Schema `true`; the TypeScript SDK's Client.listTools (1.32.2) requires
// every outputSchema property to be an object and rejects the whole
// tools/list result, so a host built on it sees no tool at all.
// operator.mjs then lists the tools leniently (as the MCP Inspector does)
// and reports the rejection. Set this to false once the fields have a
// schema object (a jsonschema description tag is enough): then a rejection
// fails the test.
const tsToolSchemaBug = false

// operatorReport is operator.mjs's one-line JSON report.
type operatorReport struct {
	OK                   bool    `json:"ok"`
	Transport            string  `json:"transport"`
	TaskID               string  `json:"task_id"`
	Stages               int     `json:"stages"`
	Answer               string  `json:"answer"`
	ResourcesUpdatedTask int     `json:"resources_updated_task"`
	Logging              int     `json:"logging"`
	StrictToolsListError string  `json:"strict_tools_list_error"`
	PID                  int     `json:"pid"`
	Seconds              float64 `json:"seconds"`
}

// TestInterop runs operator.mjs over stdio, streamable HTTP and SSE, and
// the Inspector CLI's tools/list, resources/list and tools/call, each
// against a binary of its own on a fake LLM of its own.
func TestInterop(t *testing.T) {
	in := needInterop(t)
	for _, transport := range []string{"stdio", "http", "sse"} {
		t.Run("operator/"+transport, func(t *testing.T) {
			t.Parallel()
			in.operatorFlow(t, transport)
		})
	}
	t.Run("inspector/tools_list", func(t *testing.T) {
		t.Parallel()
		var res struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		run := in.inspect(t, &res, "--method", "tools/list", "--strict")
		// --strict reports each schema-portability problem on stderr as
		// `Warning: tool "name"` (or Error: …), then path, issue and fix.
		for line := range strings.Lines(run.stderr) {
			if strings.HasPrefix(line, "Warning: ") || strings.HasPrefix(line, "Error: ") {
				t.Errorf("Inspector --strict: %s", line)
			}
		}
		if t.Failed() {
			t.Logf("Inspector stderr:\n%s", lastLines(run.stderr, 200))
		}
		var names []string
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
		}
		for _, want := range []string{"add_task", "send_message", "ask_info", "get_inbox", "wait_for_updates", "manage_task", "manage_agent", "read_resource"} {
			if !slices.Contains(names, want) {
				t.Errorf("tools/list lacks %s (got %v)", want, names)
			}
		}
	})
	t.Run("inspector/resources_list", func(t *testing.T) {
		t.Parallel()
		var res struct {
			Resources []struct {
				URI string `json:"uri"`
			} `json:"resources"`
		}
		in.inspect(t, &res, "--method", "resources/list")
		var uris []string
		for _, r := range res.Resources {
			uris = append(uris, r.URI)
		}
		if !slices.Contains(uris, "mas://tasks") {
			t.Errorf("resources/list lacks mas://tasks (got %v)", uris)
		}
	})
	t.Run("inspector/ask_info", func(t *testing.T) {
		t.Parallel()
		var res struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			Structured struct {
				Data []struct {
					Name string `json:"name"`
				} `json:"data"`
			} `json:"structuredContent"`
		}
		in.inspect(t, &res, "--method", "tools/call", "--tool-name", "ask_info", "--tool-arg", "type=all_agents")
		if res.IsError || len(res.Content) == 0 {
			t.Fatalf("ask_info all_agents: %+v", res)
		}
		var names []string
		for _, a := range res.Structured.Data {
			names = append(names, a.Name)
		}
		for _, want := range []string{"manager", "operator"} {
			if !strings.Contains(res.Content[0].Text, want) {
				t.Errorf("ask_info all_agents text does not mention %s:\n%s", want, res.Content[0].Text)
			}
			if !slices.Contains(names, want) {
				t.Errorf("ask_info all_agents data lacks agent %s (got %v)", want, names)
			}
		}
	})
}

// operatorFlow runs operator.mjs against a fresh binary on a fresh fake LLM
// over transport, and checks from the Go side that alice read the answer.
func (in *interop) operatorFlow(t *testing.T, transport string) {
	team, llm := fakeTeam(t)
	// Each binary keeps its durable state in its own directory.
	env := append(llmEnv(llm.BaseURL()), "MAS_DATA_DIR="+t.TempDir())
	args := []string{filepath.Join(in.dir, "operator.mjs"),
		"--timeout", fmt.Sprint(operatorTimeout.Seconds()),
		"--question", scripted.OperatorQuestion, "--summary", scripted.TaskSummary, "--answer", interopAnswer,
		transport}
	nodeEnv := cleanEnv()
	switch transport {
	case "stdio":
		// The script spawns the binary and passes OPENAI_* and MAS_* on.
		args = append(args, in.bin, "--stdio", "--log-level", "debug")
		nodeEnv = cleanEnv(env...)
	case "http":
		args = append(args, in.startHTTP(t, cleanEnv(env...)).base+"/mcp")
	case "sse":
		args = append(args, in.startHTTP(t, cleanEnv(env...)).base+"/sse")
	default:
		t.Fatalf("unknown transport %q", transport)
	}

	run := in.runNode(t, in.node, nodeEnv, args...)
	defer func() {
		// Over stdio, the server's stderr is the script's.
		if t.Failed() {
			t.Logf("operator.mjs %s: %v (after %s)\nstdout:\n%s\nstderr:\n%s", transport, run.err,
				run.took.Round(time.Millisecond), run.stdout, lastLines(run.stderr, 200))
		}
	}()
	checkNoKey(t, map[string]string{"operator.mjs's stdout": run.stdout, "operator.mjs's stderr (with the stdio server's)": run.stderr})
	if run.err != nil {
		t.Fatalf("operator.mjs %s: %v", transport, run.err)
	}
	var rep operatorReport
	line := strings.TrimSpace(run.stdout)
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal([]byte(line), &rep); err != nil || !rep.OK {
		t.Fatalf("operator.mjs %s: report %q: %v", transport, line, err)
	}
	t.Logf("%s in %s: %s", transport, run.took.Round(time.Millisecond), line)
	if rep.Transport != transport || rep.Stages != 2 || rep.Answer != interopAnswer || rep.ResourcesUpdatedTask == 0 {
		t.Errorf("report %+v: want transport %s, 2 stages, the answer, resources/updated for the task", rep, transport)
	}
	switch {
	case rep.StrictToolsListError != "" && tsToolSchemaBug:
		t.Logf("KNOWN BUG (see tsToolSchemaBug): the TypeScript SDK's Client.listTools rejects tools/list: %s", rep.StrictToolsListError)
	case rep.StrictToolsListError != "":
		t.Errorf("the TypeScript SDK's Client.listTools rejects tools/list: %s", rep.StrictToolsListError)
	case tsToolSchemaBug:
		t.Errorf("the TypeScript SDK's Client.listTools accepts tools/list now: set tsToolSchemaBug to false")
	}
	if transport == "stdio" {
		// The SDK closes the server it spawned; none may be left running.
		if rep.PID <= 0 {
			t.Errorf("report has no pid of the spawned server: %+v", rep)
		} else if !waitGone(rep.PID, 5*time.Second) {
			t.Errorf("mas-mcp (pid %d) spawned over stdio was still running after operator.mjs exited: killed", rep.PID)
		}
	}
	got := team.OperatorAnswers()
	if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, interopAnswer) }) {
		t.Errorf("alice read %q from the operator, want the answer %q", got, interopAnswer)
	}
}

// inspect runs the MCP Inspector's CLI against the binary over stdio with
// the fake LLM's environment (the CLI passes the server only what -e
// gives), and decodes its JSON result into out. It returns the run.
func (in *interop) inspect(t *testing.T, out any, method ...string) nodeRun {
	_, llm := fakeTeam(t)
	args := []string{"--no-install", "mcp-inspector", "--cli", "--format", "json"}
	for _, kv := range append(llmEnv(llm.BaseURL()), "MAS_DATA_DIR="+t.TempDir()) {
		args = append(args, "-e", kv)
	}
	args = append(args, method...)
	args = append(args, "--", in.bin, "--stdio")
	run := in.runNode(t, in.npx, cleanEnv(), args...)
	checkNoKey(t, map[string]string{"the inspector's stdout": run.stdout, "the inspector's stderr": run.stderr})
	if run.err != nil {
		t.Fatalf("mcp-inspector %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(method, " "), run.err, run.stdout, lastLines(run.stderr, 100))
	}
	var env struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(run.stdout), &env); err != nil || len(env.Result) == 0 {
		t.Fatalf("mcp-inspector %s: output is not {\"result\": …}: %v\n%s", strings.Join(method, " "), err, run.stdout)
	}
	if err := json.Unmarshal(env.Result, out); err != nil {
		t.Fatalf("mcp-inspector %s: result: %v\n%s", strings.Join(method, " "), err, env.Result)
	}
	return run
}
