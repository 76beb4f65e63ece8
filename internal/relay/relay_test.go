package relay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func mustID(t *testing.T, v any) jsonrpc.ID {
	t.Helper()
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRelayFailsCallsInFlight: a call the owner never answered (it died)
// gets an answer saying so, as a tool error for tools/call and a JSON-RPC
// error otherwise; the relay's own requests' answers never reach the host.
func TestRelayFailsCallsInFlight(t *testing.T) {
	var out bytes.Buffer
	r := newRelay(nil, &out)
	r.note([]byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add_task"}}`))
	r.note([]byte(`{"jsonrpc":"2.0","id":"r","method":"resources/read","params":{"uri":"mas://tasks"}}`))
	r.note([]byte(`{"jsonrpc":"2.0","id":8,"method":"ping"}`))
	// 9 never reached the owner (the write failed): the next owner gets it.
	unsent := []byte(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ask_info"}}`)
	r.note(unsent)
	r.unsent = append(r.unsent, unsent)
	// A subscription stream stays open for the next owner.
	r.note([]byte(`{"jsonrpc":"2.0","id":10,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["mas://tasks"]}}}`))
	// The owner answered 8, and a request of the relay itself.
	r.fromOwner(bufio.NewReader(strings.NewReader(`{"jsonrpc":"2.0","id":8,"result":{}}`+"\n"+
		`{"jsonrpc":"2.0","id":"`+idPrefix+`1","result":{}}`+"\n")), io.Discard)
	r.failInflight()
	r.out.flush(t.Context())
	got := map[string]map[string]any{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("relay wrote %q: %v", sc.Text(), err)
		}
		got[fmt.Sprint(m["id"])] = m
	}
	if len(got) != 3 {
		t.Fatalf("relay wrote %v, want answers to 7, r and 8 only", got)
	}
	if _, ok := r.inflight[mustID(t, 9.0)]; !ok {
		t.Errorf("the unsent request 9 is no longer awaited: %v", r.inflight)
	}
	if _, ok := r.listens[mustID(t, 10.0)]; !ok {
		t.Errorf("the subscription stream 10 was dropped: %v", r.listens)
	}
	if res, _ := got["7"]["result"].(map[string]any); res == nil || res["isError"] != true {
		t.Errorf("tools/call in flight answered %v, want a tool error", got["7"])
	}
	if e, _ := got["r"]["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "may or may not have taken effect") {
		t.Errorf("resources/read in flight answered %v, want a JSON-RPC error with the reason", got["r"])
	}
	if got["8"]["result"] == nil {
		t.Errorf("the owner's answer to 8 was not relayed: %v", got["8"])
	}
}

// TestRelayNotesSession: what a new owner must be told follows the host's
// messages: its initialize, log level and current subscriptions.
func TestRelayNotesSession(t *testing.T) {
	r := newRelay(nil, io.Discard)
	for _, l := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"mas://tasks"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{"uri":"mas://agents"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"resources/unsubscribe","params":{"uri":"mas://tasks"}}`,
		`[{"jsonrpc":"2.0","id":6,"method":"ping"}]`,
		`not json`,
	} {
		r.note([]byte(l))
	}
	if r.init == nil || r.init.Method != "initialize" || r.inited == nil || r.level == nil {
		t.Errorf("init %v, initialized %q, level %v: want all noted", r.init, r.inited, r.level)
	}
	if len(r.subs) != 1 || r.subs["mas://agents"] == nil {
		t.Errorf("subscriptions %v, want mas://agents only", r.subs)
	}
	if len(r.inflight) != 5 {
		t.Errorf("in flight %v, want the 5 requests", r.inflight)
	}
}

// TestRelayResumeOlderHost: for a host of an older protocol the new owner
// gets initialize, initialized, the log level and the subscriptions again
// (each answered, the answers kept from the host), then what the stopped
// owner never received; the host hears that resources changed.
func TestRelayResumeOlderHost(t *testing.T) {
	var host bytes.Buffer
	r := newRelay(nil, &host)
	for _, l := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"mas://tasks"}}`,
	} {
		r.note([]byte(l))
	}
	r.unsent = [][]byte{[]byte(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"get_inbox"}}`)}
	relaySide, ownerSide := net.Pipe()
	defer relaySide.Close()
	var seen []string
	ownerDone := make(chan struct{})
	go func() {
		defer close(ownerDone)
		br := bufio.NewReader(ownerSide)
		for len(seen) < 5 {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			req := request(line)
			if req == nil {
				return
			}
			id, _ := json.Marshal(req.ID.Raw())
			if !req.IsCall() {
				id = nil
			}
			seen = append(seen, req.Method+" "+string(id))
			if req.IsCall() && req.Method != "tools/call" {
				// A notification first, then the answer.
				fmt.Fprintf(ownerSide, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`+"\n")
				fmt.Fprintf(ownerSide, `{"jsonrpc":"2.0","id":%s,"result":{}}`+"\n", id)
			}
		}
	}()
	if err := r.resume(t.Context(), relaySide, bufio.NewReader(relaySide)); err != nil {
		t.Fatal(err)
	}
	<-ownerDone
	r.out.flush(t.Context())
	want := []string{`initialize "mas-relay-1"`, "notifications/initialized ", `logging/setLevel "mas-relay-2"`,
		`resources/subscribe "mas-relay-3"`, "tools/call 4"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("the new owner got %q, want %q", seen, want)
	}
	out := host.String()
	if strings.Contains(out, "mas-relay-") {
		t.Errorf("answers to the relay's requests reached the host:\n%s", out)
	}
	for _, w := range []string{`"notifications/message"`, `"notifications/resources/list_changed"`, `"notifications/resources/updated"`, `"uri":"mas://tasks"`} {
		if !strings.Contains(out, w) {
			t.Errorf("the host did not get %s:\n%s", w, out)
		}
	}
	if len(r.unsent) != 0 {
		t.Errorf("unsent %q after the resume, want none", r.unsent)
	}
}

// TestRelayFailedResumeDoesNotReplayWhatItSent: a resume that fails after
// the new owner took one of the calls the stopped owner never received
// does not send that call again on the next attempt (the owner may have
// run it: a tool call twice is a task added twice); it is answered as in
// flight (it may or may not have taken effect), and the call never sent is
// kept for the next owner.
func TestRelayFailedResumeDoesNotReplayWhatItSent(t *testing.T) {
	var host bytes.Buffer
	r := newRelay(nil, &host)
	sent := []byte(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"add_task"}}`)
	kept := []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"get_inbox"}}`)
	for _, b := range [][]byte{sent, kept} {
		r.note(b)
		r.unsent = append(r.unsent, b)
	}
	relaySide, ownerSide := net.Pipe()
	defer relaySide.Close()
	ownerDone := make(chan struct{})
	go func() {
		defer close(ownerDone)
		// The new owner takes the first call, then stops.
		_, _ = bufio.NewReader(ownerSide).ReadBytes('\n')
		ownerSide.Close()
	}()
	err := r.resume(t.Context(), relaySide, bufio.NewReader(relaySide))
	<-ownerDone
	if err == nil {
		t.Fatal("resume on an owner that stopped: no error")
	}
	r.failInflight()
	r.out.flush(t.Context())
	if len(r.unsent) != 1 || !bytes.Equal(r.unsent[0], kept) {
		t.Errorf("unsent after the failed resume %q, want only the call never sent (5)", r.unsent)
	}
	got := jsonLines(t, &host)
	if len(got) != 1 || got[0]["id"] != 4.0 || !strings.Contains(fmt.Sprint(got[0]["result"]), "may or may not have taken effect") {
		t.Errorf("the host got %v, want the call the failed owner took (4) answered as in flight", got)
	}
}

// TestRelayResumeFailsOnARefusedInitialize: a new owner that answers the
// replayed initialize with an error has not taken the session: the resume
// fails (and is tried again), where it counted any answer as success and
// went on relaying to an owner that never initialized. A refused
// subscription, the host's own to meet, does not fail it.
func TestRelayResumeFailsOnARefusedInitialize(t *testing.T) {
	for _, c := range []struct {
		refuse  string // the method the owner refuses
		wantErr bool
	}{{"initialize", true}, {"resources/subscribe", false}} {
		r := newRelay(nil, &bytes.Buffer{})
		for _, l := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"mas://tasks/gone"}}`,
		} {
			r.note([]byte(l))
		}
		relaySide, ownerSide := net.Pipe()
		ownerDone := make(chan struct{})
		go func() {
			defer close(ownerDone)
			defer ownerSide.Close()
			br := bufio.NewReader(ownerSide)
			for {
				line, err := br.ReadBytes('\n')
				if err != nil {
					return
				}
				req := request(line)
				if req == nil || !req.IsCall() {
					continue
				}
				id, _ := json.Marshal(req.ID.Raw())
				if req.Method == c.refuse {
					fmt.Fprintf(ownerSide, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"not now"}}`+"\n", id)
				} else {
					fmt.Fprintf(ownerSide, `{"jsonrpc":"2.0","id":%s,"result":{}}`+"\n", id)
				}
			}
		}()
		err := r.resume(t.Context(), relaySide, bufio.NewReader(relaySide))
		relaySide.Close()
		<-ownerDone
		if got := err != nil; got != c.wantErr {
			t.Errorf("resume with %s refused: %v, want an error %v", c.refuse, err, c.wantErr)
		}
		if c.wantErr && (err == nil || !strings.Contains(err.Error(), "initialize: the new owner refused it")) {
			t.Errorf("resume with initialize refused: %v, want it named", err)
		}
	}
}
