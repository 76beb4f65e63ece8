package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type callIn struct {
	Name  string `json:"name" jsonschema:"a name"`
	Times int    `json:"times,omitempty" jsonschema:"how many times"`
}

type callOut struct {
	Said string `json:"said"`
	Data any    `json:"data"`
}

// toolClient serves one tool registered with addTool and returns a client
// session to it.
func toolClient(t *testing.T, def *mcp.Tool, h mcp.ToolHandlerFor[callIn, callOut]) *mcp.ClientSession {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	addTool(srv, def, h)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestAddToolAsTheSDK: a tool registered with addTool lists the schemas it
// was given, validates its arguments as mcp.AddTool does (the same errors),
// applies the input schema's defaults, and returns its output as
// structuredContent (and as text when the handler gave none); with
// checkOutputs, an output its schema refuses is a protocol error.
func TestAddToolAsTheSDK(t *testing.T) {
	in, out := schemaOf[callIn](), schemaOf[callOut]()
	def := &mcp.Tool{Name: "say", Description: "says", InputSchema: in, OutputSchema: out}
	var got callIn
	cs := toolClient(t, def, func(_ context.Context, _ *mcp.CallToolRequest, a callIn) (*mcp.CallToolResult, callOut, error) {
		got = a
		switch a.Name {
		case "text":
			return textResult("said %s", a.Name), callOut{Said: a.Name, Data: []string{}}, nil
		case "bad output":
			return nil, callOut{Said: a.Name, Data: "not an object or list"}, nil
		}
		return nil, callOut{Said: a.Name, Data: map[string]int{"times": a.Times}}, nil
	})
	ctx := context.Background()

	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 1 {
		t.Fatalf("tools/list = %v, %v", list, err)
	}
	for which, pair := range map[string][2]any{"input": {in, list.Tools[0].InputSchema}, "output": {out, list.Tools[0].OutputSchema}} {
		want, _ := json.Marshal(pair[0])
		gotSchema, _ := json.Marshal(pair[1])
		var w, g any
		_ = json.Unmarshal(want, &w)
		_ = json.Unmarshal(gotSchema, &g)
		if ws, gs := jsonText(w), jsonText(g); ws != gs {
			t.Errorf("%s schema listed:\n%s\nwant:\n%s", which, gs, ws)
		}
	}

	for _, tc := range []struct {
		name string
		args any
		want string // a substring of the tool error
	}{
		{"missing required", map[string]any{"times": 2}, `validating "arguments": `},
		{"wrong type", map[string]any{"name": 5}, `want "string"`},
		{"unknown property", map[string]any{"name": "x", "Name": "y"}, "unexpected additional properties"},
		{"not an object", []string{"x"}, `validating "arguments": unmarshaling arguments`},
		{"no arguments", nil, "required"},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "say", Arguments: tc.args})
		if err != nil || !res.IsError || !strings.Contains(toolText(res), tc.want) {
			t.Errorf("%s: %v, %v; want a tool error with %q", tc.name, toolText(res), err, tc.want)
		}
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "say", Arguments: map[string]any{"name": "plain", "times": 3}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v, %v", res, err)
	}
	if got != (callIn{Name: "plain", Times: 3}) {
		t.Errorf("handler got %+v", got)
	}
	// (The client decodes structuredContent into a map: its keys come back sorted.)
	if want := `{"said":"plain","data":{"times":3}}`; jsonString(res.StructuredContent) != `{"data":{"times":3},"said":"plain"}` || toolText(res) != want {
		t.Errorf("structured %s, text %q; want both %s", jsonString(res.StructuredContent), toolText(res), want)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "say", Arguments: map[string]any{"name": "text"}})
	if err != nil || toolText(res) != "said text" || jsonString(res.StructuredContent) != `{"data":[],"said":"text"}` {
		t.Errorf("call with text: %v, %v", res, err)
	}

	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "say", Arguments: map[string]any{"name": "bad output"}})
	if err == nil || !strings.Contains(err.Error(), "validating tool output") {
		t.Errorf("an output its schema refuses: %v, want a protocol error validating tool output", err)
	}
}

// TestAddToolDefaults: the input schema's defaults reach the handler.
func TestAddToolDefaults(t *testing.T) {
	in := schemaOf[callIn]()
	in.Properties["times"].Default = json.RawMessage("7")
	var got callIn
	cs := toolClient(t, &mcp.Tool{Name: "say", InputSchema: in, OutputSchema: schemaOf[callOut]()},
		func(_ context.Context, _ *mcp.CallToolRequest, a callIn) (*mcp.CallToolResult, callOut, error) {
			got = a
			return nil, callOut{Said: a.Name, Data: []int{}}, nil
		})
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "say", Arguments: map[string]any{"name": "x"}}); err != nil {
		t.Fatal(err)
	}
	if got != (callIn{Name: "x", Times: 7}) {
		t.Errorf("handler got %+v, want times 7 from the default", got)
	}
}

// The schema type this file relies on.
var _ *jsonschema.Schema = schemaOf[callIn]()

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
