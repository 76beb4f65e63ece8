package skills

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/prompts"
)

// fixedPartBefore is each skill's fixed prompt part (runner.fixedPart: the
// system message and the skill's rules, return format, MCP guide and memory
// rules), in characters, as it was before issue 14 item 6, measured at
// commit 1ba5233 by rendering fixedPart with the prompt sets of that commit.
// instruction_generation then carried the MCP guide inside its tool step
// section; that guide (6,761 en, 4,436 zh characters) is counted here, as it
// is now part of the skill's MCP section.
var fixedPartBefore = map[string]map[string]int{
	"en": {
		engine.SkillPlanning: 22603, engine.SkillReflection: 21808, engine.SkillSummary: 20248,
		engine.SkillInstructionGeneration: 20693 + 6761, engine.SkillThink: 19859, engine.SkillQuickThink: 19555,
		engine.SkillSendMessage: 22052, engine.SkillProcessMessage: 20914, engine.SkillTaskManager: 22152,
		engine.SkillAgentManager: 20872, engine.SkillAskInfo: 20848, engine.SkillToolDecision: 27747,
		engine.SkillDecision: 20131,
	},
	"zh": {
		engine.SkillPlanning: 10810, engine.SkillReflection: 10409, engine.SkillSummary: 9511,
		engine.SkillInstructionGeneration: 9890 + 4436, engine.SkillThink: 9277, engine.SkillQuickThink: 9173,
		engine.SkillSendMessage: 10487, engine.SkillProcessMessage: 9830, engine.SkillTaskManager: 10770,
		engine.SkillAgentManager: 10184, engine.SkillAskInfo: 9994, engine.SkillToolDecision: 14513,
		engine.SkillDecision: 9565,
	},
}

// TestFixedPartHalved: the part of every skill's prompt that no agent or
// step changes is at most half of what it was (issue 14 item 6), in both
// languages, so that a trivial task's calls cost half the characters.
func TestFixedPartHalved(t *testing.T) {
	for _, lang := range prompts.Languages {
		set := loadSet(t, lang)
		for _, name := range engine.SkillNames {
			before, ok := fixedPartBefore[lang][name]
			if !ok {
				t.Errorf("%s/%s: no baseline size", lang, name)
				continue
			}
			r := newTestRunner(t, set, name, nil)
			got := utf8.RuneCountInString(r.fixedPart())
			if got > before/2 {
				t.Errorf("%s/%s: fixed part is %d characters, want at most %d (half of %d)", lang, name, got, before/2, before)
			}
			t.Logf("%s/%s: fixed part %d characters (%.0f%% of %d)", lang, name, got, 100*float64(got)/float64(before), before)
		}
	}
}

// TestFixedPartIsInThePrompt: fixedPart measures what the prompt really
// carries: the system message is the whole system message, and every static
// section appears in the user message before anything that varies.
func TestFixedPartIsInThePrompt(t *testing.T) {
	for _, lang := range prompts.Languages {
		set := loadSet(t, lang)
		for _, name := range engine.SkillNames {
			r := newTestRunner(t, set, name, nil)
			system, user := r.render(fixture(name))
			if system != r.systemMessage() {
				t.Errorf("%s/%s: system message is not systemMessage()", lang, name)
			}
			for _, sec := range r.sk.sections {
				st := r.staticSection(sec)
				if st == "" {
					continue
				}
				at, vary := strings.Index(user, st), strings.Index(user, set.Heading("memory_content"))
				switch {
				case at < 0:
					t.Errorf("%s/%s: static section %d is not in the user message", lang, name, sec)
				case vary < 0 || at > vary:
					t.Errorf("%s/%s: static section %d comes after the memory's content, where the variable part begins", lang, name, sec)
				}
			}
		}
	}
}
