package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/dbjob"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// Database password proof (cases B08, N11).
//
// Before the basic-auth Secret, maas-db-config or maas-api change because
// the database password changed (or is new on an existing database),
// maasctl proves the password on the live database as the owner role. It
// does so with a short Job in the database namespace rather than a
// port-forward through the API server:
//
//   - the Job connects exactly as maas-api does: to the CNPG -rw Service
//     by its cluster DNS name, through the cluster network and its
//     NetworkPolicies, with TLS (sslmode=require) and pg_hba's hostssl
//     rules for pod addresses; a port-forward reaches the pod's loopback,
//     where pg_hba usually has other rules, so a password it proves may
//     still fail for maas-api;
//   - it needs only create/get/delete on Jobs and Secrets in the database
//     namespace (which maasctl already has there), not pods/portforward,
//     which many clusters grant to nobody outside the namespace admins;
//   - maasctl keeps no database client and no connection to a pod open
//     across a run that can be killed at any moment.
//
// The password goes to the Job only through a Secret (env valueFrom
// secretKeyRef), never in its args or an env literal; the Secret carries
// an ownerReference to the Job (garbage-collected with it) and is deleted
// as soon as the Job ends. The container runs psql (Database.ClientImage)
// with libpq's PG* variables: PGHOST=<cluster>-rw.<namespace>.svc,
// PGPORT=5432, PGDATABASE, PGUSER=<owner>, PGSSLMODE=require and
// PGPASSWORD from the Secret. A "prove" Job runs SELECT 1. A "change" Job
// (maasctl database rotate-password) logs in with the old password and
// sets the new one with ALTER ROLE CURRENT_USER PASSWORD (an ordinary role
// may change its own password; PostgreSQL docs, ALTER ROLE), the new value
// read inside psql by \getenv from NEW_PASSWORD, then logs in with the new
// one and runs SELECT 1.
//
// Why maasctl changes the role itself: CloudNativePG does not apply an
// in-place change of the initdb Secret to the running database
// (cloudnative-pg#2658); its instance manager sets the owner's password
// from that Secret when an instance starts as primary (cloudnative-pg#6762,
// and devantler-tech/platform PR #1748 for the failover case). So the
// database and the Secret must be made to agree by maasctl, in that order:
// the database first (proven), then the Secret (so a later failover sets
// the same value), then maas-db-config and maas-api.
//
// The Job's outcome is read from its status as the Job controller writes
// it (batch/v1 JobStatus.conditions: type Complete or Failed with status
// True; k8s.io/api/batch/v1 types.go JobConditionType). backoffLimit is 0
// (one attempt: a refused password stays refused) and
// activeDeadlineSeconds bounds the run.

const (
	// DBJobLabel marks maasctl's database Jobs and their Secrets; its
	// value is DBJobProve or DBJobChange.
	DBJobLabel = verify.DBJobLabel
	// DBJobProve is a Job that logs in and runs SELECT 1.
	DBJobProve = "prove"
	// DBJobChange is a Job that logs in with PGPASSWORD, sets
	// NEW_PASSWORD on the role and logs in with it.
	DBJobChange = "change"
	// DBJobPasswordKey and DBJobNewPasswordKey are the keys of the Job's
	// Secret.
	DBJobPasswordKey    = "password"
	DBJobNewPasswordKey = "new-password"

	dbJobDeadline = 120 // seconds, activeDeadlineSeconds
)

// changeScript is the "change" Job's shell script: no value appears in it.
const changeScript = `set -eu
psql -X -q -v ON_ERROR_STOP=1 <<'SQL'
\getenv new_password NEW_PASSWORD
ALTER ROLE CURRENT_USER PASSWORD :'new_password';
SQL
PGPASSWORD="$NEW_PASSWORD" exec psql -X -tA -v ON_ERROR_STOP=1 -c 'SELECT 1'
`

// DBRefusedError means a Job could not log in to the database with a
// password: the database rejects it (or could not be reached: the Job's
// log tells). It never carries the password.
type DBRefusedError struct {
	// Role is the owner role, Job the Job's namespace/name, Reason the
	// Job's Failed condition (reason: message).
	Role, Job, Reason string
}

func (e *DBRefusedError) Error() string {
	ns, name, _ := strings.Cut(e.Job, "/")
	return fmt.Sprintf("Job %s failed (%s); its log says why: kubectl logs job/%s -n %s", e.Job, e.Reason, name, ns)
}

// dbJob runs one database Job and returns nil when it completed, a
// *DBRefusedError when it failed, or another error (the API server, a
// timeout). The Job is deleted when it completed and kept (for its log,
// until its TTL) when it failed; its Secret is deleted either way.
func dbJob(ctx context.Context, e *Env, kind, password, newPassword string) error {
	d := e.Inv.Database
	ns := d.Namespace
	kc := e.Clients.Kube
	labels := map[string]string{DBJobLabel: kind, assets.ManagedByLabel: assets.ManagedByValue}
	data := map[string][]byte{DBJobPasswordKey: []byte(password)}
	if kind == DBJobChange {
		data[DBJobNewPasswordKey] = []byte(newPassword)
	}
	sec, err := kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "maasctl-db-" + kind + "-", Namespace: ns, Labels: labels},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}, metav1.CreateOptions{FieldManager: kube.FieldManager})
	if err != nil {
		return fmt.Errorf("create the Secret of the database %s Job in %s: %w", kind, ns, err)
	}
	defer func() {
		_ = kc.CoreV1().Secrets(ns).Delete(context.WithoutCancel(ctx), sec.Name, metav1.DeleteOptions{})
	}()
	job := dbJobObject(e.Inv, kind, sec.Name, labels)
	job, err = kc.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{FieldManager: kube.FieldManager})
	if err != nil {
		return fmt.Errorf("create the database %s Job in %s: %w", kind, ns, err)
	}
	// The Secret goes with the Job if this process dies before its defer.
	owner := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"batch/v1","kind":"Job","name":%q,"uid":%q}]}}`, job.Name, job.UID)
	if _, err := kc.CoreV1().Secrets(ns).Patch(ctx, sec.Name, types.MergePatchType, []byte(owner), metav1.PatchOptions{FieldManager: kube.FieldManager}); err != nil {
		return fmt.Errorf("set the owner of Secret %s/%s: %w", ns, sec.Name, err)
	}
	e.progress("database/secret", "database Job %s/%s (%s the password of role %s) started", ns, job.Name, kind, d.Owner)
	wctx, cancel := context.WithTimeout(ctx, (dbJobDeadline+60)*time.Second)
	defer cancel()
	var failed string
	_, err = waiters.For(wctx, e.Clients, waiters.Target{
		GVK:       schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
		Namespace: ns, Name: job.Name,
		Cond: func(u *unstructured.Unstructured) waiters.Result {
			if c, ok := waiters.GetCondition(u, string(batchv1.JobComplete)); ok && c.Status == "True" {
				return waiters.Result{Done: true, Status: "Complete"}
			}
			if c, ok := waiters.GetCondition(u, string(batchv1.JobFailed)); ok && c.Status == "True" {
				failed = c.Reason + ": " + c.Message
				return waiters.Result{Done: true, Status: "Failed"}
			}
			return waiters.Result{Status: "running"}
		},
	})
	if err != nil {
		return fmt.Errorf("database %s Job %s/%s: %w", kind, ns, job.Name, err)
	}
	if failed != "" {
		return &DBRefusedError{Role: d.Owner, Job: ns + "/" + job.Name, Reason: failed}
	}
	bg := metav1.DeletePropagationBackground
	_ = kc.BatchV1().Jobs(ns).Delete(context.WithoutCancel(ctx), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	return nil
}

// dbJobObject is the Job of kind reading its passwords from Secret secret.
func dbJobObject(inv *inventory.Inventory, kind, secret string, labels map[string]string) *batchv1.Job {
	command := []string{"psql", "-X", "-tA", "-v", "ON_ERROR_STOP=1", "-c", "SELECT 1"}
	var env []corev1.EnvVar
	if kind == DBJobChange {
		env = []corev1.EnvVar{{Name: "NEW_PASSWORD", ValueFrom: dbjob.SecretKey(secret, DBJobNewPasswordKey)}}
		command = []string{"sh", "-c", changeScript}
	}
	return dbjob.New(inv.Database, kind, labels, secret, DBJobPasswordKey, command, env, dbJobDeadline)
}

// dbLive reports whether the CNPG Cluster exists and its bootstrap made a
// primary (status.currentPrimary set; CNPG api/v1 ClusterStatus), so a
// password can be proven on it, also while the Cluster is not Ready (for
// example because its initdb Secret is missing). A Cluster that is absent
// or still bootstrapping takes the Secret's password at initdb.
func dbLive(ctx context.Context, e *Env) (bool, error) {
	d := e.Inv.Database
	cl := &unstructured.Unstructured{}
	cl.SetAPIVersion("postgresql.cnpg.io/v1")
	cl.SetKind("Cluster")
	cl.SetNamespace(d.Namespace)
	cl.SetName(d.ClusterName)
	live, err := e.Clients.Get(ctx, cl)
	switch {
	case apierrors.IsNotFound(err) || meta404(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get CNPG Cluster %s/%s: %w", d.Namespace, d.ClusterName, err)
	}
	primary, _, _ := unstructured.NestedString(live.Object, "status", "currentPrimary")
	return primary != "", nil
}

// meta404 is a kind the API server does not serve (no CNPG yet).
func meta404(err error) bool {
	var ns *kube.NotServedError
	return errors.As(err, &ns)
}

// dbProofs remembers, per Env, the password proven in this run, so
// database/secret and dbsecret/maas-db-config run one Job between them.
var dbProofs sync.Map // *Env -> string

// proveDBPassword proves pw on the live database as the owner (see the
// comment at the top of this file) unless it was proven in this run.
// With mayChange, a refused pw is set on the role with a "change" Job that
// logs in with old (the password the live basic-auth Secret holds) and
// proven again. Errors: the refusal, naming the Vault version, the path
// and the role, with the fix; never a value.
func proveDBPassword(ctx context.Context, e *Env, pw, old string, mayChange bool) error {
	if p, ok := dbProofs.Load(e); ok && p.(string) == pw {
		return nil
	}
	err := dbJob(ctx, e, DBJobProve, pw, "")
	var refused *DBRefusedError
	if errors.As(err, &refused) && mayChange && old != "" && old != pw {
		e.progress("database/secret", "the database does not accept the new password yet: setting it on role %s", e.Inv.Database.Owner)
		first := refused.Job
		err = dbJob(ctx, e, DBJobChange, old, pw)
		if err == nil {
			// That refusal was the expected one (a rotation proves the
			// new password before setting it): its failed Job has no log
			// worth keeping and would look like a failure until its TTL.
			ns, name, _ := strings.Cut(first, "/")
			bg := metav1.DeletePropagationBackground
			_ = e.Clients.Kube.BatchV1().Jobs(ns).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{PropagationPolicy: &bg})
		}
	}
	if errors.As(err, &refused) {
		d := e.Inv.Database
		version := "the version"
		if v, ok := e.Secrets.(interface{ DBPasswordVersion() int }); ok && v.DBPasswordVersion() > 0 {
			version = fmt.Sprintf("version %d", v.DBPasswordVersion())
		}
		fix := fmt.Sprintf("put the password the database uses back into Vault (vault kv rollback -mount=... or vault kv put %s password=...), or change it on the database on purpose with `maasctl database rotate-password`", d.VaultPath)
		if mayChange {
			fix = fmt.Sprintf("the database accepts neither Vault's password nor the one in Secret %s/%s: set the role's password by hand (ALTER ROLE %s PASSWORD ...) to Vault's value, or restore Vault's previous version, then re-run", d.Namespace, d.SecretName, d.Owner)
		}
		return fmt.Errorf("Vault holds %s of %s, the database rejects it as role %s (%v); nothing was changed: Secret %s/%s, %s and maas-api keep the old password. Fix: %s",
			version, d.VaultPath, d.Owner, refused, d.Namespace, d.SecretName, e.Inv.DBConfig.Name, fix)
	}
	if err != nil {
		return err
	}
	dbProofs.Store(e, pw)
	e.progress("database/secret", "the database accepts the password as role %s", e.Inv.Database.Owner)
	return nil
}

// liveSecretPassword is the password key of a live Secret ("" when the
// Secret or key is absent).
func liveSecretPassword(ctx context.Context, e *Env, ns, name, key string) (string, bool, error) {
	s, err := e.Clients.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	v, ok := s.Data[key]
	return string(v), ok, nil
}

// dbJobAccess is what the proof Jobs need in the database namespace:
// create, watch and delete Jobs and their Secrets.
func dbJobAccess(ns string) func(*Env) []Access {
	return func(*Env) []Access {
		out := readAccess("batch", "jobs", ns)
		return append(out, Access{"create", "batch", "jobs", ns, ""}, Access{"delete", "batch", "jobs", ns, ""}, Access{"delete", "", "secrets", ns, ""})
	}
}
