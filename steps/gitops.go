package steps

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
)

// RenderOptions configure RenderManifestsWith.
type RenderOptions struct {
	// Secrets says how the Secrets that carry the database password reach
	// the cluster: "" (not rendered, only described) or SecretsExternal.
	Secrets string
	// SecretStore is the External Secrets ClusterSecretStore that reads
	// Vault, with SecretsExternal. Default DefaultSecretStore.
	SecretStore string
}

// Render secret modes and defaults.
const (
	// SecretsExternal renders External Secrets Operator ExternalSecrets
	// (external-secrets.io/v1) that read the password from the
	// inventory's Vault path.
	SecretsExternal    = "external-secrets"
	DefaultSecretStore = "vault"
)

// Argo CD annotations (https://argo-cd.readthedocs.io/en/stable/user-guide/sync-waves/,
// .../sync-options/#skip-dry-run-for-new-custom-resources-types, .../resource_hooks/).
const (
	SyncWaveAnnotation    = "argocd.argoproj.io/sync-wave"
	SyncOptionsAnnotation = "argocd.argoproj.io/sync-options"
	HookAnnotation        = "argocd.argoproj.io/hook"
	hookDeleteAnnotation  = "argocd.argoproj.io/hook-delete-policy"
	skipDryRun            = "SkipDryRunOnMissingResource=true"
)

// Validate checks the options before anything is rendered.
func (o RenderOptions) Validate() error {
	switch o.Secrets {
	case "", SecretsExternal:
		return nil
	}
	return fmt.Errorf("--secrets %q: want %s (or leave it out to only describe the Secrets)", o.Secrets, SecretsExternal)
}

func (o RenderOptions) store() string {
	if o.SecretStore == "" {
		return DefaultSecretStore
	}
	return o.SecretStore
}

// annotateForArgo gives each document the sync wave of its file (apply
// order) and, when an earlier step's operator registers its kind (a group
// some step Serves), SkipDryRunOnMissingResource, so that Argo CD does not
// fail the dry run of a kind not served yet.
func annotateForArgo(docs []*unstructured.Unstructured, wave int, operatorGroups map[string]bool) {
	for _, d := range docs {
		a := d.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		if _, hook := a[HookAnnotation]; !hook {
			a[SyncWaveAnnotation] = fmt.Sprint(wave)
		}
		if g := d.GroupVersionKind().Group; operatorGroups[g] {
			a[SyncOptionsAnnotation] = skipDryRun
		}
		d.SetAnnotations(a)
	}
}

// operatorGroups are the API groups the steps' operators register.
func operatorGroups(reg *Registry) map[string]bool {
	out := map[string]bool{}
	for _, s := range reg.Steps {
		for _, g := range s.Serves {
			out[g] = true
		}
	}
	return out
}

// kustomization lists the rendered files in apply order for kustomize
// (kustomize build DIR) and Argo CD's kustomize support.
func kustomization(files []ManifestFile) ManifestFile {
	var b strings.Builder
	b.WriteString("# maasctl render: the manifests of maasctl install, in apply order (sync waves by file number).\n")
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, f := range files {
		if strings.HasSuffix(f.Name, ".yaml") {
			fmt.Fprintf(&b, "- %s\n", f.Name)
		}
	}
	return ManifestFile{Name: "kustomization.yaml", Data: []byte(b.String())}
}

// vaultRemoteKey splits a Vault path (database.vaultPath, "kv/a/b") into
// the KV mount ("kv", the ClusterSecretStore's spec.provider.vault.path)
// and the key below it ("a/b", an ExternalSecret's remoteRef.key).
func vaultRemoteKey(p string) (mount, key string) {
	mount, key, _ = strings.Cut(strings.Trim(p, "/"), "/")
	return mount, key
}

// externalSecret is an ExternalSecret (external-secrets.io/v1) that
// builds Secret ns/name of type typ from the key password of Vault path
// p, with the template data given (Go templates over .password).
func externalSecret(ns, name, typ, store, p string, data map[string]any) *unstructured.Unstructured {
	_, key := vaultRemoteKey(p)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"refreshInterval": "1h",
			"secretStoreRef":  map[string]any{"kind": "ClusterSecretStore", "name": store},
			"target": map[string]any{"name": name, "creationPolicy": "Owner", "template": map[string]any{
				"type": typ, "engineVersion": "v2", "data": data,
			}},
			"data": []any{map[string]any{"secretKey": "password", "remoteRef": map[string]any{"key": key, "property": "password"}}},
		},
	}}
}

// dbSecretExternal is the ExternalSecret of the database owner's
// basic-auth Secret (database/secret).
func dbSecretExternal(inv *inventory.Inventory, _ assets.Facts, store string) []*unstructured.Unstructured {
	d := inv.Database
	return []*unstructured.Unstructured{externalSecret(d.Namespace, d.SecretName, "kubernetes.io/basic-auth", store, d.VaultPath,
		map[string]any{"username": d.Owner, "password": "{{ .password }}"})}
}

// dbConfigExternal is the ExternalSecret of each maas-db-config copy
// (dbsecret/maas-db-config): DB_CONNECTION_URL with the password
// URL-encoded, as DBConnectionURL builds it.
func dbConfigExternal(inv *inventory.Inventory, f assets.Facts, store string) []*unstructured.Unstructured {
	tmpl := strings.Replace(connectionURLTemplate(inv), "<URL-encoded password>", "{{ .password | urlquery }}", 1)
	var out []*unstructured.Unstructured
	for _, ns := range f.Release.DBConfigNamespaces(inv) {
		out = append(out, externalSecret(ns, inv.DBConfig.Name, "Opaque", store, inv.Database.VaultPath, map[string]any{"DB_CONNECTION_URL": tmpl}))
	}
	return out
}

// kuadrantRestartHook is the Argo CD PostSync hook that does what
// platform/kuadrant does at install (case B01): when the Kuadrant CR
// reports MissingDependency because the operator started before Istio, it
// deletes the operator's pods once; the new pod finds Istio. A
// ServiceAccount with get on Kuadrant and list/delete on the operator's
// pods runs it.
func kuadrantRestartHook(inv *inventory.Inventory) []*unstructured.Unstructured {
	k := inv.Kuadrant
	const name = "maasctl-kuadrant-restart"
	meta := func(ns string) map[string]any {
		return map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"app.kubernetes.io/part-of": "maasctl", "app.kubernetes.io/component": "gitops-hook"}}
	}
	role := func(ns string, rules ...any) []*unstructured.Unstructured {
		return []*unstructured.Unstructured{
			{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(ns), "rules": rules}},
			{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(ns),
				"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
				"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": name, "namespace": k.Namespace}}}},
		}
	}
	script := fmt.Sprintf(`reason=$(oc get kuadrant %[1]s -n %[2]s -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}')
if [ "$reason" = MissingDependency ]; then
  echo "Kuadrant reports MissingDependency: restarting the operator once"
  oc delete pod -n %[3]s -l %[4]s
fi`, k.Name, k.Namespace, k.OperatorNamespace, k.OperatorSelector)
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(k.Namespace),
		"spec": map[string]any{"backoffLimit": int64(2), "template": map[string]any{"spec": map[string]any{
			"serviceAccountName": name, "restartPolicy": "Never",
			"containers": []any{map[string]any{"name": "restart", "image": "registry.redhat.io/openshift4/ose-cli:latest",
				"command": []any{"/bin/sh", "-c", script}}},
		}}},
	}}
	job.SetAnnotations(map[string]string{HookAnnotation: "PostSync", hookDeleteAnnotation: "HookSucceeded"})
	out := []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(k.Namespace)}}}
	out = append(out, role(k.Namespace, map[string]any{"apiGroups": []any{"kuadrant.io"}, "resources": []any{"kuadrants"}, "verbs": []any{"get"}})...)
	out = append(out, role(k.OperatorNamespace, map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"list", "delete"}})...)
	return append(out, job)
}

// renderKuadrant is platform/kuadrant's Render: the Kuadrant CR and the
// restart hook.
func renderKuadrant(inv *inventory.Inventory, _ assets.Facts, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
	return append(slices.Clone(objs), kuadrantRestartHook(inv)...), []string{
		"The Job " + "maasctl-kuadrant-restart is an Argo CD PostSync hook: it restarts the Kuadrant operator once when Kuadrant reports MissingDependency",
		"(the operator started before Istio), as maasctl install does. Without Argo CD, run it after the GatewayClass is accepted.",
	}, nil
}
