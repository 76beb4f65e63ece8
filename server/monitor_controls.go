package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/mas-mcp/mas-mcp/engine"
)

// The monitor's controls: the operator's buttons on the page, doing what
// manage_task, manage_agent and answer_approval do over MCP.
//
//	POST /api/control          {action, task_id | agent_id, step_id, reason, instruction}
//	POST /api/answer_approval  {message_id, approve, note}
//
// control's actions: pause_task and resume_task (task_id); pause_agent and
// resume_agent (agent_id); interrupt (agent_id, instruction, reason);
// cancel_step (agent_id, step_id, reason).

// controlRequest is POST /api/control's body.
type controlRequest struct {
	Action      string `json:"action"`
	TaskID      string `json:"task_id,omitempty"`
	AgentID     string `json:"agent_id,omitempty"`
	StepID      string `json:"step_id,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Instruction string `json:"instruction,omitempty"`
}

var controlActions = []string{engine.ActionPauseTask, engine.ActionResumeTask, engine.ActionPauseAgent, engine.ActionResumeAgent,
	actionInterrupt, actionCancelStep}

func (s *Server) apiControl(w http.ResponseWriter, r *http.Request) {
	op, ok := s.authed(w, r)
	if !ok {
		return
	}
	var req controlRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	if !slices.Contains(controlActions, req.Action) {
		s.apiError(w, http.StatusBadRequest, fmt.Sprintf("action %q: must be one of %s", req.Action, strings.Join(controlActions, ", ")))
		return
	}
	// The IDs are held to what the MCP tools hold them to (manage_task,
	// manage_agent: inputs.go) before the engine sees them, which would
	// echo them whole in its errors.
	c := inputCheck{l: &s.cfg.Limits}
	c.name("task_id", req.TaskID)
	c.name("agent_id", req.AgentID)
	c.name("step_id", req.StepID)
	c.text("reason", req.Reason)
	c.text("instruction", req.Instruction)
	if c.err != nil {
		s.apiError(w, http.StatusBadRequest, c.err.Error())
		return
	}
	var res any
	var err error
	switch req.Action {
	case engine.ActionPauseTask, engine.ActionResumeTask:
		if strings.TrimSpace(req.TaskID) == "" {
			s.apiError(w, http.StatusBadRequest, "task_id: is required")
			return
		}
		res, err = s.sys.TaskInstruction(op, engine.TaskInstruction{Action: req.Action, TaskID: req.TaskID})
	case engine.ActionPauseAgent, engine.ActionResumeAgent:
		if strings.TrimSpace(req.AgentID) == "" {
			s.apiError(w, http.StatusBadRequest, "agent_id: is required")
			return
		}
		res, err = s.sys.AgentInstruction(op, engine.AgentInstruction{Action: req.Action, Agents: engine.StringList{req.AgentID}})
	case actionInterrupt:
		var stepID string
		if stepID, err = s.sys.Interrupt(op, req.AgentID, req.Reason, req.Instruction); err == nil {
			res = map[string]any{"agent_id": req.AgentID, "interrupted_step": stepID}
		}
	case actionCancelStep:
		if err = s.sys.CancelStep(op, req.AgentID, req.StepID, req.Reason); err == nil {
			res = map[string]any{"agent_id": req.AgentID, "cancelled_step": req.StepID}
		}
	}
	if err != nil {
		s.apiError(w, engineStatus(err), err.Error())
		return
	}
	apiJSON(w, http.StatusOK, map[string]any{"success": true, "message": req.Action + " done", "result": res})
}

// approvalRequest is POST /api/answer_approval's body.
type approvalRequest struct {
	MessageID string `json:"message_id"`
	Approve   *bool  `json:"approve"`
	Note      string `json:"note,omitempty"`
}

func (s *Server) apiAnswerApproval(w http.ResponseWriter, r *http.Request) {
	op, ok := s.authed(w, r)
	if !ok {
		return
	}
	var req approvalRequest
	if !s.readJSON(w, r, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.MessageID) == "":
		s.apiError(w, http.StatusBadRequest, "message_id: is required")
		return
	case req.Approve == nil:
		s.apiError(w, http.StatusBadRequest, "approve: is required (true or false)")
		return
	}
	if err := (AnswerApprovalIn{MessageID: req.MessageID, Note: req.Note}).check(&s.cfg.Limits); err != nil {
		s.apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.sys.AnswerApproval(op, req.MessageID, engine.Decision{Approve: *req.Approve, Note: req.Note}); err != nil {
		s.apiError(w, engineStatus(err), err.Error())
		return
	}
	word := map[bool]string{true: "approved", false: "denied"}[*req.Approve]
	apiJSON(w, http.StatusOK, map[string]any{"success": true, "message": word})
}

// engineStatus is the HTTP status of an engine error.
func engineStatus(err error) int {
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, engine.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, engine.ErrEnded):
		return http.StatusConflict
	}
	return http.StatusBadRequest
}
