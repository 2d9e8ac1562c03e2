package testenv

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// startTestPostgres starts the real server in a new state folder, skipping
// (unless MAASCTL_REQUIRE_TESTENV=1) when it is not installed.
func startTestPostgres(t *testing.T) *PostgresServer {
	t.Helper()
	if _, err := FindPostgres(); err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(err)
		}
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	pg, err := StartPostgres(ctx)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Logf("%s ready on %s after %d ms", pg.Version, pg.Addr(), time.Since(t0).Milliseconds())
	t.Cleanup(func() {
		if err := pg.Stop(); err != nil {
			t.Errorf("stop PostgreSQL: %v", err)
		}
	})
	return pg
}

// TestPostgresTLSAndPasswords: a role with a password logs in over TCP
// only with TLS and only with its password; without TLS pg_hba.conf has
// no line for the connection.
func TestPostgresTLSAndPasswords(t *testing.T) {
	pg := startTestPostgres(t)
	ctx := context.Background()
	admin, err := pg.Admin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE ROLE app LOGIN PASSWORD 's3cr3t''pw'`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE app OWNER app`); err != nil {
		t.Fatal(err)
	}
	url := func(pw, mode string) string {
		return "postgresql://app:" + pw + "@" + pg.Addr() + "/app?sslmode=" + mode + "&connect_timeout=5"
	}
	c, err := pgx.Connect(ctx, url("s3cr3t%27pw", "require"))
	if err != nil {
		t.Fatalf("TLS + right password: %v", err)
	}
	var ssl bool
	if err := c.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil || !ssl {
		t.Errorf("session is not TLS (ssl=%v, err=%v)", ssl, err)
	}
	_ = c.Close(ctx)

	_, err = pgx.Connect(ctx, url("s3cr3t%27pw", "disable"))
	if err == nil || !strings.Contains(err.Error(), "no pg_hba.conf entry") || !strings.Contains(err.Error(), "no encryption") {
		t.Errorf("a connection without TLS was not refused by pg_hba.conf: %v", err)
	}
	_, err = pgx.Connect(ctx, url("wrong", "require"))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28P01" {
		t.Errorf("wrong password: want SQLSTATE 28P01, got %v", err)
	}
	// A failed statement carrying a password is not logged with its text.
	if _, err := admin.Exec(ctx, `CREATE ROLE app LOGIN PASSWORD 'logged-if-leaky'`); err == nil {
		t.Error("CREATE ROLE of an existing role succeeded")
	}
	if logContains(pg.proc.logFile, "logged-if-leaky") {
		t.Errorf("%s holds the text of a failed statement with a password", pg.proc.logFile)
	}
	var method string
	if err := admin.QueryRow(ctx, `SELECT left(rolpassword, 13) FROM pg_authid WHERE rolname = 'app'`).Scan(&method); err != nil || method != "SCRAM-SHA-256" {
		t.Errorf("password not stored as SCRAM-SHA-256: %q %v", method, err)
	}
}

// TestPostgresPortTaken: PostgreSQL started on a port another process
// holds exits with an exitedError whose portInUse is true, the check
// startPostgresFreePort and Start retry on (PostgreSQL logs
// "Address already in use", capitalised, which the Go servers' check
// missed: CI of 2026-12-03).
func TestPostgresPortTaken(t *testing.T) {
	startTestPostgres(t) // skips or fails as the others do when not installed
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := startPostgres(ctx, dir, l.Addr().(*net.TCPAddr).Port, false)
	if err == nil {
		_ = pg.stop()
		t.Fatal("PostgreSQL started on a port another listener holds")
	}
	var ex *exitedError
	if !errors.As(err, &ex) || !ex.portInUse() {
		t.Fatalf("the start error is not taken as a port in use (no retry would follow): %v", err)
	}
}
