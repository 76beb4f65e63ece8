// Package archtest checks the dependency rules of ARCHITECTURE.md: arrows
// point down only, and the engine depends on no MCP SDK, server, downstream
// or skills code.
package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/mas-mcp/mas-mcp/"

// forbidden lists, per package directory, import path prefixes its non-test
// files must not use.
var forbidden = map[string][]string{
	"engine": {
		module + "server", module + "downstream", module + "skills", module + "cmd", module + "store",
		"github.com/modelcontextprotocol/", "github.com/mark3labs/",
	},
	"skills":  {module + "server", module + "downstream", module + "cmd", module + "store"},
	"llm":     {module},
	"store":   {module + "server", module + "downstream", module + "skills", module + "cmd"},
	"server":  {module + "downstream", module + "skills", module + "store", module + "cmd"},
	"prompts": {module},
}

func TestImportRules(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for dir, bad := range forbidden {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range bad {
					if strings.HasPrefix(path, b) {
						t.Errorf("%s imports %s: package %s must not depend on %s", f, path, dir, b)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no file checked: wrong root?")
	}
}
