package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The database side of a simulated CNPG Cluster's initdb bootstrap, done
// in the real PostgreSQL of Options.Postgres as CNPG's instance manager
// does it on a new PGDATA (cloudnative-pg pkg/management/postgres/initdb.go,
// InitInfo.ConfigureNewInstance; docs/src/bootstrap.md "initdb"):
//
//   - the owner (spec.bootstrap.initdb.owner, default the database name,
//     default "app") is created as CREATE ROLE <owner> LOGIN when it does
//     not exist, and its password is the `password` of the basic-auth
//     Secret spec.bootstrap.initdb.secret (or of the generated <cluster>-app
//     Secret when none is named);
//   - the database (spec.bootstrap.initdb.database, default "app") is
//     created as CREATE DATABASE <db> OWNER <owner> when it does not exist.
//
// This happens once per Cluster (its UID is recorded as the database's
// comment). A later change of the Secret is not applied to the role: CNPG
// applied in-place Secret updates only when its pods restarted
// (cloudnative-pg#2658), which is how a password reaches the Secret but
// not the database (case B08). A leftover database and role of a deleted
// Cluster with the same names are dropped first: a new Cluster has a new
// PGDATA on a new PVC (the old PVCs are garbage-collected with the old
// Cluster). Two Clusters sharing one database name in one test are not
// supported.

// bootstrapped records Cluster UIDs whose database this process already
// checked, to skip the round trip on every reconcile.
var bootstrapped sync.Map // Options.Postgres + "|" + UID -> bool

func (c *cnpg) bootstrapDatabase(ctx context.Context, cl *unstructured.Unstructured, owner, secretName string) error {
	m := c.m
	if m.opts.Postgres == "" || held(ctx) {
		return nil
	}
	done := m.opts.Postgres + "|" + string(cl.GetUID())
	if _, ok := bootstrapped.Load(done); ok {
		return nil
	}
	db := str(cl, "spec", "bootstrap", "initdb", "database")
	if db == "" {
		db = "app"
	}
	password, err := c.ownerPassword(ctx, cl, secretName)
	if err != nil {
		return err
	}
	marker := "cnpg.io/cluster-uid=" + string(cl.GetUID())
	conn, err := pgx.Connect(ctx, m.opts.Postgres)
	if err != nil {
		return fmt.Errorf("initdb of cluster %s: connect to PostgreSQL as superuser: %w", keyOf(cl), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var comment *string
	err = conn.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database') FROM pg_catalog.pg_database WHERE datname = $1`, db).Scan(&comment)
	switch {
	case err == nil && comment != nil && *comment == marker:
		bootstrapped.Store(done, true)
		return nil
	case err == nil:
		// A previous Cluster's database: a new Cluster starts from an empty PGDATA.
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(db)+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("initdb of cluster %s: drop the previous cluster's database %q: %w", keyOf(cl), db, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("initdb of cluster %s: look up database %q: %w", keyOf(cl), db, err)
	}
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+ident(owner)); err != nil {
		return fmt.Errorf("initdb of cluster %s: drop the previous cluster's role %q: %w", keyOf(cl), owner, err)
	}
	// The password goes in as a literal (DDL takes no parameters); the
	// server stores its SCRAM-SHA-256 verifier. Errors never echo it: a
	// PgError carries the server's message, which does not quote it.
	stmts := []string{
		"CREATE ROLE " + ident(owner) + " LOGIN PASSWORD " + literal(password),
		"CREATE DATABASE " + ident(db) + " OWNER " + ident(owner),
		"COMMENT ON DATABASE " + ident(db) + " IS " + literal(marker),
	}
	for i, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				err = fmt.Errorf("%s (SQLSTATE %s)", pe.Message, pe.Code)
			} else {
				err = errors.New("statement failed")
			}
			return fmt.Errorf("initdb of cluster %s: step %d of 3 (role %q, database %q): %w", keyOf(cl), i+1, owner, db, err)
		}
	}
	bootstrapped.Store(done, true)
	m.log.Info("initdb: created owner role and database", zap.Stringer("cluster", keyOf(cl)), zap.String("owner", owner), zap.String("database", db))
	return nil
}

// ownerPassword reads the owner's password from the initdb Secret (or the
// generated <cluster>-app Secret), from the cache or, right after it was
// created, from the API server. It is never logged.
func (c *cnpg) ownerPassword(ctx context.Context, cl *unstructured.Unstructured, secretName string) (string, error) {
	if secretName == "" {
		secretName = cl.GetName() + "-app"
	}
	if s := c.m.get(gvrSecret, cl.GetNamespace(), secretName); s != nil {
		return secretValue(s, "password")
	}
	s, err := c.m.kube.CoreV1().Secrets(cl.GetNamespace()).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("initdb of cluster %s: read secret %s: %w", keyOf(cl), secretName, err)
	}
	if pw := string(s.Data["password"]); pw != "" {
		return pw, nil
	}
	return "", fmt.Errorf("initdb of cluster %s: secret %s has no password", keyOf(cl), secretName)
}

// ident quotes a PostgreSQL identifier.
func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

// literal quotes a string constant (standard_conforming_strings is on, the
// default since PostgreSQL 9.1, so only ' needs doubling).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
