package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/mas-mcp/mas-mcp/internal/secret"
)

// The embedded server's listener is on loopback, but loopback is every
// local user's: without credentials any process on the machine could read
// every operator's messages and rewrite the store. So the owner of a data
// directory makes up a user and password at each start, requires them of
// every client (its own in-process connection included), and leaves them
// in authFile (0600, in a 0700 directory) for the processes of the same
// user that join it (Options.JoinOwner).

// authFile holds the embedded server's credentials, beside nats.url.
const authFile = "nats.auth"

// embeddedUser is the one user of an embedded server.
const embeddedUser = "mas-mcp"

// embeddedAuth is authFile's content.
type embeddedAuth struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// newEmbeddedAuth makes up the credentials of this start of the embedded
// server and writes them to the data directory, replacing the previous
// owner's (which are then worthless: that server is gone).
func newEmbeddedAuth(dir string) (embeddedAuth, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return embeddedAuth{}, fmt.Errorf("store: credentials of the embedded server: %w", err)
	}
	a := embeddedAuth{User: embeddedUser, Password: hex.EncodeToString(b)}
	data, _ := json.Marshal(a)
	if err := writePrivate(filepath.Join(dir, authFile), data); err != nil {
		return embeddedAuth{}, fmt.Errorf("store: credentials of the embedded server: %w", err)
	}
	return a, nil
}

// readEmbeddedAuth reads the credentials the data directory's owner left.
func readEmbeddedAuth(dir string) (embeddedAuth, error) {
	var a embeddedAuth
	b, err := os.ReadFile(filepath.Join(dir, authFile))
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil || a.User == "" || a.Password == "" {
		return embeddedAuth{}, fmt.Errorf("%s: not the credentials an owner writes", authFile)
	}
	return a, nil
}

// writePrivate replaces path with data, readable by this user only. It
// never widens or reuses the mode of an existing file: the new content is
// written to a fresh 0600 file and renamed over it.
func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err = f.Chmod(0o600); err == nil {
		if _, err = f.Write(data); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// NATSAuth holds how to authenticate to an external NATS server
// (Options.NATSURL): nats.go's standard options. Zero values are left out.
// Its String and LogValue mask the secrets, so printing or logging it
// never shows them.
type NATSAuth struct {
	// CredsFile is a NATS credentials file (a user JWT and its nkey seed).
	CredsFile string
	// User and Password authenticate with a user name and password.
	User, Password string
	// Token authenticates with a token.
	Token string
	// CAFile verifies the server's TLS certificate (PEM); setting it, or a
	// client certificate, requires TLS.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key (PEM), for
	// servers that verify clients.
	CertFile, KeyFile string
}

// check refuses combinations nats.go would reject or silently ignore.
func (a NATSAuth) check() error {
	switch {
	case a.Password != "" && a.User == "":
		return errors.New("store: nats auth: a password needs a user")
	case a.User != "" && a.Password == "":
		return fmt.Errorf("store: nats auth: user %s has no password", a.User)
	case a.Token != "" && a.User != "":
		return errors.New("store: nats auth: a token and a user/password: choose one")
	case a.CredsFile != "" && (a.Token != "" || a.User != ""):
		return errors.New("store: nats auth: a credentials file and a token or user/password: choose one")
	case (a.CertFile == "") != (a.KeyFile == ""):
		return errors.New("store: nats auth: a client certificate needs both its certificate and its key file")
	}
	return nil
}

// options are the nats.go options a connects with.
func (a NATSAuth) options() []nats.Option {
	var o []nats.Option
	if a.CredsFile != "" {
		o = append(o, nats.UserCredentials(a.CredsFile))
	}
	if a.User != "" {
		o = append(o, nats.UserInfo(a.User, a.Password))
	}
	if a.Token != "" {
		o = append(o, nats.Token(a.Token))
	}
	if a.CAFile != "" {
		o = append(o, nats.RootCAs(a.CAFile))
	}
	if a.CertFile != "" {
		o = append(o, nats.ClientCert(a.CertFile, a.KeyFile))
	}
	return o
}

// String describes a without its secrets.
func (a NATSAuth) String() string {
	v := a.LogValue()
	return v.String()
}

// LogValue shows which options are set; the password and the token only
// as set or not.
func (a NATSAuth) LogValue() slog.Value {
	var attrs []slog.Attr
	add := func(k, v string) {
		if v != "" {
			attrs = append(attrs, slog.String(k, v))
		}
	}
	add("creds_file", a.CredsFile)
	add("user", a.User)
	if a.Password != "" {
		add("password", "set")
	}
	if a.Token != "" {
		add("token", "set")
	}
	add("tls_ca", a.CAFile)
	add("tls_cert", a.CertFile)
	add("tls_key", a.KeyFile)
	return slog.GroupValue(attrs...)
}

// secrets masks a's secrets (password, token) in what nats.go says (its
// errors), in case one ever echoes them, by internal/secret's rule: one
// under secret.MinLen bytes is not masked, or a password "nats" would mask
// every "nats: …" error.
func (a NATSAuth) secrets() *secret.List { return secret.New("****", a.Password, a.Token) }
