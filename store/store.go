// Package store keeps the MAS durable on NATS JetStream (ARCHITECTURE.md
// "Durability"): task and agent documents in KV buckets, updated by
// revision so a conflicting writer is detected; every message in a stream,
// published with Nats-Msg-Id before it is delivered. By default the NATS
// server is embedded, with file storage in the data directory and fsync on
// every write; --nats-url points at an existing server or cluster instead.
//
// It implements engine.Store, and Load gives the engine.Image a restart
// rebuilds the MAS from.
package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mas-mcp/mas-mcp/engine"
)

// SchemaVersion is the version of the documents this build writes. A
// document of a later version is refused, never misread.
//
// 2: an agent's ended steps (and, since, its waiting ones) may be in
// chunks of their own (steps.go);
// 3: an agent's lists (working memory, received message IDs, to-do list,
// step order) may be in a base chunk, the head holding how they differ
// (lists.go); the steps of an agent's head are in head_steps, apart from
// the agent (encodeHead);
// documents of schemas 1 and 2 are read as they are.
const SchemaVersion = 3

// Names of the JetStream assets.
const (
	bucketTasks  = "mas_tasks"
	bucketAgents = "mas_agents"
	bucketLease  = "mas_owner"
	leaseKey     = "owner"
	streamMsgs   = "MAS_MESSAGES"
	subjectMsgs  = "mas.msg."
)

// Roles a Store can have.
const (
	// RoleOwner embeds the NATS server of the data directory.
	RoleOwner = "owner"
	// RoleClient found the data directory owned by another process and
	// connected to that process's server.
	RoleClient = "client"
	// RoleExternal uses an external NATS server or cluster (--nats-url).
	RoleExternal = "external"
)

// Options configure Open. Zero values mean defaults.
type Options struct {
	// DataDir holds the embedded server's files and the owner lock.
	// Default: the user's data directory (os.UserConfigDir()/mas-mcp).
	DataDir string
	// NATSURL uses an existing NATS server or cluster instead of the
	// embedded one.
	NATSURL string
	// NATSAuth authenticates to the NATS server of NATSURL (credentials
	// in the URL work too). The embedded server makes up its own.
	NATSAuth NATSAuth
	// SyncInterval, when positive, replaces fsync-on-every-write with an
	// fsync every interval: faster, but an OS crash (not a process crash)
	// may lose the writes of the last interval.
	SyncInterval time.Duration
	// JoinOwner, when the data directory is owned by another process,
	// connects to that process's NATS server (RoleClient) instead of
	// failing with an *InUseError.
	JoinOwner bool
	// LeaseTTL is how long the lease an external NATS server's owner holds
	// outlives that owner's crash (default 10s; renewed every third of it).
	LeaseTTL time.Duration
	// OnLeaseLost is called if another process took the lease over (this
	// one was cut off from NATS for longer than LeaseTTL): the caller
	// must stop, or two engines would run the same agents.
	OnLeaseLost func()
	// Replicas of the streams on an external cluster (default 1).
	Replicas int
	Logger   *slog.Logger
}

// Store is the durable engine.Store.
type Store struct {
	opts Options
	log  *slog.Logger
	role string

	srv  *server.Server // embedded server (owner only)
	lock *os.File       // the data directory's lock (owner only)
	nc   *nats.Conn
	js   jetstream.JetStream
	kvT  jetstream.KeyValue
	kvA  jetstream.KeyValue
	kvS  jetstream.KeyValue // chunks of agents' steps that no longer change (steps.go)

	mu     sync.Mutex // guards revs, unsure, steps, trails and written
	steps  map[string]*agentSteps
	trails []*Trail          // opened by OpenTrail, closed by Close first
	revs   map[string]uint64 // last revision written or read, per KV key
	// unsure holds, per KV key, the documents whose writes failed in a
	// way that leaves their outcome unknown (they may have landed), since
	// the last write known to land (unsureLocked).
	unsure map[string][][]byte
	// written counts the writes that succeeded (Written).
	written WriteStats

	lease     jetstream.KeyValue // external NATS: the owner's lease
	stopLease context.CancelFunc
	leaseDone chan struct{}
}

// DefaultDataDir is where the embedded server keeps its files by default.
func DefaultDataDir() (string, error) {
	base, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("store: no user data directory (set --data-dir): %w", err)
	}
	return filepath.Join(base, "mas-mcp"), nil
}

// Open connects to (or starts) NATS and makes sure the buckets and the
// stream exist. With a data directory owned by another running mas-mcp, it
// connects to that process's server (RoleClient).
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	s := &Store{opts: o, log: o.Logger, revs: map[string]uint64{}, unsure: map[string][][]byte{}, steps: map[string]*agentSteps{}}
	var err error
	switch {
	case o.NATSURL != "":
		s.role = RoleExternal
		if err := o.NATSAuth.check(); err != nil {
			return nil, err
		}
		opts := append([]nats.Option{nats.Name("mas-mcp"), nats.MaxReconnects(-1)}, o.NATSAuth.options()...)
		s.nc, err = nats.Connect(o.NATSURL, opts...)
		if err != nil {
			return nil, o.NATSAuth.secrets().Error(fmt.Errorf("store: connect to %s: %w", redactURL(o.NATSURL), err))
		}
	default:
		if err := s.openDataDir(); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.setup(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if s.role == RoleExternal {
		if err := s.takeLease(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.log.Info("store ready", "role", s.role, "data_dir", s.opts.DataDir)
	return s, nil
}

// openDataDir takes the data directory's lock and embeds its server, or,
// when another process holds the lock, connects to that process's server.
func (s *Store) openDataDir() error {
	if s.opts.DataDir == "" {
		d, err := DefaultDataDir()
		if err != nil {
			return err
		}
		s.opts.DataDir = d
	}
	dir := s.opts.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("store: data directory %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "mas.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("store: lock file: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if !s.opts.JoinOwner {
			pid, _ := os.ReadFile(filepath.Join(dir, "mas.lock"))
			return &InUseError{Dir: dir, Owner: strings.TrimSpace(string(pid))}
		}
		return s.joinOwner()
	}
	// The lock file says who owns the directory, for messages.
	if err := lock.Truncate(0); err == nil {
		_, _ = lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	s.lock, s.role = lock, RoleOwner
	auth, err := newEmbeddedAuth(dir)
	if err != nil {
		return err
	}
	opts := &server.Options{
		Username:   auth.User,
		Password:   auth.Password,
		ServerName: "mas-mcp",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   filepath.Join(dir, "jetstream"),
		SyncAlways: s.opts.SyncInterval <= 0,
		NoSigs:     true,
		NoLog:      true,
	}
	if s.opts.SyncInterval > 0 {
		opts.SyncInterval = s.opts.SyncInterval
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("store: embedded nats server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("store: embedded nats server did not start within 10s")
	}
	s.srv = srv
	// Other processes on this data directory find the server here.
	if err := os.WriteFile(filepath.Join(dir, "nats.url"), []byte(srv.ClientURL()), 0o600); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.nc, err = nats.Connect(srv.ClientURL(), nats.InProcessServer(srv), nats.Name("mas-mcp-owner"),
		nats.UserInfo(auth.User, auth.Password))
	if err != nil {
		return fmt.Errorf("store: connect to the embedded server: %w", err)
	}
	return nil
}

// InUseError says the data directory belongs to another running process.
type InUseError struct {
	Dir   string
	Owner string // the owner's process ID, when known
}

func (e *InUseError) Error() string {
	who := "another process"
	if e.Owner != "" {
		who = "process " + e.Owner
	}
	return fmt.Sprintf("store: the data directory %s is in use by %s", e.Dir, who)
}

// SocketPath is where the owner of a data directory accepts local MCP
// sessions from other mas-mcp processes started on the same directory.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, "mas.sock") }

// joinOwner connects to the server of the process that owns the data
// directory.
func (s *Store) joinOwner() error {
	b, err := os.ReadFile(filepath.Join(s.opts.DataDir, "nats.url"))
	if err != nil {
		return fmt.Errorf("store: the data directory %s is in use by another process, whose address is unreadable: %w", s.opts.DataDir, err)
	}
	url := strings.TrimSpace(string(b))
	auth, err := readEmbeddedAuth(s.opts.DataDir)
	if err != nil {
		return fmt.Errorf("store: the data directory %s is in use by another process, whose credentials are unreadable: %w", s.opts.DataDir, err)
	}
	s.nc, err = nats.Connect(url, nats.Name("mas-mcp-client"), nats.UserInfo(auth.User, auth.Password))
	if err != nil {
		return fmt.Errorf("store: the data directory %s is in use by another process; connecting to it at %s: %w", s.opts.DataDir, url, err)
	}
	s.role = RoleClient
	return nil
}

// setup creates the buckets and the stream if missing.
func (s *Store) setup(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("store: jetstream: %w", err)
	}
	s.js = js
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv := func(name, desc string) (jetstream.KeyValue, error) {
		b, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, Description: desc, History: 1, Storage: jetstream.FileStorage, Replicas: s.opts.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("store: bucket %s: %w", name, err)
		}
		return b, nil
	}
	if s.kvT, err = kv(bucketTasks, "mas-mcp task documents"); err != nil {
		return err
	}
	if s.kvA, err = kv(bucketAgents, "mas-mcp agent documents"); err != nil {
		return err
	}
	if s.kvS, err = kv(bucketSteps, "mas-mcp agents' ended steps, in chunks"); err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        streamMsgs,
		Description: "mas-mcp messages, in delivery order",
		Subjects:    []string{subjectMsgs + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    s.opts.Replicas,
		Duplicates:  10 * time.Minute,
		MaxAge:      90 * 24 * time.Hour,
	}); err != nil {
		return fmt.Errorf("store: stream %s: %w", streamMsgs, err)
	}
	return nil
}

// DataDir is the data directory in use ("" with an external server).
func (s *Store) DataDir() string {
	if s.role == RoleExternal {
		return ""
	}
	return s.opts.DataDir
}

// Role says how the store reaches NATS (RoleOwner, RoleClient, RoleExternal).
func (s *Store) Role() string { return s.role }

// Close disconnects; the owner stops its embedded server (after flushing)
// and releases the data directory.
func (s *Store) Close() error {
	s.mu.Lock()
	trails := s.trails
	s.mu.Unlock()
	for _, t := range trails {
		_ = t.Close() // its queued entries land before the connection drains
	}
	if s.stopLease != nil {
		s.stopLease()
		<-s.leaseDone
		// Gone cleanly: the next owner need not wait for the lease to expire.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.lease.Delete(ctx, leaseKey)
		cancel()
	}
	if s.nc != nil {
		_ = s.nc.Drain()
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	if s.lock != nil {
		_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
		s.lock.Close()
	}
	return nil
}

// takeLease makes this process the one owner of the state on an external
// NATS server: a key with a TTL, renewed while the process lives. A lease
// another process renews means that process runs the MAS: refused with an
// *InUseError. A lease nobody renews (its owner crashed) is waited out.
func (s *Store) takeLease(ctx context.Context) error {
	ttl := s.opts.LeaseTTL
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucketLease, Description: "mas-mcp: which process runs the MAS", History: 1,
		TTL: ttl, Storage: jetstream.FileStorage, Replicas: s.opts.Replicas,
	})
	if err != nil {
		return fmt.Errorf("store: bucket %s: %w", bucketLease, err)
	}
	s.lease = kv
	host, _ := os.Hostname()
	me, _ := json.Marshal(map[string]any{"pid": os.Getpid(), "host": host, "since": time.Now().UTC()})
	var seenRev uint64
	var seenAt time.Time
	for {
		rev, err := kv.Create(ctx, leaseKey, me)
		if err == nil {
			s.renewLease(rev, ttl)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("store: take the lease: %w", err)
		}
		entry, err := kv.Get(ctx, leaseKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired or released meanwhile
		}
		if err != nil {
			return fmt.Errorf("store: read the lease: %w", err)
		}
		switch {
		case seenRev == 0:
			seenRev, seenAt = entry.Revision(), time.Now()
			s.log.Warn("the state on this NATS server has an owner; waiting to see whether it is alive", "owner", string(entry.Value()), "up_to", ttl)
		case entry.Revision() != seenRev || time.Since(seenAt) > 2*ttl:
			// Renewed: the owner lives.
			return &InUseError{Dir: "NATS " + redactURL(s.opts.NATSURL), Owner: string(entry.Value())}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(ttl / 10):
		}
	}
}

// renewLease keeps the lease while the store is open.
func (s *Store) renewLease(rev uint64, ttl time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopLease, s.leaseDone = cancel, make(chan struct{})
	go func() {
		defer close(s.leaseDone)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			entry, err := s.lease.Get(ctx, leaseKey)
			if err == nil && entry.Revision() == rev {
				var n uint64
				if n, err = s.lease.Update(ctx, leaseKey, entry.Value(), rev); err == nil {
					rev = n
					continue
				}
			}
			if ctx.Err() != nil {
				return
			}
			if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyExists) {
				s.log.Error("store: another process took the lease over: stopping", "err", err)
				if s.opts.OnLeaseLost != nil {
					s.opts.OnLeaseLost()
				}
				return
			}
			s.log.Warn("store: renewing the lease", "err", err) // NATS unreachable: try again
		}
	}()
}

// envelope is every stored document: its schema version and one payload.
type envelope struct {
	Schema  int                `json:"schema"`
	Task    *engine.TaskState  `json:"task,omitempty"`
	Agent   *engine.AgentState `json:"agent,omitempty"`
	Message *engine.Message    `json:"message,omitempty"`
	// An agent whose ended steps are partly in chunks (steps.go): the
	// keys of those chunks and the order of all its steps.
	Chunks    []string `json:"chunks,omitempty"`
	StepOrder []string `json:"step_order,omitempty"`
	// An agent whose lists are in a base (lists.go): the base's chunk
	// key (one of Chunks) and how the lists differ from it.
	Base  string      `json:"base,omitempty"`
	Lists *listsDelta `json:"lists,omitempty"`
	// HeadSteps are the steps an agent's head holds, written apart from
	// the agent (encodeHead); read back into its step list by assemble.
	HeadSteps []engine.StepState `json:"head_steps,omitempty"`
}

func decode(b []byte, what string) (*envelope, error) {
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	if e.Schema > SchemaVersion {
		return nil, fmt.Errorf("store: %s was written by a newer mas-mcp (document schema %d, this build reads up to %d): upgrade mas-mcp", what, e.Schema, SchemaVersion)
	}
	if e.Schema < 1 {
		return nil, fmt.Errorf("store: %s has no schema version", what)
	}
	return &e, nil
}

// Load reads every document and message: the image a restart rebuilds the
// MAS from. It remembers the documents' revisions for the writes to come.
func (s *Store) Load(ctx context.Context) (*engine.Image, error) {
	img := &engine.Image{}
	readAll := func(kv jetstream.KeyValue, kind string, keep func(*envelope)) error {
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return fmt.Errorf("store: list %s: %w", kind, err)
		}
		var names []string
		for k := range keys.Keys() {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			entry, err := kv.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("store: get %s %s: %w", kind, k, err)
			}
			e, err := decode(entry.Value(), kind+" "+k)
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.revs[kv.Bucket()+"/"+k] = entry.Revision()
			s.mu.Unlock()
			keep(e)
		}
		return nil
	}
	if err := readAll(s.kvT, "task", func(e *envelope) {
		if e.Task != nil {
			img.Tasks = append(img.Tasks, *e.Task)
		}
	}); err != nil {
		return nil, err
	}
	var chunkErr error
	if err := readAll(s.kvA, "agent", func(e *envelope) {
		if e.Agent == nil {
			return
		}
		as := s.stepsOf(e.Agent.AgentID)
		as.mu.Lock()
		as.reset()
		err := s.assemble(ctx, e, as)
		as.mu.Unlock()
		if err != nil {
			chunkErr = cmp.Or(chunkErr, err)
			return
		}
		img.Agents = append(img.Agents, *e.Agent)
	}); err != nil {
		return nil, err
	}
	if chunkErr != nil {
		return nil, chunkErr
	}
	if err := s.sweepChunks(ctx); err != nil {
		return nil, err
	}
	sort.SliceStable(img.Tasks, func(i, j int) bool { return img.Tasks[i].CreatedAt.Before(img.Tasks[j].CreatedAt) })
	sort.SliceStable(img.Agents, func(i, j int) bool { return img.Agents[i].CreatedAt.Before(img.Agents[j].CreatedAt) })

	msgs, err := s.loadMessages(ctx)
	if err != nil {
		return nil, err
	}
	img.Messages = msgs
	return img, nil
}

// loadMessages reads the whole message stream in order.
func (s *Store) loadMessages(ctx context.Context) ([]engine.Message, error) {
	stream, err := s.js.Stream(ctx, streamMsgs)
	if err != nil {
		return nil, fmt.Errorf("store: stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: stream info: %w", err)
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("store: read messages: %w", err)
	}
	var out []engine.Message
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("store: read messages: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			e, err := decode(m.Data(), "message")
			if err != nil {
				return nil, err
			}
			if e.Message != nil {
				out = append(out, *e.Message)
			}
			if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= info.State.LastSeq {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("store: read messages: %w", err)
		}
		if n == 0 {
			break
		}
	}
	return out, nil
}

// redactURL hides credentials in a NATS URL for messages.
func redactURL(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…@" + u[i+1:]
		}
	}
	return u
}
