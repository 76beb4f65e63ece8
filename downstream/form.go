package downstream

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
)

// A form is what the operator is asked to fill in: the fields of a server's
// elicitation, or the missing and invalid arguments of a tool call (spec
// 001). Elicitation forms are flat objects of primitive fields; a field
// whose type is not primitive is asked as JSON text.

// field is one field of a form.
type field struct {
	Name, Type, Title, Description string
	Enum                           []any
	Required                       bool
	// JSON: the field's value is not primitive (an object, an array, or
	// untyped); it is asked as JSON text and decoded.
	JSON bool
}

// form is an ordered list of fields.
type form struct{ fields []field }

// formFromSchema reads the properties of an object schema; only, when not
// nil, keeps the properties it names.
func formFromSchema(schema any, only map[string]bool) form {
	var s struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Title       string `json:"title"`
			Description string `json:"description"`
			Enum        []any  `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	b, _ := json.Marshal(schema)
	_ = json.Unmarshal(b, &s)
	var f form
	for name, p := range s.Properties {
		if only != nil && !only[name] {
			continue
		}
		fd := field{Name: name, Title: p.Title, Description: p.Description, Enum: p.Enum,
			Required: slices.Contains(s.Required, name)}
		switch t := p.Type.(type) {
		case string:
			fd.Type = t
		case []any: // ["string", "null"]: the first non-null type
			for _, x := range t {
				if x, _ := x.(string); x != "" && x != "null" && fd.Type == "" {
					fd.Type = x
				}
			}
		}
		switch fd.Type {
		case "string", "number", "integer", "boolean":
		default:
			fd.JSON = true
		}
		f.fields = append(f.fields, fd)
	}
	// Missing properties the schema requires but does not describe.
	for _, name := range s.Required {
		if _, ok := s.Properties[name]; !ok && (only == nil || only[name]) {
			f.fields = append(f.fields, field{Name: name, Required: true, JSON: true})
		}
	}
	sort.Slice(f.fields, func(i, j int) bool { return f.fields[i].Name < f.fields[j].Name })
	return f
}

// describe lists the fields for the question's text, one a line.
func (f form) describe() string {
	var b strings.Builder
	for _, fd := range f.fields {
		t := fd.Type
		if fd.JSON {
			t = "JSON"
			if fd.Type != "" {
				t = fd.Type + " as JSON"
			}
		}
		fmt.Fprintf(&b, "- %s (%s", fd.Name, t)
		if fd.Required {
			b.WriteString(", required")
		}
		b.WriteString(")")
		if d := strings.TrimSpace(fd.Title + " " + fd.Description); d != "" {
			b.WriteString(": " + d)
		}
		if len(fd.Enum) > 0 {
			vals, _ := json.Marshal(fd.Enum)
			b.WriteString(" one of " + string(vals))
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// schema is the form as an elicitation's requested schema.
func (f form) schema() map[string]any {
	props := map[string]any{}
	var required []string
	for _, fd := range f.fields {
		p := map[string]any{"type": fd.Type}
		if fd.JSON {
			p["type"] = "string"
			fd.Description = strings.TrimSpace(fd.Description + " (JSON)")
		}
		if fd.Title != "" {
			p["title"] = fd.Title
		}
		if fd.Description != "" {
			p["description"] = fd.Description
		}
		if len(fd.Enum) > 0 && !fd.JSON {
			p["enum"] = fd.Enum
		}
		props[fd.Name] = p
		if fd.Required {
			required = append(required, fd.Name)
		}
	}
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// formAnswer is the operator's answer to a form.
type formAnswer struct {
	// Action is "accept" or "decline" (MCP's elicitation actions).
	Action  string
	Content map[string]any
}

// declines reports whether a free-text reply declines the form.
func declines(reply string) bool {
	r := strings.ToLower(strings.Trim(strings.TrimSpace(reply), ".!。！"))
	return slices.Contains([]string{"no", "decline", "cancel", "refuse", "deny", "不", "不要", "拒绝", "取消"}, r)
}

// parse reads the operator's answer: a decision (approve with the values as
// its arguments, or deny to decline), or a reply that is a JSON object of
// the values, the value itself when the form has one field, or a word
// that declines.
func (f form) parse(a engine.Answer) (formAnswer, error) {
	var values map[string]any
	switch {
	case a.Decision != nil && !a.Decision.Approve:
		return formAnswer{Action: "decline"}, nil
	case a.Decision != nil:
		values = a.Decision.Arguments
	default:
		reply := strings.TrimSpace(a.Text)
		switch {
		case declines(reply):
			return formAnswer{Action: "decline"}, nil
		case strings.HasPrefix(reply, "{"):
			if err := json.Unmarshal([]byte(reply), &values); err != nil {
				return formAnswer{}, fmt.Errorf("the operator's reply is not a JSON object of the values: %v", err)
			}
		case len(f.fields) == 1:
			values = map[string]any{f.fields[0].Name: reply}
		default:
			return formAnswer{}, fmt.Errorf("the operator's reply %q gives no values: a JSON object of them was expected", reply)
		}
	}
	content := map[string]any{}
	for _, fd := range f.fields {
		v, ok := values[fd.Name]
		if !ok {
			continue
		}
		cv, err := fd.coerce(v)
		if err != nil {
			return formAnswer{}, fmt.Errorf("%s: %v", fd.Name, err)
		}
		content[fd.Name] = cv
	}
	return formAnswer{Action: "accept", Content: content}, nil
}

// coerce gives a value the field's type (a form's text becomes a number,
// a boolean, or decoded JSON).
func (fd field) coerce(v any) (any, error) {
	s, isString := v.(string)
	if !isString {
		return v, nil
	}
	s = strings.TrimSpace(s)
	switch {
	case fd.JSON:
		var out any
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			if fd.Type == "" {
				return s, nil // untyped: take the text
			}
			return nil, fmt.Errorf("%q is not JSON: %v", s, err)
		}
		return out, nil
	case fd.Type == "integer":
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", s)
		}
		return n, nil
	case fd.Type == "number":
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", s)
		}
		return n, nil
	case fd.Type == "boolean":
		switch strings.ToLower(s) {
		case "true", "yes", "y", "1", "是":
			return true, nil
		case "false", "no", "n", "0", "否":
			return false, nil
		}
		return nil, fmt.Errorf("%q is not true or false", s)
	}
	return s, nil
}

// argumentForm is the form for a call whose arguments fail the tool's
// input schema: its required properties that are missing, and those given
// whose values fail their own schema. Empty when the failure lies
// elsewhere (an unknown property the schema forbids, a rule across
// properties): asking for fields would not mend it.
func argumentForm(schema any, args map[string]any) form {
	var s struct {
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
		Defs       map[string]any `json:"$defs"`
	}
	b, _ := json.Marshal(schema)
	_ = json.Unmarshal(b, &s)
	ask := map[string]bool{}
	for _, name := range s.Required {
		if _, ok := args[name]; !ok {
			ask[name] = true
		}
	}
	for name, v := range args {
		p, ok := s.Properties[name]
		if !ok {
			continue
		}
		one := map[string]any{"type": "object", "properties": map[string]any{name: p}}
		if s.Defs != nil {
			one["$defs"] = s.Defs
		}
		if checkArguments(resolveSchema(one), map[string]any{name: v}) != nil {
			ask[name] = true
		}
	}
	if len(ask) == 0 {
		return form{}
	}
	return formFromSchema(schema, ask)
}
