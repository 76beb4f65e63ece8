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

	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// mcpappDir holds the task view's sources, its build script and its
// pinned packages (make deps installs them).
const mcpappDir = "mcpapp"

// appLLMDelay slows each fake LLM answer in the MCP App's browser test, so
// that the task's steps come one by one while the view follows them.
const appLLMDelay = 150 * time.Millisecond

// needMCPApp finds node and the packages of mcpapp/ (esbuild, ext-apps,
// the TypeScript SDK's client), failing the test when they are missing.
func needMCPApp(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := nodeBinary()
	if err != nil {
		t.Fatalf("the MCP App tests need Node.js on PATH: %v; run `make deps`", err)
	}
	if dir, err = filepath.Abs(mcpappDir); err != nil {
		t.Fatal(err)
	}
	checkPinned(t, dir, "run `make deps` (it installs server/mcpapp's packages from their lockfile)")
	return node, dir
}

// TestMCPAppBundleCommitted: the committed task view is what build.mjs
// makes from src/ with the lockfile's packages (make app rebuilds it).
func TestMCPAppBundleCommitted(t *testing.T) {
	node, dir := needMCPApp(t)
	out := filepath.Join(t.TempDir(), "task-view.html")
	cmd := exec.Command(node, filepath.Join(dir, "build.mjs"), "--out", out)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node build.mjs: %v\n%s", err, b)
	}
	built, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(dir, "dist", "task-view.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(built, committed) {
		t.Fatalf("server/mcpapp/dist/task-view.html (%d bytes) is not what its sources build (%d bytes): run `make app` and commit the result", len(committed), len(built))
	}
}

// TestBrowserMCPApp: in a minimal MCP Apps host (ext-apps' AppBridge and
// the TypeScript SDK's client, in Chromium), add_task's view follows the
// scripted task live, the operator answers alice's question from inside
// the view, the answer reaches alice and the view shows the task finish.
func TestBrowserMCPApp(t *testing.T) {
	node, dir := needBrowser(t)
	_, appDir := needMCPApp(t)
	bin := teststack.Binary(t, teststack.MasPlain)
	team, llm := fakeTeam(t)
	// The LLM answers once the view shows the task (mcpapp.mjs says
	// SHOWN), slowly enough for the view to show the steps as they come.
	shown := make(chan struct{})
	ended := make(chan struct{})
	defer close(ended)
	llm.Handle(func(c *fakellm.Call) fakellm.Reply {
		select {
		case <-shown:
		case <-ended:
		}
		r := team.Handle(c)
		r.Delay = appLLMDelay
		return r
	})
	srv := startBrowserServer(t, bin, "", cleanEnv(append(llmEnv(llm.BaseURL()), "MAS_DATA_DIR="+t.TempDir())...))
	defer srv.stopOnce(t)

	hostJS := filepath.Join(t.TempDir(), "host.js")
	build := exec.Command(node, filepath.Join(appDir, "build.mjs"), "--host", filepath.Join(dir, "mcpapp-host.js"), "--out", hostJS)
	build.Dir = appDir
	build.Env = cleanEnv()
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("bundle the test host: %v\n%s", err, b)
	}

	artifacts, err := filepath.Abs(filepath.Join("..", "testdata", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifacts, "browser-mcp-app.png")
	question := filepath.Join(artifacts, "browser-mcp-app-question.png")
	for _, f := range []string{shot, question} {
		_ = os.Remove(f)
	}
	const answer = "Markdown, one section per finding <b>& a summary</b>."
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "mcpapp.mjs"),
		"--timeout", fmt.Sprint(browserTimeout.Seconds()), "--chromium", chromium, "--host-js", hostJS,
		"--screenshot", shot, "--question-shot", question,
		"--question", scripted.OperatorQuestion, "--answer", answer, "--summary", scripted.TaskSummary,
		srv.base)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 10 * time.Second
	var stderr teststack.SyncBuffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node mcpapp.mjs: %v", err)
	}
	var stdout strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "SHOWN" {
			close(shown)
			continue
		}
		stdout.WriteString(line + "\n")
	}
	err = cmd.Wait()
	checkNoKey(t, map[string]string{"mcpapp.mjs's output": stdout.String() + stderr.String()})
	if err != nil {
		t.Fatalf("mcpapp.mjs failed (%v) after %s:\n%s\nmas-mcp:\n%s", err, time.Since(start).Round(time.Millisecond),
			lastLines(stderr.String(), 40), lastLines(srv.Stderr.String(), 60))
	}
	out := strings.TrimSpace(stdout.String())
	last := out[strings.LastIndex(out, "\n")+1:]
	var rep struct {
		OK              bool    `json:"ok"`
		Seconds         float64 `json:"seconds"`
		ProgressSamples int     `json:"progress_samples"`
		QuestionSeenMS  int64   `json:"question_seen_ms"`
		AnsweredMS      int64   `json:"answered_ms"`
		FinishedMS      int64   `json:"finished_ms"`
	}
	if err := json.Unmarshal([]byte(last), &rep); err != nil || !rep.OK {
		t.Fatalf("mcpapp.mjs report %q: %v", last, err)
	}
	t.Logf("mcpapp.mjs stderr:\n%s", stderr.String())
	t.Logf("mcpapp.mjs passed in %.1fs: %d live views before the question (at %d ms), answered at %d ms, finished at %d ms; screenshots %s, %s",
		rep.Seconds, rep.ProgressSamples, rep.QuestionSeenMS, rep.AnsweredMS, rep.FinishedMS, shot, question)
	if _, err := os.Stat(shot); err != nil {
		t.Errorf("no screenshot: %v", err)
	}
	got := team.OperatorAnswers()
	if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, answer) }) {
		t.Errorf("alice read %q from the operator, want the view's answer %q", got, answer)
	}
}
