package doctor

import (
	"fmt"

	"github.com/maasctl/maasctl/internal/verify"
)

// Finding codes of maas-api's schema migrations (case N10).
const (
	CodeDBNotOwner     = "MAAS-D032"
	CodeDBDirty        = "MAAS-D033"
	CodeDBIndexInvalid = "MAAS-D034"
)

// schemaFindings: what maas-api's pods report about their migrations
// (verify.MigrationFailure) and what the database answered the schema
// check Job (verify.SchemaProblems, with --database). Each finding's fix
// is the SQL a DBA runs on the CNPG primary; none is applied by maasctl.
func schemaFindings(s *verify.State) []Finding {
	var out []Finding
	d := s.Inv.Database
	dbObj := "database " + d.Name + " of Cluster " + d.Namespace + "/" + d.ClusterName
	podObj := obj("Deployment", s.Release.MaaSAPINamespace(s.Inv), "maas-api")
	for _, f := range verify.MigrationFailuresOf(s) {
		cause, fix := verify.MigrationCause(s, f)
		ev := fmt.Sprintf("pod %s: %s", f.Pod, f.Message)
		switch f.Kind {
		case "owner":
			out = append(out, finding(CodeDBNotOwner, podObj, ev, cause, fix))
		case "dirty":
			out = append(out, finding(CodeDBDirty, podObj, ev, cause, fix))
		}
	}
	if s.Schema == nil || !s.Schema.Ran {
		return out
	}
	codes := map[int]string{verify.SchemaNotOwner: CodeDBNotOwner, verify.SchemaDirty: CodeDBDirty, verify.SchemaInvalidIndex: CodeDBIndexInvalid}
	for _, p := range verify.SchemaProblems(s) {
		out = append(out, finding(codes[p.Bit], dbObj, p.Observed+" (schema check Job "+s.Schema.Job+")", p.Cause, p.Fix))
	}
	return out
}
