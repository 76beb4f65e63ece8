package engine

// Skill names (spec §3).
const (
	SkillPlanning              = "planning"
	SkillReflection            = "reflection"
	SkillSummary               = "summary"
	SkillInstructionGeneration = "instruction_generation"
	SkillThink                 = "think"
	SkillQuickThink            = "quick_think"
	SkillSendMessage           = "send_message"
	SkillProcessMessage        = "process_message"
	SkillTaskManager           = "task_manager"
	SkillAgentManager          = "agent_manager"
	SkillAskInfo               = "ask_info"
	SkillToolDecision          = "tool_decision"
	SkillDecision              = "decision"
)

// SkillNames lists the 13 skills in spec order.
var SkillNames = []string{
	SkillPlanning, SkillReflection, SkillSummary, SkillInstructionGeneration,
	SkillThink, SkillQuickThink, SkillSendMessage, SkillProcessMessage,
	SkillTaskManager, SkillAgentManager, SkillAskInfo, SkillToolDecision,
	SkillDecision,
}

// CoreSkills are the skills the engine itself schedules (a stage's first
// planning, reflection after failures, summary, message handling): every LLM
// agent has them, whatever its configuration says.
var CoreSkills = []string{
	SkillPlanning, SkillReflection, SkillSummary, SkillSendMessage, SkillProcessMessage,
}
