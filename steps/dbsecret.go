package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

func dbSecretSteps(inv *inventory.Inventory) []*Step {
	return []*Step{{
		ID: "dbsecret/maas-db-config", Title: "Secret " + inv.DBConfig.Name + " (DB_CONNECTION_URL for maas-api) in every namespace the RHOAI release reads it from",
		// It needs the password (database/secret) and names the service
		// by its fixed FQDN, so it is written while the database starts;
		// the DSC, which starts maas-api, waits for the database itself.
		After: []string{"database/secret"},
		Apply: applyDBConfig,
		Check: func(ctx context.Context, e *Env, _ *Step) (bool, string, error) {
			secrets, err := dbConfigSecrets(ctx, e)
			if err != nil {
				return false, "", err
			}
			for _, s := range secrets {
				ok, msg, p, err := secretState(ctx, e, s)
				if !ok || err != nil {
					return ok, msg, err
				}
				if p {
					return false, fmt.Sprintf("%s was changed but maas-api was not restarted on it yet", kube.Describe(s)), nil
				}
			}
			return true, "", nil
		},
		HashExtra: func(e *Env) string {
			return "vault:" + e.Inv.Database.VaultPath + " namespaces:" + strings.Join(e.Facts.Release.DBConfigNamespaces(e.Inv), ",")
		},
		// One copy per namespace the RHOAI release reads it from; the step
		// creates those namespaces when missing.
		Objects: func(e *Env, s *Step) []*unstructured.Unstructured {
			out := slices.Clone(e.objects(s.ID))
			for _, ns := range e.Facts.Release.DBConfigNamespaces(e.Inv) {
				if ns != e.Inv.DBConfig.Namespace {
					out = append(out, namespaceObject(ns))
				}
				out = append(out, secretStub(ns, e.Inv.DBConfig.Name))
			}
			return out
		},
		Desired: func(ctx context.Context, e *Env, s *Step) ([]DesiredObject, error) {
			return secretsDesired(ctx, e, s, func() ([]*unstructured.Unstructured, error) { return dbConfigSecrets(ctx, e) })
		},
		Render: renderDBConfig, ExternalSecrets: dbConfigExternal,
		Access: withAccess(func(e *Env) []Access {
			var out []Access
			for _, ns := range e.Facts.Release.DBConfigNamespaces(e.Inv) {
				// The Secret's namespace is created when missing.
				out = append(out, secretAccess(ns)(e)...)
				out = append(out, ObjectAccess([]*unstructured.Unstructured{namespaceStub(ns)}, nil, true)...)
			}
			return append(out, Access{"patch", "apps", "deployments", e.Facts.Release.MaaSAPINamespace(e.Inv), ""})
		}),
	}}
}

// renderDBConfig renders the Namespaces maas-db-config goes to and
// explains the Secrets, which carry the password and are not rendered.
func renderDBConfig(inv *inventory.Inventory, f assets.Facts, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
	docs := slices.Clone(objs)
	var notes []string
	c := inv.DBConfig
	for _, ns := range f.Release.DBConfigNamespaces(inv) {
		if ns != c.Namespace {
			docs = append(docs, namespaceObject(ns))
		}
		notes = append(notes, fmt.Sprintf("Secret %s/%s (Opaque) is not rendered: it carries the database password.", ns, c.Name))
	}
	notes = append(notes, "Provide it with key DB_CONNECTION_URL = "+connectionURLTemplate(inv), "before the DataScienceCluster enables MaaS.")
	return docs, notes, nil
}

// dbConfigSecrets builds maas-db-config for every namespace the layout
// needs (release.Release.DBConfigNamespaces).
func dbConfigSecrets(ctx context.Context, e *Env) ([]*unstructured.Unstructured, error) {
	pw, err := dbPassword(ctx, e)
	if err != nil {
		return nil, err
	}
	return dbConfigSecretsFor(e, pw)
}

// dbConfigSecretsFor is dbConfigSecrets for password pw.
func dbConfigSecretsFor(e *Env, pw string) ([]*unstructured.Unstructured, error) {
	c := e.Inv.DBConfig
	var out []*unstructured.Unstructured
	for _, ns := range e.Facts.Release.DBConfigNamespaces(e.Inv) {
		out = append(out, secretObject(ns, c.Name, "Opaque", map[string]string{"DB_CONNECTION_URL": DBConnectionURL(e.Inv, pw)}))
	}
	return out, nil
}

// dbConfigSecret is the maas-db-config copy maas-api itself reads (in the
// layout's maas-api namespace); dbConfigSecrets lists every copy.
func dbConfigSecret(ctx context.Context, e *Env) (*unstructured.Unstructured, error) {
	all, err := dbConfigSecrets(ctx, e)
	if err != nil {
		return nil, err
	}
	apiNS := e.Facts.Release.MaaSAPINamespace(e.Inv)
	for _, s := range all {
		if s.GetNamespace() == apiNS {
			return s, nil
		}
	}
	return all[len(all)-1], nil
}

// applyDBConfig writes maas-db-config, with the database's service FQDN,
// into every namespace the RHOAI release reads it from, creating those
// namespaces when missing: it must exist before MaaS is enabled, and on
// 3.5 maas-api runs in redhat-ai-gateway-infra, which otherwise appears only
// later (case B06, rh-aiservices-bu/rhoai-maas-guide PR #169). If a copy
// changed while maas-api already runs, maas-api is restarted so it reads the
// new URL (it reads the Secret only at start).
func applyDBConfig(ctx context.Context, e *Env, s *Step) error {
	id := s.ID
	secrets, err := dbConfigSecrets(ctx, e)
	if err != nil {
		return err
	}
	apiNS := e.Facts.Release.MaaSAPINamespace(e.Inv)
	deps := e.Clients.Kube.AppsV1().Deployments(apiNS)
	_, err = deps.Get(ctx, "maas-api", metav1.GetOptions{})
	apiRuns := err == nil
	stale, pending, err := staleDBConfig(ctx, e, id, secrets)
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		// A changed password reaches maas-db-config only once the
		// database accepts it (case B08).
		pw, err := dbPassword(ctx, e)
		if err != nil {
			return err
		}
		live, err := dbLive(ctx, e)
		if err != nil {
			return err
		}
		if live {
			if err := proveDBPassword(ctx, e, pw, "", false); err != nil {
				return err
			}
		}
	}
	for _, s := range stale {
		w := s
		if apiRuns {
			// Marked until maas-api has restarted on it: a run killed
			// between this write and the restart restarts it next time.
			w = s.DeepCopy()
			w.SetAnnotations(map[string]string{restartPendingAnnotation: "maas-api"})
		}
		if _, err := e.Clients.Apply(ctx, w); err != nil {
			return err
		}
		e.progress(id, "wrote Secret %s/%s", s.GetNamespace(), s.GetName())
		pending = pending || apiRuns
	}
	if !pending || !apiRuns {
		return nil
	}
	return restartMaaSAPI(ctx, e, id, apiNS, secrets)
}

// restartPendingAnnotation marks a maas-db-config copy written while
// maas-api ran and not yet followed by maas-api's restart and rollout.
const restartPendingAnnotation = "maasctl.io/restart-pending"

// staleDBConfig ensures the namespaces of the maas-db-config copies and
// returns the copies that differ from the live ones, and whether a
// maas-api restart is still owed for an earlier write.
func staleDBConfig(ctx context.Context, e *Env, id string, secrets []*unstructured.Unstructured) (stale []*unstructured.Unstructured, pending bool, err error) {
	for _, s := range secrets {
		if err := ensureNamespace(ctx, e, id, namespaceObject(s.GetNamespace())); err != nil {
			return nil, false, err
		}
		same, _, p, err := secretState(ctx, e, s)
		if err != nil {
			return nil, false, err
		}
		if !same {
			stale = append(stale, s)
		}
		pending = pending || p
	}
	return stale, pending, nil
}

// restartMaaSAPI restarts maas-api on the new maas-db-config, waits for
// its rollout and then drops the restart marker from the copies.
func restartMaaSAPI(ctx context.Context, e *Env, id, apiNS string, secrets []*unstructured.Unstructured) error {
	deps := e.Clients.Kube.AppsV1().Deployments(apiNS)
	e.progress(id, "maas-db-config changed: restarting Deployment %s/maas-api", apiNS)
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"maasctl.io/restartedAt":%q}}}}}`, time.Now().UTC().Format(time.RFC3339Nano))
	dep, err := deps.Patch(ctx, "maas-api", "application/strategic-merge-patch+json", []byte(patch), metav1.PatchOptions{FieldManager: kube.FieldManager})
	if err != nil {
		return fmt.Errorf("restart maas-api after maas-db-config changed: %w", err)
	}
	// The step ends once the restarted maas-api serves: until then
	// the DataScienceCluster reports MaaS not ready and a verify right
	// after the run would fail on a restart this run made.
	t := waiters.Target{
		GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: apiNS, Name: "maas-api",
		Cond: waiters.DeploymentRolledOut,
		OnChange: func(r waiters.Result) {
			if !r.Done {
				e.progress(id, "waiting for Deployment %s/maas-api to roll out: %s", apiNS, r.Status)
			}
		},
	}
	// A maas-api that cannot migrate its schema (case N10) fails the wait
	// at once, named, instead of at its timeout.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if dep.Spec.Selector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector); err == nil && !sel.Empty() {
			go watchMaaSAPIMigrations(wctx, e, apiNS, sel.String(), 2*time.Second, cancel)
		}
	}
	if _, err := waiters.For(wctx, e.Clients, t); err != nil {
		var mf *MigrationFailedError
		if errors.As(context.Cause(wctx), &mf) {
			return mf
		}
		return fmt.Errorf("maas-api did not roll out after the restart for the new maas-db-config: %w", err)
	}
	for _, s := range secrets { // drop the marker (server-side apply without it)
		if _, err := e.Clients.Apply(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
