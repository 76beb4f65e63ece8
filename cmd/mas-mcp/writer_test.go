package main

import (
	"io"
	"sync"
)

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
