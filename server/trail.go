package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mas-mcp/mas-mcp/engine"
)

// The trail's resources: mas://tasks/{task_id}/trail (paged, filtered by
// query parameters) and mas://tasks/{task_id}/steps/{step_id} (one step's
// whole record, also after its stage ended), and get_trail for hosts that
// do not read resources. Each shows only what its reader may see: the task
// must be visible to the reader, messages with an operator among sender and
// receivers only to those operators, an operator's actions and steps only
// to that operator.

func trailURI(id string) string        { return "mas://tasks/" + id + "/trail" }
func stepURI(task, step string) string { return "mas://tasks/" + task + "/steps/" + step }

// trailParams are the query parameters of mas://tasks/{task_id}/trail.
var trailParams = []string{"cursor", "agent", "step", "kind", "limit"}

// addTrailResources registers the trail's resource templates.
func (s *Server) addTrailResources() {
	for _, t := range []*mcp.ResourceTemplate{
		{URITemplate: "mas://tasks/{task_id}/trail{?cursor,agent,step,kind,limit}", Name: "trail", Title: "A task's trail",
			Description: "The task's durable audit trail, oldest first: every LLM call (request messages, raw answer, parse result, tokens, latency), tool call, message, instruction, operator action and step end. Paged: pass a page's next_cursor as ?cursor=… (absent on the last page). Filters: agent (agent_id), step (step_id), kind (" + strings.Join(engine.TrailKinds, ", ") + "); limit sets the page size (default 50, at most 500).",
			MIMEType:    mimeJSON},
		{URITemplate: "mas://tasks/{task_id}/steps/{step_id}", Name: "step", Title: "A step's record",
			Description: "One step's whole record from the trail: its LLM calls (prompt and raw answer) or tool calls, and its state as it ended; readable after its stage ended.",
			MIMEType:    mimeJSON},
	} {
		s.mcp.AddResourceTemplate(t, s.readResource)
	}
}

// TrailDocument is a page of mas://tasks/{task_id}/trail.
type TrailDocument struct {
	TaskID  string              `json:"task_id"`
	Entries []engine.TrailEntry `json:"entries"`
	// NextCursor continues after this page; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	// NextURI is the next page's URI (the same filters, NextCursor).
	NextURI string `json:"next_uri,omitempty"`
}

// StepRecord is mas://tasks/{task_id}/steps/{step_id}.
type StepRecord struct {
	TaskID string `json:"task_id"`
	StepID string `json:"step_id"`
	// Step is the step's state: the live one while its agent still lists
	// it, else the one the trail recorded when it ended.
	Step *engine.StepState `json:"step,omitempty"`
	// Entries is everything the trail holds for the step, in order.
	Entries []engine.TrailEntry `json:"entries"`
}

// trailDocument serves the trail's URIs for reader; ok is false for any
// other URI.
func (s *Server) trailDocument(uri, reader string) (doc any, ok bool, err error) {
	u, perr := url.Parse(uri)
	if perr != nil || u.Scheme != "mas" || u.Host != "tasks" {
		return nil, false, nil
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	switch {
	case len(parts) == 2 && parts[1] == "trail" && parts[0] != "":
		q := engine.TrailQuery{TaskID: parts[0]}
		vals, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return nil, true, &resourceError{uri: uri, problem: "query: " + err.Error()}
		}
		for k, v := range vals {
			if len(v) != 1 {
				return nil, true, &resourceError{uri: uri, problem: fmt.Sprintf("query parameter %q: give it once", k)}
			}
			switch k {
			case "cursor":
				q.Cursor = v[0]
			case "agent":
				q.AgentID = v[0]
			case "step":
				q.StepID = v[0]
			case "kind":
				q.Kind = v[0]
			case "limit":
				n, err := strconv.Atoi(v[0])
				if err != nil {
					return nil, true, &resourceError{uri: uri, problem: fmt.Sprintf("limit %q: not a number", v[0])}
				}
				q.Limit = n
			default:
				return nil, true, &resourceError{uri: uri, problem: fmt.Sprintf("query parameter %q: unknown; the trail takes %s", k, strings.Join(trailParams, ", "))}
			}
		}
		d, err := s.trailPage(reader, q)
		if err != nil {
			return nil, true, &resourceError{uri: uri, problem: err.Error(), notFound: errors.Is(err, engine.ErrNotFound)}
		}
		return d, true, nil
	case len(parts) == 3 && parts[1] == "steps" && parts[0] != "" && parts[2] != "" && u.RawQuery == "":
		d, err := s.stepRecord(reader, parts[0], parts[2])
		if err != nil {
			return nil, true, &resourceError{uri: uri, problem: err.Error(), notFound: errors.Is(err, engine.ErrNotFound)}
		}
		return d, true, nil
	}
	return nil, false, nil
}

// trailReader is the configured trail, or an error saying there is none.
func (s *Server) trailReader() (engine.TrailReader, error) {
	if s.cfg.Trail == nil {
		return nil, errors.New("this server keeps no trail (it was started without one)")
	}
	return s.cfg.Trail, nil
}

func (s *Server) trailCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, 30*time.Second)
}

// trailPage reads one page of a task's trail as reader may see it.
func (s *Server) trailPage(reader string, q engine.TrailQuery) (*TrailDocument, error) {
	if _, err := s.sys.TaskFor(reader, q.TaskID); err != nil {
		return nil, err
	}
	r, err := s.trailReader()
	if err != nil {
		return nil, err
	}
	// Cursors go out sealed and entries without the store's seq: both
	// count every task's entries (trail_cursors.go).
	if q.Cursor != "" {
		if q.Cursor, err = s.trailCursors.open(q.Cursor, reader, q.TaskID); err != nil {
			return nil, err
		}
	}
	_, limit, err := q.Check()
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.trailCtx()
	defer cancel()
	// The page is filled with entries reader may see, and continues only
	// when one more follows: a page short by the entries left out, or an
	// empty last one, would tell how many of others' (or that some) lie
	// in between. The store is read on, page after page, past them.
	d := &TrailDocument{TaskID: q.TaskID, Entries: []engine.TrailEntry{}}
	sq, more := q, false
	for !more {
		p, err := r.ReadTrail(ctx, sq)
		if err != nil {
			return nil, err
		}
		for _, e := range s.visibleEntries(reader, p.Entries) {
			if len(d.Entries) == limit {
				more = true
				break
			}
			d.Entries = append(d.Entries, e)
		}
		if p.NextCursor == "" {
			break
		}
		sq.Cursor = p.NextCursor
	}
	if more {
		d.NextCursor = s.trailCursors.seal(d.Entries[limit-1].Seq, reader, q.TaskID)
		d.NextURI = trailNextURI(q, d.NextCursor)
	}
	for i := range d.Entries {
		d.Entries[i].Seq = 0
	}
	return d, nil
}

// trailNextURI is the URI of the trail page after cursor, with q's
// filters and page size: the longest URI the server gives out
// (MinNameBytes). The page size is the one the page had (at most
// engine.MaxTrailPage), not a larger one the reader asked for.
func trailNextURI(q engine.TrailQuery, cursor string) string {
	v := url.Values{"cursor": {cursor}}
	for k, x := range map[string]string{"agent": q.AgentID, "step": q.StepID, "kind": q.Kind} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(min(q.Limit, engine.MaxTrailPage)))
	}
	return trailURI(q.TaskID) + "?" + v.Encode()
}

// stepRecord gathers one step's entries from the trail.
func (s *Server) stepRecord(reader, taskID, stepID string) (*StepRecord, error) {
	if _, err := s.sys.TaskFor(reader, taskID); err != nil {
		return nil, err
	}
	r, err := s.trailReader()
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.trailCtx()
	defer cancel()
	rec := &StepRecord{TaskID: taskID, StepID: stepID, Entries: []engine.TrailEntry{}}
	var all []engine.TrailEntry
	if err := engine.ReadAllTrail(ctx, r, engine.TrailQuery{TaskID: taskID, StepID: stepID}, func(e engine.TrailEntry) error {
		all = append(all, e)
		return nil
	}); err != nil {
		return nil, err
	}
	// The record is built from the entries reader may see only: the step's
	// recorded state among them, as the rule leaves a step out as a whole.
	rec.Entries = append(rec.Entries, s.visibleEntries(reader, all)...)
	for i := range rec.Entries {
		if st := rec.Entries[i].Step; st != nil {
			rec.Step = st
		}
	}
	agentID := ""
	if len(all) > 0 {
		agentID = all[0].AgentID
	}
	if agentID != "" && s.hiddenAgent(reader, agentID) {
		return nil, fmt.Errorf("step %s: %w: an operator's steps can be read only by that operator", stepID, engine.ErrNotFound)
	}
	if len(all) > 0 && len(rec.Entries) == 0 {
		// Every entry was left out: the step carries what reader may not
		// see, so its live state (which the engine filters by the texts
		// the task still holds) is not shown either.
		return nil, fmt.Errorf("step_id %q: %w: the trail of task %s holds no such step", stepID, engine.ErrNotFound, taskID)
	}
	// A step whose own entries were left out (its message entries may
	// remain) is not shown live either: the live filter knows only the
	// texts the task still holds, the trail all of them.
	stepHidden := false
	for i := range all {
		if all[i].Message == nil && !slices.ContainsFunc(rec.Entries, func(e engine.TrailEntry) bool { return e.Seq == all[i].Seq }) {
			stepHidden = true
		}
	}
	for i := range rec.Entries {
		rec.Entries[i].Seq = 0 // the store's, across tasks (trail_cursors.go)
	}
	if a, ok := s.sys.AgentFor(reader, agentID); ok && !stepHidden {
		for i := range a.AgentStep.StepList {
			if st := a.AgentStep.StepList[i]; st.StepID == stepID {
				rec.Step = &st
			}
		}
	}
	if rec.Step == nil && len(rec.Entries) == 0 {
		return nil, fmt.Errorf("step_id %q: %w: the trail of task %s holds no such step", stepID, engine.ErrNotFound, taskID)
	}
	return rec, nil
}

// hiddenAgent reports whether agentID is an operator other than reader
// (whose actions and steps are its own, spec §7.1).
func (s *Server) hiddenAgent(reader, agentID string) bool {
	b, ok := s.sys.AgentBrief(agentID)
	return ok && b.Kind == engine.KindHuman && agentID != reader
}

// visibleEntries drops what reader may not see: the engine's rule
// (engine.System.TrailEntriesFor) leaves out other operators' private
// messages, their actions and steps, and the LLM calls, tool calls, steps and
// instructions that quote a private message of others (a manager's prompt
// holds the message it digests).
func (s *Server) visibleEntries(reader string, es []engine.TrailEntry) []engine.TrailEntry {
	return s.sys.TrailEntriesFor(reader, es)
}

// --- get_trail

// GetTrailIn is get_trail's input.
type GetTrailIn struct {
	TaskID string `json:"task_id" jsonschema:"the task whose trail to read"`
	StepID string `json:"step_id,omitempty" jsonschema:"only this step's entries; with no cursor, also the step's state (its whole record, also after its stage ended)"`
	Agent  string `json:"agent,omitempty" jsonschema:"only this agent's entries (agent_id)"`
	Kind   string `json:"kind,omitempty" jsonschema:"only entries of this kind: llm_call, tool_call, message, instruction, operator_action, step"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the next_cursor of the previous page; empty for the first page"`
	Limit  int    `json:"limit,omitempty" jsonschema:"page size (default 50, at most 500)"`
}

// GetTrailOut is get_trail's output. Entries and Step are open documents
// in its schema (a list of TrailEntry, a StepState): their optional parts
// are null where the portable schema admits no null.
type GetTrailOut struct {
	TaskID     string `json:"task_id"`
	Entries    any    `json:"entries" jsonschema:"the trail entries, oldest first (as in mas://tasks/{task_id}/trail)"`
	NextCursor string `json:"next_cursor,omitempty" jsonschema:"pass it as cursor for the next page; absent on the last page"`
	// Step is the step's state when step_id was given.
	Step any `json:"step,omitempty" jsonschema:"the step's state, when step_id was given"`
}

func (s *Server) getTrailTool() tool {
	return defTool("get_trail", "Read a task's trail",
		"Read a task's durable audit trail (what mas://tasks/{task_id}/trail and mas://tasks/{task_id}/steps/{step_id} give, for hosts that do not read resources): every LLM call with its request messages, raw answer and parse result, every tool call with arguments and result, every message, instruction, operator action and step end, oldest first, also after stages and the task ended. Paged: call again with the returned next_cursor until it is absent. Filters: agent, step_id, kind.",
		readOnly(), s.getTrail)
}

func (s *Server) getTrail(ctx context.Context, req *mcp.CallToolRequest, in GetTrailIn) (*mcp.CallToolResult, GetTrailOut, error) {
	reader := s.operator(ctx, req.Extra)
	d, err := s.trailPage(reader, engine.TrailQuery{TaskID: in.TaskID, AgentID: in.Agent, StepID: in.StepID, Kind: in.Kind, Cursor: in.Cursor, Limit: in.Limit})
	if err != nil {
		return nil, GetTrailOut{}, err
	}
	out := GetTrailOut{TaskID: d.TaskID, Entries: d.Entries, NextCursor: d.NextCursor}
	if in.StepID != "" && in.Cursor == "" {
		if rec, err := s.stepRecord(reader, in.TaskID, in.StepID); err == nil && rec.Step != nil {
			out.Step = rec.Step
		}
	}
	more := ""
	if out.NextCursor != "" {
		more = fmt.Sprintf("; more after cursor %s", out.NextCursor)
	}
	return textResult("%d trail entries of task %s%s:\n%s", len(d.Entries), in.TaskID, more, jsonText(d.Entries)), out, nil
}

func (in GetTrailIn) check(l *Limits) error {
	c := inputCheck{l: l}
	c.name("task_id", in.TaskID)
	c.name("step_id", in.StepID)
	c.name("agent", in.Agent)
	c.name("kind", in.Kind)
	c.name("cursor", in.Cursor)
	return c.err
}

func (GetTrailIn) schema(s *jsonschema.Schema) {
	enum(s, "kind", engine.TrailKinds...)
	between(s, "limit", 0, engine.MaxTrailPage)
}
