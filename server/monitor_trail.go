package server

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/mas-mcp/mas-mcp/engine"
)

// apiTrail serves GET /api/trail?task_id=…[&step=…&agent=…&kind=…&cursor=…
// &limit=…&brief=1]: a page of a task's trail as the monitor's operator may
// see it (what mas://tasks/{task_id}/trail gives). With brief=1 every body
// is cut to briefChars, for the task timeline.
func (s *Server) apiTrail(w http.ResponseWriter, r *http.Request) {
	op, ok := s.authed(w, r)
	if !ok {
		return
	}
	v := r.URL.Query()
	q := engine.TrailQuery{TaskID: v.Get("task_id"), StepID: v.Get("step"), AgentID: v.Get("agent"), Kind: v.Get("kind"), Cursor: v.Get("cursor")}
	// Held to the limits of names and IDs (inputs.go) before the engine
	// sees them, which would echo them whole in its errors.
	c := inputCheck{l: &s.cfg.Limits}
	for _, f := range []struct{ name, v string }{{"task_id", q.TaskID}, {"step", q.StepID}, {"agent", q.AgentID}, {"kind", q.Kind}, {"cursor", q.Cursor}} {
		c.name(f.name, f.v)
	}
	if c.err != nil {
		s.apiError(w, http.StatusBadRequest, c.err.Error())
		return
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			s.apiError(w, http.StatusBadRequest, "limit "+strconv.Quote(l)+": not a number")
			return
		}
		q.Limit = n
	}
	d, err := s.trailPage(op, q)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		s.apiError(w, http.StatusNotFound, err.Error())
		return
	case err != nil:
		s.apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	if v.Get("brief") == "1" {
		for i := range d.Entries {
			for _, b := range d.Entries[i].Bodies() {
				if r := []rune(b.Text); len(r) > briefChars {
					b.Text = string(r[:briefChars]) + "…"
				}
			}
		}
	}
	apiJSON(w, http.StatusOK, d)
}

// briefChars is how much of each body a brief trail page keeps.
const briefChars = 240
