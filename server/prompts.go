package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// instructions are sent to every client at initialization.
const instructions = `mas-mcp is a team of LLM agents. You act as its human operator: hand tasks over with add_task, follow them (wait_for_updates, read_resource, or subscriptions to mas:// resources), answer agents' questions (get_inbox, then send_message to the asking agent), and steer with manage_task / manage_agent. The prompt "operator_guide" explains the workflow.`

// operatorGuide teaches a host LLM to act as the MAS's operator.
const operatorGuide = `You are the human operator of mas-mcp, a multi-agent system (MAS) of LLM agents. You do not do the work yourself: you hand tasks to the MAS, watch them, answer the agents' questions and judge the results.

## How the MAS works
- A task is owned by a manager agent. It creates agents from templates, adds them to the task's group, and splits the task into stages that run one after another. Each stage gives every allocated agent a goal.
- Agents plan their own steps, message each other, and end their part of a stage with a summary. When every agent of a stage has summarised, the manager judges the stage (finishes it, or retries it). After the last stage the manager judges the task and finishes it with a summary.
- You are an agent too (a HumanAgent): agents may ask you questions. A question marked as waiting blocks the asking agent until you answer.

## Your workflow
1. Hand over a task: call add_task with a short task_name and a detailed task_intention (goal, constraints, expected deliverable). It returns the task_id at once; the work happens in the background.
2. Follow it: call wait_for_updates (pass the returned cursor each time), or read mas://tasks/{task_id} with read_resource. ask_info with type task_info gives a readable summary.
3. Answer agents: call get_inbox regularly. For each message awaiting your reply, answer with send_message to its sender in the same task (task_id, receiver [sender_id]); urgent ones first — the agent is blocked until you reply. Your reply is matched to the question automatically.
4. Steer when needed: send_message to the manager with new instructions; or use manage_task (add_stage, finish_stage, retry_stage, finish_task, cancel_task) and manage_agent (init_new_agent, add_task_participant) yourself.
5. When the task's execution_state is finished, read its task_summary and the stages' completion_summary, and report the result.

## Finding IDs
ask_info type tasks lists tasks; task_agents (task_id) lists a task's agents; available_agents_config lists agent templates. The base task (base: true) is where the manager listens for general requests.`

func (s *Server) addPrompts() {
	s.mcp.AddPrompt(&mcp.Prompt{
		Name:        "operator_guide",
		Title:       "Act as the MAS's operator",
		Description: "Teaches a host LLM how to hand over a task, watch it and answer the agents. Optionally starts with a task.",
		Arguments: []*mcp.PromptArgument{
			{Name: "task", Description: "a task to hand over right away (optional)"},
		},
	}, s.operatorGuidePrompt)
}

func (s *Server) operatorGuidePrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	text := operatorGuide
	task := strings.TrimSpace(req.Params.Arguments["task"])
	c := inputCheck{l: &s.cfg.Limits}
	if c.text("task", task); c.err != nil {
		return nil, c.err
	}
	if task != "" {
		text += fmt.Sprintf("\n\n## Your task now\nHand this task over with add_task, then follow it to the end and report the result:\n\n%s", task)
	}
	return &mcp.GetPromptResult{
		Description: "How to act as the operator of mas-mcp",
		Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}},
	}, nil
}
