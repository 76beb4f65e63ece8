package relay

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mas-mcp/mas-mcp/server"
)

// The bounds on what the relay keeps of the host's session (see the
// package's doc): its requests awaiting answers, and the resources it is
// subscribed to, which a new owner is told again; how many of each, and
// how many bytes of them all.

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

// DefaultMaxKeptBytes is Config.MaxKeptBytes' default, 64 MiB: four lines
// of the largest size (server.MaxLineBytes), as the queue to the host
// holds; what a host's requests take is mostly tens of bytes (an ID and a
// method), but their IDs, methods, subscriptions/listen requests (kept
// whole) and subscriptions may each be a line of 16 MiB, and the counts
// alone would let the relay keep hundreds of gigabytes of them.
const DefaultMaxKeptBytes = 64 << 20

// idBytes is what the relay counts for keeping a request's ID.
func idBytes(id jsonrpc.ID) int {
	if s, ok := id.Raw().(string); ok {
		return len(s)
	}
	return 8
}

// subBytes is what the relay counts for keeping a subscription.
func subBytes(uri string, req *jsonrpc.Request) int {
	return len(uri) + idBytes(req.ID) + len(req.Method) + len(req.Params)
}

// subscribedURI is the resource a resources/subscribe or /unsubscribe
// request names ("" if none).
func subscribedURI(req *jsonrpc.Request) string {
	var p struct {
		URI string `json:"uri"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return ""
	}
	return p.URI
}

// keptBytesLocked counts the bytes the relay keeps of the host's session
// (r.kept is this count, kept up to date as requests come and go): the
// IDs and methods of its requests awaiting answers, its
// subscriptions/listen requests and its subscriptions. r.mu must be held.
func (r *relay) keptBytesLocked() int {
	n := 0
	for id, method := range r.inflight {
		n += idBytes(id) + len(method)
	}
	for _, b := range r.listens {
		n += len(b)
	}
	for uri, req := range r.subs {
		n += subBytes(uri, req)
	}
	return n
}

// moreBytesLocked is how many bytes the relay would keep besides those it
// keeps once it noted req (b, its line). r.mu must be held.
func (r *relay) moreBytesLocked(req *jsonrpc.Request, b []byte) int {
	if req.Method == "resources/unsubscribe" {
		// It frees what it costs once answered: never refused for bytes
		// (the refusals tell the host to unsubscribe).
		return 0
	}
	more := idBytes(req.ID) + len(req.Method)
	if method, open := r.inflight[req.ID]; open {
		more -= idBytes(req.ID) + len(method)
	}
	switch req.Method {
	case "subscriptions/listen":
		more += len(b) - len(r.listens[req.ID])
	case "resources/subscribe":
		if uri := subscribedURI(req); uri != "" {
			more += subBytes(uri, req)
			if old := r.subs[uri]; old != nil {
				more -= subBytes(uri, old)
			}
		}
	}
	return more
}

// openLocked notes the host's call id of method as awaiting its answer.
// r.mu must be held.
func (r *relay) openLocked(id jsonrpc.ID, method string) {
	if old, open := r.inflight[id]; open {
		r.kept -= idBytes(id) + len(old)
	}
	r.inflight[id] = method
	r.kept += idBytes(id) + len(method)
}

// listenLocked keeps the host's subscriptions/listen request b, of id.
// r.mu must be held.
func (r *relay) listenLocked(id jsonrpc.ID, b []byte) {
	r.kept += len(b) - len(r.listens[id])
	r.listens[id] = b
}

// closeLocked forgets the host's call id: answered, cancelled or failed.
// r.mu must be held.
func (r *relay) closeLocked(id jsonrpc.ID) {
	if method, open := r.inflight[id]; open {
		r.kept -= idBytes(id) + len(method)
		delete(r.inflight, id)
	}
	r.kept -= len(r.listens[id])
	delete(r.listens, id)
}

// subscribeLocked keeps the host's subscription to uri (req), and
// unsubscribeLocked forgets it. r.mu must be held.
func (r *relay) subscribeLocked(uri string, req *jsonrpc.Request) {
	r.unsubscribeLocked(uri)
	r.subs[uri] = req
	r.kept += subBytes(uri, req)
}

func (r *relay) unsubscribeLocked(uri string) {
	if old := r.subs[uri]; old != nil {
		r.kept -= subBytes(uri, old)
		delete(r.subs, uri)
	}
}

// overLimitLocked returns the answer to a host's request (b, its line)
// that would pass one of the relay's bounds: a call when maxInflight calls
// of the host await answers, a subscription to one more resource when it
// is subscribed to maxSubs, a call that would have the relay keep more
// than maxKept bytes. Nil when it fits (a call reusing the ID of one in
// flight, or a subscription to a resource it has, takes no more room;
// its bytes replace theirs). r.mu must be held.
func (r *relay) overLimitLocked(req *jsonrpc.Request, b []byte) *jsonrpc.Response {
	if !req.IsCall() {
		return nil
	}
	var msg string
	if _, open := r.inflight[req.ID]; !open && len(r.inflight) >= r.maxInflight {
		msg = fmt.Sprintf("not sent: %d requests of this client await their answers, the limit (%d) of the mas-mcp process "+
			"that relays this session to the one owning the data directory; wait for answers, or cancel requests (notifications/cancelled), before sending more",
			len(r.inflight), r.maxInflight)
	} else if req.Method == "resources/subscribe" && len(r.subs) >= r.maxSubs {
		if uri := subscribedURI(req); uri != "" && r.subs[uri] == nil {
			msg = fmt.Sprintf("not subscribed: this client is subscribed to %d resources, the limit (%d) of the mas-mcp process "+
				"that relays this session to the one owning the data directory; unsubscribe from some first (resources/unsubscribe)", len(r.subs), r.maxSubs)
		}
	}
	if more := r.moreBytesLocked(req, b); msg == "" && more > 0 && r.kept+more > r.maxKept {
		msg = fmt.Sprintf("not sent: the mas-mcp process that relays this session to the one owning the data directory keeps %d bytes "+
			"of this client's requests awaiting answers and subscriptions (their IDs and methods, subscriptions/listen requests whole, "+
			"resources/subscribe requests), and this %s request would take %d more, past the limit (%d bytes); wait for answers, "+
			"cancel requests (notifications/cancelled) or unsubscribe (resources/unsubscribe), or send it with a shorter ID and params",
			r.kept, req.Method, more, r.maxKept)
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
			"inflight", len(r.inflight), "max_inflight", r.maxInflight, "subscriptions", len(r.subs), "max_subscriptions", r.maxSubs,
			"kept_bytes", r.kept, "max_kept_bytes", r.maxKept)
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
				r.unsubscribeLocked(uri)
			}
		}
	}
	r.closeLocked(resp.ID)
}
