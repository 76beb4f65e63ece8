// Command mas-mcp runs the multi-agent system behind an MCP server: a
// manager agent, the operator's HumanAgent and the base task come up at
// once; agents call an OpenAI-compatible LLM as they work.
//
// This command only reads its command line (flags, the environment, a
// config file: app.LoadConfig) and calls app.Run, which does the wiring.
// Logs go to stderr only (stdout is reserved for the MCP stdio protocol).
// SIGINT and SIGTERM shut it down cleanly with status 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mas-mcp/mas-mcp/internal/app"
)

// version is set at build time (-ldflags "-X main.version=…"); otherwise
// mas-mcp reads its version from the build information.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := app.LoadConfig(os.Args[1:], os.Getenv, os.Stderr, version)
	if err == nil {
		err = app.Run(ctx, cfg)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "mas-mcp:", err)
		os.Exit(1)
	}
}
