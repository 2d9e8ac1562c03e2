package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// TestDatabasePasswordMismatchFailsForReal is case B08 on the real
// database: after an install, the owner role that the simulated CNPG's
// initdb created from the basic-auth Secret logs in with the Secret's
// password over TLS, and maas-api (the data-path stand-in) keeps its keys
// in that database. Then the role's password is changed in PostgreSQL
// behind the installer's back (ALTER ROLE), so the Secret and
// maas-db-config hold a password the database no longer accepts: maasctl
// verify's data path fails naming the database (key minting on the
// running maas-api; /health once maas-api restarts), and no password
// reaches its output. Once the two agree again, verify passes.
func TestDatabasePasswordMismatchFailsForReal(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	inst := c.maasctl(t, "install", "-o", "json")
	mustSucceed(t, inst)
	runLlamaCoder(t, c, 1)
	p := startPlane(t, c)
	inv := inventory.Default()
	d := inv.Database
	dbHost := fmt.Sprintf("%s-rw.%s.svc:5432", d.ClusterName, d.Namespace)
	ctx := context.Background()

	sec, err := c.clients.Kube.CoreV1().Secrets(d.Namespace).Get(ctx, d.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	password := string(sec.Data["password"])
	if len(password) < 20 || string(sec.Data["username"]) != d.Owner {
		t.Fatalf("Secret %s/%s: username %q, password of %d chars", d.Namespace, d.SecretName, sec.Data["username"], len(password))
	}
	pg := c.env.Postgres()
	admin, err := pg.Admin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)

	// CNPG's initdb: the owner role (LOGIN) owns the database, and the
	// Secret's password opens it over TLS (hostssl only).
	var dbOwner string
	var canLogin bool
	err = admin.QueryRow(ctx, `SELECT r.rolname, r.rolcanlogin FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba WHERE d.datname = $1`, d.Name).Scan(&dbOwner, &canLogin)
	if err != nil || dbOwner != d.Owner || !canLogin {
		t.Fatalf("database %q: owner %q login=%v (%v), want owner %q with LOGIN", d.Name, dbOwner, canLogin, err, d.Owner)
	}
	ownerURL := func(mode string) string {
		return fmt.Sprintf("postgresql://%s:%s@%s/%s?sslmode=%s&connect_timeout=5", d.Owner, urlEscape(password), pg.Addr(), d.Name, mode)
	}
	owner, err := pgx.Connect(ctx, ownerURL("require"))
	if err != nil {
		t.Fatalf("the Secret's password does not open the database over TLS: %s", scrubbed(err, password))
	}
	_ = owner.Close(ctx)
	if _, err := pgx.Connect(ctx, ownerURL("disable")); err == nil || !strings.Contains(err.Error(), "no pg_hba.conf entry") {
		t.Errorf("a connection without TLS was not refused: %s", scrubbed(err, password))
	}

	var outputs []run
	defer func() { noSecretsInOutputs(t, c, p, outputs) }()
	verifyOK := func(t *testing.T, when string) {
		t.Helper()
		rep, r := verifyRun(t, c, p)
		outputs = append(outputs, r)
		if r.exit != 0 || !rep.Passed {
			t.Fatalf("verify %s: exit %d, failed %v\n%s\nmaas-api log:\n%s", when, r.exit, rep.FailedCodes(), r.stdout, strings.Join(p.MaaSAPILog(), "\n"))
		}
	}
	verifyOK(t, "after install")
	var tableOwner string
	if keys := p.keys(t); len(keys) == 0 {
		t.Error("verify minted no key into maas-api's api_keys table")
	}
	appDB, err := pgx.Connect(ctx, strings.Replace(pg.AdminConnString(), "dbname=postgres", "dbname="+d.Name, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer appDB.Close(ctx)
	if err := appDB.QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE tablename = 'api_keys'`).Scan(&tableOwner); err != nil || tableOwner != d.Owner {
		t.Errorf("api_keys owned by %q (%v), want the initdb owner %q (case N10)", tableOwner, err, d.Owner)
	}

	// Behind the installer's back: the database's password changes, the
	// Secret and maas-db-config keep the old one.
	other := "changed-behind-the-installer-" + fmt.Sprint(time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "ALTER ROLE "+pgx.Identifier{d.Owner}.Sanitize()+" PASSWORD "+sqlLiteral(other)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range outputs {
			if strings.Contains(r.stdout+r.stderr, other) {
				t.Error("the database's new password appears in maasctl output")
			}
		}
		for _, l := range p.MaaSAPILog() {
			if strings.Contains(l, password) || strings.Contains(l, other) {
				t.Errorf("a password appears in maas-api's log: %s", strings.ReplaceAll(strings.ReplaceAll(l, password, "<pw>"), other, "<pw>"))
			}
		}
	}()
	rep, r := verifyRun(t, c, p)
	outputs = append(outputs, r)
	expectVerifyFails(t, rep, r, verify.CodeMintKey, "password authentication failed")
	mint := checkText(rep, verify.CodeMintKey)
	t.Logf("verify with the role's password changed behind the Secret:\n%s", mint)
	mustContain(t, "verify's "+verify.CodeMintKey+" check", mint, `database \"`+d.Name+`\"`, dbHost)

	// maas-api restarts (a rollout): it cannot connect at start and exits,
	// so even /health has no healthy upstream.
	restart := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := c.clients.Kube.AppsV1().Deployments(inv.RHOAI.MaaSAPINamespace).Patch(ctx, "maas-api", types.StrategicMergePatchType, []byte(restart), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, r = verifyRun(t, c, p)
	outputs = append(outputs, r)
	expectVerifyFails(t, rep, r, verify.CodeHealth, string(verify.ClassUnavailable))
	t.Logf("verify after maas-api restarted:\n%s", checkText(rep, verify.CodeHealth))
	if log := strings.Join(p.MaaSAPILog(), "\n"); !strings.Contains(log, "failed to initialize token store") || !strings.Contains(log, d.Name) {
		t.Errorf("maas-api's log does not say it could not start on its database:\n%s", log)
	}

	// The two agree again: verify passes.
	if _, err := admin.Exec(ctx, "ALTER ROLE "+pgx.Identifier{d.Owner}.Sanitize()+" PASSWORD "+sqlLiteral(password)); err != nil {
		t.Fatal(err)
	}
	verifyOK(t, "once the database has the Secret's password again")
}

// checkText joins what a verify check said (result, detail, cause, fix).
func checkText(rep *verify.Report, code string) string {
	var b strings.Builder
	for _, ch := range rep.Failed() {
		if ch.Code == code {
			fmt.Fprintf(&b, "%s %s | %s | %s | %s\n", ch.Code, ch.Result, ch.Detail, ch.Cause, ch.Fix)
		}
	}
	return b.String()
}

func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func urlEscape(s string) string {
	r := strings.NewReplacer("%", "%25", "@", "%40", ":", "%3A", "/", "%2F", "?", "%3F", "#", "%23", "&", "%26", "+", "%2B", " ", "%20")
	return r.Replace(s)
}

// scrubbed is err's text with password replaced.
func scrubbed(err error, password string) string {
	if err == nil {
		return "<nil>"
	}
	return strings.ReplaceAll(err.Error(), password, "<password>")
}
