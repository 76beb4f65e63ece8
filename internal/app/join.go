package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mas-mcp/mas-mcp/internal/relay"
	"github.com/mas-mcp/mas-mcp/store"
)

// join serves a process whose data directory (or external NATS state)
// another mas-mcp owns: a --stdio process relays its host's session to the
// owner (internal/relay) and takes over should the owner stop; anything
// else is refused with what to do instead. A --stdio --http process is
// refused too: the owner serves the web monitor and MCP over HTTP, not
// this one, and the error names the owner's address (or says it serves
// none).
func join(ctx context.Context, cfg Config, log *slog.Logger, inUse *store.InUseError) error {
	switch {
	case cfg.NATSURL != "":
		return fmt.Errorf("%w: one mas-mcp runs the MAS of a NATS server; connect your MCP client to that one", inUse)
	case !cfg.Stdio:
		return fmt.Errorf("%w: serving HTTP needs a data directory of its own (--data-dir); %s; "+
			"or point your MCP client at the running mas-mcp (a --stdio mas-mcp on this directory joins it)", inUse, ownerHTTP(inUse))
	case cfg.StdioHTTP:
		return fmt.Errorf("--http %s: %w; %s; leave out --http (this process then relays its stdio to the owner), "+
			"or give this process a data directory of its own (--data-dir)", cfg.HTTP.Addr, inUse, ownerHTTP(inUse))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := func(tookOver bool) {
		log.Info("mas-mcp ready", "transport", "stdio", "listen", "stdin/stdout", "data_dir", inUse.Dir,
			"joined_pid", inUse.Owner, "took_over", tookOver)
	}
	takeOver := func(ctx context.Context) (relay.Owner, error) {
		inst, err := start(ctx, cfg, log, cancel)
		if err != nil {
			return nil, err
		}
		log.Info("took over the data directory", "base_task", inst.sys.BaseTaskID())
		return relayOwner{inst}, nil
	}
	return relay.Serve(ctx, relay.Config{Socket: store.SocketPath(inUse.Dir), TakeOver: takeOver, Ready: ready, Logger: log},
		os.Stdin, os.Stdout)
}

// relayOwner is an instance the relay started on taking over.
type relayOwner struct{ inst *instance }

func (o relayOwner) ServeConn(ctx context.Context, c net.Conn) error {
	return o.inst.srv.ServeConn(ctx, c)
}
func (o relayOwner) Close() { o.inst.close() }

// httpNoteFile is where the owner of a data directory notes the address it
// serves HTTP on, for the messages of processes that find it owned.
func httpNoteFile(dataDir string) string { return filepath.Join(dataDir, "http.json") }

// httpNote is the content of httpNoteFile.
type httpNote struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr"`
}

// announceHTTP notes addr in the data directory this instance owns; close
// removes the note.
func (in *instance) announceHTTP(addr string) {
	if in.st == nil || in.st.Role() != store.RoleOwner {
		return
	}
	path := httpNoteFile(in.st.DataDir())
	b, _ := json.Marshal(httpNote{PID: os.Getpid(), Addr: addr})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		in.log.Debug("noting the HTTP address in the data directory", "err", err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		in.log.Debug("noting the HTTP address in the data directory", "err", err)
		return
	}
	in.httpNote = path
}

// ownerHTTP says where the owner of a data directory serves HTTP: its note
// counts only when written by the owner the lock names (a note a killed
// owner left behind does not).
func ownerHTTP(inUse *store.InUseError) string {
	b, err := os.ReadFile(httpNoteFile(inUse.Dir))
	var n httpNote
	if err == nil && json.Unmarshal(b, &n) == nil && n.Addr != "" && strconv.Itoa(n.PID) == inUse.Owner {
		return fmt.Sprintf("the owner serves the web monitor at http://%s/ and MCP at http://%s/mcp: open those", n.Addr, n.Addr)
	}
	return "the owner serves no HTTP (it was started without --http, or with --stdio alone): " +
		"restart it with --http ADDR to get the web monitor"
}
