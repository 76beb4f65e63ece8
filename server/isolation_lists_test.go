package server_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestResourceListCursorHidesOtherOperatorsTask: resources/list is paged
// over what the operator may see, and its nextCursor tells nothing of what
// it may not. go-sdk pages the list (1000 resources a page) before the
// visibility filter, and its cursor is the base64 of the last URI of the
// unfiltered page: here ann's task, the 1000th resource. Bea's cursors are
// opaque (no URI in them), her pages together are exactly what she may
// see, once each, and a cursor she did not get — ann's, or one made up —
// is refused with invalid params. (The padding stands for a MAS of ~1000
// agents, each of which has two resources.)
func TestResourceListCursorHidesOtherOperatorsTask(t *testing.T) {
	o := newOperatorsWith(t, "2025-11-25", nil)
	task := annTaskAtRest(o)
	list := func(p *peer) (uris, cursors []string) {
		t.Helper()
		cursor := ""
		for range 100 {
			res, err := p.client.ListResources(context.Background(), &mcp.ListResourcesParams{Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Resources {
				uris = append(uris, r.URI)
			}
			if res.NextCursor == "" {
				return uris, cursors
			}
			cursors = append(cursors, res.NextCursor)
			cursor = res.NextCursor
		}
		t.Fatal("more than 100 pages")
		return nil, nil
	}
	pad := func(format string, n int) {
		for i := range n {
			uri := fmt.Sprintf(format, i)
			o.srv.MCP().AddResource(&mcp.Resource{URI: uri, Name: uri},
				func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) { return nil, nil })
		}
	}
	all, _ := list(o.annPeer) // ann sees every task there is (hers and the base task)
	idx := slices.Index(all, "mas://tasks/"+task)
	if idx < 0 || idx >= 1000 {
		t.Fatalf("ann's task at %d of %d resources", idx, len(all))
	}
	pad("mas://catalog/pad-%04d", 999-idx) // sorting before ann's task: hers is the 1000th
	pad("mas://zz/pad-%04d", 1500)         // after it: bea's list takes more than one page

	all, annCursors := list(o.annPeer)
	want := slices.DeleteFunc(slices.Clone(all), func(u string) bool { return strings.Contains(u, task) })
	uris, cursors := list(o.beaPC)
	if len(cursors) == 0 {
		t.Fatalf("bea listed %d resources in one page, want more than one", len(uris))
	}
	for _, c := range cursors {
		for _, enc := range []*base64.Encoding{base64.URLEncoding, base64.RawURLEncoding, base64.StdEncoding, base64.RawStdEncoding} {
			if b, _ := enc.DecodeString(c); strings.Contains(string(b), task) || strings.Contains(string(b), "mas://") {
				t.Errorf("bea's resources/list nextCursor %s decodes to %q", c, b)
			}
		}
	}
	slices.Sort(uris)
	if !slices.Equal(uris, want) {
		t.Errorf("bea's pages hold %d resources, want the %d of ann's %d that are not her task's (%d duplicated)",
			len(uris), len(want), len(all), len(uris)-len(slices.Compact(slices.Clone(uris))))
	}

	for name, cursor := range map[string]string{
		"ann's cursor":  annCursors[0],
		"a made-up one": base64.URLEncoding.EncodeToString([]byte("mas://tasks/" + task)),
	} {
		_, err := o.beaPC.client.ListResources(context.Background(), &mcp.ListResourcesParams{Cursor: cursor})
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, "cursor") {
			t.Errorf("bea's resources/list with %s: %v, want invalid params naming the cursor", name, err)
		}
	}
}
