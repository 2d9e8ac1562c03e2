package dataplane

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/verify"
)

// The unit tests share one real PostgreSQL (testenv.StartPostgres); each
// test gets the database "maas" anew, owned by role "maas" with the
// password of internal/verify/testdata/healthy.yaml's maas-db-config.
var (
	testPG    *testenv.PostgresServer
	testPGErr error
)

const (
	dbHost = "maas-postgres-rw.rhoai-maas-db.svc:5432"
	sub    = "llama-coder-default"
)

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	testPG, testPGErr = testenv.StartPostgres(ctx)
	cancel()
	code := m.Run()
	if testPG != nil {
		if err := testPG.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop PostgreSQL:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// freshDatabase (re)creates role maas and database maas and returns the
// DBHosts mapping the fixture's URL host to the server.
func freshDatabase(t *testing.T) map[string]string {
	t.Helper()
	if testPGErr != nil {
		if os.Getenv(testenv.EnvRequire) == "1" {
			t.Fatal(testPGErr)
		}
		t.Skipf("skipping: no PostgreSQL for maas-api's database: %v", testPGErr)
	}
	adminExec(t, `DROP DATABASE IF EXISTS maas WITH (FORCE)`, `DROP ROLE IF EXISTS maas`,
		`CREATE ROLE maas LOGIN PASSWORD 'unit-test-pw'`, `CREATE DATABASE maas OWNER maas`)
	return map[string]string{dbHost: testPG.Addr()}
}

func adminExec(t *testing.T, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	c, err := testPG.Admin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestKeysLiveInTheDatabase: a minted key is a row of api_keys (hash only),
// and the schema is migrated to SchemaVersion, clean.
func TestKeysLiveInTheDatabase(t *testing.T) {
	c := start(t, healthy(t), Options{})
	key, id := c.mint(aliceToken, sub)
	ctx := context.Background()
	rows := adminQuery(t, `SELECT username || '|' || key_hash || '|' || subscription || '|' || array_to_string(user_groups, ',') FROM api_keys WHERE id = '`+id+`'`)
	if len(rows) != 1 || !strings.HasPrefix(rows[0], "alice|"+hashKey(key)+"|"+sub+"|developers") || strings.Contains(rows[0], key) {
		t.Errorf("api_keys row for %s = %q", id, rows)
	}
	if got := adminQuery(t, `SELECT version || ' ' || dirty FROM schema_migrations`); len(got) != 1 || got[0] != fmt.Sprintf("%d false", SchemaVersion) {
		t.Errorf("schema_migrations = %q, want version %d clean", got, SchemaVersion)
	}
	keys, err := c.s.KeysErr(ctx)
	if err != nil || len(keys) != 1 || keys[0].ID != id {
		t.Errorf("Keys() = %v, %v", keys, err)
	}
}

// adminQuery runs a one-column query in database maas as the superuser.
func adminQuery(t *testing.T, q string) []string {
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, strings.Replace(testPG.AdminConnString(), "dbname=postgres", "dbname=maas", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	rows, err := db.Query(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// TestDatabaseFailures: maas-api fails as it does upstream when its
// database refuses it, names the database, never the password, and
// recovers once the password agrees again.
func TestDatabaseFailures(t *testing.T) {
	r := healthy(t)
	c := start(t, r, Options{})
	if st, _ := c.do(http.MethodGet, "/maas-api/health", "", nil); st != http.StatusOK {
		t.Fatalf("health: HTTP %d", st)
	}
	c.mint(aliceToken, sub)

	// The role's password changes behind the Secret: the running maas-api
	// fails its next statement with 500 naming the database.
	adminExec(t, `ALTER ROLE maas PASSWORD 'rotated-elsewhere'`)
	st, b := c.do(http.MethodPost, "/maas-api/v1/api-keys", aliceToken, map[string]any{"name": "x", "subscription": sub})
	body := string(b)
	if st != http.StatusInternalServerError || !strings.Contains(body, "Failed to create API key") ||
		!strings.Contains(body, `database \"maas\" on `+dbHost) || !strings.Contains(body, "28P01") {
		t.Errorf("mint with a stale password: HTTP %d %s", st, body)
	}
	for _, l := range append(c.s.MaaSAPILog(), body) {
		if strings.Contains(l, "unit-test-pw") || strings.Contains(l, "rotated-elsewhere") {
			t.Errorf("a password leaked: %s", l)
		}
	}
	// A restart (new Deployment generation) cannot start: no healthy upstream.
	setDeploymentGeneration(r, 2)
	if st, b := c.do(http.MethodGet, "/maas-api/health", "", nil); st != http.StatusServiceUnavailable || string(b) != noHealthyUpstream {
		t.Errorf("health after a restart with a stale password: HTTP %d %s", st, b)
	}
	if log := strings.Join(c.s.MaaSAPILog(), "\n"); !strings.Contains(log, "failed to initialize token store") || !strings.Contains(log, "password authentication failed") {
		t.Errorf("maas-api log does not say why it exited:\n%s", log)
	}
	// The password agrees again: maas-api starts and serves.
	adminExec(t, `ALTER ROLE maas PASSWORD 'unit-test-pw'`)
	if st, b := c.do(http.MethodGet, "/maas-api/health", "", nil); st != http.StatusOK {
		t.Errorf("health once the password agrees: HTTP %d %s", st, b)
	}
	c.mint(aliceToken, sub)

	// sslmode=disable is refused by pg_hba.conf (hostssl only).
	setURL(r, "postgresql://maas:unit-test-pw@"+dbHost+"/maas?sslmode=disable")
	setDeploymentGeneration(r, 3)
	if st, _ := c.do(http.MethodGet, "/maas-api/health", "", nil); st != http.StatusServiceUnavailable {
		t.Errorf("health with sslmode=disable: HTTP %d", st)
	}
	if log := c.s.MaaSAPILog(); !strings.Contains(log[len(log)-1], "no pg_hba.conf entry") {
		t.Errorf("last log line = %q, want pg_hba.conf refusal", log[len(log)-1])
	}
	// An unmapped host resolves nowhere (no DNS).
	setURL(r, "postgresql://maas:unit-test-pw@maas-postgres-rw:5432/maas?sslmode=require")
	setDeploymentGeneration(r, 4)
	if st, _ := c.do(http.MethodGet, "/maas-api/health", "", nil); st != http.StatusServiceUnavailable {
		t.Errorf("health with an unmapped host: HTTP %d", st)
	}
	if log := c.s.MaaSAPILog(); !strings.Contains(log[len(log)-1], "lookup maas-postgres-rw: no such host") {
		t.Errorf("last log line = %q, want a failed lookup", log[len(log)-1])
	}
	// The Secret goes away: the running maas-api keeps the URL it read at
	// start; a restart cannot load it.
	setURL(r, "postgresql://maas:unit-test-pw@"+dbHost+"/maas?sslmode=require")
	setDeploymentGeneration(r, 5)
	if st, _ := c.do(http.MethodGet, "/maas-api/health", "", nil); st != http.StatusOK {
		t.Fatalf("health after a restart with a good URL: HTTP %d", st)
	}
	r.Remove(verify.SecretGVK, "redhat-ai-gateway-infra", "maas-db-config")
	if st, b := c.do(http.MethodGet, "/maas-api/health", "", nil); st != http.StatusOK {
		t.Errorf("health of a running maas-api after its Secret was deleted: HTTP %d %s", st, b)
	}
	c.mint(aliceToken, sub)
	setDeploymentGeneration(r, 6)
	if st, _ := c.do(http.MethodGet, "/maas-api/health", "", nil); st != http.StatusServiceUnavailable {
		t.Errorf("health after a restart without its Secret: HTTP %d", st)
	}
	if log := c.s.MaaSAPILog(); !strings.Contains(log[len(log)-1], "failed to load database URL: secret redhat-ai-gateway-infra/maas-db-config not found") {
		t.Errorf("last log line = %q", log[len(log)-1])
	}
}

func setDeploymentGeneration(r *verify.StaticReader, gen int64) {
	mutate(r, func() (*unstructured.Unstructured, error) {
		return r.Get(context.Background(), verify.DeploymentGVK, "redhat-ai-gateway-infra", "maas-api")
	}, func(u *unstructured.Unstructured) { u.SetGeneration(gen) })
}

func setURL(r *verify.StaticReader, url string) {
	mutate(r, func() (*unstructured.Unstructured, error) {
		return r.Get(context.Background(), verify.SecretGVK, "redhat-ai-gateway-infra", "maas-db-config")
	}, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, base64.StdEncoding.EncodeToString([]byte(url)), "data", "DB_CONNECTION_URL")
	})
}
