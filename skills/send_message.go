package skills

import (
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
)

// sendMessage writes a message to other agents (<send_message>), or, when
// the agent lacks what it needs to say, asks for a decision step first
// (<get_more_info>) (spec §3.7, §9.1.2). Prompt: system → role → (goal →
// rules) → history → memory.
func sendMessage() skill {
	return skill{
		name:     engine.SkillSendMessage,
		sections: []section{secRole, secHistory, secStep, secMemory},
		parse: func(answer string, _ *engine.ExecInput) (*engine.Output, error) {
			if lastBlock(answer, "send_message", "get_more_info") == "get_more_info" {
				var sp engine.StepSpec
				if err := ExtractJSON(answer, "get_more_info", &sp); err != nil {
					return nil, err
				}
				if err := needIntention("get_more_info", sp); err != nil {
					return nil, err
				}
				return &engine.Output{GetMoreInfo: &sp, Result: map[string]any{"get_more_info": sp}}, nil
			}
			var m engine.OutgoingMessage
			if err := ExtractJSON(answer, "send_message", &m); err != nil {
				return nil, err
			}
			// An empty receiver is left to the engine: a reply goes to the
			// agent it answers; any other message is refused there. A list
			// with a null or blank entry is no such answer: decoding leaves
			// it "", which the model did not write as an agent_id.
			if i := blankEntry(m.Receiver); i >= 0 {
				return nil, errorf("<send_message>: receiver[%d] is null or blank: each entry must be an agent_id (leave receiver out only to answer the message being replied to)", i)
			}
			if strings.TrimSpace(m.Message) == "" {
				return nil, errorf("<send_message>: message is empty")
			}
			return &engine.Output{SendMessage: &m, Result: map[string]any{"send_message": m}}, nil
		},
	}
}

// lastBlock returns which of the tags has the complete block that closes
// last in s, reasoning aside ("" when none has one): the model's final word
// counts.
func lastBlock(s string, tags ...string) string {
	s = StripReasoning(s)
	best, at := "", -1
	for _, tag := range tags {
		if _, ok := Block(s, tag); !ok {
			continue
		}
		if i := strings.LastIndex(s, "</"+tag+">"); i > at {
			best, at = tag, i
		}
	}
	return best
}

// needIntention checks a step-like block has its two fields.
func needIntention(tag string, sp engine.StepSpec) error {
	switch {
	case strings.TrimSpace(sp.StepIntention) == "":
		return errorf("<%s>: step_intention is empty", tag)
	case strings.TrimSpace(sp.TextContent) == "":
		return errorf("<%s>: text_content is empty", tag)
	}
	return nil
}
