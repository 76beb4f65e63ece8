package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/server"
)

const (
	appURI  = "ui://mas-mcp/task-view.html"
	appMIME = "text/html;profile=mcp-app"
)

// TestAppLinkedFromTools: add_task and show_task name the task view in
// _meta.ui.resourceUri (and the flat ui/resourceUri of older hosts); no
// other tool does, so hosts render the view only for those two.
func TestAppLinkedFromTools(t *testing.T) {
	e := newEnv(t)
	res, err := e.client.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, tool := range res.Tools {
		ui, _ := tool.Meta["ui"].(map[string]any)
		if ui == nil {
			continue
		}
		if ui["resourceUri"] != appURI || tool.Meta["ui/resourceUri"] != appURI {
			t.Errorf("tool %s: _meta %v, want ui.resourceUri and ui/resourceUri %s", tool.Name, tool.Meta, appURI)
		}
		linked[tool.Name] = true
	}
	if len(linked) != 2 || !linked["add_task"] || !linked["show_task"] {
		t.Errorf("tools linked to the view: %v, want add_task and show_task", linked)
	}
}

// TestAppResource: the view is listed and read as one self-contained HTML
// page of the MCP Apps profile, built on ext-apps' App class.
func TestAppResource(t *testing.T) {
	e := newEnv(t)
	list, err := e.client.ListResources(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range list.Resources {
		if r.URI == appURI {
			found = true
			if r.MIMEType != appMIME {
				t.Errorf("listed with mimeType %q, want %q", r.MIMEType, appMIME)
			}
		}
	}
	if !found {
		t.Errorf("resources/list lacks %s", appURI)
	}
	res, err := e.client.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: appURI})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) != 1 {
		t.Fatalf("%d contents, want 1", len(res.Contents))
	}
	c := res.Contents[0]
	if c.URI != appURI || c.MIMEType != appMIME {
		t.Errorf("content %s %q, want %s %q", c.URI, c.MIMEType, appURI, appMIME)
	}
	for _, want := range []string{"<!doctype html>", `id="stages"`, "ui/initialize", "wait_for_updates", "answer_approval"} {
		if !strings.Contains(c.Text, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, bad := range []string{`<script src=`, `<link rel=`, `src="http`, `href="http`, "@import"} {
		if strings.Contains(c.Text, bad) {
			t.Errorf("the page loads something from outside (%q): it must be self-contained", bad)
		}
	}
}

// TestShowTask: show_task gives the task's stages, its agents with their
// steps and the question awaiting the operator, with a cursor from which
// wait_for_updates reports the changes after the view was read; with no
// task_id it shows the newest task.
func TestShowTask(t *testing.T) {
	e := newEnv(t)
	if msg := e.callErr("show_task", map[string]any{}); !strings.Contains(msg, "add_task") {
		t.Errorf("show_task with no task: %q, want a hint to add_task", msg)
	}
	f := e.startTask()
	var v server.TaskView
	res := e.call("show_task", map[string]any{}, &v)
	if v.TaskID != f.TaskID || v.TaskName != "report" || v.State != "running" {
		t.Fatalf("show_task: task %s %q %s, want %s \"report\" running", v.TaskID, v.TaskName, v.State, f.TaskID)
	}
	if len(v.Stages) != 2 || v.Stages[0].StageID != f.Stages[0] || len(v.Stages[0].Agents) != 2 {
		t.Errorf("stages %+v, want the fixture's two, each with alice and bob", v.Stages)
	}
	names := map[string]int{}
	for _, a := range v.Agents {
		names[a.Name] = len(a.Steps)
	}
	if names["alice"] == 0 || names["bob"] == 0 {
		t.Errorf("agents and their step counts %v: want alice and bob with steps", names)
	}
	if len(v.Questions) != 1 || v.Questions[0].MessageID != f.Question.MessageID || v.Questions[0].SenderName != "alice" || !v.Questions[0].Urgent {
		t.Errorf("questions %+v, want alice's urgent question %s", v.Questions, f.Question.MessageID)
	}
	if !strings.Contains(resultText(res), "1 question(s) awaiting your reply") {
		t.Errorf("text %q does not say a question awaits", resultText(res))
	}
	if v.Cursor == 0 {
		t.Fatal("cursor 0")
	}

	// The operator answers: wait_for_updates from the view's cursor reports it.
	e.call("send_message", map[string]any{"task_id": f.TaskID, "receiver": f.Alice, "content": "Markdown."}, nil)
	var w server.WaitOut
	e.call("wait_for_updates", map[string]any{"cursor": v.Cursor, "task_id": f.TaskID, "timeout_seconds": 30}, &w)
	if len(w.Events) == 0 || w.TimedOut {
		t.Errorf("wait_for_updates from the view's cursor %d: %+v, want the answer's events", v.Cursor, w)
	}
	var after server.TaskView
	e.call("show_task", map[string]any{"task_id": f.TaskID}, &after)
	for _, q := range after.Questions {
		if q.MessageID == f.Question.MessageID {
			t.Errorf("the answered question is still listed: %+v", after.Questions)
		}
	}
	if msg := e.callErr("show_task", map[string]any{"task_id": "no-such-task"}); msg == "" {
		t.Error("show_task of an unknown task: no message")
	}
}
