package server

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// completion/complete: as a host's user types a resource template's argument
// (task_id, stage_id, agent_id) the host offers the IDs that exist and that
// the caller may see, each matching what was typed. The values are IDs; the
// typed text matches an ID's start or (case-insensitively) anywhere in the
// task's, stage's or agent's name, so a user can type "report" and get the
// ID of the task named "Quarterly report".
//
// A reference the server does not have (an unknown prompt or template, an
// argument without completions such as operator_guide's free-text "task")
// gets an empty list, not an error: the conformance suite asks for a prompt
// of its own test server and expects a list.

// maxCompletions is the protocol's limit of values in one answer.
const maxCompletions = 100

// candidate is one value that may be offered, with the name it is known by.
type candidate struct{ id, name string }

// Kinds of ID a completion offers.
const (
	kindTask  = "task"
	kindAgent = "agent"
)

// visibleTo decides which tasks (kindTask, by task ID; their stages go with
// them) and agents (kindAgent, by agent ID) operator may be offered as
// completions. A task follows the engine's rule (a completion that offered
// another operator's task would name it, and matching its name would confirm
// words of it); every agent is offered, as mas://agents/{agent_id} is
// readable by every operator (filtered to what it may see).
func (s *Server) visibleTo(operator, kind, id string) bool {
	if kind == kindTask {
		return s.sys.Visible(operator, id)
	}
	return true
}

func (s *Server) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := req.Params
	var args map[string]string
	if p.Context != nil {
		args = p.Context.Arguments
	}
	var cands []candidate
	if p.Ref != nil && p.Ref.Type == "ref/resource" {
		cands = s.resourceCandidates(s.operator(ctx, req.Extra), p.Ref.URI, p.Argument.Name, args)
	}
	// ref/prompt: operator_guide's only argument is free text.
	return completionResult(cands, p.Argument.Value), nil
}

// resourceCandidates lists the values of argument arg of the resource
// template tmpl, as operator op may see them; args are the template's
// arguments already chosen (a stage_id is completed within its task_id).
func (s *Server) resourceCandidates(op, tmpl, arg string, args map[string]string) []candidate {
	if !strings.HasPrefix(tmpl, "mas://") || !strings.Contains(tmpl, "{"+arg+"}") {
		return nil
	}
	var out []candidate
	switch arg {
	case "task_id":
		for _, t := range s.sys.TasksFor(op) {
			if s.visibleTo(op, kindTask, t.TaskID) {
				out = append(out, candidate{t.TaskID, t.TaskName})
			}
		}
	case "stage_id":
		task := args["task_id"]
		for _, t := range s.sys.TasksFor(op) {
			if (task != "" && t.TaskID != task) || !s.visibleTo(op, kindTask, t.TaskID) {
				continue
			}
			for _, st := range t.StageList {
				out = append(out, candidate{st.StageID, st.StageIntention})
			}
		}
	case "agent_id":
		if strings.HasPrefix(tmpl, "mas://operators/") {
			// Only an operator may read its own inbox.
			if b, ok := s.sys.AgentBrief(op); ok {
				out = append(out, candidate{b.AgentID, b.Name})
			}
			return out
		}
		for _, a := range s.sys.AgentBriefs() {
			if s.visibleTo(op, kindAgent, a.AgentID) {
				out = append(out, candidate{a.AgentID, a.Name})
			}
		}
	}
	return out
}

// completionResult keeps the candidates matching typed: those whose ID
// starts with it first, then those whose name contains it; at most
// maxCompletions, with the total and whether there are more.
func completionResult(cands []candidate, typed string) *mcp.CompleteResult {
	lower := strings.ToLower(typed)
	var byID, byName []string
	for _, c := range cands {
		switch {
		case strings.HasPrefix(c.id, typed):
			byID = append(byID, c.id)
		case lower != "" && strings.Contains(strings.ToLower(c.name), lower):
			byName = append(byName, c.id)
		}
	}
	vals := append(byID, byName...)
	res := &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}, Total: len(vals)}}
	if len(vals) > maxCompletions {
		vals, res.Completion.HasMore = vals[:maxCompletions], true
	}
	res.Completion.Values = append(res.Completion.Values, vals...)
	return res
}
