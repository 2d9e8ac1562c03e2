package steps

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// cnpgCRD is the CRD whose presence means CloudNativePG is already installed.
const cnpgCRD = "clusters.postgresql.cnpg.io"

func databaseSteps(inv *inventory.Inventory) []*Step {
	op := inv.Database.Operator
	d := inv.Database
	return []*Step{
		{
			ID: "database/operator", Title: "CloudNativePG operator (OLM, unless postgresql.cnpg.io is served)",
			Serves: []string{"postgresql.cnpg.io"},
			Apply: func(ctx context.Context, e *Env, s *Step) error {
				if served, err := crdServed(ctx, e, cnpgCRD); err != nil || served {
					if served {
						e.progress(s.ID, "%s already served: not installing CNPG", cnpgCRD)
					}
					return err
				}
				return olmInstall(ctx, e, s, op)
			},
			Check: func(ctx context.Context, e *Env, _ *Step) (bool, string, error) {
				served, err := crdServed(ctx, e, cnpgCRD)
				if err != nil || !served {
					return false, cnpgCRD + " not served", err
				}
				return true, "", nil
			},
			Desired: func(ctx context.Context, e *Env, s *Step) ([]DesiredObject, error) {
				if served, err := crdServed(ctx, e, cnpgCRD); err != nil || served {
					return nil, err // the step installs nothing then
				}
				return olmDesired(ctx, e, s, op)
			},
			Render: func(_ *inventory.Inventory, _ assets.Facts, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
				docs, notes := olmRender(op, objs)
				return docs, append([]string{"Leave this file out when the cluster already serves postgresql.cnpg.io (install skips it then)."}, notes...), nil
			},
			Access:  olmAccess(op),
			Removal: Removal{Group: "operators", Data: "the database's operator"},
		},
		{
			ID: "database/secret", Title: "database password (Vault, generated once) and basic-auth Secret",
			Apply: func(ctx context.Context, e *Env, s *Step) error {
				for _, ns := range e.objects(s.ID) {
					if err := ensureNamespace(ctx, e, s.ID, ns); err != nil {
						return err
					}
				}
				sec, err := dbSecret(ctx, e)
				if err != nil {
					return err
				}
				if err := proveBeforeSecret(ctx, e); err != nil {
					return err
				}
				_, err = e.Clients.Apply(ctx, sec)
				return err
			},
			Check: func(ctx context.Context, e *Env, _ *Step) (bool, string, error) {
				sec, err := dbSecret(ctx, e)
				if err != nil {
					return false, "", err
				}
				return checkSecret(ctx, e, sec)
			},
			HashExtra: func(e *Env) string { return "vault:" + e.Inv.Database.VaultPath },
			Objects: func(e *Env, s *Step) []*unstructured.Unstructured {
				return append(slices.Clone(e.objects(s.ID)), secretStub(d.Namespace, d.SecretName))
			},
			Desired: func(ctx context.Context, e *Env, s *Step) ([]DesiredObject, error) {
				return secretsDesired(ctx, e, s, func() ([]*unstructured.Unstructured, error) {
					sec, err := dbSecret(ctx, e)
					return []*unstructured.Unstructured{sec}, err
				})
			},
			ExternalSecrets: dbSecretExternal,
			Render: func(inv *inventory.Inventory, _ assets.Facts, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
				return objs, []string{
					fmt.Sprintf("Secret %s/%s (type kubernetes.io/basic-auth) is not rendered: it carries the database password.", d.Namespace, d.SecretName),
					fmt.Sprintf("Provide it from Vault %s (keys username=%s and password), for example:", d.VaultPath, d.Owner),
					fmt.Sprintf("  oc create secret generic %s -n %s --type=kubernetes.io/basic-auth --from-literal=username=%s \\", d.SecretName, d.Namespace, d.Owner),
					fmt.Sprintf("    --from-literal=password=\"$(vault kv get -field=password %s)\"", d.VaultPath)}, nil
			},
			Access: withAccess(secretAccess(d.Namespace), dbJobAccess(d.Namespace)),
			Removal: Removal{Data: "the database credentials",
				VaultSecret: func(inv *inventory.Inventory) string { return inv.Database.VaultPath }},
		},
		{
			ID: "database/cluster", Title: "CloudNativePG Cluster " + d.ClusterName,
			After: []string{"database/operator", "database/secret"},
			Apply: applyCluster,
			Access: withAccess(func(*Env) []Access {
				var out []Access
				for _, v := range []string{"list", "watch"} {
					out = append(out, Access{v, "batch", "jobs", d.Namespace, ""}, Access{v, "", "persistentvolumeclaims", d.Namespace, ""})
				}
				return out
			}),
			Removal: Removal{Data: "the database Cluster and its data",
				DataNamespace: func(inv *inventory.Inventory) string { return inv.Database.Namespace }},
		},
	}
}

// dbSecret builds the basic-auth Secret CNPG's initdb reads for the owner
// (cloudnative-pg docs "Bootstrap": bootstrap.initdb.secret must be of type
// kubernetes.io/basic-auth with username equal to the owner).
func dbSecret(ctx context.Context, e *Env) (*unstructured.Unstructured, error) {
	pw, err := dbPassword(ctx, e)
	if err != nil {
		return nil, err
	}
	d := e.Inv.Database
	return secretObject(d.Namespace, d.SecretName, "kubernetes.io/basic-auth", map[string]string{
		"username": d.Owner,
		"password": pw,
	}), nil
}

// proveBeforeSecret proves Vault's password on the live database when the
// basic-auth Secret is about to change (or is new on an existing
// database): see dbproof.go. A database that is not there yet or still
// bootstrapping takes the Secret at initdb and needs no proof.
func proveBeforeSecret(ctx context.Context, e *Env) error {
	pw, err := dbPassword(ctx, e)
	if err != nil {
		return err
	}
	d := e.Inv.Database
	live, err := e.Clients.Kube.CoreV1().Secrets(d.Namespace).Get(ctx, d.SecretName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Secret %s/%s: %w", d.Namespace, d.SecretName, err)
	}
	old := ""
	if err == nil {
		old = string(live.Data["password"])
		if old == pw {
			return nil
		}
	}
	ready, err := dbLive(ctx, e)
	if err != nil || !ready {
		return err
	}
	// A rotation this Secret says is under way (RotatingAnnotation names
	// the Vault version it rotates to) goes on in an install too.
	mayChange := e.Policy.RotateDBPassword
	if v, ok := e.Secrets.(interface{ DBPasswordVersion() int }); ok && live != nil && v.DBPasswordVersion() > 0 {
		mayChange = mayChange || live.Annotations[RotatingAnnotation] == strconv.Itoa(v.DBPasswordVersion())
	}
	return proveDBPassword(ctx, e, pw, old, mayChange)
}

// DBConnectionURL is the DB_CONNECTION_URL maas-api reads from maas-db-config:
// postgresql://OWNER:PASSWORD@CLUSTER-rw.NAMESPACE.svc:5432/DB?sslmode=MODE,
// with user and password URL-encoded (case B07).
func DBConnectionURL(inv *inventory.Inventory, password string) string {
	d := inv.Database
	u := url.URL{
		Scheme:   "postgresql",
		User:     url.UserPassword(d.Owner, password),
		Host:     fmt.Sprintf("%s-rw.%s.svc:5432", d.ClusterName, d.Namespace),
		Path:     "/" + d.Name,
		RawQuery: url.Values{"sslmode": {inv.DBConfig.SSLMode}}.Encode(),
	}
	return u.String()
}

// dbPassword reads the database password and rejects one with a control
// character: a trailing newline (echo | base64, vault kv put from a file)
// makes the role password differ from what clients send, and CNPG's
// generated pgpass breaks on it (case B07, cloudnative-pg#5060). The
// message never contains the value.
func dbPassword(ctx context.Context, e *Env) (string, error) {
	pw, err := e.Secrets.DBPassword(ctx)
	if n, ok := e.Secrets.(interface{ TakeNotes() []string }); ok {
		for _, msg := range n.TakeNotes() { // a lost check-and-set race, KV v1 (case B10)
			e.progress("database/secret", "%s", msg)
		}
	}
	if err != nil {
		return "", fmt.Errorf("database password from Vault %s: %w", e.Inv.Database.VaultPath, err)
	}
	for i, r := range pw {
		if unicode.IsControl(r) {
			return "", &Problem{
				Message: fmt.Sprintf("the database password in Vault %s has a control character at byte %d (a line break or tab)", e.Inv.Database.VaultPath, i),
				Fix:     "store it without one (vault kv put with a value that has no trailing newline), or delete the secret to let maasctl generate one"}
		}
	}
	if pw == "" {
		return "", fmt.Errorf("the database password in Vault %s is empty", e.Inv.Database.VaultPath)
	}
	return pw, nil
}

// applyCluster applies the CNPG Cluster and waits for Ready. CNPG keeps a
// Cluster in "Setting up primary" forever when its bootstrap Job fails
// (cloudnative-pg#11044) and never says so in status, so the wait also
// watches the Jobs and PVCs labelled cnpg.io/cluster=<name>: a failed Job
// ends the step at once with the Job's reason and the logs command; a
// Pending PVC is reported as it happens and in the timeout error (case B09).
func applyCluster(ctx context.Context, e *Env, s *Step) error {
	id := s.ID
	objs := e.objects(id)
	if err := applyObjects(ctx, e, id, objs); err != nil {
		return err
	}
	d := e.Inv.Database
	sel := "cnpg.io/cluster=" + d.ClusterName
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	failed := make(chan error, 1)
	go watchClusterJobs(wctx, e, id, sel, failed)
	pending := &pvcTracker{}
	go pending.watch(wctx, e, id, sel)
	done := make(chan error, 1)
	go func() { done <- waitReady(wctx, e, s, objs) }()
	var err error
	select {
	case err = <-done:
	case err = <-failed:
		cancel()
		<-done
	}
	if err != nil && waiters.IsTimeout(err) {
		if p := pending.String(); p != "" {
			return &Problem{Message: fmt.Sprintf("%v; %s", err, p),
				Fix: fmt.Sprintf("check that database.storageClass (or a default StorageClass) exists and can provision ('oc describe pvc -n %s')", d.Namespace), Err: err}
		}
	}
	return err
}

// watchClusterJobs sends the first failed CNPG Job (condition Failed=True,
// batch/v1 JobStatus) to failed.
func watchClusterJobs(ctx context.Context, e *Env, id, sel string, failed chan<- error) {
	ns := e.Inv.Database.Namespace
	jobs := e.Clients.Kube.BatchV1().Jobs(ns)
	lw := waiters.SelectorListWatch(jobs.List, jobs.Watch, sel)
	_, _ = watchtools.UntilWithSync(ctx, lw, &batchv1.Job{}, nil, func(ev watch.Event) (bool, error) {
		j, ok := ev.Object.(*batchv1.Job)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				select {
				case failed <- fmt.Errorf("CNPG Job %s/%s failed (%s: %s) after %d attempt(s), so Cluster %s stays in \"Setting up primary\" (CNPG does not report this in the Cluster status): read 'kubectl logs job/%s -n %s', fix the cause (often a stale PVC or bad bootstrap credentials), then delete the Cluster and its PVCs (oc delete cluster.postgresql.cnpg.io %s -n %s; oc delete pvc -l %s -n %s) and re-run",
					ns, j.Name, c.Reason, c.Message, j.Status.Failed, e.Inv.Database.ClusterName, j.Name, ns, e.Inv.Database.ClusterName, ns, sel, ns):
				default:
				}
				return true, nil
			}
		}
		return false, nil
	})
}

// pvcTracker records which PVCs of the Cluster are Pending.
type pvcTracker struct {
	mu      sync.Mutex
	pending map[string]string
}

func (p *pvcTracker) watch(ctx context.Context, e *Env, id, sel string) {
	pvcs := e.Clients.Kube.CoreV1().PersistentVolumeClaims(e.Inv.Database.Namespace)
	lw := waiters.SelectorListWatch(pvcs.List, pvcs.Watch, sel)
	_, _ = watchtools.UntilWithSync(ctx, lw, &corev1.PersistentVolumeClaim{}, nil, func(ev watch.Event) (bool, error) {
		c, ok := ev.Object.(*corev1.PersistentVolumeClaim)
		if !ok {
			return false, nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.pending == nil {
			p.pending = map[string]string{}
		}
		if ev.Type == watch.Deleted || c.Status.Phase != corev1.ClaimPending {
			delete(p.pending, c.Name)
			return false, nil
		}
		sc := "the default StorageClass"
		if c.Spec.StorageClassName != nil && *c.Spec.StorageClassName != "" {
			sc = "StorageClass " + *c.Spec.StorageClassName
		}
		if _, seen := p.pending[c.Name]; !seen {
			// The line still names the Cluster the step waits on: a
			// progress line replaces the last one in the live view.
			e.progress(id, "waiting for Cluster %s/%s: PVC %s/%s is Pending (%s)", c.Namespace, e.Inv.Database.ClusterName, c.Namespace, c.Name, sc)
		}
		p.pending[c.Name] = sc
		return false, nil
	})
}

// String lists the Pending PVCs, or "" when none is.
func (p *pvcTracker) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for name, sc := range p.pending {
		out = append(out, fmt.Sprintf("PVC %s Pending (%s)", name, sc))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func secretObject(ns, name, typ string, data map[string]string) *unstructured.Unstructured {
	sd := map[string]any{}
	for k, v := range data {
		sd[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{
			"name": name, "namespace": ns,
			"labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue},
		},
		"type": typ,
		"data": sd,
	}}
}

// checkSecret compares a live Secret's data with the wanted stringData
// without ever putting a value into the returned message.
func checkSecret(ctx context.Context, e *Env, want *unstructured.Unstructured) (bool, string, error) {
	same, msg, _, err := secretState(ctx, e, want)
	return same, msg, err
}

// secretState is checkSecret that also reports whether the live Secret
// carries restartPendingAnnotation (false when it is missing), from the
// same GET.
func secretState(ctx context.Context, e *Env, want *unstructured.Unstructured) (same bool, msg string, pending bool, err error) {
	live, err := e.Clients.Kube.CoreV1().Secrets(want.GetNamespace()).Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, kube.Describe(want) + " missing", false, nil
	}
	if err != nil {
		return false, "", false, err
	}
	_, pending = live.Annotations[restartPendingAnnotation]
	same, msg = sameSecretData(live, want)
	return same, msg, pending, nil
}

// sameSecretData compares live's data and type with want's, naming the
// first key that differs (never its value).
func sameSecretData(live *corev1.Secret, want *unstructured.Unstructured) (bool, string) {
	sd, _, _ := unstructured.NestedStringMap(want.Object, "data")
	for k, v := range sd {
		if base64.StdEncoding.EncodeToString(live.Data[k]) != v {
			return false, fmt.Sprintf("%s key %s differs", kube.Describe(want), k)
		}
	}
	if typ, _, _ := unstructured.NestedString(want.Object, "type"); string(live.Type) != typ {
		return false, fmt.Sprintf("%s has type %s, want %s", kube.Describe(want), live.Type, typ)
	}
	return true, ""
}

// crdServed reports whether the CRD named plural.group is Established and
// served, from discovery (kube.Clients.CRDServed: no request when the run's
// discovery already lists it).
func crdServed(_ context.Context, e *Env, name string) (bool, error) {
	ok, err := e.Clients.CRDServed(name)
	if err != nil {
		return false, fmt.Errorf("discovery of CRD %s: %w", name, err)
	}
	return ok, nil
}
