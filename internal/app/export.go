package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/store"
)

// Export is `mas-mcp export --task ID`: it writes a task's whole trail
// as JSON Lines, one entry a line, oldest first, bodies filled in.
//
// It opens the data directory like the server does. When no mas-mcp runs
// on it, export owns it for the moment it reads. When one runs, export
// reads through that process's NATS server (as a second stdio mas-mcp
// joins it), and sees every entry the owner has written — an entry still
// queued in the owner's writer (milliseconds) is not in the export.
func Export(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mas-mcp export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	task := fs.String("task", "", "the task whose trail to export (required)")
	dataDir := fs.String("data-dir", getenv("MAS_DATA_DIR"), "the data directory (env MAS_DATA_DIR; default: the user's mas-mcp directory)")
	// Not the environment's value as the default: --help prints defaults,
	// and the URL may hold a password.
	natsURL := fs.String("nats-url", "", "read from this NATS server instead of a data directory (default: env MAS_NATS_URL)")
	out := fs.String("out", "", "write to this file instead of stdout")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mas-mcp export --task ID [--data-dir DIR | --nats-url URL] [--out FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *natsURL == "" {
		*natsURL = getenv("MAS_NATS_URL")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("export: unexpected argument %q", fs.Arg(0))
	}
	if *task == "" {
		return errors.New("export: --task is required")
	}
	st, err := store.Open(ctx, store.Options{DataDir: *dataDir, NATSURL: *natsURL, JoinOwner: true,
		NATSAuth: store.NATSAuth{Password: getenv("MAS_NATS_PASSWORD"), Token: getenv("MAS_NATS_TOKEN"), User: getenv("MAS_NATS_USER")}})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer st.Close()
	tr, err := st.OpenTrail(ctx, store.TrailOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("export: this data directory has no trail yet: %w", err)
	}
	w := stdout
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	if err := engine.ReadAllTrail(ctx, tr, engine.TrailQuery{TaskID: *task}, func(e engine.TrailEntry) error {
		n++
		return enc.Encode(&e)
	}); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(stderr, "mas-mcp export: %d entries of task %s\n", n, *task)
	return nil
}
