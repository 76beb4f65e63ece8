package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStoreClosedToLocalClients: another program on this machine that finds
// the embedded NATS server of a running mas-mcp (its address is in the data
// directory; ports can be scanned) cannot connect without credentials, so it
// can neither read the operators' messages nor rewrite the store; the MAS
// keeps serving.
func TestStoreClosedToLocalClients(t *testing.T) {
	m := newMAS(t, masOptions{NoRace: true})
	m.start()
	b, err := os.ReadFile(filepath.Join(m.dataDir, "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSpace(string(b))
	nc, err := nats.Connect(url, nats.NoReconnect())
	if err == nil {
		defer nc.Close()
		js, _ := jetstream.New(nc)
		for _, bucket := range []string{"mas_tasks", "mas_agents"} {
			if _, err := js.KeyValue(context.Background(), bucket); err == nil {
				t.Errorf("a client without credentials opened bucket %s", bucket)
			}
		}
		t.Fatalf("a client without credentials connected to the embedded server at %s", url)
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("connect without credentials: %v, want an authorization violation", err)
	}
	addTask(m) // the MAS itself still reads and writes its store
}
