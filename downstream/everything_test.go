package downstream_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
)

// everythingCall is one call of an agent to server-everything and what its
// tool step must show.
type everythingCall struct {
	call scripted.Call
	// wantErr, when set, are substrings of the failed step's
	// execute_result.error; otherwise the step must have finished.
	wantErr []string
	// check looks at the finished step's execute_result.
	check func(t *testing.T, result map[string]any)
	// decided is a substring of the tool_decision prompt that follows a
	// finished call (the decision saw this call's result).
	decided string
}

// TestEverything has an agent use server-everything over each transport:
// its capabilities, a tool, a resource and a prompt, tools with image,
// embedded-resource and resource-link results, and three calls that fail
// (an unknown tool, arguments the tool's schema refuses, a tool that reports
// an error) after which the agent carries on to its summary.
func TestEverything(t *testing.T) {
	for _, mode := range []string{"stdio", "streamableHttp", "sse"} {
		t.Run(mode, func(t *testing.T) {
			var sc downstream.ServerConfig
			if mode == "stdio" {
				sc = everythingStdio(t)
			} else {
				sc = startEverything(t, mode)
			}
			testEverything(t, mode, sc)
		})
	}
}

func testEverything(t *testing.T, mode string, sc downstream.ServerConfig) {
	msg := "hello over " + mode + ", ünïcode ✓"
	doc := "demo://resource/static/document/features.md"
	calls := []everythingCall{{
		call: scripted.Call{Server: "everything", Describe: true},
		check: func(t *testing.T, r map[string]any) {
			caps := asMap(t, r["capabilities_list_description"])
			if diff := cmp.Diff(map[string]any{"prompts": true, "resources": true, "tools": true}, caps["capabilities"]); diff != "" {
				t.Errorf("capabilities mismatch (-want +got):\n%s", diff)
			}
			tools := asMap(t, caps["tools"])
			echo := asMap(t, tools["echo"])
			if !strings.Contains(jsonString(echo["input_schema"]), `"message"`) {
				t.Errorf("echo's input_schema = %s", jsonString(echo["input_schema"]))
			}
			if a := asMap(t, echo["annotations"]); a["readOnlyHint"] != true {
				t.Errorf("echo's annotations = %v", a)
			}
			if res := asMap(t, caps["resources"]); asMap(t, res["features.md"])["uri"] != doc {
				t.Errorf("resources lack features.md at %s: %s", doc, jsonString(res))
			}
			args := asMap(t, asMap(t, asMap(t, caps["prompts"])["args-prompt"])["arguments"])
			if diff := cmp.Diff(true, asMap(t, args["city"])["required"]); diff != "" || args["state"] == nil {
				t.Errorf("args-prompt arguments = %s", jsonString(args))
			}
		},
		decided: "capabilities_list_description",
	}, {
		call: scripted.Call{Server: "everything", Tool: "echo", Args: map[string]any{"message": msg}},
		check: func(t *testing.T, r map[string]any) {
			want := map[string]any{"content": []any{map[string]any{"type": "text", "text": "Echo: " + msg}}}
			if diff := cmp.Diff(want, r["mcp_server_result"]); diff != "" {
				t.Errorf("echo result mismatch (-want +got):\n%s", diff)
			}
		},
		decided: "Echo: hello over " + mode,
	}, {
		call: scripted.Call{Server: "everything", Resource: "features.md", Args: map[string]any{"uri": doc}},
		check: func(t *testing.T, r map[string]any) {
			c := asMap(t, asSlice(t, asMap(t, r["mcp_server_result"])["contents"])[0])
			if c["uri"] != doc || c["mimeType"] != "text/markdown" || !strings.HasPrefix(fmt.Sprint(c["text"]), "# Everything Server - Features") {
				t.Errorf("resource contents = %s", jsonString(c))
			}
		},
		decided: "Everything Server - Features",
	}, {
		call: scripted.Call{Server: "everything", Prompt: "args-prompt", Args: map[string]any{"city": "Lyon", "state": "Rhône"}},
		check: func(t *testing.T, r map[string]any) {
			want := []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": "What's weather in Lyon, Rhône?"}}}
			if diff := cmp.Diff(want, asMap(t, r["mcp_server_result"])["messages"]); diff != "" {
				t.Errorf("prompt messages mismatch (-want +got):\n%s", diff)
			}
		},
		decided: "What's weather in Lyon",
	}, {
		call: scripted.Call{Server: "everything", Tool: "get-tiny-image"},
		check: func(t *testing.T, r map[string]any) {
			img := block(t, r, "image")
			data, err := base64.StdEncoding.DecodeString(fmt.Sprint(img["data"]))
			if img["mimeType"] != "image/png" || err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
				t.Errorf("image block: mimeType %v, data %.40v… (%v)", img["mimeType"], img["data"], err)
			}
		},
		decided: "the image you requested",
	}, {
		call: scripted.Call{Server: "everything", Tool: "get-resource-reference", Args: map[string]any{"resourceType": "Text", "resourceId": 2}},
		check: func(t *testing.T, r map[string]any) {
			res := asMap(t, block(t, r, "resource")["resource"])
			if !strings.HasSuffix(fmt.Sprint(res["uri"]), "/2") || !strings.HasPrefix(fmt.Sprint(res["text"]), "Resource 2:") {
				t.Errorf("embedded resource = %s", jsonString(res))
			}
		},
		decided: "Resource 2:",
	}, {
		call: scripted.Call{Server: "everything", Tool: "get-resource-links", Args: map[string]any{"count": 2}},
		check: func(t *testing.T, r map[string]any) {
			link := block(t, r, "resource_link")
			if link["uri"] == nil || link["name"] == nil {
				t.Errorf("resource link = %s", jsonString(link))
			}
		},
		decided: "resource_link",
	}, {
		call:    scripted.Call{Server: "everything", Tool: "no-such-tool", Args: map[string]any{}},
		wantErr: []string{`tool_name "no-such-tool"`, "no such tool", "echo", "get-sum"},
	}, {
		call:    scripted.Call{Server: "everything", Tool: "get-sum", Args: map[string]any{"a": "one", "b": 2}},
		wantErr: []string{"arguments of everything.get-sum", "/a", "number"},
	}, {
		// The server's own answer: a result with isError.
		call:    scripted.Call{Server: "everything", Tool: "get-resource-reference", Args: map[string]any{"resourceType": "Text", "resourceId": -1}},
		wantErr: []string{"tool get-resource-reference reported an error", "Invalid resourceId: -1"},
		check: func(t *testing.T, r map[string]any) {
			if res := asMap(t, r["mcp_server_result"]); res["isError"] != true {
				t.Errorf("mcp_server_result = %s, want isError", jsonString(res))
			}
		},
	}, {
		// The agent still works after the failures.
		call:    scripted.Call{Server: "everything", Tool: "get-sum", Args: map[string]any{"a": 2, "b": 40}},
		decided: "The sum of 2 and 40 is 42.",
	}}

	cfg := &downstream.Config{Servers: map[string]downstream.ServerConfig{"everything": sc}}
	var script []scripted.Call
	for _, c := range calls {
		script = append(script, c.call)
	}
	// A call with invalid arguments fails at once here (requests_test.go
	// has the operator asked for them).
	s := newToolStackWith(t, cfg, script, stackOptions{executor: func(ec *downstream.ExecutorConfig) { ec.NoArgumentQuestions = true }})
	w := s.runWorker(t, "everything")

	steps := s.toolSteps(w)
	if len(steps) != len(calls) {
		t.Fatalf("tool steps: %d, want %d\n%s", len(steps), len(calls), s.Dump())
	}
	var decided []string
	for i, c := range calls {
		st := steps[i]
		name := fmt.Sprintf("step %d (%s)", i, jsonString(c.call))
		if len(c.wantErr) > 0 {
			msg, _ := st.ExecuteResult["error"].(string)
			if st.ExecutionState != engine.StateFailed {
				t.Errorf("%s: %s, want failed", name, st.ExecutionState)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(msg, w) {
					t.Errorf("%s: error %q lacks %q", name, msg, w)
				}
			}
		} else {
			if st.ExecutionState != engine.StateFinished {
				t.Errorf("%s: %s: %v", name, st.ExecutionState, st.ExecuteResult["error"])
				continue
			}
			decided = append(decided, c.decided)
		}
		if c.check != nil {
			c.check(t, st.ExecuteResult)
		}
	}

	// One tool_decision after each finished call, and each saw its call's
	// result in its tool history.
	got := s.user.Decisions()
	if len(got) != len(decided) {
		t.Fatalf("tool_decision steps: %d, want %d (one after each finished call)", len(got), len(decided))
	}
	for i, want := range decided {
		if !strings.Contains(got[i], want) {
			t.Errorf("tool_decision %d: its prompt lacks %q (the result of its call)", i, want)
		}
	}
}

// block returns the first content block of the given type in a tool result.
func block(t *testing.T, result map[string]any, typ string) map[string]any {
	t.Helper()
	for _, b := range asSlice(t, asMap(t, result["mcp_server_result"])["content"]) {
		if m := asMap(t, b); m["type"] == typ {
			return m
		}
	}
	t.Fatalf("no %s block in %s", typ, jsonString(result["mcp_server_result"]))
	return nil
}

func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: not a JSON object", jsonString(v))
	}
	return m
}

func asSlice(t *testing.T, v any) []any {
	t.Helper()
	s, ok := v.([]any)
	if !ok || len(s) == 0 {
		t.Fatalf("%s: not a non-empty JSON array", jsonString(v))
	}
	return s
}

// TestSSESessionOutlivesConnect lists an SSE server's capabilities: the
// session must outlive the connecting (and the step that connected it).
func TestSSESessionOutlivesConnect(t *testing.T) {
	sc := startEverything(t, "sse")
	sc.Timeout = downstream.Duration(5 * time.Second)
	pool := downstream.NewPool(&downstream.Config{Servers: map[string]downstream.ServerConfig{"everything": sc}}, nil)
	t.Cleanup(func() { _ = pool.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	caps, err := pool.Describe(ctx, "everything") // connects with ctx
	cancel()                                      // that step is over
	if err != nil {
		t.Fatalf("describe over SSE: %v", err)
	}
	if _, ok := caps.Tools["echo"]; !ok {
		t.Fatalf("tools over SSE lack echo: %v", caps.Tools)
	}
}
