package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// TestN10MaaSAPISchemaMigrations: maas-api cannot migrate (case N10) and
// maasctl names it, in verify and doctor, with the fix a DBA runs; the
// test applies each printed fix and verify/doctor are clean after.
//
// The database states are real: the test creates maas-api's tables as the
// owner role in the control plane's PostgreSQL (as maas-api's
// golang-migrate run would), then (a) gives api_keys to another role,
// (b) marks schema_migrations dirty, (c) leaves idx_api_keys_labels_gin
// INVALID by interrupting its CREATE INDEX CONCURRENTLY (a statement
// timeout while another session holds a lock on the table). The schema
// check Job runs against that database (the simulated Job controller of
// e2e/sim/dbjobs.go runs its SQL). What maas-api reports in (a) and (b)
// is written by the test into the maas-api pod's status the way the
// kubelet writes it for a crash-looping container (state.waiting
// CrashLoopBackOff, lastState.terminated with the termination message):
// kwok runs no container; the fix's restart deletes that pod.
func TestN10MaaSAPISchemaMigrations(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=180"))
	inv := inventory.Default()
	d := inv.Database
	apiNS := inv.RHOAI.MaaSAPINamespace
	ctx := context.Background()
	sec, err := c.clients.Kube.CoreV1().Secrets(d.Namespace).Get(ctx, d.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	password := string(sec.Data["password"])
	db, err := pgx.Connect(ctx, strings.Replace(c.env.Postgres().AdminConnString(), "dbname=postgres", "dbname="+d.Name, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	exec := func(sql string) {
		t.Helper()
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// maas-api's migrations 0001-0006 and its concurrent index, as the
	// owner role of maas-db-config.
	owner := pgx.Identifier{d.Owner}.Sanitize()
	exec("SET ROLE " + owner)
	exec(`CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)`)
	exec(`INSERT INTO schema_migrations VALUES (6, false)`)
	exec(`CREATE TABLE api_keys (id text PRIMARY KEY, username text NOT NULL, key_hash text NOT NULL, tenant text, labels jsonb)`)
	exec(`CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_api_keys_labels_gin ON api_keys USING gin (labels)`)
	exec("RESET ROLE")

	var outputs []string
	defer func() {
		for _, o := range outputs {
			if strings.Contains(o, password) {
				t.Error("the database password appears in maasctl output")
			}
		}
	}()
	verifyDB := func(t *testing.T) map[string]verify.Check {
		t.Helper()
		r := c.maasctl(t, "verify", "--live-only", "--database", "-o", "json")
		outputs = append(outputs, r.stdout+r.stderr)
		var rep verify.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("verify -o json: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		out := map[string]verify.Check{}
		for _, ch := range rep.Checks {
			out[ch.Code] = ch
		}
		return out
	}
	doctorDB := func(t *testing.T) *doctor.Report {
		t.Helper()
		r := c.maasctl(t, "doctor", "--live-only", "--database", "-o", "json")
		outputs = append(outputs, r.stdout+r.stderr)
		var rep doctor.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("doctor -o json: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		return &rep
	}
	clean := func(t *testing.T, when string) {
		t.Helper()
		v := verifyDB(t)
		for _, code := range []string{verify.CodeMaaSAPIMigrations, verify.CodeDBSchema} {
			if v[code].Result != verify.Pass {
				t.Errorf("%s: verify %s = %s: %s (%s)", when, code, v[code].Result, v[code].Detail, v[code].Cause)
			}
		}
		for _, f := range doctorDB(t).Findings {
			if f.Code == doctor.CodeDBNotOwner || f.Code == doctor.CodeDBDirty || f.Code == doctor.CodeDBIndexInvalid {
				t.Errorf("%s: doctor still reports %s: %s", when, f.Code, f.Evidence)
			}
		}
	}
	clean(t, "with maas-api's schema healthy")

	// sqlOf is the SQL of the n-th "psql -d <db> -c ..." of a fix.
	sqlRE := regexp.MustCompile(`psql -d \S+ -c "((?:[^"\\]|\\.)*)"`)
	applyFix := func(t *testing.T, fix string, n int) {
		t.Helper()
		m := sqlRE.FindAllStringSubmatch(fix, -1)
		if len(m) <= n {
			t.Fatalf("the fix names no SQL #%d: %s", n, fix)
		}
		exec(strings.ReplaceAll(m[n][1], `\"`, `"`))
	}
	doctorFinding := func(t *testing.T, code string) *doctor.Finding {
		t.Helper()
		for _, f := range doctorDB(t).Findings {
			if f.Code == code {
				return &f
			}
		}
		t.Fatalf("doctor reports no %s", code)
		return nil
	}

	t.Run("(a) api_keys owned by another role", func(t *testing.T) {
		exec(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'maas_dba') THEN CREATE ROLE maas_dba; END IF; END $$`)
		exec(`ALTER TABLE api_keys OWNER TO maas_dba`)
		pod := crashMaaSAPI(t, c, apiNS, "time=2026-12-02T03:00:00Z level=ERROR msg=\"schema migration failed\" error=\"migration failed: must be owner of table api_keys (SQLSTATE 42501) in line 0: ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS labels JSONB\"")
		v := verifyDB(t)
		m, s := v[verify.CodeMaaSAPIMigrations], v[verify.CodeDBSchema]
		if m.Result != verify.Fail || s.Result != verify.Fail {
			t.Fatalf("verify: %s %s (%s), %s %s (%s); want both failed", m.Code, m.Result, m.Detail, s.Code, s.Result, s.Detail)
		}
		mustContain(t, "MAAS-V015", m.Detail+" "+m.Cause+" "+m.Fix, pod, "must be owner of table api_keys", "ALTER TABLE api_keys OWNER TO "+d.Owner, "oc rollout restart deployment/maas-api -n "+apiNS)
		mustContain(t, "MAAS-V016", s.Detail+" "+s.Fix, "api_keys is not owned by role "+d.Owner, "ALTER TABLE api_keys OWNER TO "+d.Owner)
		f := doctorFinding(t, doctor.CodeDBNotOwner)
		mustContain(t, "doctor "+doctor.CodeDBNotOwner, f.Evidence+" "+f.Fix, "must be owner", "ALTER TABLE api_keys OWNER TO "+d.Owner)
		applyFix(t, m.Fix, 0)
		restartMaaSAPI(t, c, apiNS, pod)
		clean(t, "after the owner fix")
	})

	t.Run("(b) a dirty migration", func(t *testing.T) {
		exec(`UPDATE schema_migrations SET version = 7, dirty = true`)
		pod := crashMaaSAPI(t, c, apiNS, "time=2026-12-02T03:00:00Z level=ERROR msg=\"schema migration failed\" error=\"Dirty database version 7. Fix and force version.\"")
		v := verifyDB(t)
		m, s := v[verify.CodeMaaSAPIMigrations], v[verify.CodeDBSchema]
		if m.Result != verify.Fail || s.Result != verify.Fail {
			t.Fatalf("verify: %s %s (%s), %s %s (%s); want both failed", m.Code, m.Result, m.Detail, s.Code, s.Result, s.Detail)
		}
		mustContain(t, "MAAS-V015", m.Detail+" "+m.Cause+" "+m.Fix, "Dirty database version 7", "dirty at version 7", "db/schema/0007_", "UPDATE schema_migrations SET version = 6, dirty = false", "migrate force 6")
		mustContain(t, "MAAS-V016", s.Detail, "schema_migrations is dirty")
		f := doctorFinding(t, doctor.CodeDBDirty)
		mustContain(t, "doctor "+doctor.CodeDBDirty, f.Fix, "UPDATE schema_migrations SET version = 6, dirty = false")
		// The DBA found that none of 0007's statements took effect: the
		// fix's "none applied" branch (its second SQL; the first reads).
		applyFix(t, m.Fix, 1)
		restartMaaSAPI(t, c, apiNS, pod)
		var version int
		var dirty bool
		if err := db.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty); err != nil || version != 6 || dirty {
			t.Errorf("schema_migrations after the fix: %d dirty=%v (%v)", version, dirty, err)
		}
		clean(t, "after the force-version fix")
	})

	t.Run("(c) an INVALID concurrent index", func(t *testing.T) {
		exec(`DROP INDEX CONCURRENTLY idx_api_keys_labels_gin`)
		// A CREATE INDEX CONCURRENTLY interrupted after its catalog entry
		// (it waits for the lock another session holds; the timeout
		// cancels it): PostgreSQL leaves the index INVALID.
		lock, err := pgx.Connect(ctx, strings.Replace(c.env.Postgres().AdminConnString(), "dbname=postgres", "dbname="+d.Name, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close(ctx)
		tx, err := lock.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE api_keys IN ROW EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		exec(`SET statement_timeout = '1s'`)
		if _, err := db.Exec(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_api_keys_labels_gin ON api_keys USING gin (labels)`); err == nil {
			t.Fatal("CREATE INDEX CONCURRENTLY was not interrupted")
		}
		exec(`RESET statement_timeout`)
		_ = tx.Rollback(ctx)
		// maas-api's retry at its next start: IF NOT EXISTS skips it.
		exec(`CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_api_keys_labels_gin ON api_keys USING gin (labels)`)
		var valid bool
		if err := db.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'idx_api_keys_labels_gin'::regclass`).Scan(&valid); err != nil || valid {
			t.Fatalf("idx_api_keys_labels_gin valid=%v (%v): the case proves nothing", valid, err)
		}
		v := verifyDB(t)
		m, s := v[verify.CodeMaaSAPIMigrations], v[verify.CodeDBSchema]
		if m.Result != verify.Pass {
			t.Errorf("verify %s = %s (%s): maas-api reports nothing here", m.Code, m.Result, m.Detail)
		}
		if s.Result != verify.Fail {
			t.Fatalf("verify %s = %s (%s), want failed on the INVALID index", s.Code, s.Result, s.Detail)
		}
		mustContain(t, "MAAS-V016", s.Detail+" "+s.Fix, "idx_api_keys_labels_gin is INVALID", "REINDEX INDEX CONCURRENTLY idx_api_keys_labels_gin", "DROP INDEX CONCURRENTLY IF EXISTS idx_api_keys_labels_gin")
		f := doctorFinding(t, doctor.CodeDBIndexInvalid)
		mustContain(t, "doctor "+doctor.CodeDBIndexInvalid, f.Evidence+" "+f.Fix, "INVALID", "REINDEX INDEX CONCURRENTLY idx_api_keys_labels_gin")
		applyFix(t, f.Fix, 0)
		if err := db.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'idx_api_keys_labels_gin'::regclass`).Scan(&valid); err != nil || !valid {
			t.Errorf("after the REINDEX idx_api_keys_labels_gin valid=%v (%v)", valid, err)
		}
		clean(t, "after the REINDEX")
	})
}

// maasAPIPod is the name of a Running maas-api pod.
func maasAPIPod(t *testing.T, c *cluster, ns string) string {
	t.Helper()
	return waitPod(t, c, ns, "app.kubernetes.io/name=maas-api").GetName()
}

// crashMaaSAPI writes, as the kubelet does for a container that exits 1
// at start and is being backed off, the state of the maas-api pod's
// container: waiting CrashLoopBackOff, last terminated with message (the
// end of its log), not ready. It returns the pod's name.
func crashMaaSAPI(t *testing.T, c *cluster, ns, message string) string {
	t.Helper()
	ctx := context.Background()
	name := maasAPIPod(t, c, ns)
	pods := c.clients.Kube.CoreV1().Pods(ns)
	for attempt := 0; ; attempt++ {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			cs.Ready, cs.RestartCount = false, cs.RestartCount+3
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off 40s restarting failed container=%s pod=%s_%s", cs.Name, name, ns)}}
			cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
				Message: message, StartedAt: now, FinishedAt: now}}
		}
		_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			break
		}
		if attempt > 5 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return name
}

// restartMaaSAPI is the fix's restart: the pod is deleted and the
// Deployment's new pod runs.
func restartMaaSAPI(t *testing.T, c *cluster, ns, old string) {
	t.Helper()
	ctx := context.Background()
	if err := c.clients.Kube.CoreV1().Pods(ns).Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if n := maasAPIPod(t, c, ns); n != old {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no new maas-api pod after %s was deleted", old)
}

// TestN10MaaSAPICannotMigrateAfterRotation is case N10's trigger reached
// through a password change, which the case does not spell out:
// `maasctl database rotate-password` sets the new password on the
// database, the Secret and maas-db-config, then restarts maas-api, and the
// restarted maas-api crash-loops on its schema migration ("must be owner
// of table api_keys", state (a)). The rotation must stop at once naming
// the pod, maas-api's message and the DBA's fix (verify MAAS-V015's), not
// wait for a rollout that cannot come (rotate-password has no timeout of
// its own: it waited until killed). Once maas-api starts again, a re-run
// of rotate-password finishes the rotation with the password it already
// set (never a third).
//
// kwok runs no container: the test holds the restarted pod Pending (kwok's
// ready delay on the template) and writes into it what the kubelet writes
// for a container that exits 1 at start and is backed off.
func TestN10MaaSAPICannotMigrateAfterRotation(t *testing.T) {
	fullOnly(t, "maas-api cannot migrate after a rotation (TestN10MaaSAPISchemaMigrations covers case N10 itself)")
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=180"))
	apiNS := inventory.Default().RHOAI.MaaSAPINamespace
	ctx := context.Background()
	deps := c.clients.Kube.AppsV1().Deployments(apiNS)
	v1 := c.vault.Data(vaultMount, vaultPath)["password"]

	// From here on a new maas-api pod stays Pending for an hour unless
	// the test writes its state.
	delay := func(v string) {
		t.Helper()
		p := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%s}}}}}`, "pod-ready.stage.kwok.x-k8s.io/delay", v)
		if _, err := deps.Patch(ctx, "maas-api", types.StrategicMergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	delay(`"1h"`)

	const ownerMsg = `time=2026-12-02T03:00:00Z level=ERROR msg="schema migration failed" error="migration failed: must be owner of table api_keys (SQLSTATE 42501) in line 0: ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS labels JSONB"`
	// The pods of maasctl's restart (its template annotation) crash-loop.
	mctx, stopMarking := context.WithCancel(ctx)
	defer stopMarking()
	var marked sync.Map // pod name -> time marked
	var markMu sync.Mutex
	var markErr error
	go func() {
		pods := c.clients.Kube.CoreV1().Pods(apiNS)
		for mctx.Err() == nil {
			l, err := pods.List(mctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=maas-api"})
			if err == nil {
				for i := range l.Items {
					p := &l.Items[i]
					if _, ok := p.Annotations["maasctl.io/restartedAt"]; !ok || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
						continue
					}
					p.Status.Phase = corev1.PodRunning
					p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image, RestartCount: 3,
						State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container"}},
						LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: ownerMsg}}}}
					if _, err := pods.UpdateStatus(mctx, p, metav1.UpdateOptions{}); err == nil {
						marked.LoadOrStore(p.Name, time.Now())
					} else {
						markMu.Lock()
						markErr = err
						markMu.Unlock()
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	// rotate-password, killed after 5 minutes if it does not end.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := c.command(rctx, "database", "rotate-password", "--lease-duration", "3s")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	ended := time.Now()
	stopMarking()
	markMu.Lock()
	if markErr != nil {
		t.Logf("writing a maas-api pod's crash loop failed at least once: %v", markErr)
	}
	markMu.Unlock()
	if rctx.Err() != nil {
		t.Fatalf("rotate-password did not end within 5 minutes with maas-api crash-looping on its schema migration (killed)\n%s\n%s", out.String(), errb.String())
	}
	if err == nil {
		t.Fatalf("rotate-password succeeded with maas-api crash-looping:\n%s", out.String())
	}
	var first time.Time
	var pod string
	marked.Range(func(k, v any) bool {
		if tm := v.(time.Time); first.IsZero() || tm.Before(first) {
			first, pod = tm, k.(string)
		}
		return true
	})
	if pod == "" {
		t.Fatalf("rotate-password failed before maas-api's restart:\n%s\n%s", out.String(), errb.String())
	}
	t.Logf("rotate-password failed %s after pod %s was marked crash-looping", ended.Sub(first).Round(time.Millisecond), pod)
	if d := ended.Sub(first); d > 60*time.Second {
		t.Errorf("rotate-password ended %s after maas-api crash-looped, want at once", d)
	}
	msg := out.String() + errb.String()
	mustContain(t, "rotate-password output", msg, "phase maas-db-config", "maas-api cannot start: its schema migration fails", apiNS+"/"+pod,
		"must be owner of table api_keys", "ALTER TABLE api_keys OWNER TO "+b08Owner, "oc rollout restart deployment/maas-api -n "+apiNS)
	v2 := c.vault.Data(vaultMount, vaultPath)["password"]
	assertNoSecret(t, c, v2, map[string]string{"stdout": out.String(), "stderr": errb.String()})
	if v2 == v1 || !dbAccepts(t, c, v2) {
		t.Fatalf("the failed rotation did not leave the database on Vault's version 2 (changed: %v)", v2 != v1)
	}

	// The DBA's fix done, maas-api starts: the re-run finishes the
	// rotation on version 2.
	delay("null")
	r := b08Rotate(t, c)
	mustSucceed(t, r)
	mustContain(t, "re-run output", r.stdout, "resumed: true", "version 2")
	if n := c.vault.Versions(vaultMount, vaultPath); n != 2 {
		t.Errorf("Vault holds %d versions, want 2: the re-run must go on with the password the database has", n)
	}
	if got := b08Converged(t, c); got != v2 {
		t.Error("the rotation did not end on version 2")
	}
}
