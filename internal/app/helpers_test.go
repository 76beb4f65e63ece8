package app

import (
	"context"
	"io"
)

// loadConfig is LoadConfig for tests: no usage output, no build version.
func loadConfig(args []string, getenv func(string) string) (Config, error) {
	return LoadConfig(args, getenv, io.Discard, "")
}

// run is what main does, with the logs going to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := LoadConfig(args, getenv, stderr, "")
	if err != nil {
		return err
	}
	cfg.Logs = stderr
	return Run(ctx, cfg)
}
