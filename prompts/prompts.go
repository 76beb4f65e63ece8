// Package prompts holds the prompt texts and agent templates of mas-mcp as
// YAML files embedded in the binary: an English set (default) and a Chinese
// set, plus language-neutral agent templates. A user may point Load at a
// directory with the same layout to override any file or add templates.
//
// Layout (embedded, and of an override directory):
//
//	<lang>/base.yaml        system_prompt, persistent_memory_prompt, mcp_base_prompt, headings, texts
//	<lang>/skills/<n>.yaml  one file per skill: name, use_guide.description, use_prompt.{skill_prompt,return_format}
//	agents/<name>.yaml      agent templates (name, role, profile, skills, tools, llm_config, i18n)
package prompts

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

//go:embed en zh agents
var embedded embed.FS

// Languages lists the prompt sets built in.
var Languages = []string{"en", "zh"}

// SkillNames are the 13 skills of spec §3, in spec order.
var SkillNames = []string{
	"planning", "reflection", "summary", "instruction_generation", "think",
	"quick_think", "send_message", "process_message", "task_manager",
	"agent_manager", "ask_info", "tool_decision", "decision",
}

// HeadingKeys are the section headings every set must define (spec §5).
var HeadingKeys = []string{
	"system", "role", "role_info", "skills_tools", "skills", "tools", "no_skills", "no_tools",
	"current_step", "history", "no_history", "memory", "memory_rules", "memory_content",
	"no_memory", "tool_step", "tool_history", "no_tool_history", "mcp", "executed", "pending",
	"skill_rules", "history_folded", "memory_full",
}

// TextKeys are the engine's own texts (messages and step texts it writes)
// that every set must define. Each is a text/template.
var TextKeys = []string{
	"start_task_intention", "start_task_text",
	"start_stage_intention", "start_stage_text",
	"stage_started_notice", "stage_finished_notice", "task_finished_notice",
	"stage_complete", "task_judge",
	"reply_intention", "reply_text", "process_intention", "process_text",
	"wait_timeout_intention", "wait_timeout_text",
	"wait_cycle_intention", "wait_cycle_text",
	"reflection_intention", "reflection_text",
	"summary_intention", "summary_text",
	"budget_steps", "budget_reflections", "budget_unstaged", "summary_failed",
	"human_reply_needed", "human_stage_started", "human_stage_finished", "human_task_finished",
	"ask_info_result", "repair_request",
	"tool_describe_intention", "tool_describe_text", "tool_result_intention", "tool_result_text",
	"tool_confirm", "tool_elicit", "tool_missing_arguments",
	"text_clipped", "message_shortened",
	"stall_no_stages", "stall_stage", "stall_no_running_stage", "stall_last_failure", "stall_base", "stall_notice", "stall_failed",
	"llm_waiting", "llm_outage_began", "llm_outage_ended", "llm_outage_ended_restarted", "llm_outage_gave_up", "llm_outage_paused", "llm_outage_base_held", "llm_outage_resumed", "llm_refused", "store_refusing",
	"tool_waiting", "tool_outage_began", "tool_outage_ended", "tool_outage_gave_up",
	"reply_lost_intention", "reply_lost_text", "operator_task_failed", "operator_reply_lost", "task_cancelled", "task_failed_no_reason",
	"budget_reached", "budget_question", "budget_declined", "budget_waiting", "operator_waiting",
	"interrupt_intention", "interrupt_text", "interrupt_dropped",
	"history_digest", "pending_digest",
	"memory_added", "memory_deleted", "memory_no_key", "memory_ignored", "memory_ops_ignored", "memory_refused", "memory_refused_total",
	"shared_info_step", "stage_no_step_left", "stage_step_failed", "tool_instruction_intention",
	"base_task_name", "base_task_intention", "base_stage_goal",
	"reason_plan_ends", "reason_goal_met", "reason_reflection_ends",
	"ask_info_none", "ask_info_no_tools", "ask_info_template", "ask_info_template_hint",
	"ask_info_skills", "ask_info_tools", "ask_info_pool", "ask_info_conversation",
	"ask_info_stage_goal", "ask_info_step", "ask_info_agent", "ask_info_steps",
}

// SkillPrompt is one skill's prompt file.
type SkillPrompt struct {
	Name     string `yaml:"name"`
	UseGuide struct {
		// Description is shown in every prompt's list of available skills.
		Description string `yaml:"description"`
	} `yaml:"use_guide"`
	UsePrompt struct {
		// SkillPrompt is the skill's rules (spec §5.3).
		SkillPrompt string `yaml:"skill_prompt"`
		// ReturnFormat says which tagged block to answer with (LLM_CONTRACT.md).
		ReturnFormat string `yaml:"return_format"`
	} `yaml:"use_prompt"`
}

// AgentTemplate is an agent configuration that can be instantiated directly
// (spec §3.10 init_new_agent, §3.11 available_agents_config).
type AgentTemplate struct {
	Name      string         `yaml:"name"`
	Role      string         `yaml:"role"`
	Profile   string         `yaml:"profile"`
	Skills    []string       `yaml:"skills"`
	Tools     []string       `yaml:"tools"`
	LLMConfig map[string]any `yaml:"llm_config"`
	// I18N holds per-language role and profile; Set.Templates applies the
	// set's language.
	I18N map[string]struct {
		Role    string `yaml:"role"`
		Profile string `yaml:"profile"`
	} `yaml:"i18n"`
}

type baseFile struct {
	SystemPrompt           string            `yaml:"system_prompt"`
	PersistentMemoryPrompt string            `yaml:"persistent_memory_prompt"`
	MCPBasePrompt          string            `yaml:"mcp_base_prompt"`
	Headings               map[string]string `yaml:"headings"`
	Texts                  map[string]string `yaml:"texts"`
}

// Set is one language's prompts, loaded and checked. It is immutable and safe
// for concurrent use.
type Set struct {
	lang      string
	base      baseFile
	skills    map[string]SkillPrompt
	texts     map[string]*template.Template
	templates []AgentTemplate
}

// Load reads the set for lang ("en" or "zh"; "" means "en") from the embedded
// files, overlaid by the files under dir when dir is non-empty. Keys present
// in an override file replace the embedded ones; templates in dir/agents are
// added or replace embedded templates of the same name. Every skill, heading
// and text must be present and every text must parse, or Load fails naming
// the file and key.
func Load(lang, dir string) (*Set, error) {
	if lang == "" {
		lang = "en"
	}
	if !slices.Contains(Languages, lang) {
		return nil, fmt.Errorf("prompts: language %q: must be one of %s", lang, strings.Join(Languages, ", "))
	}
	var over fs.FS
	if dir != "" {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("prompts: override directory: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("prompts: override directory %q is not a directory", dir)
		}
		over = os.DirFS(dir)
	}
	s := &Set{lang: lang, skills: map[string]SkillPrompt{}, texts: map[string]*template.Template{}}

	if err := decodeLayered(over, path.Join(lang, "base.yaml"), &s.base); err != nil {
		return nil, err
	}
	for _, name := range SkillNames {
		var sp SkillPrompt
		file := path.Join(lang, "skills", name+".yaml")
		if err := decodeLayered(over, file, &sp); err != nil {
			return nil, err
		}
		if sp.Name != name {
			return nil, fmt.Errorf("prompts: %s: name is %q, want %q", file, sp.Name, name)
		}
		for field, v := range map[string]string{
			"use_guide.description":    sp.UseGuide.Description,
			"use_prompt.skill_prompt":  sp.UsePrompt.SkillPrompt,
			"use_prompt.return_format": sp.UsePrompt.ReturnFormat,
		} {
			if strings.TrimSpace(v) == "" {
				return nil, fmt.Errorf("prompts: %s: %s is empty", file, field)
			}
		}
		s.skills[name] = sp
	}
	baseName := path.Join(lang, "base.yaml")
	for field, v := range map[string]string{
		"system_prompt":            s.base.SystemPrompt,
		"persistent_memory_prompt": s.base.PersistentMemoryPrompt,
		"mcp_base_prompt":          s.base.MCPBasePrompt,
	} {
		if strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("prompts: %s: %s is empty", baseName, field)
		}
	}
	for _, k := range HeadingKeys {
		if _, ok := s.base.Headings[k]; !ok {
			return nil, fmt.Errorf("prompts: %s: headings.%s is missing", baseName, k)
		}
	}
	for _, k := range TextKeys {
		src, ok := s.base.Texts[k]
		if !ok {
			return nil, fmt.Errorf("prompts: %s: texts.%s is missing", baseName, k)
		}
		t, err := template.New(k).Option("missingkey=error").Parse(src)
		if err != nil {
			return nil, fmt.Errorf("prompts: %s: texts.%s: %w", baseName, k, err)
		}
		s.texts[k] = t
	}
	tpls, err := loadTemplates(over)
	if err != nil {
		return nil, err
	}
	for i := range tpls {
		if l, ok := tpls[i].I18N[lang]; ok {
			if l.Role != "" {
				tpls[i].Role = l.Role
			}
			if l.Profile != "" {
				tpls[i].Profile = l.Profile
			}
		}
		tpls[i].I18N = nil
	}
	s.templates = tpls
	return s, nil
}

// decodeLayered decodes the embedded file, then the override file (if any)
// on top of it, so an override may set only some keys.
func decodeLayered(over fs.FS, file string, v any) error {
	data, err := embedded.ReadFile(file)
	if err != nil {
		return fmt.Errorf("prompts: embedded %s: %w", file, err)
	}
	if err := decode(data, v); err != nil {
		return fmt.Errorf("prompts: embedded %s: %w", file, err)
	}
	if over == nil {
		return nil
	}
	data, err = fs.ReadFile(over, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("prompts: override %s: %w", file, err)
	}
	if err := decode(data, v); err != nil {
		return fmt.Errorf("prompts: override %s: %w", file, err)
	}
	return nil
}

// decode decodes one YAML document into v, rejecting unknown keys. A file
// without content (empty, or only comments) sets nothing: yaml.v3 reports it
// as io.EOF, which would otherwise surface as a bare "EOF" error.
func decode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func loadTemplates(over fs.FS) ([]AgentTemplate, error) {
	byName := map[string]AgentTemplate{}
	read := func(fsys fs.FS, label string) error {
		entries, err := fs.ReadDir(fsys, "agents")
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("prompts: %s agents: %w", label, err)
		}
		for _, e := range entries {
			if e.IsDir() || (!strings.HasSuffix(e.Name(), ".yaml") && !strings.HasSuffix(e.Name(), ".yml")) {
				continue
			}
			file := path.Join("agents", e.Name())
			data, err := fs.ReadFile(fsys, file)
			if err != nil {
				return fmt.Errorf("prompts: %s %s: %w", label, file, err)
			}
			var t AgentTemplate
			if err := decode(data, &t); err != nil {
				return fmt.Errorf("prompts: %s %s: %w", label, file, err)
			}
			if strings.TrimSpace(t.Name) == "" {
				return fmt.Errorf("prompts: %s %s: name is empty", label, file)
			}
			if strings.TrimSpace(t.Role) == "" {
				return fmt.Errorf("prompts: %s %s: role is empty", label, file)
			}
			for _, sk := range t.Skills {
				if !slices.Contains(SkillNames, sk) {
					return fmt.Errorf("prompts: %s %s: skills: unknown skill %q", label, file, sk)
				}
			}
			byName[t.Name] = t
		}
		return nil
	}
	if err := read(embedded, "embedded"); err != nil {
		return nil, err
	}
	if over != nil {
		if err := read(over, "override"); err != nil {
			return nil, err
		}
	}
	out := make([]AgentTemplate, 0, len(byName))
	for _, t := range byName {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b AgentTemplate) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Lang is the set's language code.
func (s *Set) Lang() string { return s.lang }

// SystemPrompt is the MAS base system prompt (spec §1.1, §5.1).
func (s *Set) SystemPrompt() string { return s.base.SystemPrompt }

// PersistentMemoryPrompt explains how to manage persistent memory (spec §5.5, §9.3).
func (s *Set) PersistentMemoryPrompt() string { return s.base.PersistentMemoryPrompt }

// MCPBasePrompt teaches agents the MCP interaction (spec §4.3, §5.11).
func (s *Set) MCPBasePrompt() string { return s.base.MCPBasePrompt }

// Heading returns a section heading; Load guarantees every HeadingKeys entry.
func (s *Set) Heading(key string) string { return s.base.Headings[key] }

// Skill returns a skill's prompt file.
func (s *Set) Skill(name string) (SkillPrompt, bool) {
	sp, ok := s.skills[name]
	return sp, ok
}

// SkillGuides maps every skill name to its use_guide description.
func (s *Set) SkillGuides() map[string]string {
	m := make(map[string]string, len(s.skills))
	for n, sp := range s.skills {
		m[n] = strings.TrimSpace(sp.UseGuide.Description)
	}
	return m
}

// Text renders one of TextKeys with data. A key outside TextKeys or a
// template that fails on data yields a marker naming the problem rather than
// a panic, so a bad override cannot crash an agent.
func (s *Set) Text(key string, data any) string {
	t, ok := s.texts[key]
	if !ok {
		return "[missing text " + key + "]"
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return fmt.Sprintf("[text %s: %v]", key, err)
	}
	return strings.TrimRight(b.String(), "\n")
}

// Templates returns the agent templates, sorted by name, with role and
// profile in the set's language. The result is a deep copy: callers may
// change it without affecting the set or each other.
func (s *Set) Templates() []AgentTemplate {
	out := slices.Clone(s.templates)
	for i := range out {
		out[i].Skills = slices.Clone(out[i].Skills)
		out[i].Tools = slices.Clone(out[i].Tools)
		out[i].LLMConfig = maps.Clone(out[i].LLMConfig)
	}
	return out
}
