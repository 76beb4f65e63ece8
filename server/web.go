package server

import (
	"embed"
	"io/fs"
	"net/http"
)

// web holds the monitor page (spec §8.5, §10.5): static files embedded in
// the binary, no build step.
//
//go:embed web
var web embed.FS

// pageHandler serves the monitor page at / and its assets.
func (s *Server) pageHandler() http.Handler {
	sub, err := fs.Sub(web, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		// No other site may frame the page (clickjacking): CSP for
		// current browsers, X-Frame-Options for older ones.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		files.ServeHTTP(w, r)
	})
}
