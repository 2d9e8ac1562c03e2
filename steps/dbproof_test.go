package steps

import (
	"strings"
	"testing"

	"github.com/maasctl/maasctl/inventory"
)

// The database Jobs carry no password: libpq's PG* variables name the -rw
// Service, the owner, the database and sslmode=require; PGPASSWORD and
// NEW_PASSWORD come from the Job's Secret only.
func TestDBJobObjectCarriesNoPassword(t *testing.T) {
	inv := inventory.Default()
	for _, kind := range []string{DBJobProve, DBJobChange} {
		j := dbJobObject(inv, kind, "maasctl-db-x", map[string]string{DBJobLabel: kind})
		c := j.Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
				if e.ValueFrom.SecretKeyRef.Name != "maasctl-db-x" {
					t.Errorf("%s: %s from Secret %s", kind, e.Name, e.ValueFrom.SecretKeyRef.Name)
				}
				env[e.Name] = "ref:" + e.ValueFrom.SecretKeyRef.Key
			case e.ValueFrom != nil:
				t.Errorf("%s: %s from something other than a Secret", kind, e.Name)
			default:
				env[e.Name] = e.Value
			}
		}
		want := map[string]string{"PGHOST": "maas-postgres-rw.rhoai-maas-db.svc", "PGPORT": "5432", "PGUSER": inv.Database.Owner, "PGDATABASE": inv.Database.Name, "PGSSLMODE": "require", "PGPASSWORD": "ref:" + DBJobPasswordKey}
		if kind == DBJobChange {
			want["NEW_PASSWORD"] = "ref:" + DBJobNewPasswordKey
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s: %s = %q, want %q", kind, k, env[k], v)
			}
		}
		if kind == DBJobProve && env["NEW_PASSWORD"] != "" {
			t.Errorf("prove Job has NEW_PASSWORD")
		}
		args := strings.Join(append(c.Command, c.Args...), " ")
		if strings.Contains(strings.ToLower(args), "password '") || strings.Contains(args, "PGPASSWORD=") && !strings.Contains(args, `PGPASSWORD="$NEW_PASSWORD"`) {
			t.Errorf("%s: a password literal in the command: %s", kind, args)
		}
		if *j.Spec.BackoffLimit != 0 || j.Spec.ActiveDeadlineSeconds == nil || c.Image != inventory.DefaultDBClientImage {
			t.Errorf("%s: backoffLimit %d, deadline %v, image %s", kind, *j.Spec.BackoffLimit, j.Spec.ActiveDeadlineSeconds, c.Image)
		}
	}
}
