package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/schemas")

const schemaDir = "testdata/schemas"

// toolDefinition is what a tool's golden snapshot holds: the definition as
// tools/list returns it, field for field.
type toolDefinition struct {
	Name         string               `json:"name"`
	Title        string               `json:"title"`
	Description  string               `json:"description"`
	InputSchema  any                  `json:"inputSchema"`
	OutputSchema any                  `json:"outputSchema"`
	Annotations  *mcp.ToolAnnotations `json:"annotations"`
}

// listTools returns tools/list's answer as the client decoded it and as raw
// JSON objects (to see which keys are present at all).
func listTools(t *testing.T) ([]*mcp.Tool, []map[string]any) {
	t.Helper()
	e := newEnv(t)
	res, err := e.client.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	for _, tl := range res.Tools {
		var m map[string]any
		if err := json.Unmarshal([]byte(jsonString(tl)), &m); err != nil {
			t.Fatal(err)
		}
		raw = append(raw, m)
	}
	return res.Tools, raw
}

// TestToolSchemasGolden compares every tool's definition with its snapshot
// in testdata/schemas/<tool>.json. Run with -update to rewrite them after an
// intended change (and review the diff). A tool without a snapshot fails, and
// so does a snapshot without a tool.
func TestToolSchemasGolden(t *testing.T) {
	tools, _ := listTools(t)
	if *updateGolden {
		if err := os.MkdirAll(schemaDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, tl := range tools {
		seen[tl.Name+".json"] = true
		t.Run(tl.Name, func(t *testing.T) {
			def := toolDefinition{Name: tl.Name, Title: tl.Title, Description: tl.Description,
				InputSchema: tl.InputSchema, OutputSchema: tl.OutputSchema, Annotations: tl.Annotations}
			got, err := json.MarshalIndent(def, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join(schemaDir, tl.Name+".json")
			if *updateGolden {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("no snapshot of tool %s (%v): run go test ./server/ -run TestToolSchemasGolden -update and review it", tl.Name, err)
			}
			if bytes.Equal(want, got) {
				return
			}
			var w, g any
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(w, g); diff != "" {
				t.Errorf("tool %s changed (-%s +tools/list); if intended, rerun with -update:\n%s", tl.Name, path, diff)
			} else {
				t.Errorf("%s is not formatted as -update writes it; rerun with -update", path)
			}
		})
	}
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			if *updateGolden {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("%s: snapshot of a tool tools/list does not have; rerun with -update to delete it", f)
		}
	}
}

// Tools whose hints the design fixes (ARCHITECTURE.md "MCP surface").
var (
	readOnlyTools    = []string{"ask_info", "get_inbox", "wait_for_updates", "read_resource", "show_task"}
	destructiveTools = []string{"manage_task"}
	allTools         = []string{"add_task", "send_message", "ask_info", "get_inbox", "answer_approval", "wait_for_updates", "manage_task", "manage_agent", "read_resource", "show_task"}
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestToolInvariants checks across every tool what github-mcp-server checks
// of its own: unique snake_case names, titles and descriptions, explicit
// hints, described input properties, object input and output schemas.
func TestToolInvariants(t *testing.T) {
	_, raw := listTools(t)
	var names []string
	for _, tl := range raw {
		name, _ := tl["name"].(string)
		names = append(names, name)
		t.Run(name, func(t *testing.T) {
			if !snakeCase.MatchString(name) {
				t.Errorf("name %q is not snake_case", name)
			}
			for _, k := range []string{"title", "description"} {
				if s, _ := tl[k].(string); strings.TrimSpace(s) == "" {
					t.Errorf("%s is empty", k)
				}
			}
			checkAnnotations(t, name, tl)
			in, ok := tl["inputSchema"].(map[string]any)
			if !ok || in["type"] != "object" {
				t.Fatalf("inputSchema %v: want an object schema", tl["inputSchema"])
			}
			props, _ := in["properties"].(map[string]any)
			if len(props) == 0 {
				t.Errorf("inputSchema has no properties")
			}
			for p, v := range props {
				if !snakeCase.MatchString(p) {
					t.Errorf("input property %q is not snake_case", p)
				}
				if d, _ := v.(map[string]any)["description"].(string); strings.TrimSpace(d) == "" {
					t.Errorf("input property %q has no description", p)
				}
			}
			req, _ := in["required"].([]any)
			for _, r := range req {
				if _, ok := props[r.(string)]; !ok {
					t.Errorf("required property %q is not among the properties", r)
				}
			}
			if in["additionalProperties"] != false {
				t.Errorf("inputSchema additionalProperties = %v, want false (unknown arguments are rejected)", in["additionalProperties"])
			}
			out, ok := tl["outputSchema"].(map[string]any)
			if !ok || out["type"] != "object" {
				t.Errorf("outputSchema %v: want an object schema", tl["outputSchema"])
			}
		})
	}
	sorted := slices.Sorted(slices.Values(allTools))
	if diff := cmp.Diff(sorted, slices.Sorted(slices.Values(names))); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		t.Errorf("tool names are not unique: %v", names)
	}
}

// checkAnnotations: annotations are present; readOnlyHint is set explicitly
// (true on read-only tools); destructiveHint is set explicitly on every tool
// that writes (true on destructive ones); title matches.
func checkAnnotations(t *testing.T, name string, tl map[string]any) {
	t.Helper()
	ann, ok := tl["annotations"].(map[string]any)
	if !ok {
		t.Fatalf("annotations missing")
	}
	ro, ok := ann["readOnlyHint"].(bool)
	if !ok {
		t.Errorf("annotations.readOnlyHint is not set")
	}
	if want := slices.Contains(readOnlyTools, name); ro != want {
		t.Errorf("readOnlyHint = %v, want %v", ro, want)
	}
	if ann["title"] != tl["title"] {
		t.Errorf("annotations.title %v != title %v", ann["title"], tl["title"])
	}
	if _, ok := ann["openWorldHint"].(bool); !ok {
		t.Errorf("annotations.openWorldHint is not set (the MAS is a closed world)")
	}
	d, set := ann["destructiveHint"].(bool)
	switch {
	case ro && d:
		t.Errorf("a read-only tool has destructiveHint true")
	case !ro && !set:
		t.Errorf("destructiveHint is not set on a tool that writes (its default is true)")
	case !ro && d != slices.Contains(destructiveTools, name):
		t.Errorf("destructiveHint = %v, want %v", d, slices.Contains(destructiveTools, name))
	}
}
