package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mas-mcp/mas-mcp/server"
)

// TestRelayBoundsTheHostsRequests: past Config.MaxInflight requests of
// the host awaiting answers, the next is not forwarded to the owner: the
// host gets an answer naming the limit at once (a tool error for
// tools/call, JSON-RPC error -32000 otherwise). Notifications still go,
// and once the owner answers one, a request goes again.
func TestRelayBoundsTheHostsRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 2
		heard := make(chan string, 16) // the methods and IDs the owner got
		answers := make(chan string)   // lines the owner writes
		cfg := takeOverOnce(t, func(c net.Conn) {
			go func() {
				for a := range answers {
					fmt.Fprintln(c, a)
				}
			}()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				if req := request(sc.Bytes()); req != nil {
					heard <- fmt.Sprint(req.Method, " ", req.ID.Raw())
				}
			}
		})
		cfg.MaxInflight = limit
		var logs bytes.Buffer
		cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		hostIn, hostW := io.Pipe()
		var host bytes.Buffer // read once Serve returned: it no longer writes then
		done := make(chan error, 1)
		go func() { done <- Serve(context.Background(), cfg, hostIn, &host) }()
		send := func(line string) {
			t.Helper()
			if _, err := fmt.Fprintln(hostW, line); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait_for_updates"}}`)
		send(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"mas://tasks"}}`)
		send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`)
		send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask_info"}}`)
		send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
		// The same ID as one in flight takes no more room.
		send(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"mas://tasks"}}`)
		answers <- `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`
		synctest.Wait()
		send(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
		close(answers)
		hostW.Close()
		if err := <-done; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		close(heard)

		var got []string
		for h := range heard {
			got = append(got, h)
		}
		want := []string{"tools/call 1", "resources/read 2", "notifications/progress <nil>", "resources/read 2", "ping 5"}
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("the owner got %q, want %q: the requests past the limit of %d in flight are not forwarded", got, want, limit)
		}
		answered := map[string]map[string]any{}
		for _, m := range jsonLines(t, &host) {
			answered[fmt.Sprint(m["id"])] = m
		}
		if res, _ := answered["3"]["result"].(map[string]any); res == nil || res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), fmt.Sprintf("limit (%d)", limit)) {
			t.Errorf("tools/call 3, past the limit, answered %v; want a tool error naming the limit %d", answered["3"], limit)
		}
		if e, _ := answered["4"]["error"].(map[string]any); e == nil || e["code"] != float64(server.CodeOverLimit) || !strings.Contains(fmt.Sprint(e["message"]), fmt.Sprintf("limit (%d)", limit)) {
			t.Errorf("ping 4, past the limit, answered %v; want JSON-RPC error %d naming the limit %d", answered["4"], server.CodeOverLimit, limit)
		}
		if answered["1"]["result"] == nil {
			t.Errorf("the owner's answer to 1 was not relayed: %v", answered["1"])
		}
		if n := strings.Count(logs.String(), "over a limit of the relay"); n != 1 {
			t.Errorf("%d warnings of refused requests logged, want 1 for the two in a row:\n%s", n, logs.String())
		}
	})
}

// TestRelayBoundsSubscriptions: the host's subscriptions, which a new
// owner is told again, are bounded: a subscription to one more resource
// than MaxSubscriptions is refused with an error naming the limit (and
// not recorded), one to a resource it has is not. A subscription the
// owner refuses is forgotten, and makes room.
func TestRelayBoundsSubscriptions(t *testing.T) {
	r := newRelay(nil, io.Discard)
	if r.maxSubs != DefaultMaxSubscriptions || r.maxInflight != DefaultMaxInflight {
		t.Errorf("the relay's bounds are %d subscriptions and %d requests, want the defaults %d and %d", r.maxSubs, r.maxInflight, DefaultMaxSubscriptions, DefaultMaxInflight)
	}
	r.maxSubs = 2
	sub := func(id int, uri string) *jsonrpc.Response {
		return r.note([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/subscribe","params":{"uri":%q}}`, id, uri)))
	}
	for i, uri := range []string{"mas://tasks", "mas://agents"} {
		if resp := sub(i+1, uri); resp != nil {
			t.Fatalf("subscription %d of 2 refused: %v", i+1, resp.Error)
		}
	}
	resp := sub(3, "mas://catalog")
	var e *jsonrpc.Error
	if resp == nil || !errors.As(resp.Error, &e) || e.Code != server.CodeOverLimit || !strings.Contains(e.Message, "limit (2)") {
		t.Fatalf("a third subscription answered %+v, want JSON-RPC error %d naming the limit 2", resp, server.CodeOverLimit)
	}
	if r.subs["mas://catalog"] != nil || r.inflight[mustID(t, 3.0)] != "" {
		t.Errorf("the refused subscription was recorded: subscriptions %v, in flight %v", r.subs, r.inflight)
	}
	if resp := sub(4, "mas://tasks"); resp != nil {
		t.Errorf("a subscription to a resource the host has, at the limit, refused: %v", resp.Error)
	}
	// The owner refuses mas://agents (2): it is forgotten.
	r.fromOwner(bufio.NewReader(strings.NewReader(`{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"no such resource"}}`+"\n")), io.Discard)
	if _, ok := r.subs["mas://agents"]; ok || len(r.subs) != 1 {
		t.Errorf("subscriptions %v after the owner refused mas://agents, want mas://tasks only", r.subs)
	}
	if resp := sub(5, "mas://catalog"); resp != nil {
		t.Errorf("a subscription below the limit again refused: %v", resp.Error)
	}
}

// TestRelayBoundsTheBytesItKeeps: the counts bound how many requests and
// subscriptions the relay keeps, not their size, and a host's IDs,
// methods, subscriptions/listen requests (kept whole, to send a new owner
// again) and subscriptions can be lines of up to 16 MiB each. Past
// MaxKeptBytes a call is not forwarded: it is answered with JSON-RPC error
// -32000 naming the limit in bytes, and nothing of it is kept. An answer
// makes room again, and the count of kept bytes matches what is kept.
func TestRelayBoundsTheBytesItKeeps(t *testing.T) {
	r := newRelay(nil, io.Discard)
	if r.maxKept != DefaultMaxKeptBytes {
		t.Errorf("the relay keeps at most %d bytes, want the default %d", r.maxKept, DefaultMaxKeptBytes)
	}
	const limit = 2000
	r.maxKept = limit
	pad := strings.Repeat("x", 500)
	listen := func(id int) *jsonrpc.Response {
		return r.note([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":{"resourcesListChanged":true},"pad":%q}}`, id, pad)))
	}
	overLimit := func(what string, resp *jsonrpc.Response) {
		t.Helper()
		var e *jsonrpc.Error
		if resp == nil || !errors.As(resp.Error, &e) || e.Code != server.CodeOverLimit || !strings.Contains(e.Message, fmt.Sprintf("limit (%d bytes)", limit)) {
			t.Errorf("%s past %d bytes kept answered %+v, want JSON-RPC error %d naming the limit of %d bytes", what, limit, resp, server.CodeOverLimit, limit)
		}
	}
	for id := 1; id <= 3; id++ {
		if resp := listen(id); resp != nil {
			t.Fatalf("subscriptions/listen %d (about 600 bytes of %d) refused: %v", id, limit, resp.Error)
		}
	}
	overLimit("a fourth subscriptions/listen", listen(4))
	overLimit("a call with an ID of 1,000 bytes", r.note([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"ping"}`, strings.Repeat("i", 1000)))))
	overLimit("a subscription with 1,000 bytes of params", r.note([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":6,"method":"resources/subscribe","params":{"uri":"mas://tasks","pad":%q}}`, strings.Repeat("p", 1000)))))
	if _, ok := r.listens[mustID(t, 4.0)]; ok || len(r.inflight) != 3 || len(r.subs) != 0 {
		t.Errorf("refused requests were kept: in flight %v, %d listens, subscriptions %v", r.inflight, len(r.listens), r.subs)
	}
	// Small calls still fit.
	if resp := r.note([]byte(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)); resp != nil {
		t.Errorf("a ping below the limit refused: %v", resp.Error)
	}
	// The owner answers listen 1: its bytes are free again.
	r.fromOwner(bufio.NewReader(strings.NewReader(`{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")), io.Discard)
	if resp := listen(8); resp != nil {
		t.Errorf("subscriptions/listen 8, after an answer made room, refused: %v", resp.Error)
	}
	r.mu.Lock()
	kept, counted := r.kept, r.keptBytesLocked()
	r.mu.Unlock()
	if kept != counted || kept > limit {
		t.Errorf("the relay counts %d bytes kept, %d by its maps, limit %d", kept, counted, limit)
	}
	// Full to the byte, the host may still unsubscribe: the refusals tell
	// it to.
	r.mu.Lock()
	r.maxKept = 2 * limit
	r.mu.Unlock()
	if resp := r.note([]byte(`{"jsonrpc":"2.0","id":9,"method":"resources/subscribe","params":{"uri":"mas://tasks"}}`)); resp != nil {
		t.Fatalf("a small subscription refused: %v", resp.Error)
	}
	r.fromOwner(bufio.NewReader(strings.NewReader(`{"jsonrpc":"2.0","id":9,"result":{}}`+"\n")), io.Discard)
	r.mu.Lock()
	r.maxKept = r.kept
	r.mu.Unlock()
	if resp := r.note([]byte(`{"jsonrpc":"2.0","id":10,"method":"resources/unsubscribe","params":{"uri":"mas://tasks"}}`)); resp != nil {
		t.Errorf("resources/unsubscribe with the relay full to its byte limit refused: %v", resp.Error)
	}
	cfg := Config{Socket: "unused", TakeOver: func(context.Context) (Owner, error) { return nil, errors.New("unused") }, MaxKeptBytes: -1}
	if err := Serve(context.Background(), cfg, strings.NewReader(""), io.Discard); err == nil || !strings.Contains(err.Error(), "MaxKeptBytes -1: must not be negative") {
		t.Errorf("Serve with MaxKeptBytes -1: %v, want it refused naming the field", err)
	}
}
