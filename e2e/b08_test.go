package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/steps"
)

// b08State is what the tests compare: the basic-auth Secret, the
// maas-api copy of maas-db-config and the maas-api Deployment.
type b08State struct {
	secretPW, secretRV string
	cfgPW, cfgRV       string
	apiGeneration      int64
}

const (
	b08DBNS     = "rhoai-maas-db"
	b08Secret   = "maas-postgres-secret"
	b08APINS    = "redhat-ai-gateway-infra"
	b08Owner    = "maas"
	b08Database = "maas"
)

func b08Read(t *testing.T, c *cluster) b08State {
	t.Helper()
	ctx := context.Background()
	var st b08State
	st.secretPW, st.secretRV = secretPassword(t, c, b08DBNS, b08Secret)
	cfg, err := c.clients.Kube.CoreV1().Secrets(b08APINS).Get(ctx, "maas-db-config", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("maas-db-config: %v", err)
	}
	st.cfgRV = cfg.ResourceVersion
	if u, err := url.Parse(string(cfg.Data["DB_CONNECTION_URL"])); err == nil && u.User != nil {
		st.cfgPW, _ = u.User.Password()
	}
	dep, err := c.clients.Kube.AppsV1().Deployments(b08APINS).Get(ctx, "maas-api", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("maas-api: %v", err)
	}
	st.apiGeneration = dep.Generation
	return st
}

// dbAccepts reports whether the real PostgreSQL lets the owner in with pw
// over TLS.
func dbAccepts(t *testing.T, c *cluster, pw string) bool {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), fmt.Sprintf("postgresql://%s:%s@%s/%s?sslmode=require&connect_timeout=5", b08Owner, urlEscape(pw), c.env.Postgres().Addr(), b08Database))
	if err != nil {
		if !strings.Contains(err.Error(), "password authentication failed") {
			t.Fatalf("connect as %s: %s", b08Owner, scrubbed(err, pw))
		}
		return false
	}
	_ = conn.Close(context.Background())
	return true
}

// b08Converged checks that Vault's current password is everywhere and the
// database accepts it, and returns it.
func b08Converged(t *testing.T, c *cluster) string {
	t.Helper()
	pw := c.vault.Data(vaultMount, vaultPath)["password"]
	st := b08Read(t, c)
	if pw == "" || st.secretPW != pw || st.cfgPW != pw {
		t.Errorf("Vault's password is not everywhere: Secret same=%v, maas-db-config same=%v", st.secretPW == pw, st.cfgPW == pw)
	}
	if !dbAccepts(t, c, pw) {
		t.Error("the database rejects Vault's current password")
	}
	cfg, _ := c.clients.Kube.CoreV1().Secrets(b08APINS).Get(context.Background(), "maas-db-config", metav1.GetOptions{})
	if cfg != nil && cfg.Annotations["maasctl.io/restart-pending"] != "" {
		t.Error("maas-db-config still says maas-api's restart is owed")
	}
	return pw
}

func b08Rotate(t *testing.T, c *cluster) run {
	t.Helper()
	return c.maasctl(t, "database", "rotate-password", "--lease-duration", "3s")
}

// TestB08VaultChangedOutOfBandStopsInstall is case B08's trigger state on
// the real database: after an install, Vault's password is changed behind
// maasctl (version 2) while the database keeps version 1's. A re-run
// proves version 2 on the database with a Job (psql as the owner through
// the -rw Service), is refused, and stops naming the version, the path and
// the role, before any write: the basic-auth Secret, maas-db-config and
// maas-api stay on version 1, which the database still accepts. The
// second variant: the basic-auth Secret deleted by hand on the existing
// database (a new Secret on a live database is proven too).
func TestB08VaultChangedOutOfBandStopsInstall(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=120"))
	before := b08Read(t, c)
	v1 := c.vault.Data(vaultMount, vaultPath)["password"]
	if v1 == "" || before.secretPW != v1 || before.cfgPW != v1 || !dbAccepts(t, c, v1) {
		t.Fatal("after the install, Vault, the Secret, maas-db-config and the database do not agree")
	}
	vc := vaultAPI(t, c)
	v2 := "OutOfBandVersion2TheDatabaseNeverSaw0123"
	vaultWrite(t, vc, "kv/data/cloudnativepg/maas-postgres", map[string]any{"data": map[string]any{"username": "maas", "password": v2}, "options": map[string]any{"cas": 1}})

	r := c.install(t)
	if r.exit == 0 { // go on: the state checks below say what was written
		t.Error("the re-run with a password the database rejects exited 0")
	}
	mustContain(t, "re-run output", r.stdout+r.stderr,
		"Vault holds version 2 of kv/cloudnativepg/maas-postgres, the database rejects it as role maas",
		"maasctl database rotate-password", "kubectl logs job/")
	assertNoSecret(t, c, v1, map[string]string{"stdout": r.stdout, "stderr": r.stderr})
	assertNoSecret(t, c, v2, map[string]string{"stdout": r.stdout, "stderr": r.stderr})
	after := b08Read(t, c)
	if after.secretRV != before.secretRV || after.cfgRV != before.cfgRV || after.apiGeneration != before.apiGeneration {
		t.Errorf("a refused password was written: Secret rv %s→%s, maas-db-config rv %s→%s, maas-api generation %d→%d",
			before.secretRV, after.secretRV, before.cfgRV, after.cfgRV, before.apiGeneration, after.apiGeneration)
	}
	if !dbAccepts(t, c, v1) || dbAccepts(t, c, v2) {
		t.Error("the database's password changed")
	}
	// The proof Job: password only by secretKeyRef, sslmode=require, the
	// -rw Service; its Secret deleted.
	jobs, err := c.clients.Kube.BatchV1().Jobs(b08DBNS).List(context.Background(), metav1.ListOptions{LabelSelector: steps.DBJobLabel})
	if err != nil || len(jobs.Items) == 0 {
		t.Fatalf("no database Job kept after the refusal (%v)", err)
	}
	j := jobs.Items[0]
	ctr := j.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil {
			env[e.Name] = "secretKeyRef:" + e.ValueFrom.SecretKeyRef.Key
			continue
		}
		env[e.Name] = e.Value
	}
	if env["PGPASSWORD"] != "secretKeyRef:password" || env["PGSSLMODE"] != "require" || env["PGHOST"] != "maas-postgres-rw.rhoai-maas-db.svc" || env["PGUSER"] != "maas" {
		t.Errorf("the Job's libpq parameters: %v", env)
	}
	if spec := fmt.Sprint(ctr.Command, ctr.Args, env); strings.Contains(spec, v2) || strings.Contains(spec, v1) {
		t.Error("a password appears in the Job's command, args or env literals")
	}
	secs, _ := c.clients.Kube.CoreV1().Secrets(b08DBNS).List(context.Background(), metav1.ListOptions{LabelSelector: steps.DBJobLabel})
	if secs != nil && len(secs.Items) > 0 {
		t.Errorf("the Job's password Secret %s was not deleted", secs.Items[0].Name)
	}

	t.Run("Secret deleted on the live database", func(t *testing.T) {
		if err := c.clients.Kube.CoreV1().Secrets(b08DBNS).Delete(context.Background(), b08Secret, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r := c.install(t)
		mustFail(t, r)
		mustContain(t, "re-run output", r.stdout+r.stderr, "Vault holds version 2 of kv/cloudnativepg/maas-postgres, the database rejects it as role maas")
		if _, err := c.clients.Kube.CoreV1().Secrets(b08DBNS).Get(context.Background(), b08Secret, metav1.GetOptions{}); err == nil {
			t.Error("the Secret was recreated with a password the database rejects")
		}
		if cfg, err := c.clients.Kube.CoreV1().Secrets(b08APINS).Get(context.Background(), "maas-db-config", metav1.GetOptions{}); err != nil || cfg.ResourceVersion != before.cfgRV {
			t.Errorf("maas-db-config was written (or is gone: %v)", err)
		}
	})
}

// TestB08RotatePassword: `maasctl database rotate-password` end to end on
// the real database: Vault gets version 2 (check-and-set), the database
// the new password (the simulated CNPG, like CNPG, does not apply a Secret
// change to the role, so maasctl's change Job does), then the Secret and
// maas-db-config, and maas-api restarts and keeps serving: a key minted
// through the data path is stored in the database with the new password;
// the old one is refused. No password in any output. A second rotate
// makes version 3; an install after it changes nothing.
func TestB08RotatePassword(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	mustSucceed(t, c.maasctl(t, "install", "-o", "json"))
	runLlamaCoder(t, c, 1)
	p := startPlane(t, c)
	v1 := c.vault.Data(vaultMount, vaultPath)["password"]
	before := b08Read(t, c)
	var outputs []run
	defer func() { noSecretsInOutputs(t, c, p, outputs) }()

	r := b08Rotate(t, c)
	outputs = append(outputs, r)
	mustSucceed(t, r)
	t.Logf("rotate:\n%s", r.stdout)
	mustContain(t, "rotate output", r.stdout, "phase vault", "phase database", "phase secret", "phase maas-db-config", "rotated: the database password is version 2", "resumed: false")
	if n := c.vault.Versions(vaultMount, vaultPath); n != 2 {
		t.Fatalf("Vault holds %d versions after one rotation, want 2", n)
	}
	v2 := b08Converged(t, c)
	if v2 == v1 {
		t.Fatal("the password did not change")
	}
	if dbAccepts(t, c, v1) {
		t.Error("the database still accepts the old password")
	}
	// The rotation's first proof of the new password is refused on
	// purpose (the database does not have it yet): a successful rotation
	// leaves no failed Job behind to look like a failure until its TTL.
	jobs, err := c.clients.Kube.BatchV1().Jobs(b08DBNS).List(context.Background(), metav1.ListOptions{LabelSelector: steps.DBJobLabel})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.DeletionTimestamp == nil && j.Status.Failed > 0 {
			t.Errorf("a successful rotation left failed database Job %s", j.Name)
		}
	}
	if st := b08Read(t, c); st.apiGeneration == before.apiGeneration {
		t.Error("maas-api was not restarted")
	}
	rep, vr := verifyRun(t, c, p)
	outputs = append(outputs, vr)
	if vr.exit != 0 || !rep.Passed {
		t.Fatalf("verify after the rotation: exit %d, failed %v\n%s\nmaas-api log:\n%s", vr.exit, rep.FailedCodes(), vr.stdout, strings.Join(p.MaaSAPILog(), "\n"))
	}
	for _, o := range []run{r, vr} {
		assertNoSecret(t, c, v1, map[string]string{"stdout": o.stdout, "stderr": o.stderr})
		assertNoSecret(t, c, v2, map[string]string{"stdout": o.stdout, "stderr": o.stderr})
	}

	// The second rotation with -o json: install's run events.
	r = c.maasctl(t, "database", "rotate-password", "--lease-duration", "3s", "-o", "json")
	outputs = append(outputs, r)
	mustSucceed(t, r)
	checkRotateEvents(t, r)
	if n := c.vault.Versions(vaultMount, vaultPath); n != 3 {
		t.Errorf("Vault holds %d versions after a second rotation, want 3", n)
	}
	v3 := b08Converged(t, c)
	if dbAccepts(t, c, v2) {
		t.Error("the database still accepts version 2")
	}
	st := b08Read(t, c)
	inst := c.maasctl(t, "install", "-o", "json")
	outputs = append(outputs, inst)
	mustSucceed(t, inst)
	if after := b08Read(t, c); after != st {
		t.Errorf("an install after the rotation changed the Secret, maas-db-config or maas-api: %+v → %+v", redactState(st), redactState(after))
	}
	assertNoSecret(t, c, v3, map[string]string{"stdout": inst.stdout + r.stdout, "stderr": inst.stderr + r.stderr})
}

// checkRotateEvents: rotate-password -o json printed only run events, as
// install -o json does: run-started, started, the phases as progress,
// done, run-done with a summary naming the step and counting its writes.
func checkRotateEvents(t *testing.T, r run) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(r.events) == 0 || len(r.events) != len(lines) {
		t.Fatalf("rotate -o json: %d events from %d lines:\n%s", len(r.events), len(lines), r.stdout)
	}
	var types []string
	progress := ""
	for _, ev := range r.events {
		if len(types) == 0 || types[len(types)-1] != string(ev.Type) {
			types = append(types, string(ev.Type))
		}
		if ev.Type == steps.EventProgress {
			if ev.Step != steps.RotateStepID {
				t.Errorf("progress event of step %q, want %s", ev.Step, steps.RotateStepID)
			}
			progress += ev.Message + "\n"
		}
	}
	if got := strings.Join(types, ","); got != "run-started,started,progress,done,run-done" {
		t.Errorf("event types %s", got)
	}
	mustContain(t, "rotate progress events", progress, "phase vault", "phase database", "phase secret", "phase maas-db-config", "phase done")
	sum := summary(t, r.events)
	if len(sum.Done) != 1 || sum.Done[0] != steps.RotateStepID || len(sum.Failed) != 0 || sum.Writes == 0 {
		t.Errorf("run-done summary %+v", sum)
	}
}

func redactState(s b08State) b08State {
	s.secretPW, s.cfgPW = "<pw>", "<pw>"
	return s
}

// TestB08RotateKilledResumes: rotate-password killed (SIGKILL) right after
// it reports each phase, then run again: the re-run goes on with the
// password Vault already holds (never a third one: Vault's version count
// grows by one per rotation), and ends with Vault, the database, the
// Secret and maas-db-config agreeing and maas-api restarted. The second
// variant: after a kill in the database phase, an install (not a rotate)
// finishes the rotation. Between the database's change and maas-api's
// restart the role has only the new password, so a maas-api restarted by
// someone else in that window fails until the re-run: the window is the
// run's own (seconds), and maas-db-config never holds a new password the
// database refused.
func TestB08RotateKilledResumes(t *testing.T) {
	fullOnly(t, "a password rotation killed mid-way resumes (TestB08RotatePassword rotates without a kill)")
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=120"))
	versions := 1
	prev := c.vault.Data(vaultMount, vaultPath)["password"]
	killAt := func(t *testing.T, phase string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		b := c.start(ctx, t, "database", "rotate-password", "--lease-duration", "3s")
		seen := false
		for b.lines.Scan() {
			if strings.Contains(b.lines.Text(), "phase "+phase) {
				seen = true
				_ = b.cmd.Process.Signal(syscall.SIGKILL)
				break
			}
		}
		_ = b.cmd.Wait()
		if !seen {
			t.Fatalf("rotate ended before phase %s; stderr:\n%s", phase, b.stderr)
		}
		time.Sleep(3 * time.Second) // the killed run's Lease expires
	}
	for _, phase := range []string{"vault", "database", "secret", "maas-db-config"} {
		t.Run("killed at "+phase, func(t *testing.T) {
			killAt(t, phase)
			versions++
			if n := c.vault.Versions(vaultMount, vaultPath); n != versions {
				t.Fatalf("Vault holds %d versions after the kill, want %d", n, versions)
			}
			// Between the ALTER ROLE and maas-api's restart the role has
			// one password: maas-db-config holds the previous one or
			// Vault's new one, never any other.
			st := b08Read(t, c)
			if now := c.vault.Data(vaultMount, vaultPath)["password"]; st.cfgPW != prev && st.cfgPW != now {
				t.Error("the kill left maas-db-config on a third password")
			}
			if st.cfgPW != prev && !dbAccepts(t, c, st.cfgPW) {
				t.Error("maas-db-config got a new password the database rejects")
			}
			r := b08Rotate(t, c)
			mustSucceed(t, r)
			mustContain(t, "re-run output", r.stdout, "resumed: true", fmt.Sprintf("version %d", versions))
			if n := c.vault.Versions(vaultMount, vaultPath); n != versions {
				t.Errorf("the re-run wrote Vault again: %d versions, want %d", n, versions)
			}
			prev = b08Converged(t, c)
		})
	}
	t.Run("killed at database, install finishes", func(t *testing.T) {
		killAt(t, "database")
		versions++
		r := c.install(t)
		mustSucceed(t, r)
		if n := c.vault.Versions(vaultMount, vaultPath); n != versions {
			t.Errorf("install wrote Vault: %d versions, want %d", n, versions)
		}
		b08Converged(t, c)
	})
}

// TestB08N11RotateOverDeletedVersion is case N11 on the rotation path:
// Vault at version 2 with version 2 soft-deleted, the database holding
// version 1's value. An install writes nothing and names the deleted
// version and rotate-password as the way out; rotate-password (the
// explicit choice) writes version 3 with check-and-set 2, sets it on the
// database (logging in with version 1's value from the Secret) and
// switches everything; version 2's value never reaches anything.
func TestB08N11RotateOverDeletedVersion(t *testing.T) {
	fullOnly(t, "a rotation over a deleted latest Vault version (TestN11DeletedLatestVersion covers the install)")
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=120"))
	v1 := c.vault.Data(vaultMount, vaultPath)["password"]
	before := b08Read(t, c)
	vc := vaultAPI(t, c)
	v2 := "Version2DeletedNeverReachedTheDatabase01"
	vaultWrite(t, vc, "kv/data/cloudnativepg/maas-postgres", map[string]any{"data": map[string]any{"username": "maas", "password": v2}, "options": map[string]any{"cas": 1}})
	if _, err := vc.Logical().Delete("kv/data/cloudnativepg/maas-postgres"); err != nil {
		t.Fatal(err)
	}
	r := c.install(t)
	mustFail(t, r)
	mustContain(t, "install output", r.stdout+r.stderr, "latest version 2 was deleted", "not a missing password")
	if n := c.vault.Versions(vaultMount, vaultPath); n != 2 {
		t.Errorf("install wrote Vault: %d versions", n)
	}
	if st := b08Read(t, c); st != before {
		t.Error("install changed the Secret, maas-db-config or maas-api over a deleted version")
	}

	r = b08Rotate(t, c)
	mustSucceed(t, r)
	mustContain(t, "rotate output", r.stdout, "latest version 2 of kv/cloudnativepg/maas-postgres is deleted", "version 3")
	if n := c.vault.Versions(vaultMount, vaultPath); n != 3 {
		t.Fatalf("Vault holds %d versions, want 3", n)
	}
	v3 := b08Converged(t, c)
	if dbAccepts(t, c, v1) || dbAccepts(t, c, v2) {
		t.Error("the database still accepts version 1 or 2")
	}
	for _, pw := range []string{v1, v2, v3} {
		assertNoSecret(t, c, pw, map[string]string{"stdout": r.stdout, "stderr": r.stderr})
	}
}
