package secret

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewKeepsTheScrubbedOnes(t *testing.T) {
	l := New(Redacted, "short", "1234567", "12345678", "", "a-longer-secret", "12345678")
	if diff := cmp.Diff([]string{"a-longer-secret", "12345678"}, l.All()); diff != "" {
		t.Errorf("kept mismatch (-want +got):\n%s", diff)
	}
	if New(Redacted, "ollama", "EMPTY", "") != nil {
		t.Error("a List of secrets all shorter than MinLen is not nil")
	}
	var none *List
	if none.Len() != 0 || none.Text("x ollama") != "x ollama" || string(none.Bytes([]byte("b"))) != "b" || none.Error(nil) != nil {
		t.Error("a nil List changed something")
	}
}

func TestText(t *testing.T) {
	const R = Redacted
	l := New(R, "pw-SECRET-42", "SECRET-42-and-more", "tok&en<123>", `pa"ss\word`, "hunter2")
	for _, tt := range []struct{ in, want string }{
		{"nothing here", "nothing here"},
		{"pw pw-SECRET-42 twice pw-SECRET-42.", "pw " + R + " twice " + R + "."},
		// Overlapping and touching secrets: one replacement, no part left.
		{"x pw-SECRET-42-and-more y", "x " + R + " y"},
		{"pw-SECRET-42pw-SECRET-42", R},
		// Shorter than MinLen: left everywhere.
		{"hunter2 and hunter2!", "hunter2 and hunter2!"},
		// As JSON and %q spell them.
		{`{"t":"tok\u0026en\u003c123\u003e"}`, `{"t":"` + R + `"}`},
		{`{"t":"tok&en<123>"}`, `{"t":"` + R + `"}`},
		{fmt.Sprintf("value %q: bad", `pa"ss\word`), `value "` + R + `": bad`},
		{`pa"ss\word`, R},
	} {
		if got := l.Text(tt.in); got != tt.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
		if got := string(l.Bytes([]byte(tt.in))); got != tt.want {
			t.Errorf("Bytes(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// TestTextInJSON: a secret with characters JSON escapes, in an encoded
// value, decodes to the replacement, not to the secret.
func TestTextInJSON(t *testing.T) {
	const secret = "p&ss\"w<r>d\\42\u2028"
	l := New(Redacted, secret)
	b, err := json.Marshal(map[string]string{"note": "the password is " + secret})
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if err := json.Unmarshal(l.Bytes(b), &out); err != nil {
		t.Fatal(err)
	}
	if want := "the password is " + Redacted; out["note"] != want {
		t.Errorf("decoded %q, want %q", out["note"], want)
	}
}

func TestErrorWraps(t *testing.T) {
	l := New("****", "s3cret-MARKER")
	base := fmt.Errorf("open s3cret-MARKER: %w", fs.ErrNotExist)
	err := l.Error(fmt.Errorf("store: %w", base))
	if got, want := err.Error(), "store: open ****: file does not exist"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, base) {
		t.Error("the scrubbed error does not wrap what the error wrapped")
	}
	clean := errors.New("nothing secret")
	if l.Error(clean) != clean {
		t.Error("an error without a secret was replaced")
	}
}
