package verify

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/dbjob"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// maas-api's schema migrations (case N10).
//
// On every start maas-api runs golang-migrate over its embedded
// db/schema/*.sql (table schema_migrations: version, dirty), then its
// "concurrent migrations" outside any transaction, today
// CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_api_keys_labels_gin
// (opendatahub-io/models-as-a-service maas-api
// internal/api_keys/db_driver.go). Three states break or degrade it:
//
//   - the role of maas-db-config's URL does not own api_keys: ALTER TABLE
//     fails with "must be owner of table api_keys" (SQLSTATE 42501) and
//     maas-api exits "schema migration failed";
//   - an interrupted migration left schema_migrations dirty: every start
//     fails with golang-migrate's "Dirty database version N. Fix and force
//     version." (golang-migrate/migrate#282, #361);
//   - an interrupted CREATE INDEX CONCURRENTLY left the index INVALID
//     (pg_index.indisvalid false); the retry's IF NOT EXISTS skips it, so
//     maas-api starts and nothing ever reports it.
//
// The first two are read from what maas-api reports: its pods' container
// state (CrashLoopBackOff) and last termination message (which holds the
// end of its log when the container's terminationMessagePolicy is
// FallbackToLogsOnError; otherwise `oc logs --previous` does). The third
// is in the database only, so maasctl asks it: a short Job in the database
// namespace (SchemaProber), like the password proof Job of steps/dbproof.go
// and for the same reasons (it connects as maas-api does, through the
// CNPG -rw Service with TLS; it needs create/get/delete on Jobs in that
// namespace only, no pods/exec or port-forward; maasctl keeps no database
// client). The Job logs in as the owner role with the password of the
// CNPG basic-auth Secret (database.secretName, key password, by
// secretKeyRef: no copy of it is made) and runs SchemaSQL, read-only,
// which answers all three questions at once as a bit set; the container
// exits 64 plus that set when it is not zero, and the Job's
// podFailurePolicy turns those exit codes into a Failed condition whose
// message carries the exit code (reason PodFailurePolicy; Kubernetes
// pkg/controller/job pod_failure_policy.go: "Container psql for pod ...
// failed with exit code N matching FailJob rule at index 0"). So the
// outcome is read from the Job's status alone, without its pod's log.

// DBJobLabel marks maasctl's database Jobs; its value is the Job's kind
// (steps.DBJobProve, steps.DBJobChange, DBJobSchema).
const DBJobLabel = "maasctl.io/db-job"

// DBJobSchema is the read-only schema check Job of SchemaProber.
const DBJobSchema = "schema"

// ConcurrentIndexes are the indexes maas-api builds with CREATE INDEX
// CONCURRENTLY (its concurrent migrations): the only MaaS indexes a crash
// can leave INVALID (an index built inside a migration's transaction is
// rolled back with it).
var ConcurrentIndexes = []string{"idx_api_keys_labels_gin"}

// Bits of SchemaSQL's answer.
const (
	SchemaNotOwner     = 1 // api_keys exists and its owner is not current_user
	SchemaDirty        = 2 // schema_migrations has a dirty row
	SchemaInvalidIndex = 4 // an index of ConcurrentIndexes has indisvalid false
)

// schemaExitBase is added to SchemaSQL's answer for the container's exit
// code (64..71; psql itself exits 1, 2 or 3).
const schemaExitBase = 64

// SchemaSQL is the check Job's query: one integer, the sum of the Schema*
// bits. Read-only; tables that do not exist yet (maas-api has not
// migrated) count as fine. schema_migrations is read through query_to_xml
// inside a CASE so that a missing table is never parsed.
var SchemaSQL = `SELECT
  (CASE WHEN a.oid IS NOT NULL AND pg_get_userbyid(a.relowner) <> current_user THEN 1 ELSE 0 END)
+ (CASE WHEN to_regclass('schema_migrations') IS NULL THEN 0
        WHEN (xpath('/row/d/text()', query_to_xml('SELECT count(*) AS d FROM schema_migrations WHERE dirty', false, true, '')))[1]::text <> '0' THEN 2
        ELSE 0 END)
+ (CASE WHEN EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                     WHERE c.relname IN (` + quoteList(ConcurrentIndexes) + `) AND NOT i.indisvalid) THEN 4 ELSE 0 END)
FROM (SELECT 1) AS one LEFT JOIN pg_class a ON a.oid = to_regclass('api_keys')`

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	return strings.Join(q, ", ")
}

// schemaScript runs SchemaSQL (from env SCHEMA_SQL) and exits with
// schemaExitBase plus its answer when that is not 0.
const schemaScript = `set -eu
bits=$(psql -X -tA -v ON_ERROR_STOP=1 -c "$SCHEMA_SQL")
[ "$bits" = 0 ] || exit $((64 + bits))
`

// SchemaProbe is the outcome of the schema check Job. Ran is false when
// the check could not run (Err says why); Bits is SchemaSQL's answer.
type SchemaProbe struct {
	Ran  bool
	Bits int
	// Job is namespace/name of the Job; Err why it did not answer.
	Job, Err string
}

// SchemaProber runs the schema check against the live database.
type SchemaProber interface {
	ProbeSchema(ctx context.Context, inv *inventory.Inventory) SchemaProbe
}

// JobSchemaProber is the SchemaProber of a cluster: the Job described at
// the top of this file, waited for at most Timeout (default 3 minutes).
type JobSchemaProber struct {
	Clients *kube.Clients
	Timeout time.Duration
}

// SchemaJob is the schema check Job for inv (GenerateName
// maasctl-db-schema-).
func SchemaJob(inv *inventory.Inventory) *batchv1.Job {
	d := inv.Database
	labels := map[string]string{DBJobLabel: DBJobSchema, "app.kubernetes.io/managed-by": "maasctl"}
	codes := make([]int32, 0, 7)
	for b := 1; b <= SchemaNotOwner|SchemaDirty|SchemaInvalidIndex; b++ {
		codes = append(codes, int32(schemaExitBase+b))
	}
	job := dbjob.New(d, DBJobSchema, labels, d.SecretName, "password", []string{"sh", "-c", schemaScript},
		[]corev1.EnvVar{{Name: "SCHEMA_SQL", Value: SchemaSQL}}, 120)
	ctr := dbjob.Container
	job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action:      batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: &ctr, Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: codes},
	}}}
	return job
}

var exitCodeRE = regexp.MustCompile(`exit code (\d+)`)

// ProbeSchema implements SchemaProber.
func (p JobSchemaProber) ProbeSchema(ctx context.Context, inv *inventory.Inventory) SchemaProbe {
	ns := inv.Database.Namespace
	jobs := p.Clients.Kube.BatchV1().Jobs(ns)
	job, err := jobs.Create(ctx, SchemaJob(inv), metav1.CreateOptions{FieldManager: kube.FieldManager})
	if err != nil {
		return SchemaProbe{Err: fmt.Sprintf("cannot create the schema check Job in %s: %v", ns, err)}
	}
	out := SchemaProbe{Job: ns + "/" + job.Name}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	keep := false
	_, err = waiters.For(wctx, p.Clients, waiters.Target{
		GVK:       schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
		Namespace: ns, Name: job.Name,
		Cond: func(u *unstructured.Unstructured) waiters.Result {
			if c, ok := waiters.GetCondition(u, string(batchv1.JobComplete)); ok && c.Status == "True" {
				out.Ran = true
				return waiters.Result{Done: true, Status: "Complete"}
			}
			if c, ok := waiters.GetCondition(u, string(batchv1.JobFailed)); ok && c.Status == "True" {
				if m := exitCodeRE.FindStringSubmatch(c.Message); c.Reason == batchv1.JobReasonPodFailurePolicy && m != nil {
					if n, _ := strconv.Atoi(m[1]); n > schemaExitBase && n <= schemaExitBase+7 {
						out.Ran, out.Bits = true, n-schemaExitBase
						return waiters.Result{Done: true, Status: "Failed"}
					}
				}
				keep = true
				out.Err = fmt.Sprintf("the schema check Job %s failed (%s: %s); its log says why: kubectl logs job/%s -n %s", out.Job, c.Reason, c.Message, job.Name, ns)
				return waiters.Result{Done: true, Status: "Failed"}
			}
			return waiters.Result{Status: "running"}
		},
	})
	if err != nil && out.Err == "" {
		keep = true
		out.Err = fmt.Sprintf("schema check Job %s: %v", out.Job, err)
	}
	if !keep {
		bg := metav1.DeletePropagationBackground
		_ = jobs.Delete(context.WithoutCancel(ctx), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	}
	return out
}

// MigrationFailure is what a maas-api pod reports about its start: Kind is
// "owner", "dirty" or "migration" ("" when the pod reports none), Version
// the dirty version, Object what it does not own, Message the line read.
type MigrationFailure struct {
	Pod, Kind, Object, Message string
	Version                    int
	CrashLoop                  bool
}

var (
	dirtyRE = regexp.MustCompile(`Dirty database version (\d+)`)
	ownerRE = regexp.MustCompile(`must be owner of (?:table|relation|index|sequence) ([A-Za-z0-9_."]+)`)
)

// migrationFailures reads the maas-api pods' container states: a
// terminated state or last termination whose message names a migration
// failure (see the top of this file).
func migrationFailures(pods []*unstructured.Unstructured) []MigrationFailure {
	var out []MigrationFailure
	for _, p := range pods {
		cs, _, _ := unstructured.NestedSlice(p.Object, "status", "containerStatuses")
		for _, x := range cs {
			m, _ := x.(map[string]any)
			waiting, _, _ := unstructured.NestedString(m, "state", "waiting", "reason")
			for _, path := range [][]string{{"state", "terminated", "message"}, {"lastState", "terminated", "message"}} {
				msg, _, _ := unstructured.NestedString(m, path...)
				f := MigrationFailure{Pod: p.GetName(), CrashLoop: waiting == "CrashLoopBackOff"}
				switch {
				case dirtyRE.MatchString(msg):
					f.Kind = "dirty"
					f.Version, _ = strconv.Atoi(dirtyRE.FindStringSubmatch(msg)[1])
				case ownerRE.MatchString(msg):
					f.Kind, f.Object = "owner", strings.Trim(ownerRE.FindStringSubmatch(msg)[1], `"`)
				case strings.Contains(msg, "migration failed") || strings.Contains(msg, "failed to run migrations"):
					f.Kind = "migration"
				default:
					continue
				}
				f.Message = lastLine(msg, dirtyRE, ownerRE)
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// lastLine is the line of msg that matches one of res (or its last line),
// at most 300 characters.
func lastLine(msg string, res ...*regexp.Regexp) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	pick := lines[len(lines)-1]
	for _, l := range lines {
		for _, re := range res {
			if re.MatchString(l) {
				pick = l
			}
		}
	}
	return oneLine(pick, 300)
}

// Fixes of the three schema states, for a DBA on the CNPG primary (the
// postgres container of pod <currentPrimary> connects as the superuser
// over the local socket). owner is the role of maas-db-config's URL,
// which maasctl sets to database.owner.

// psqlOnPrimary is the oc exec prefix that runs sql on the primary.
func psqlOnPrimary(inv *inventory.Inventory, sql string) string {
	d := inv.Database
	return fmt.Sprintf(`oc exec -n %s $(oc get cluster.postgresql.cnpg.io %s -n %s -o jsonpath='{.status.currentPrimary}') -c postgres -- psql -d %s -c %q`,
		d.Namespace, d.ClusterName, d.Namespace, d.Name, sql)
}

func restartMaaSAPI(ns string) string {
	return "oc rollout restart deployment/maas-api -n " + ns
}

// OwnerFix is the fix of a maas-api whose role does not own its tables.
func OwnerFix(inv *inventory.Inventory, maasAPINS string) string {
	o := inv.Database.Owner
	return fmt.Sprintf("make the role of maas-db-config (%s) the owner of the MaaS tables, then restart maas-api: %s; %s   (maasctl never switches maas-db-config to another role)",
		o, psqlOnPrimary(inv, fmt.Sprintf("ALTER TABLE api_keys OWNER TO %s; ALTER TABLE schema_migrations OWNER TO %s;", o, o)), restartMaaSAPI(maasAPINS))
}

// DirtyFix is golang-migrate's documented force procedure for version
// (0: read it first); never done automatically.
func DirtyFix(inv *inventory.Inventory, maasAPINS string, version int) string {
	v, prev := "N", "N-1"
	if version > 0 {
		v, prev = strconv.Itoa(version), strconv.Itoa(version-1)
	}
	return fmt.Sprintf("scale maas-api down (oc scale deployment/maas-api -n %s --replicas=0), read the state (%s), check which statements of maas-api db/schema/%s_*.up.sql took effect, then force the version: none applied -> %s (golang-migrate: migrate force %s) so maas-api runs it again; all applied -> %s; then oc scale deployment/maas-api -n %s --replicas=1",
		maasAPINS, psqlOnPrimary(inv, "SELECT version, dirty FROM schema_migrations;"), pad4(v),
		psqlOnPrimary(inv, fmt.Sprintf("UPDATE schema_migrations SET version = %s, dirty = false;", prev)), prev,
		psqlOnPrimary(inv, "UPDATE schema_migrations SET dirty = false;"), maasAPINS)
}

func pad4(v string) string {
	if n, err := strconv.Atoi(v); err == nil {
		return fmt.Sprintf("%04d", n)
	}
	return "000" + v
}

// IndexFix rebuilds the INVALID concurrent indexes.
func IndexFix(inv *inventory.Inventory, maasAPINS string) string {
	var re, drop []string
	for _, i := range ConcurrentIndexes {
		re = append(re, "REINDEX INDEX CONCURRENTLY "+i+";")
		drop = append(drop, "DROP INDEX CONCURRENTLY IF EXISTS "+i+";")
	}
	return fmt.Sprintf("rebuild it without locking writes: %s   (or drop it and let maas-api re-create it at start: %s then %s)",
		psqlOnPrimary(inv, strings.Join(re, " ")), psqlOnPrimary(inv, strings.Join(drop, " ")), restartMaaSAPI(maasAPINS))
}
