package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync/atomic"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool calls without per-call schema work. mcp.AddTool's handler does, on
// every call: decode the arguments into a map, apply defaults, validate,
// re-marshal, decode into In; marshal Out, decode it again, validate it
// and re-marshal it. And on protocol versions with standard headers
// (2026-07-28) the SDK marshals the tool's input schema on every
// tools/call to look for x-mcp-header annotations (validateParamHeaders),
// which costs a *jsonschema.Schema a reflective MarshalJSON each time but a
// json.RawMessage only a copy.
//
// addTool registers the tool with Server.AddTool instead: its schemas are
// marshalled (json.RawMessage) and resolved once, here; each call decodes
// and validates the arguments against the resolved input schema as the SDK
// does (same errors: `validating "arguments": …`), decodes In from the
// arguments as they came, and marshals Out once, into structuredContent.
// The output is not validated against the output schema on each call: it
// is built by this package from the very type the schema is inferred from.
// The tests validate every output (checkOutputs, set by export_test.go).

// checkOutputs makes every tool call validate its output against the tool's
// output schema, as mcp.AddTool does; a violation is a protocol error.
var checkOutputs atomic.Bool

// addTool registers def (its schemas *jsonschema.Schema, the input one of
// type object) with h as its handler; see above.
func addTool[In, Out any](srv *mcp.Server, def *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	inRes, inRaw := resolveOnce(def.Name, "input", def.InputSchema)
	outRes, outRaw := resolveOnce(def.Name, "output", def.OutputSchema)
	defaults := hasDefaults(inRaw)
	// A nil *T output is sent as T's zero value ({}), not null.
	var zeroOut any
	if rt := reflect.TypeFor[Out](); rt.Kind() == reflect.Pointer {
		zeroOut = reflect.Zero(rt.Elem()).Interface()
	}
	t := *def
	t.InputSchema, t.OutputSchema = inRaw, outRaw
	srv.AddTool(&t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args json.RawMessage
		if req.Params != nil {
			args = req.Params.Arguments
		}
		input, err := decodeArguments[In](args, inRes, defaults)
		if err != nil {
			return errorResult(err), nil
		}
		res, out, err := h(ctx, req, input)
		if err != nil {
			if werr, ok := err.(*jsonrpc.Error); ok {
				return nil, werr
			}
			return errorResult(err), nil
		}
		if res == nil {
			res = &mcp.CallToolResult{}
		}
		if res.InputRequests != nil {
			return res, nil // a multi round-trip answer carries no content
		}
		var v any = out
		if zeroOut != nil && reflect.ValueOf(v).IsNil() {
			v = zeroOut
		}
		return withOutput(res, v, outRes)
	})
}

// resolveOnce resolves a tool's schema and marshals it for the wire.
func resolveOnce(tool, which string, schema any) (*jsonschema.Resolved, json.RawMessage) {
	s, ok := schema.(*jsonschema.Schema)
	if !ok || s == nil {
		panic(fmt.Sprintf("server: tool %s: %s schema %T: want a *jsonschema.Schema", tool, which, schema))
	}
	res, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
	if err != nil {
		panic(fmt.Sprintf("server: tool %s: %s schema: %v", tool, which, err)) // a programming error, caught by every test
	}
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("server: tool %s: %s schema: %v", tool, which, err))
	}
	return res, raw
}

// hasDefaults: the marshalled schema may have a default value somewhere (a
// "default" key; a property named default counts too, harmlessly).
func hasDefaults(raw json.RawMessage) bool { return bytes.Contains(raw, []byte(`"default":`)) }

// decodeArguments validates a call's arguments against the input schema,
// as mcp.AddTool does (after applying the schema's defaults, if it has
// any), and decodes them into In.
func decodeArguments[In any](args json.RawMessage, schema *jsonschema.Resolved, defaults bool) (In, error) {
	var in In
	v := map[string]any{}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &v); err != nil {
			return in, fmt.Errorf("validating \"arguments\": unmarshaling arguments: %w", err)
		}
	}
	if defaults {
		if err := schema.ApplyDefaults(&v); err != nil {
			return in, fmt.Errorf("validating \"arguments\": applying schema defaults:\n%w", err)
		}
	}
	if err := schema.Validate(v); err != nil {
		return in, fmt.Errorf("validating \"arguments\": %w", err)
	}
	if defaults {
		var err error
		if args, err = json.Marshal(v); err != nil {
			return in, fmt.Errorf("validating \"arguments\": marshalling with defaults: %w", err)
		}
	}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &in); err != nil {
			return in, err
		}
	}
	return in, nil
}

// withOutput puts out in res's structuredContent, marshalled once, and (as
// mcp.AddTool does) its JSON in a text content when res has none, or in an
// extra one when it is not an object.
func withOutput(res *mcp.CallToolResult, out any, schema *jsonschema.Resolved) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("marshaling output: %w", err)
	}
	if checkOutputs.Load() {
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("validating tool output: %w", err)
		}
		if err := schema.Validate(&doc); err != nil {
			return nil, fmt.Errorf("validating tool output: %w", err)
		}
	}
	res.StructuredContent = json.RawMessage(b)
	if res.Content == nil {
		res.Content = []mcp.Content{&mcp.TextContent{Text: string(b)}}
	} else if !isObjectJSON(b) {
		res.Content = append(res.Content, &mcp.TextContent{Text: string(b)})
	}
	return res, nil
}

func errorResult(err error) *mcp.CallToolResult {
	var res mcp.CallToolResult
	res.SetError(err)
	return &res
}

// isObjectJSON: the JSON value b is an object.
func isObjectJSON(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}
