package server

import "net/http"

// metricsHandler serves /metrics to the callers /api serves: a bound
// monitor session or an operator's bearer token (no authentication only
// where /api needs none, on a loopback listener without tokens).
func (s *Server) metricsHandler(metrics http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.authed(w, r); !ok {
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		metrics.ServeHTTP(w, r)
	})
}
