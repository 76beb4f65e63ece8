// Package archtest checks the dependency rules of ARCHITECTURE.md: arrows
// point down only; the engine depends on no MCP SDK, server, downstream or
// skills code; cmd/ is flags only and leaves the wiring to internal/app;
// no program code depends on a test helper.
package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/mas-mcp/mas-mcp/"

// testHelpers are the packages only tests may import.
var testHelpers = []string{module + "internal/teststack", module + "internal/fakellm", module + "internal/scripted"}

// forbidden lists, per package directory, import path prefixes its non-test
// files must not use. Every package of the module has an entry (an empty
// one says it may import any package it does not form a cycle with).
var forbidden = map[string][]string{
	"engine": {
		module + "server", module + "downstream", module + "skills", module + "cmd", module + "store", module + "internal",
		"github.com/modelcontextprotocol/", "github.com/mark3labs/",
	},
	"skills":     {module + "server", module + "downstream", module + "cmd", module + "store", module + "internal"},
	"llm":        {module},
	"store":      {module + "server", module + "downstream", module + "skills", module + "cmd", module + "internal"},
	"server":     {module + "downstream", module + "skills", module + "store", module + "cmd", module + "internal"},
	"downstream": {module + "server", module + "skills", module + "store", module + "cmd", module + "internal"},
	"prompts":    {module},
	// The relay joins a data directory's owner through the server's line
	// reader and the store's socket; it never builds a MAS itself (the
	// wiring hands it a constructor).
	"internal/relay": {module + "engine", module + "downstream", module + "skills", module + "llm", module + "cmd", module + "internal/app"},
	// The wiring may import every layer, never the command.
	"internal/app": {module + "cmd"},
	// Test helpers build stacks from the layers; never from the wiring.
	"internal/teststack": {module + "cmd", module + "internal/app", module + "server", module + "downstream", module + "store"},
	"internal/fakellm":   {module + "cmd", module + "internal/app", module + "engine", module + "server", module + "downstream", module + "store"},
	"internal/scripted":  {module + "cmd", module + "internal/app", module + "engine", module + "server", module + "downstream", module + "store"},
	// Telemetry is a leaf the layers call into (like llm): it knows the
	// LLM client's observer hook and the MCP SDK's middleware types, never
	// the MAS's own layers.
	"internal/telemetry":          {module + "cmd", module + "internal/app", module + "engine", module + "server", module + "downstream", module + "skills", module + "store"},
	"internal/telemetry/otlptest": {module},
	// The secrets rule (which secrets are scrubbed, and how) is a leaf of
	// the standard library that every layer scrubbing text uses.
	"internal/secret": {module},
}

// exempt lists, per package directory, the module packages it may import
// although a forbidden prefix matches them: the layers' OpenTelemetry hooks,
// and the one rule for scrubbing secrets (internal/secret), which every
// layer that scrubs text follows.
var exempt = map[string][]string{
	"engine":     {module + "internal/telemetry", module + "internal/secret"},
	"server":     {module + "internal/telemetry", module + "internal/secret"},
	"downstream": {module + "internal/telemetry", module + "internal/secret"},
	"store":      {module + "internal/secret"},
	"llm":        {module + "internal/secret"},
}

// allowedOnly lists, per package directory, the only module packages its
// non-test files may import (the standard library is always allowed, any
// other module never): cmd/ maps its command line to internal/app.
var allowedOnly = map[string][]string{
	"cmd/mas-mcp": {module + "internal/app"},
}

// imports parses the imports of dir's non-test files.
func imports(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
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
		out[f] = []string{}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			out[f] = append(out[f], path)
		}
	}
	return out
}

// standard reports whether path is in the standard library (its first
// element has no dot).
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func TestImportRules(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for dir, bad := range forbidden {
		for f, paths := range imports(t, filepath.Join(root, dir)) {
			checked++
			for _, path := range paths {
				for _, b := range bad {
					if strings.HasPrefix(path, b) && !slices.Contains(exempt[dir], path) {
						t.Errorf("%s imports %s: package %s must not depend on %s", f, path, dir, b)
					}
				}
				if dir != "internal/teststack" && dir != "internal/scripted" && slices.Contains(testHelpers, path) {
					t.Errorf("%s imports %s: only tests may use a test helper", f, path)
				}
			}
		}
	}
	for dir, ok := range allowedOnly {
		for f, paths := range imports(t, filepath.Join(root, dir)) {
			checked++
			for _, path := range paths {
				if !standard(path) && !slices.Contains(ok, path) {
					t.Errorf("%s imports %s: package %s may import only the standard library and %v", f, path, dir, ok)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no file checked: wrong root?")
	}
}

// TestEveryPackageHasARule: a new package gets its rule here when it is
// added, so that the rules keep covering the whole module.
func TestEveryPackageHasARule(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if _, ok := forbidden[rel]; ok {
			return nil
		}
		if _, ok := allowedOnly[rel]; ok {
			return nil
		}
		t.Errorf("package %s (%s) has no import rule: add it to internal/archtest", rel, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
