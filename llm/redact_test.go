package llm

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// leakKey is the API key of the scrubbing tests: distinctive runs at both
// ends, as OpenAI's masked echo shows them.
const leakKey = "sk-proj-7f3A9bC2dE5fG8hJ1kLEAK"

func TestScrub(t *testing.T) {
	base, err := url.Parse("https://gw-user:pa55word@llm.example.org/v1?api-key=MARKER-q1&tenant=t%2B12&flag")
	if err != nil {
		t.Fatal(err)
	}
	s := newScrubber(leakKey, base)
	const R = redacted
	tests := []struct{ in, want string }{
		// The key, whole or in part.
		{"invalid credentials: Bearer " + leakKey, "invalid credentials: Bearer " + R},
		{"key " + leakKey[5:20] + " rejected", "key " + R + " rejected"},
		{"key " + leakKey[3:11] + "!", "key " + R + "!"},
		{"seven " + leakKey[3:10] + " kept", "seven " + leakKey[3:10] + " kept"},
		// Masked forms.
		{"Incorrect API key provided: sk-pro*********************LEAK. You can find your API key at https://x/", "Incorrect API key provided: " + R + ". You can find your API key at https://x/"},
		{"key sk-…LEAK is revoked", "key " + R + " is revoked"},
		{"key sk-...LEAK is revoked", "key " + R + " is revoked"},
		{"bad key: sk-…7f3**********LEAK", "bad key: " + R},
		{"bad key: '…9bC2dE…'", "bad key: '" + R + "'"},
		{"sk-abc*********LEAK, again", R + ", again"},
		// Text that only looks masked stays.
		{"Loading... done", "Loading... done"},
		{"a ** b and 2**10", "a ** b and 2**10"},
		{"status 401: Unauthorized …", "status 401: Unauthorized …"},
		{"ab…cd", "ab…cd"},
		// The base URL's secrets, as a transport error quotes the URL
		// ("gw-user:" is a run of the user information "gw-user:pa55word").
		{`Post "https://gw-user:***@llm.example.org/v1/chat/completions?api-key=MARKER-q1&tenant=t%2B12&flag": EOF`,
			`Post "https://` + R + `***@llm.example.org/v1/chat/completions?` + R + `": EOF`},
		// A value shorter than secret.MinLen (t+12) is left where it stands
		// alone, as every layer leaves one (internal/secret).
		{"token MARKER-q1 and tenant t+12 and pa55word", "token " + R + " and tenant t+12 and " + R},
	}
	for _, tt := range tests {
		if got := s.scrub(tt.in); got != tt.want {
			t.Errorf("scrub(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
	if got := (*scrubber)(nil).scrub("x " + leakKey); got != "x "+leakKey {
		t.Errorf("nil scrubber changed the text: %q", got)
	}
	if got := newScrubber("", nil).scrub("Loading... sk-abc***LEAK"); got != "Loading... sk-abc***LEAK" {
		t.Errorf("a scrubber without secrets changed the text: %q", got)
	}
}

// FuzzScrub: whatever surrounds the key, no run of minRun of its
// characters survives.
func FuzzScrub(f *testing.F) {
	f.Add("before ", " after")
	f.Add("", "")
	f.Add("sk-", "LEAK")
	f.Fuzz(func(t *testing.T, before, after string) {
		s := newScrubber(leakKey, nil)
		out := s.scrub(before + leakKey + after)
		for i := 0; i+minRun <= len(leakKey); i++ {
			if strings.Contains(out, leakKey[i:i+minRun]) {
				t.Fatalf("scrub left %q of the key in %q", leakKey[i:i+minRun], out)
			}
		}
	})
}

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://api.openai.com/v1", "https://api.openai.com/v1"},
		{"http://user:pass@127.0.0.1:8080/v1?api-key=MARKER", "http://[REDACTED]@127.0.0.1:8080/v1?api-key=[REDACTED]"},
		{"http://token@host/v1", "http://[REDACTED]@host/v1"},
		{"https://h/openai/deployments?api-version=2024-06-01&key=K&bare", "https://h/openai/deployments?api-version=[REDACTED]&key=[REDACTED]&[REDACTED]"},
		{"http://[::1", "[unparsable URL]"},
	} {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestProviderSecretsScrubbed: an endpoint behind a base URL with user
// information and ?api-key= answers 401 echoing the key masked (as OpenAI
// does) and the URL it was asked: the request went to the path with the
// query kept as a query, and neither the key, its visible parts, the
// password nor the query's marker shows in the error or the logs. A
// transport error, which quotes the URL, is scrubbed the same way.
func TestProviderSecretsScrubbed(t *testing.T) {
	const marker = "MARKER-c0ffee"
	var mu sync.Mutex
	var got []string // request URIs, guarded by mu
	var basic []bool // whether basic auth came along, guarded by mu
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RequestURI())
		_, _, ok := r.BasicAuth()
		basic = append(basic, ok)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		masked := leakKey[:6] + strings.Repeat("*", len(leakKey)-10) + leakKey[len(leakKey)-4:]
		_, _ = io.WriteString(w, errorBody("Incorrect API key provided: "+masked+". Request "+r.URL.RequestURI()+
			" from "+r.Header.Get("Authorization")))
	}))
	defer ts.Close()
	u, _ := url.Parse(ts.URL)
	base := "http://gw-user:s3cret-pw@" + u.Host + "/v1?api-key=" + marker

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://gw-user:s3cret-pw@" + dead.Addr().String() + "/v1?api-key=" + marker
	dead.Close() // nothing listens there any more: connection refused

	for _, tc := range []struct{ name, base string }{{"401 echo", base}, {"connection refused", deadURL}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			o, err := NewOpenAI(OpenAIConfig{BaseURL: tc.base, APIKey: leakKey, Model: "m", MaxRetries: 1, OutageWindow: -1,
				Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err != nil {
				t.Fatal(err)
			}
			o.sleep = (&sleepRecorder{}).sleep
			_, err = o.Complete(t.Context(), userRequest("hi"))
			if err == nil {
				t.Fatal("Complete succeeded, want an error")
			}
			t.Logf("error: %v", err)
			for _, where := range []struct{ name, text string }{{"error", err.Error()}, {"logs", logs.String()}} {
				for _, secret := range []string{marker, "s3cret-pw", leakKey[:8], leakKey[len(leakKey)-8:], "LEAK"} {
					if strings.Contains(where.text, secret) {
						t.Errorf("%s show %q:\n%s", where.name, secret, where.text)
					}
				}
			}
			for e := range errorTree(err) {
				if strings.Contains(e.Error(), marker) || strings.Contains(e.Error(), leakKey[len(leakKey)-8:]) {
					t.Errorf("wrapped error %q (%T) shows a secret", e, e)
				}
			}
			if !strings.Contains(err.Error(), redacted) {
				t.Errorf("error %q shows no %s: was anything echoed?", err, redacted)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"/v1/chat/completions?api-key=" + marker}, got); diff != "" {
		t.Errorf("request URIs mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{false}, basic); diff != "" {
		t.Errorf("basic auth sent beside the bearer key (-want +got):\n%s", diff)
	}
}

// TestBaseURLQueryWithoutKey: the query of a base URL goes with every
// request even without an API key; the user information then becomes
// basic authentication (as net/http does for URLs).
func TestBaseURLQueryWithoutKey(t *testing.T) {
	var uri, user, pass string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uri = r.URL.RequestURI()
		user, pass, _ = r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, completionBody("m", "ok", nil))
	}))
	defer ts.Close()
	u, _ := url.Parse(ts.URL)
	o, err := NewOpenAI(OpenAIConfig{BaseURL: "http://u1:p1@" + u.Host + "/gw/v1/?api-version=2024-06-01&k=a%26b", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Complete(t.Context(), userRequest("hi")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if diff := cmp.Diff([]string{"/gw/v1/chat/completions?api-version=2024-06-01&k=a%26b", "u1", "p1"}, []string{uri, user, pass}); diff != "" {
		t.Errorf("request mismatch (-want +got):\n%s", diff)
	}
}
