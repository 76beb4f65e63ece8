package app

import (
	"context"
	"io"
	"sync"
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

// lockedWriter lets a test read what another goroutine logs.
type lockedWriter struct {
	mu sync.Mutex
	w  interface {
		io.Writer
		String() string
	}
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}
