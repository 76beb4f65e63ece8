package server

import (
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mas-mcp/mas-mcp/engine"
)

// Tool schemas are inferred from the Go types, then made portable: hosts map
// them onto narrower dialects (OpenAI's strict mode, Gemini's OpenAPI subset),
// so every schema has one type per field (an optional field is left out, never
// null), every closed set is an enum, every range is in the schema, and every
// output field is typed. The MCP Inspector's --strict check (interop test)
// holds the server to it.

// typeSchemas are the schemas of types whose Go shape says less than their
// JSON does.
var typeSchemas = map[reflect.Type]*jsonschema.Schema{
	// One ID or a list of IDs.
	reflect.TypeFor[engine.StringList](): {AnyOf: []*jsonschema.Schema{
		{Type: "string"},
		{Type: "array", Items: &jsonschema.Schema{Type: "string"}},
	}},
}

// schemaOf infers T's schema and makes it portable; T's schema method (if
// it has one) then adds what the Go type cannot say (enums, ranges, the
// descriptions of engine types' fields).
func schemaOf[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		panic(fmt.Sprintf("server: schema of %T: %v", *new(T), err)) // a programming error, caught by every test
	}
	portable(s)
	if sh, ok := any(*new(T)).(interface{ schema(*jsonschema.Schema) }); ok {
		sh.schema(s)
	}
	return s
}

// portable rewrites s in place: a nullable type (["null", T], as Go's
// pointers, slices and maps infer) becomes T; a property that constrains
// nothing (Go's any) becomes "a JSON object or array" (our open documents,
// ask_info's data and read_resource's document, are one of the two).
func portable(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && (s.Types[0] == "null" || s.Types[1] == "null") {
		s.Type = s.Types[0]
		if s.Type == "null" {
			s.Type = s.Types[1]
		}
		s.Types = nil
	}
	for _, p := range s.Properties {
		if p.Type == "" && len(p.Types) == 0 && p.AnyOf == nil && p.Ref == "" && p.Enum == nil && p.Const == nil {
			p.AnyOf = []*jsonschema.Schema{{Type: "object"}, {Type: "array"}}
		}
		portable(p)
	}
	portable(s.Items)
	if s.AdditionalProperties != nil && !isFalse(s.AdditionalProperties) {
		portable(s.AdditionalProperties)
	}
	for _, a := range s.AnyOf {
		portable(a)
	}
}

// isFalse: the schema that admits nothing (additionalProperties: false).
func isFalse(s *jsonschema.Schema) bool { return s.Not != nil && reflect.ValueOf(*s.Not).IsZero() }

// enum makes property name of s one of values.
func enum(s *jsonschema.Schema, name string, values ...string) {
	p := prop(s, name)
	p.Enum = make([]any, len(values))
	for i, v := range values {
		p.Enum[i] = v
	}
}

// between bounds integer property name of s to [lo, hi] (hi 0: no upper bound).
func between(s *jsonschema.Schema, name string, lo, hi float64) {
	p := prop(s, name)
	p.Minimum = &lo
	if hi > 0 {
		p.Maximum = &hi
	}
}

func prop(s *jsonschema.Schema, name string) *jsonschema.Schema {
	p, ok := s.Properties[name]
	if !ok {
		panic(fmt.Sprintf("server: schema has no property %q", name))
	}
	return p
}

// describe sets the descriptions of s's properties.
func describe(s *jsonschema.Schema, descs map[string]string) {
	for name, d := range descs {
		prop(s, name).Description = d
	}
}

func (AskInfoIn) schema(s *jsonschema.Schema) { enum(s, "type", queryTypes()...) }

func (GetInboxIn) schema(s *jsonschema.Schema) { between(s, "limit", 1, 0) }

func (WaitIn) schema(s *jsonschema.Schema) {
	between(s, "timeout_seconds", 1, maxWaitSeconds)
	between(s, "max_events", 1, 0)
}

// schema: the result is one of several actions' results, each a JSON
// object; the schema says no more than that.
func (InstructionOut) schema(s *jsonschema.Schema) {
	s.Properties["result"] = schemaOf[map[string]any]()
}

func (ManageTaskIn) schema(s *jsonschema.Schema) {
	enum(s, "action", manageTaskActions...)
	describe(prop(s, "stages").Items, map[string]string{
		"stage_intention":  "what the stage must achieve",
		"agent_allocation": "each allocated agent's goal in the stage, {agent_id: goal}; the agents must be in the task's group",
	})
}

func (ManageAgentIn) schema(s *jsonschema.Schema) {
	enum(s, "action", manageAgentActions...)
	cfg := prop(s, "agent_config")
	describe(cfg, map[string]string{
		"template":   "the name of an agent template (ask_info available_agents_config); the other fields then override the template's",
		"name":       "the agent's name",
		"role":       "the agent's role in a few words",
		"profile":    "who the agent is and how it works, in detail",
		"skills":     "the skills it may use (ask_info skills_and_tools)",
		"tools":      "the MCP tools it may use (ask_info skills_and_tools)",
		"llm_config": "the model it runs on (default: the server's)",
	})
	llm := prop(cfg, "llm_config")
	describe(llm, map[string]string{
		"model":       "the model name at the server's LLM endpoint",
		"temperature": "sampling temperature, 0 to 2",
		"max_tokens":  "the most tokens one answer may have",
	})
	between(llm, "temperature", 0, 2)
	between(llm, "max_tokens", 1, 0)
}
