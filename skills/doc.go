// Package skills implements the 13 LLM skills of the spec (§3) — planning,
// reflection, summary, instruction_generation, think, quick_think,
// send_message, process_message, task_manager, agent_manager, ask_info,
// tool_decision and decision: prompt assembly, one LLM call, tolerant parsing
// of tagged output.
//
// The parsing rules are those of design/LLM_CONTRACT.md and live in parse.go:
// reasoning preambles are stripped ([StripReasoning]), the last complete
// `<tag> … </tag>` block wins ([Block]), and JSON inside a block is read
// leniently but never guessed at ([NormalizeJSON], [DecodeJSON]).
// [ExtractJSON] and [ExtractText] combine the three steps and return errors
// written for the model: a skill sends them back verbatim in its one repair
// round.
package skills
