package doctor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// fakeSchema answers the schema check with fixed bits.
type fakeSchema struct{ bits int }

func (f fakeSchema) ProbeSchema(context.Context, *inventory.Inventory) verify.SchemaProbe {
	return verify.SchemaProbe{Ran: true, Bits: f.bits, Job: "rhoai-maas-db/maasctl-db-schema-x"}
}

// TestSchemaFindings: each answer of the database's schema check becomes
// its own error finding with the SQL that fixes it (case N10); a healthy
// schema gives none.
func TestSchemaFindings(t *testing.T) {
	for _, tc := range []struct {
		bits int
		want map[string]string // code -> text of its fix
	}{
		{0, nil},
		{verify.SchemaNotOwner, map[string]string{doctor.CodeDBNotOwner: "ALTER TABLE api_keys OWNER TO maas;"}},
		{verify.SchemaDirty, map[string]string{doctor.CodeDBDirty: "UPDATE schema_migrations SET version = N-1, dirty = false;"}},
		{verify.SchemaInvalidIndex, map[string]string{doctor.CodeDBIndexInvalid: "REINDEX INDEX CONCURRENTLY idx_api_keys_labels_gin;"}},
		{7, map[string]string{doctor.CodeDBNotOwner: "OWNER TO maas", doctor.CodeDBDirty: "migrate force", doctor.CodeDBIndexInvalid: "DROP INDEX CONCURRENTLY"}},
	} {
		rep, err := doctor.Run(context.Background(), doctor.Options{Inventory: inventory.Default(), Reader: healthy(t), Schema: fakeSchema{tc.bits}})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]doctor.Finding{}
		for _, f := range rep.Findings {
			got[f.Code] = f
		}
		for _, code := range []string{doctor.CodeDBNotOwner, doctor.CodeDBDirty, doctor.CodeDBIndexInvalid} {
			f, ok := got[code]
			fix, want := tc.want[code]
			switch {
			case ok != want:
				t.Errorf("bits %d: finding %s present %v, want %v (%v)", tc.bits, code, ok, want, rep.Codes())
			case want && (f.Severity != doctor.Error || !strings.Contains(f.Fix, fix) || !strings.Contains(f.Evidence, "maasctl-db-schema-x")):
				t.Errorf("bits %d: %s = %+v, want an error whose fix holds %q", tc.bits, code, f, fix)
			}
		}
	}
}
