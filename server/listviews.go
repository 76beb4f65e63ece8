package server

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// listViews decides which sessions a notifications/resources/list_changed
// is for: those whose own resources/list changed since they were last told
// (or listed it, or began). go-sdk sends one to every session when a
// resource is added (Server.AddResource, from its own timer, without
// saying which): the tasks' resources of one operator would tell every
// other operator when it adds a task.
//
// Each operator's list has a version: general (every operator's list
// changed: an agent's resources, which are everyone's) plus own[op] (a
// task's resources were added that op sees, or a task was shared with op).
// Both only grow, so the sum changes exactly when either does. Each
// session records the version it was told (or listed, or began at);
// unaskedListChanges lets a list_changed through to a session only when
// its operator's version moved since, and then records the new one. So a
// change costs one visibility check per operator that has sessions
// (change), and a notification one map lookup per session it goes to.
//
// The list changes only through change, which adds the resources and
// counts the change under mu: a notification (go-sdk's timer) or a
// listing that sees the new version sees the resources too, and one that
// does not see it is followed by a notification that does. A resource
// added to the SDK's server some other way sets off a list_changed that
// no session gets.
type listViews struct {
	mu       sync.Mutex
	general  uint64                             // changes of everyone's list; guarded by mu
	own      map[string]uint64                  // per operator with sessions: changes of its tasks; guarded by mu
	sessions map[*mcp.ServerSession]*listedView // guarded by mu
	sweepAt  int                                // forget closed sessions when sessions reaches it; guarded by mu

	// decided, when set (tests only), is called after each decision of
	// tell with the session's operator ("" for a session that never
	// began) and whether it is told.
	decided atomic.Pointer[func(op string, told bool)]
}

// listedView is what a session was last told of its list.
type listedView struct {
	op   string
	told uint64 // the operator's version then
}

func newListViews() *listViews {
	return &listViews{own: map[string]uint64{}, sessions: map[*mcp.ServerSession]*listedView{}}
}

// versionLocked is op's list version. mu must be held.
func (v *listViews) versionLocked(op string) uint64 { return v.general + v.own[op] }

// change makes a change of the resource list (add, go-sdk's AddResource),
// whose resources the operators sees says see (nil: every operator).
func (v *listViews) change(add func(), sees func(op string) bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	add()
	if sees == nil {
		v.general++
		return
	}
	for op := range v.own {
		if sees(op) {
			v.own[op]++
		}
	}
}

// begin records a session of op (initialize; a subscriptions/listen
// stream of 2026-07-28) as knowing its list as it is now.
func (v *listViews) begin(s *Server, ss *mcp.ServerSession, op string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.own[op]; !ok {
		v.own[op] = 0
	}
	if len(v.sessions) >= v.sweepAt {
		// Sessions the SDK closed are forgotten once their number
		// doubles, as sessionSubs does: the SDK tells no one.
		open := s.openSessions()
		for ss := range v.sessions {
			if !open[ss] {
				delete(v.sessions, ss)
			}
		}
		v.sweepAt = 2*len(v.sessions) + 64
	}
	v.sessions[ss] = &listedView{op: op, told: v.versionLocked(op)}
}

// end forgets a session (a subscriptions/listen stream that ended).
func (v *listViews) end(ss *mcp.ServerSession) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.sessions, ss)
}

// listed records that ss is about to list its resources from the first
// page: it will know the list as it is now.
func (v *listViews) listed(ss *mcp.ServerSession) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if l := v.sessions[ss]; l != nil {
		l.told = v.versionLocked(l.op)
	}
}

// tell reports whether ss's list changed since it was last told (and
// records that it is told now). A session that never began (initialize or
// subscriptions/listen) is told nothing.
func (v *listViews) tell(ss *mcp.ServerSession) bool {
	v.mu.Lock()
	op, told := "", false
	if l := v.sessions[ss]; l != nil {
		op = l.op
		if now := v.versionLocked(l.op); now != l.told {
			l.told, told = now, true
		}
	}
	v.mu.Unlock()
	if f := v.decided.Load(); f != nil {
		(*f)(op, told)
	}
	return told
}

// recordListViews is a receiving middleware that records when a session
// begins to know its resource list: a session of an older protocol at
// initialize, a subscriptions/listen stream of 2026-07-28 (its own
// session, tagged notifications) when it opens, until it ends.
func (s *Server) recordListViews(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if !ok || (method != "initialize" && method != "subscriptions/listen") {
			return next(ctx, method, req)
		}
		if ip := ss.InitializeParams(); method == "subscriptions/listen" && ip != nil && ip.ProtocolVersion < statelessFrom {
			return next(ctx, method, req) // not a stream of its own: the session began at initialize
		}
		s.lists.begin(s, ss, s.operator(ctx, req.GetExtra()))
		if method == "subscriptions/listen" {
			defer s.lists.end(ss)
		}
		return next(ctx, method, req)
	}
}
