package relay

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mas-mcp/mas-mcp/server"
)

// The bounds on what the relay keeps of the host's session (see the
// package's doc): its requests awaiting answers, and the resources it is
// subscribed to, which a new owner is told again.

// DefaultMaxInflight is Config.MaxInflight's default: far more than a host
// has open at once (the owner holds at most limits.long_requests_per_operator
// long polls and waits of one operator, 64 by default; other calls are
// answered in seconds).
const DefaultMaxInflight = 1024

// DefaultMaxSubscriptions is Config.MaxSubscriptions' default: far more than
// the owner takes of one session (limits.subscriptions_per_session, 256 by
// default), whose refusals the relay forgets (answered); it bounds what the
// relay keeps for an owner configured to take more.
const DefaultMaxSubscriptions = 10000

// overLimitLocked returns the answer to a host's request that would pass
// one of the relay's bounds: a call when maxInflight calls of the host
// await answers, a subscription to one more resource when it is
// subscribed to maxSubs. Nil when it fits (a call reusing the ID of one in
// flight, or a subscription to a resource it has, takes nothing more).
// r.mu must be held.
func (r *relay) overLimitLocked(req *jsonrpc.Request) *jsonrpc.Response {
	if !req.IsCall() {
		return nil
	}
	var msg string
	if _, open := r.inflight[req.ID]; !open && len(r.inflight) >= r.maxInflight {
		msg = fmt.Sprintf("not sent: %d requests of this client await their answers, the limit (%d) of the mas-mcp process "+
			"that relays this session to the one owning the data directory; wait for answers, or cancel requests (notifications/cancelled), before sending more",
			len(r.inflight), r.maxInflight)
	} else if req.Method == "resources/subscribe" && len(r.subs) >= r.maxSubs {
		var p struct {
			URI string `json:"uri"`
		}
		if json.Unmarshal(req.Params, &p) == nil && p.URI != "" && r.subs[p.URI] == nil {
			msg = fmt.Sprintf("not subscribed: this client is subscribed to %d resources, the limit (%d) of the mas-mcp process "+
				"that relays this session to the one owning the data directory; unsubscribe from some first (resources/unsubscribe)", len(r.subs), r.maxSubs)
		}
	}
	if msg == "" {
		r.refusing = false
		return nil
	}
	if !r.refusing {
		// Once until a request fits again: a host that keeps sending
		// past a bound does not flood the log.
		r.refusing = true
		r.log.Warn("refusing the host's requests over a limit of the relay (logged once until one fits again)", "id", req.ID.Raw(), "method", req.Method,
			"inflight", len(r.inflight), "max_inflight", r.maxInflight, "subscriptions", len(r.subs), "max_subscriptions", r.maxSubs)
	}
	return failure(req.ID, req.Method, server.CodeOverLimit, msg)
}

// answered forgets a host's request the owner answered, and the
// subscription of a resources/subscribe it refused: a new owner is not
// told of it, and it does not count against maxSubs.
func (r *relay) answered(resp *jsonrpc.Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if resp.Error != nil && r.inflight[resp.ID] == "resources/subscribe" {
		for uri, req := range r.subs {
			if req.ID == resp.ID {
				delete(r.subs, uri)
			}
		}
	}
	delete(r.inflight, resp.ID)
	delete(r.listens, resp.ID)
}
