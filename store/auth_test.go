package store

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestEmbeddedServerRefusesStrangers: another process on this machine that
// finds the owner's loopback port (nats.url is in the data directory, and
// ports can be scanned) cannot connect without the credentials only this
// user can read, so it can neither read nor write the store; a process that
// joins the directory reads them and works.
func TestEmbeddedServerRefusesStrangers(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	owner := open(t, dir)
	defer owner.Close()
	tk := sampleTask("t")
	tk.TaskIntention = "private marker"
	if err := owner.PutTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(filepath.Join(dir, "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSpace(string(b))
	for name, opts := range map[string][]nats.Option{
		"no credentials":        nil,
		"a guessed password":    {nats.UserInfo(embeddedUser, "guess")},
		"a token":               {nats.Token("guess")},
		"the user, no password": {nats.UserInfo(embeddedUser, "")},
	} {
		nc, err := nats.Connect(url, append(opts, nats.NoReconnect())...)
		if err == nil {
			// Connected after all: prove it cannot reach the store.
			js, _ := jetstream.New(nc)
			_, kvErr := js.KeyValue(ctx, bucketTasks)
			nc.Close()
			t.Fatalf("%s: connected to the embedded server at %s (bucket lookup: %v); want refused", name, url, kvErr)
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("%s: %v, want an authorization error", name, err)
		}
	}

	info, err := os.Stat(filepath.Join(dir, authFile))
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("%s: mode %v, want 0600", authFile, mode)
	}

	joined, err := Open(ctx, Options{DataDir: dir, JoinOwner: true})
	if err != nil {
		t.Fatalf("a process joining the directory: %v", err)
	}
	defer joined.Close()
	img, err := joined.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Tasks) != 1 || img.Tasks[0].TaskIntention != "private marker" {
		t.Errorf("the joined process read %+v, want the owner's task", img.Tasks)
	}
}

// TestEmbeddedCredentialsRotate: the next owner of a directory makes up new
// credentials; the last owner's are worthless, and a file left wider than
// 0600 is replaced by a 0600 one.
func TestEmbeddedCredentialsRotate(t *testing.T) {
	dir := t.TempDir()
	first := open(t, dir)
	old, err := readEmbeddedAuth(dir)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	if err := os.Chmod(filepath.Join(dir, authFile), 0o644); err != nil {
		t.Fatal(err)
	}
	second := open(t, dir)
	defer second.Close()
	cur, err := readEmbeddedAuth(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Password == old.Password {
		t.Error("the second owner kept the first owner's password")
	}
	info, _ := os.Stat(filepath.Join(dir, authFile))
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("%s after a restart: mode %v, want 0600", authFile, mode)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "nats.url"))
	nc, err := nats.Connect(strings.TrimSpace(string(b)), nats.UserInfo(old.User, old.Password), nats.NoReconnect())
	if err == nil {
		nc.Close()
		t.Fatal("the previous owner's credentials still connect")
	}
}

// authedNATS starts an external NATS server with JetStream that requires
// the given authentication.
func authedNATS(t *testing.T, o natsserver.Options) string {
	t.Helper()
	o.Host, o.Port, o.JetStream, o.StoreDir, o.NoSigs, o.NoLog = "127.0.0.1", natsserver.RANDOM_PORT, true, t.TempDir(), true, true
	srv, err := natsserver.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv.ClientURL()
}

// TestExternalAuth: user/password and token reach an external server that
// requires them; a wrong secret is refused with an error (and logs) that
// never show it.
func TestExternalAuth(t *testing.T) {
	const secret = "s3cret-MARKER-4f2a"
	tests := []struct {
		name   string
		server natsserver.Options
		good   NATSAuth
		bad    NATSAuth
	}{
		{"user and password", natsserver.Options{Username: "mas", Password: secret},
			NATSAuth{User: "mas", Password: secret}, NATSAuth{User: "mas", Password: secret + "-wrong"}},
		{"token", natsserver.Options{Authorization: secret},
			NATSAuth{Token: secret}, NATSAuth{Token: secret + "-wrong"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := authedNATS(t, tc.server)
			ctx := context.Background()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))

			_, err := Open(ctx, Options{NATSURL: url, Logger: log})
			if err == nil {
				t.Fatal("Open without credentials succeeded")
			}
			_, err = Open(ctx, Options{NATSURL: url, NATSAuth: tc.bad, Logger: log})
			if err == nil {
				t.Fatal("Open with a wrong secret succeeded")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the secret: %v", err)
			}
			s, err := Open(ctx, Options{NATSURL: url, NATSAuth: tc.good, Logger: log})
			if err != nil {
				t.Fatalf("Open with the credentials: %v", err)
			}
			defer s.Close()
			tk := sampleTask("t")
			if err := s.PutTask(ctx, &tk); err != nil {
				t.Fatal(err)
			}
			log.Info("store options", "nats_auth", tc.good)
			if strings.Contains(logs.String(), secret) || strings.Contains(tc.good.String(), secret) {
				t.Errorf("a log line or String shows the secret:\n%s\n%s", logs.String(), tc.good)
			}
		})
	}
}

func TestNATSAuthCheck(t *testing.T) {
	for _, a := range []NATSAuth{
		{Password: "p"},
		{User: "u"},
		{User: "u", Password: "p", Token: "t"},
		{CredsFile: "f", Token: "t"},
		{CertFile: "c"},
	} {
		_, err := Open(context.Background(), Options{NATSURL: "nats://127.0.0.1:1", NATSAuth: a})
		if err == nil || !strings.HasPrefix(err.Error(), "store: nats auth:") {
			t.Errorf("%v: %v, want a refusal of the combination", a, err)
		}
	}
	// A missing credentials file is named in the error.
	_, err := Open(context.Background(), Options{NATSURL: "nats://127.0.0.1:1", NATSAuth: NATSAuth{CredsFile: "/nonexistent/x.creds"}})
	if err == nil || !strings.Contains(err.Error(), "x.creds") {
		t.Errorf("missing creds file: %v, want an error naming it", err)
	}
}

// TestExternalTLS: a server that requires TLS with client certificates is
// reached with the CA and the client certificate; without the client
// certificate it refuses.
func TestExternalTLS(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey := newCert(t, nil, nil, "mas test CA", dir, "ca")
	newCert(t, caCert, caKey, "127.0.0.1", dir, "server")
	newCert(t, caCert, caKey, "mas-mcp client", dir, "client")
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	srvPair, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	url := authedNATS(t, natsserver.Options{
		TLS: true, TLSVerify: true, TLSTimeout: 5,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{srvPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
	})
	ctx := context.Background()
	if _, err := Open(ctx, Options{NATSURL: url, NATSAuth: NATSAuth{CAFile: filepath.Join(dir, "ca.pem")}}); err == nil {
		t.Fatal("Open without a client certificate succeeded")
	}
	s, err := Open(ctx, Options{NATSURL: url, NATSAuth: NATSAuth{
		CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client.key"),
	}})
	if err != nil {
		t.Fatalf("Open with the CA and a client certificate: %v", err)
	}
	defer s.Close()
	tk := sampleTask("t")
	if err := s.PutTask(ctx, &tk); err != nil {
		t.Fatal(err)
	}
}

// newCert writes name.pem and name.key in dir: a CA when parent is nil,
// else a certificate for cn (an IP address becomes its SAN) signed by it.
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+".key", "EC PRIVATE KEY", kb)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
