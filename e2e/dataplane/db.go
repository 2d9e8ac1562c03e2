package dataplane

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/maasctl/maasctl/internal/verify"
)

// maas-api's database, as opendatahub-io/models-as-a-service maas-api does
// it (cmd main.go serve, internal/config LoadDatabaseURL,
// internal/api_keys/db_driver.go NewPostgresStoreFromURL):
//
//   - at start, maas-api reads DB_CONNECTION_URL from Secret maas-db-config
//     in its namespace, opens it with the pgx driver, pings, and runs its
//     golang-migrate schema migrations (table schema_migrations: version,
//     dirty; db/schema/0001..0003: api_keys with key_hash, user_groups,
//     status, ephemeral, subscription). Any failure ends the process
//     ("failed to initialize token store: ..."): the pod crash-loops and
//     the gateway answers 503 "no healthy upstream";
//   - once started, the API keys live in api_keys; a statement that fails
//     answers 500 ({"error": "Failed to create API key"} and the like).
//
// The stand-in's maas-api instance is the Deployment (UID, generation) it
// last saw: a rollout starts a new instance, which reads the Secret,
// connects and migrates again; a running instance keeps the URL it read
// at start even if the Secret changes or goes away, as maas-api does. A
// start that fails is retried on the next request (the kubelet's restart,
// without its back-off). Stricter than maas-api's pool (5 idle connections, 300 s
// lifetime): every request opens a new connection, so a password changed
// in the database behind the Secret fails the next request, as it does for
// maas-api once its pooled connections are recycled.
//
// One difference in what a client sees, chosen so that tests can tell why
// without pod logs: a failed statement's 500 carries, before maas-api's own
// "error" text, a "cause" with what maas-api writes to its log (database,
// host and the server's message, short enough to survive verify's
// 120-character snippet; never the password).
//
// Hosts: the URL's host:port (maas-postgres-rw.rhoai-maas-db.svc:5432 for
// the default inventory) is the CNPG -rw Service in the cluster. The
// stand-in resolves no DNS: Options.DBHosts maps each such host:port to the
// loopback address of the test's PostgreSQL, and any other host fails as an
// unknown name does.

// migrations is the stand-in's copy of maas-api's migrations (facts of
// maas-api/db/schema 0001-0003; column names as upstream).
var migrations = []string{
	1: `CREATE TABLE IF NOT EXISTS api_keys (
	id TEXT PRIMARY KEY,
	username TEXT NOT NULL,
	name TEXT NOT NULL,
	description TEXT,
	key_hash TEXT NOT NULL,
	status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked', 'expired')),
	user_groups TEXT[] NOT NULL,
	created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
	expires_at TIMESTAMPTZ,
	last_used_at TIMESTAMPTZ);
CREATE INDEX IF NOT EXISTS idx_api_keys_username_created ON api_keys (username, created_at DESC);
CREATE UNIQUE INDEX IF NOT EXISTS idx_api_keys_key_hash ON api_keys (key_hash)`,
	2: `ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS ephemeral BOOLEAN NOT NULL DEFAULT FALSE`,
	3: `ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS subscription TEXT NOT NULL DEFAULT ''`,
}

// SchemaVersion is the schema_migrations version the stand-in migrates to.
const SchemaVersion = 3

// dbError is a database failure as maas-api reports it: Public is the
// "error" of the HTTP answer, Cause the log line (password-free).
type dbError struct {
	Public, Cause string
}

func (e *dbError) Error() string { return e.Public + ": " + e.Cause }

// maasAPIInstance is the running (or crash-looping) maas-api.
type maasAPIInstance struct {
	key     string // deployment UID/generation
	cfg     *pgx.ConnConfig
	target  string // "database maas on host:port", for messages
	started bool
	err     *dbError // why the last start failed

	// idle are pooled connections for key validation only (see
	// validationConn), at most maxIdle, each dropped after maxLifetime.
	mu   sync.Mutex
	idle []pooledConn
}

type pooledConn struct {
	c       *pgx.Conn
	created time.Time
}

// maas-api's pool defaults (db_driver.go: DB_MAX_IDLE_CONNS 5,
// DB_CONN_MAX_LIFETIME_SECONDS 300).
const (
	maxIdle     = 5
	maxLifetime = 300 * time.Second
)

// validationConn returns a pooled connection for the key validation that
// Authorino asks maas-api for on every model request, or a new one. Only
// this hot path is pooled, as maas-api pools all of its statements: a new
// TLS and SCRAM handshake per model call would add its latency to every
// answer, and verify tells the gateway's fast 429 from a model server's
// slow one by latency (case B17). Key minting, listing and revocation
// still open a new connection each, so a password changed behind the
// Secret shows on the next of those.
func (in *maasAPIInstance) validationConn(ctx context.Context) (*pgx.Conn, time.Time, error) {
	in.mu.Lock()
	for len(in.idle) > 0 {
		pc := in.idle[len(in.idle)-1]
		in.idle = in.idle[:len(in.idle)-1]
		if time.Since(pc.created) < maxLifetime && !pc.c.IsClosed() {
			in.mu.Unlock()
			return pc.c, pc.created, nil
		}
		_ = pc.c.Close(context.WithoutCancel(ctx))
	}
	in.mu.Unlock()
	created := time.Now()
	c, err := in.connect(ctx, "validation failed")
	return c, created, err
}

// release puts c back into the pool (or closes it when the pool is full,
// the instance was replaced, or c failed).
func (in *maasAPIInstance) release(ctx context.Context, c *pgx.Conn, created time.Time, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ok && in.idle != nil && len(in.idle) < maxIdle && time.Since(created) < maxLifetime {
		in.idle = append(in.idle, pooledConn{c: c, created: created})
		return
	}
	_ = c.Close(context.WithoutCancel(ctx))
}

// closeIdle closes the pooled connections; later releases close theirs.
func (in *maasAPIInstance) closeIdle() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, pc := range in.idle {
		_ = pc.c.Close(context.Background())
	}
	in.idle = nil
}

type maasAPIState struct {
	mu   sync.Mutex
	inst *maasAPIInstance
	// log is what maas-api wrote to its log (start failures, failed
	// statements), newest last; no secrets.
	log []string
}

// dbURL reads DB_CONNECTION_URL of Secret maas-db-config in maas-api's
// namespace (the Secret named by the inventory's dbConfig).
func (s *Server) dbURL(ctx context.Context) (string, error) {
	ns, name := s.inv.RHOAI.MaaSAPINamespace, s.inv.DBConfig.Name
	sec := s.get(ctx, verify.SecretGVK, ns, name)
	if sec == nil {
		return "", fmt.Errorf("failed to load database URL: secret %s/%s not found", ns, name)
	}
	enc := str(sec, "data", "DB_CONNECTION_URL")
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(b) == 0 {
		return "", fmt.Errorf("failed to load database URL: secret %s/%s has no DB_CONNECTION_URL", ns, name)
	}
	return strings.TrimSpace(string(b)), nil
}

// instance returns the current maas-api instance, starting it (connect,
// migrate) when the Deployment or the URL changed or the last start
// failed. The error (a *dbError) means maas-api is not running.
func (s *Server) instance(ctx context.Context) (*maasAPIInstance, error) {
	d := s.get(ctx, verify.DeploymentGVK, s.inv.RHOAI.MaaSAPINamespace, "maas-api")
	if d == nil {
		return nil, &dbError{Public: "maas-api is not running", Cause: "deployment maas-api not found"}
	}
	key := fmt.Sprintf("%s/%d", d.GetUID(), d.GetGeneration())
	s.api.mu.Lock()
	defer s.api.mu.Unlock()
	if in := s.api.inst; in != nil && in.key == key && in.started {
		return in, nil
	}
	// A (re)start reads the Secret again.
	if old := s.api.inst; old != nil {
		old.closeIdle()
	}
	in := &maasAPIInstance{key: key, idle: []pooledConn{}}
	s.api.inst = in
	raw, err := s.dbURL(ctx)
	if err != nil {
		in.err = &dbError{Public: "maas-api is not running", Cause: err.Error()}
		s.api.log = append(s.api.log, in.err.Error())
		return nil, in.err
	}
	if s.ownPG != nil {
		s.provision(ctx, raw)
	}
	if in.cfg, in.target, err = s.connConfig(raw); err != nil {
		in.err = &dbError{Public: "maas-api is not running", Cause: "failed to initialize token store: " + err.Error()}
		s.api.log = append(s.api.log, in.err.Cause)
		return nil, in.err
	}
	if err := migrate(ctx, in); err != nil {
		in.err = &dbError{Public: "maas-api is not running", Cause: "failed to initialize token store: " + err.Error()}
		s.api.log = append(s.api.log, in.err.Cause)
		return nil, in.err
	}
	in.started = true
	return in, nil
}

// closeAll closes the current instance's pooled connections (Close).
func (st *maasAPIState) closeAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.inst != nil {
		st.inst.closeIdle()
	}
}

func (st *maasAPIState) fail(e *dbError) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.log = append(st.log, e.Error())
	return e
}

// MaaSAPILog returns what the stand-in's maas-api wrote to its log (start
// failures and failed statements, oldest first). It never holds a
// password.
func (s *Server) MaaSAPILog() []string {
	s.api.mu.Lock()
	defer s.api.mu.Unlock()
	return append([]string(nil), s.api.log...)
}

// connConfig parses DB_CONNECTION_URL as maas-api's driver does (pgx: URL
// or keyword form, sslmode, connect_timeout) and routes its host:port
// through Options.DBHosts. target names the database and host for messages.
func (s *Server) connConfig(raw string) (*pgx.ConnConfig, string, error) {
	if !strings.HasPrefix(raw, "postgresql://") && !strings.HasPrefix(raw, "postgres://") {
		return nil, "", errors.New("invalid database URL scheme. Expected format: postgresql://user:password@host:port/database")
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		// pgx's parse errors quote the URL; say only what is wrong.
		return nil, "", errors.New("failed to open PostgreSQL connection: the URL cannot be parsed (check its user, password and host are URL-encoded)")
	}
	hostport := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	target := fmt.Sprintf("database %q on %s", cfg.Database, hostport)
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > 10*time.Second {
		cfg.ConnectTimeout = 10 * time.Second
	}
	hosts := s.o.DBHosts
	// No DNS (the network rule): a name resolves only to itself when
	// DBHosts maps it, and DialFunc sends it to the mapped loopback address.
	cfg.LookupFunc = func(_ context.Context, host string) ([]string, error) {
		for hp := range hosts {
			if h, _, _ := net.SplitHostPort(hp); h == host {
				return []string{host}, nil
			}
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	dialer := &net.Dialer{}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		to, ok := hosts[addr]
		if !ok {
			return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("no route to %s in the test harness", addr)}
		}
		return dialer.DialContext(ctx, "tcp", to)
	}
	return cfg, target, nil
}

// connect opens one connection of in. Failures are *dbError naming the
// database, never the password.
func (in *maasAPIInstance) connect(ctx context.Context, public string) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, in.cfg)
	if err != nil {
		return nil, &dbError{Public: public, Cause: in.target + ": " + describe(err)}
	}
	return c, nil
}

// describe is a driver error without anything from the connection string
// but the server's own words (pgconn errors quote host and user only).
func describe(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %s (SQLSTATE %s)", pe.Severity, pe.Message, pe.Code)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		if u := errors.Unwrap(ce); u != nil {
			return describe(u)
		}
	}
	var ne *net.DNSError
	if errors.As(err, &ne) {
		return "lookup " + ne.Name + ": " + ne.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return err.Error()
}

// migrate runs the schema migrations as golang-migrate does: a dirty
// version refuses to start ("Dirty database version N. Fix and force
// version.", case N10); each step sets dirty, runs, and clears it.
func migrate(ctx context.Context, in *maasAPIInstance) error {
	c, err := pgx.ConnectConfig(ctx, in.cfg)
	if err != nil {
		return errors.New("failed to connect to PostgreSQL " + in.target + ": " + describe(err))
	}
	defer c.Close(context.WithoutCancel(ctx))
	fail := func(err error) error {
		return errors.New("schema migration failed on " + in.target + ": " + describe(err))
	}
	if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT NOT NULL PRIMARY KEY, dirty BOOLEAN NOT NULL)`); err != nil {
		return fail(err)
	}
	var version int64
	var dirty bool
	err = c.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations LIMIT 1`).Scan(&version, &dirty)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fail(err)
	}
	if dirty {
		return fmt.Errorf("schema migration failed on %s: Dirty database version %d. Fix and force version.", in.target, version)
	}
	for v := version + 1; v <= SchemaVersion; v++ {
		set := func(dirty bool) error {
			if _, err := c.Exec(ctx, `DELETE FROM schema_migrations`); err != nil {
				return err
			}
			_, err := c.Exec(ctx, `INSERT INTO schema_migrations (version, dirty) VALUES ($1, $2)`, v, dirty)
			return err
		}
		if err := set(true); err != nil {
			return fail(err)
		}
		if _, err := c.Exec(ctx, migrations[v]); err != nil {
			return fail(err)
		}
		if err := set(false); err != nil {
			return fail(err)
		}
	}
	return nil
}

// provision creates, in the private PostgreSQL (Options.DBHosts nil), the
// role and database the URL names, once per URL and only when the role is
// missing, as CNPG's initdb does for the Cluster (e2e/sim/cnpg_db.go).
// Failures are left for maas-api's own connection to report.
func (s *Server) provision(ctx context.Context, raw string) {
	if _, done := s.provisioned.LoadOrStore(raw, true); done {
		return
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil || cfg.User == "" || cfg.Database == "" {
		return
	}
	c, err := s.ownPG.Admin(ctx)
	if err != nil {
		return
	}
	defer c.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := c.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_roles WHERE rolname = $1`, cfg.User).Scan(&exists); err != nil || exists {
		return
	}
	id := pgx.Identifier{cfg.User}.Sanitize()
	_, _ = c.Exec(ctx, "CREATE ROLE "+id+" LOGIN PASSWORD '"+strings.ReplaceAll(cfg.Password, "'", "''")+"'")
	_, _ = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()+" OWNER "+id)
}
