package skills

import (
	"errors"

	"github.com/mas-mcp/mas-mcp/engine"
)

// processMessage digests a message that needs no reply; an optional
// <react_action> inserts a decision step to act on it (spec §3.8, §10.2).
// Prompt: system → role → history → memory → (message → rules): the message
// may hold its own headings, so it comes last.
func processMessage() skill {
	return skill{
		name:     engine.SkillProcessMessage,
		sections: []section{secRole, secHistory, secMemory, secStep},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			digest, err := ExtractText(answer, "process_message")
			if err != nil {
				return nil, err
			}
			out := &engine.Output{Result: map[string]any{"process_message": digest}}
			var sp engine.StepSpec
			switch err := ExtractJSON(answer, "react_action", &sp); {
			case errors.Is(err, ErrNoBlock), errors.Is(err, ErrEmptyBlock):
				// No reaction: the optional block is absent or empty.
			case err != nil:
				return nil, err
			default:
				if err := needIntention("react_action", sp); err != nil {
					return nil, err
				}
				out.ReactAction = &sp
				out.Result["react_action"] = sp
			}
			return out, nil
		},
	}
}
