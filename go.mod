module github.com/mas-mcp/mas-mcp

go 1.26.8

require (
	github.com/google/go-cmp v0.7.0
	github.com/google/uuid v1.6.0
	github.com/lmittmann/tint v1.2.1
	github.com/sashabaranov/go-openai v1.43.0
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
)
