package skills

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// zhScaffoldingAllowed are the ASCII words a zh prompt or state text may
// hold: what the model writes or reads back as it is — the JSON keys and
// enum values the parser needs (LLM_CONTRACT.md), the MCP protocol's keys,
// state names, the example tool server's name — the keys an operator writes
// in a configuration as they are (outageWindow), and the names of the
// system and its protocols. Skill names and identifiers with "_", "-" or digits
// (tags, fields, IDs) are allowed anyway.
var zhScaffoldingAllowed = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`
		MAS MCP Agent Agents JSON markdown ID IDs LLM URI URL Server
		tools resources prompts tool resource prompt skill executor type add delete
		true false null uri arguments action stages agents summary message receiver
		description title properties required object string path text contents
		messages mimeType content role user name profile skills
		init pending running finished failed idle working waiting
		agent task stage template error TaskState filesystem yes outageWindow
	`) {
		zhScaffoldingAllowed[w] = true
	}
	for _, n := range engine.SkillNames {
		zhScaffoldingAllowed[n] = true
	}
}

var asciiWord = regexp.MustCompile(`[A-Za-z][A-Za-z0-9_-]*`)

// masURI is a resource URI of the MAS (mas://tasks/…/conversation): an
// identifier, whatever words its path is made of.
var masURI = regexp.MustCompile(`mas://[^\s\]]*`)

// englishWords returns the ASCII words of text that are neither allowed
// nor identifiers.
func englishWords(text string) []string {
	var out []string
	for _, w := range asciiWord.FindAllString(masURI.ReplaceAllString(text, ""), -1) {
		if len(w) < 3 || strings.ContainsAny(w, "_-0123456789") || zhScaffoldingAllowed[w] {
			continue
		}
		out = append(out, w)
	}
	return out
}

// zhStage is the fixture of every skill with Chinese data, so that any
// English left in a rendered prompt is scaffolding.
func zhStage(name string) *engine.ExecInput {
	in := fixture(name)
	in.View = nil // its stage goal is English test data
	zh := func(i int) string { return fmt.Sprintf("中文内容%d", i) }
	in.Agent.Name, in.Agent.Role, in.Agent.Profile = "甲", "研究员", "查找并整理资料。"
	for k := range in.Agent.PersistentMemory {
		in.Agent.PersistentMemory[k] = "操作员希望报告保存在指定目录。"
	}
	fix := func(s *engine.StepState, i int) {
		s.StepIntention = zh(i)
		s.TextContent = zh(i)
		if strings.Contains(s.StepIntention+s.TextContent, "filesystem") || s.Type == engine.StepTool {
			s.TextContent = "<tool_name>filesystem</tool_name>\n" + zh(i)
		}
		if len(s.ExecuteResult) > 0 {
			keys := slices.Sorted(maps.Keys(s.ExecuteResult))
			s.ExecuteResult = map[string]any{keys[0]: zh(i)}
		}
		if s.InstructionContent != nil {
			s.InstructionContent = &engine.ToolCall{ToolName: "read_file"}
		}
	}
	for i := range in.Agent.AgentStep.StepList {
		fix(&in.Agent.AgentStep.StepList[i], i)
	}
	fix(&in.Step, 99)
	return in
}

// TestChineseHasNoEnglishScaffolding renders every skill's prompt, every
// heading and every engine text of the zh set with Chinese data and fails
// on English words that are not technical identifiers (issue 14 item 7).
func TestChineseHasNoEnglishScaffolding(t *testing.T) {
	set := loadSet(t, "zh")
	catalog := fakeCatalog{"filesystem": "读写文件。", "web_search": "搜索网页。"}
	ex, err := Executors(Config{LLM: fakellm.NewInstant(nil), Prompts: set, Tools: catalog, PromptBudget: 600})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what, text string) {
		t.Helper()
		if w := englishWords(text); len(w) > 0 {
			slices.Sort(w)
			t.Errorf("%s holds English words %q", what, slices.Compact(w))
		}
	}
	// Everything is checked: the system prompt, the memory and MCP rules,
	// each skill's rules, return format and guide (their examples are
	// Chinese too), and what the code adds: headings, field labels, history
	// lines, folding notes, digests and the engine's texts.
	for _, name := range engine.SkillNames {
		in := zhStage(name)
		in.Agent.MemoryFull = true
		system, user := ex[name].(*runner).render(in)
		check("zh prompt of "+name, system+user)
	}
	for _, k := range prompts.HeadingKeys {
		check("zh heading "+k, set.Heading(k))
	}
	// Every field any text uses, with a Chinese value.
	src, err := os.ReadFile("../prompts/zh/base.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]any{}
	for _, m := range regexp.MustCompile(`\.([A-Z][A-Za-z]*)`).FindAllStringSubmatch(string(src), -1) {
		data[m[1]] = "甲"
	}
	for _, k := range prompts.TextKeys {
		got := set.Text(k, data)
		if strings.HasPrefix(got, "[text ") {
			t.Errorf("zh text %s: %s", k, got)
			continue
		}
		check("zh text "+k, got)
	}
}
