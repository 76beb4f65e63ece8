package downstream

import (
	"context"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Capabilities is a server's capability list as agents see it (spec §4.1
// level 4, server_descriptions): which kinds it supports, then every tool,
// resource, resource template and prompt with how to call it.
type Capabilities struct {
	Capabilities      Kinds                       `json:"capabilities"`
	Tools             map[string]ToolDesc         `json:"tools,omitempty"`
	Resources         map[string]ResourceDesc     `json:"resources,omitempty"`
	ResourceTemplates map[string]ResourceTmplDesc `json:"resource_templates,omitempty"`
	Prompts           map[string]PromptDesc       `json:"prompts,omitempty"`
}

// Kinds says which capability kinds a server supports.
type Kinds struct {
	Prompts   bool `json:"prompts"`
	Resources bool `json:"resources"`
	Tools     bool `json:"tools"`
}

// ToolDesc describes one tool.
type ToolDesc struct {
	Description  string               `json:"description,omitempty"`
	Title        string               `json:"title,omitempty"`
	InputSchema  any                  `json:"input_schema,omitempty"`
	OutputSchema any                  `json:"output_schema,omitempty"`
	Annotations  *mcp.ToolAnnotations `json:"annotations,omitempty"`

	// schema is InputSchema resolved once, when the capabilities are
	// listed (nil: no schema, or one we cannot read — the server's
	// business, the call goes on).
	schema *jsonschema.Resolved
}

// ResourceDesc describes one resource.
type ResourceDesc struct {
	Description string `json:"description,omitempty"`
	Title       string `json:"title,omitempty"`
	URI         string `json:"uri"`
	MIMEType    string `json:"mimeType,omitempty"`
}

// ResourceTmplDesc describes one resource template.
type ResourceTmplDesc struct {
	Description string `json:"description,omitempty"`
	Title       string `json:"title,omitempty"`
	URITemplate string `json:"uriTemplate"`
	MIMEType    string `json:"mimeType,omitempty"`
}

// PromptDesc describes one prompt.
type PromptDesc struct {
	Description string             `json:"description,omitempty"`
	Title       string             `json:"title,omitempty"`
	Arguments   map[string]ArgDesc `json:"arguments,omitempty"`
}

// ArgDesc describes one prompt argument.
type ArgDesc struct {
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required"`
}

// Describe returns a server's capabilities, from the cache when it has them
// (they are dropped on reconnect and when the server says its tools changed).
func (p *Pool) Describe(ctx context.Context, server string) (*Capabilities, error) {
	c, err := p.conn(server)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.caps != nil {
		caps := c.caps
		c.mu.Unlock()
		return caps, nil
	}
	c.mu.Unlock()
	var caps *Capabilities
	err = p.do(ctx, server, true, func(ctx context.Context, s *mcp.ClientSession) error {
		var err error
		caps, err = describe(ctx, s)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mcp server %q: list capabilities: %w", server, err)
	}
	c.mu.Lock()
	c.caps = caps
	c.mu.Unlock()
	return caps, nil
}

func describe(ctx context.Context, s *mcp.ClientSession) (*Capabilities, error) {
	caps := &Capabilities{}
	sc := s.InitializeResult().Capabilities
	if sc != nil {
		caps.Capabilities = Kinds{Prompts: sc.Prompts != nil, Resources: sc.Resources != nil, Tools: sc.Tools != nil}
	}
	if caps.Capabilities.Tools {
		caps.Tools = map[string]ToolDesc{}
		for t, err := range s.Tools(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("tools/list: %w", err)
			}
			caps.Tools[t.Name] = ToolDesc{Description: t.Description, Title: t.Title, InputSchema: t.InputSchema,
				OutputSchema: t.OutputSchema, Annotations: t.Annotations, schema: resolveSchema(t.InputSchema)}
		}
	}
	if caps.Capabilities.Resources {
		caps.Resources = map[string]ResourceDesc{}
		for r, err := range s.Resources(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("resources/list: %w", err)
			}
			caps.Resources[r.Name] = ResourceDesc{Description: r.Description, Title: r.Title, URI: r.URI, MIMEType: r.MIMEType}
		}
		caps.ResourceTemplates = map[string]ResourceTmplDesc{}
		for r, err := range s.ResourceTemplates(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("resources/templates/list: %w", err)
			}
			caps.ResourceTemplates[r.Name] = ResourceTmplDesc{Description: r.Description, Title: r.Title, URITemplate: r.URITemplate, MIMEType: r.MIMEType}
		}
	}
	if caps.Capabilities.Prompts {
		caps.Prompts = map[string]PromptDesc{}
		for pr, err := range s.Prompts(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("prompts/list: %w", err)
			}
			d := PromptDesc{Description: pr.Description, Title: pr.Title}
			if len(pr.Arguments) > 0 {
				d.Arguments = map[string]ArgDesc{}
				for _, a := range pr.Arguments {
					d.Arguments[a.Name] = ArgDesc{Description: a.Description, Required: a.Required}
				}
			}
			caps.Prompts[pr.Name] = d
		}
	}
	return caps, nil
}
