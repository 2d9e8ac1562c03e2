package verify

import (
	"fmt"
	"strings"
)

// checkMigrations (MAAS-V015): no maas-api pod reports a failed schema
// migration in its container state (case N10 (a), (b); dbschema.go).
func checkMigrations(s *State) Check {
	ns := s.Release.MaaSAPINamespace(s.Inv)
	c := newCheck(CodeMaaSAPIMigrations, describe("Deployment", ns, "maas-api"))
	if s.MaaSAPI == nil {
		return c.skip("no Deployment maas-api (MAAS-V004)")
	}
	fs := migrationFailures(s.MaaSAPIPods)
	if len(fs) == 0 {
		return c.pass(fmt.Sprintf("%d pod(s), none reports a failed schema migration", len(s.MaaSAPIPods)))
	}
	f := fs[0]
	state := "terminated"
	if f.CrashLoop {
		state = "CrashLoopBackOff"
	}
	detail := fmt.Sprintf("pod %s (%s): %s", f.Pod, state, f.Message)
	if len(fs) > 1 {
		detail += fmt.Sprintf(" (and %d more)", len(fs)-1)
	}
	cause, fix := MigrationCause(s, f)
	return c.fail(detail, cause, fix)
}

// MigrationFailuresOf is what the maas-api pods of s report about their
// schema migrations.
func MigrationFailuresOf(s *State) []MigrationFailure { return migrationFailures(s.MaaSAPIPods) }

// MigrationCause is the cause and fix of a maas-api migration failure.
func MigrationCause(s *State, f MigrationFailure) (string, string) {
	ns := s.Release.MaaSAPINamespace(s.Inv)
	switch f.Kind {
	case "owner":
		return fmt.Sprintf("maas-api's database role (maas-db-config: %s) does not own %s, so its schema migration's ALTER TABLE is refused (must be owner, SQLSTATE 42501) and maas-api crash-loops", s.Inv.Database.Owner, orNone(f.Object)),
			OwnerFix(s.Inv, ns)
	case "dirty":
		return fmt.Sprintf("a schema migration of maas-api was interrupted (pod killed or database switchover): schema_migrations is marked dirty at version %d and every maas-api start refuses to run", f.Version),
			DirtyFix(s.Inv, ns, f.Version)
	}
	return "maas-api's schema migration failed at start, so it crash-loops", fmt.Sprintf("oc logs -n %s deploy/maas-api --previous --tail=30   (then: maasctl verify --database names ownership, dirty and index problems)", ns)
}

// checkDBSchema (MAAS-V016): the database's answer to the schema check
// Job (dbschema.go): api_keys owned by the owner role, schema_migrations
// clean, the concurrent indexes valid.
func checkDBSchema(s *State) Check {
	d := s.Inv.Database
	c := newCheck(CodeDBSchema, "database "+d.Name+" of Cluster "+d.Namespace+"/"+d.ClusterName)
	if s.Schema == nil {
		return c.skip("not asked: --database runs a read-only schema check Job in " + d.Namespace)
	}
	p := s.Schema
	if !p.Ran {
		return c.fail(p.Err, "the database could not be asked about maas-api's schema", "check that the CNPG Cluster is Ready and Secret "+d.Namespace+"/"+d.SecretName+" holds the owner's password: maasctl doctor")
	}
	if p.Bits == 0 {
		return c.pass("as role " + d.Owner + ": api_keys owned by it, schema_migrations clean, " + strings.Join(ConcurrentIndexes, ", ") + " valid (Job " + p.Job + ")")
	}
	var obs, causes, fixes []string
	for _, x := range SchemaProblems(s) {
		obs, causes, fixes = append(obs, x.Observed), append(causes, x.Cause), append(fixes, x.Fix)
	}
	return c.fail(strings.Join(obs, "; ")+" (Job "+p.Job+")", strings.Join(causes, "; "), strings.Join(fixes, "; "))
}

// SchemaProblem is one bit of the schema check's answer explained.
type SchemaProblem struct {
	Bit                  int
	Observed, Cause, Fix string
}

// SchemaProblems lists, per bit of s.Schema, the observation, cause and
// fix.
func SchemaProblems(s *State) []SchemaProblem {
	if s.Schema == nil || !s.Schema.Ran {
		return nil
	}
	ns, o := s.Release.MaaSAPINamespace(s.Inv), s.Inv.Database.Owner
	var out []SchemaProblem
	if s.Schema.Bits&SchemaNotOwner != 0 {
		out = append(out, SchemaProblem{SchemaNotOwner, "api_keys is not owned by role " + o,
			"maas-api's next migration (ALTER TABLE api_keys) fails with must be owner and maas-api crash-loops", OwnerFix(s.Inv, ns)})
	}
	if s.Schema.Bits&SchemaDirty != 0 {
		out = append(out, SchemaProblem{SchemaDirty, "schema_migrations is dirty",
			"an interrupted migration: every maas-api start fails with Dirty database version N", DirtyFix(s.Inv, ns, 0)})
	}
	if s.Schema.Bits&SchemaInvalidIndex != 0 {
		out = append(out, SchemaProblem{SchemaInvalidIndex, "index " + strings.Join(ConcurrentIndexes, ", ") + " is INVALID (pg_index.indisvalid false)",
			"an interrupted CREATE INDEX CONCURRENTLY: maas-api's retry skips it (IF NOT EXISTS), label searches scan the whole table and writes still maintain it; maas-api reports nothing", IndexFix(s.Inv, ns)})
	}
	return out
}
