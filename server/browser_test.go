package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
	"github.com/mas-mcp/mas-mcp/server"
)

// The browser test drives the monitor page in Debian's Chromium with
// playwright-core (testdata/browser/monitor.mjs), against the real binary
// on the fake LLM: `make test` installs both (make deps).

const (
	browserDir = "testdata/browser"
	chromium   = "/usr/bin/chromium"
	// browserAnswer holds markup: the page must show it as text.
	browserAnswer  = "Use <em>markdown</em> with one section per finding & a summary."
	browserTimeout = 90 * time.Second
	// llmDelay slows every fake LLM answer, so the task takes long enough
	// for the page to show its progress step by step.
	llmDelay = 40 * time.Millisecond
)

// browserReport is monitor.mjs's last line.
type browserReport struct {
	OK              bool    `json:"ok"`
	Seconds         float64 `json:"seconds"`
	TaskSeenMS      int64   `json:"task_seen_ms"`
	QuestionSeenMS  int64   `json:"question_seen_ms"`
	ProgressSamples int     `json:"progress_samples"`
	AnsweredMS      int64   `json:"answered_ms"`
	FinishedMS      int64   `json:"finished_ms"`
	ReconnectMS     int64   `json:"reconnect_ms"`
}

// TestBrowserMonitor: the operator follows a task on the monitor page, live,
// answers alice's urgent question from the inbox and sees the task finish;
// then the server restarts and the page shows the banner and reconnects.
func TestBrowserMonitor(t *testing.T) {
	node, dir := needBrowser(t)
	bin := teststack.Binary(t, teststack.MasPlain)
	team, llm := fakeTeam(t)
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		r := team.Handle(c)
		r.Delay = llmDelay
		return r
	})
	// Each start gets a data directory of its own: the restarted server
	// has a fresh MAS, so the page can only show it by re-reading states.
	env := func() []string {
		return cleanEnv(append(llmEnv(llm.BaseURL()), "MAS_DATA_DIR="+t.TempDir())...)
	}
	srv := startBrowserServer(t, bin, "", env())
	defer func() { srv.stopOnce(t) }()

	artifacts, err := filepath.Abs(filepath.Join("..", "testdata", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifacts, "browser-monitor.png")
	question := filepath.Join(artifacts, "browser-monitor-question.png")
	offline := filepath.Join(artifacts, "browser-monitor-offline.png")
	for _, f := range []string{shot, question, offline} {
		_ = os.Remove(f)
	}

	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "monitor.mjs"),
		"--timeout", fmt.Sprint(browserTimeout.Seconds()), "--chromium", chromium,
		"--screenshot", shot, "--question-shot", question, "--offline-shot", offline,
		"--question", scripted.OperatorQuestion, "--answer", browserAnswer, "--summary", scripted.TaskSummary,
		srv.base+"/")
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 10 * time.Second
	var stderr teststack.SyncBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node monitor.mjs: %v", err)
	}
	waited := false
	defer func() {
		if !waited { // a Fatal while serving the script: end it
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("monitor.mjs stderr:\n%s", lastLines(stderr.String(), 100))
		}
	}()

	// Serve the script's requests: hand over the task, stop and restart
	// the server. Its last line is the report.
	var last string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch line {
		case "READY":
			id := addTaskOverMCP(t, srv.base)
			fmt.Fprintf(stdin, "TASK %s\n", id)
		case "STOP":
			srv.stopOnce(t)
			fmt.Fprintln(stdin, "STOPPED")
		case "START":
			srv = startBrowserServer(t, bin, strings.TrimPrefix(srv.base, "http://"), env())
			fmt.Fprintln(stdin, "STARTED")
		default:
			last = line
		}
	}
	_ = stdin.Close()
	err = cmd.Wait()
	waited = true
	took := time.Since(start)
	checkNoKey(t, map[string]string{"monitor.mjs's output": last + stderr.String()})
	if ctx.Err() != nil {
		t.Fatalf("monitor.mjs killed after %s", took.Round(time.Millisecond))
	}
	if err != nil {
		t.Fatalf("monitor.mjs failed (%v) after %s:\n%s", err, took.Round(time.Millisecond), lastLines(stderr.String(), 30))
	}
	var rep browserReport
	if err := json.Unmarshal([]byte(last), &rep); err != nil || !rep.OK {
		t.Fatalf("monitor.mjs report %q: %v", last, err)
	}
	t.Logf("monitor.mjs passed in %s: task on the page after %d ms, question after %d ms (%d live views), answered at %d ms, finished at %d ms, reconnected %d ms after the restart",
		took.Round(time.Millisecond), rep.TaskSeenMS, rep.QuestionSeenMS, rep.ProgressSamples, rep.AnsweredMS, rep.FinishedMS, rep.ReconnectMS)
	t.Logf("screenshot: %s", shot)
	t.Logf("screenshots of the question and of the server down: %s, %s", question, offline)
	if _, err := os.Stat(shot); err != nil {
		t.Errorf("no screenshot: %v", err)
	}
	got := team.OperatorAnswers()
	if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, browserAnswer) }) {
		t.Errorf("alice read %q from the operator, want the page's answer %q", got, browserAnswer)
	}
}

// TestBrowserBind: on a server that requires tokens, the page asks for one
// (its API answers 401), refuses a wrong one and goes live as the token's
// operator; then it switches to another operator with its password.
func TestBrowserBind(t *testing.T) {
	node, dir := needBrowser(t)
	bin := teststack.Binary(t, teststack.MasPlain)
	_, llm := fakeTeam(t)
	const token = "browser-token-0123456789abcdef"
	config := filepath.Join(t.TempDir(), "mas.yaml")
	const password = "bea's password"
	yaml := `http:
  tokens:
    - operator: ann
      token_env: BROWSER_TEST_TOKEN
  passwords:
    - operator: bea
      password_env: BROWSER_TEST_PASSWORD
`
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv(append(llmEnv(llm.BaseURL()), "MAS_DATA_DIR="+t.TempDir(), "MAS_CONFIG="+config,
		"BROWSER_TEST_TOKEN="+token, "BROWSER_TEST_PASSWORD="+password)...)
	srv := startBrowserServer(t, bin, "", env)
	defer srv.stopOnce(t)

	shot := filepath.Join(t.TempDir(), "bind.png")
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "monitor.mjs"), "--timeout", "60", "--chromium", chromium,
		"--screenshot", shot, "--bind-token", token, "--operator", "ann",
		"--password-operator", "bea", "--password", password, srv.base+"/")
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	checkNoKey(t, map[string]string{"monitor.mjs's output": string(out)})
	if err != nil {
		t.Fatalf("monitor.mjs --bind-token failed (%v) after %s:\n%s", err, time.Since(start).Round(time.Millisecond), lastLines(string(out), 30))
	}
	t.Logf("monitor.mjs --bind-token passed in %s", time.Since(start).Round(time.Millisecond))
}

// needBrowser finds node, the pinned playwright-core and Chromium. What is
// missing fails the test: CI must never pass because the browser was not there.
func needBrowser(t *testing.T) (node, dir string) {
	t.Helper()
	const hint = "run `make test` (its `make deps` installs playwright-core and Debian's chromium)"
	node, err := nodeBinary()
	if err != nil {
		t.Fatalf("the browser test needs Node.js (20 or later) on PATH: %v; install it, then %s", err, hint)
	}
	if dir, err = filepath.Abs(browserDir); err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSONFile(t, filepath.Join(dir, "package.json"), &pkg)
	for name, want := range pkg.Dependencies {
		var got struct {
			Version string `json:"version"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "node_modules", filepath.FromSlash(name), "package.json"))
		if err != nil {
			t.Fatalf("npm package %s is not installed in %s (%v): %s", name, browserDir, err, hint)
		}
		if err := json.Unmarshal(b, &got); err != nil || got.Version != want {
			t.Fatalf("npm package %s in %s is version %q, package.json pins %s: %s", name, browserDir, got.Version, want, hint)
		}
	}
	if fi, err := os.Stat(chromium); err != nil || fi.IsDir() {
		t.Fatalf("the browser test needs Debian's Chromium at %s (%v): %s, or run %s/install-chromium.sh", chromium, err, hint, browserDir)
	}
	return node, dir
}

// browserServer is the binary under the page; stopOnce stops it at most once.
type browserServer struct {
	*httpBinary
	stopped bool
}

func (b *browserServer) stopOnce(t *testing.T) {
	if !b.stopped {
		b.stopped = true
		b.stop(t)
	}
}

// startBrowserServer starts the binary on addr ("": a loopback port it
// picks itself) and waits until it is ready.
func startBrowserServer(t *testing.T, bin, addr string, env []string) *browserServer {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	return &browserServer{httpBinary: startBinaryHTTP(t, bin, addr, env)}
}

// addTaskOverMCP hands the scripted task over through the binary's MCP
// endpoint, as an MCP host would.
func addTaskOverMCP(t *testing.T, base string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "browser-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to %s/mcp: %v", base, err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_task", Arguments: map[string]any{
		"task_name": "report", "task_intention": "Research a topic and write a report.",
	}})
	if err != nil || res.IsError {
		t.Fatalf("add_task: %v %s", err, resultTextOf(res))
	}
	var out server.AddTaskOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || out.TaskID == "" {
		t.Fatalf("add_task output %s: %v", b, err)
	}
	return out.TaskID
}

func resultTextOf(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	return resultText(res)
}

// TestMonitorMorph: the monitor re-renders its task list, task head and
// progress on every event with morph (web/dom.js), which keeps the
// elements already shown (a button under the pointer keeps its click).
// On thousands of random trees, in Chromium, morph must leave exactly
// what a plain replacement (fill) leaves, and keep a matching element.
func TestMonitorMorph(t *testing.T) {
	node, dir := needBrowser(t)
	dom, err := filepath.Abs(filepath.Join("web", "dom.js"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join(dir, "morph.mjs"), "--dom", dom, "--chromium", chromium)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("morph.mjs: %v\n%s", err, out)
	}
	var res struct {
		OK    bool `json:"ok"`
		Cases int  `json:"cases"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || !res.OK || res.Cases < 1000 {
		t.Fatalf("morph.mjs: %s (%v)", out, err)
	}
}
