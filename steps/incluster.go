package steps

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
)

// InClusterOptions configure RenderInCluster.
type InClusterOptions struct {
	// Namespace runs the Job and holds its ServiceAccount. Default: the
	// state namespace (maasctl), which the install uses anyway.
	Namespace string
	// ServiceAccount is the identity the install runs as. Default
	// maasctl-installer.
	ServiceAccount string
	// Image is the maasctl image the Job runs (built from the project's
	// Containerfile).
	Image string
	// Version labels the objects (the maasctl version).
	Version string
}

// Default names of the in-cluster run.
const (
	DefaultInstallerServiceAccount = "maasctl-installer"
	DefaultInstallerImage          = "quay.io/maasctl/maasctl:latest"
	installerRoleName              = "maasctl-installer"
)

// RBACRules groups accesses into RBAC rules: the cluster-wide ones
// (Namespace "") for a ClusterRole, the others by namespace for Roles.
// One rule per API group, resource and resource name, verbs sorted, so
// that each rule grants one resource and removing it takes exactly that
// resource away.
func RBACRules(list []Access) (cluster []map[string]any, byNS map[string][]map[string]any) {
	type key struct{ ns, group, resource, name string }
	verbs := map[key][]string{}
	for _, a := range minimalAccess(list) {
		k := key{a.Namespace, a.Group, a.Resource, a.Name}
		if !slices.Contains(verbs[k], a.Verb) {
			verbs[k] = append(verbs[k], a.Verb)
		}
	}
	keys := make([]key, 0, len(verbs))
	for k := range verbs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return fmt.Sprint(a.ns, "|", a.group, "|", a.resource, "|", a.name) < fmt.Sprint(b.ns, "|", b.group, "|", b.resource, "|", b.name)
	})
	byNS = map[string][]map[string]any{}
	for _, k := range keys {
		v := verbs[k]
		sort.Strings(v)
		r := map[string]any{"apiGroups": []any{k.group}, "resources": []any{k.resource}, "verbs": toAny(v)}
		if k.name != "" {
			r["resourceNames"] = []any{k.name}
		}
		if k.ns == "" {
			cluster = append(cluster, r)
		} else {
			byNS[k.ns] = append(byNS[k.ns], r)
		}
	}
	return cluster, byNS
}

// minimalAccess drops every access another one of the list implies: a
// named one when the same verb is granted on the whole resource in its
// namespace or cluster-wide, a namespaced one when it is granted
// cluster-wide. No rule is then redundant: each grants something no other
// does.
func minimalAccess(list []Access) []Access {
	has := map[Access]bool{}
	for _, a := range list {
		has[a] = true
	}
	var out []Access
	for a := range has {
		wide := Access{a.Verb, a.Group, a.Resource, "", ""}
		inNS := Access{a.Verb, a.Group, a.Resource, a.Namespace, ""}
		switch {
		case a.Name != "" && (has[inNS] || has[wide]):
		case a.Name == "" && a.Namespace != "" && has[wide]:
		default:
			out = append(out, a)
		}
	}
	return out
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// InstallerAccess is every permission 'maasctl install' (and its re-runs
// and verify) needs for inv, as preflight's RBAC check asks for them: the
// union of every step's Access plus the engine's own state. Resources are
// named by guessing the plural (no cluster is asked), as render does.
func InstallerAccess(inv *inventory.Inventory, f assets.Facts) ([]Access, error) {
	reg, err := NewRegistry(inv)
	if err != nil {
		return nil, err
	}
	objs, err := reg.render(inv, f)
	if err != nil {
		return nil, err
	}
	e := &Env{Inv: inv, Facts: f, Objects: objs, Registry: reg}
	return plannedAccess(e, guessResource), nil
}

// guessResource is the resource of gvk without a cluster to ask:
// meta.UnsafeGuessKindToResource, except that a kind ending in a vowel
// and "y" (Gateway) takes an "s" (gateways), as the API servers name it.
func guessResource(gvk schema.GroupVersionKind) string {
	k := strings.ToLower(gvk.Kind)
	if n := len(k); n >= 2 && k[n-1] == 'y' && strings.ContainsRune("aeiou", rune(k[n-2])) {
		return k + "s"
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural.Resource
}

// RenderInCluster renders a least-privilege in-cluster run of 'maasctl
// install' for inv: the Namespaces the grants live in, a ServiceAccount,
// a ClusterRole with the cluster-wide permissions and one Role per
// namespace with the namespaced ones (exactly InstallerAccess, which
// preflight's RBAC check asks for, so a missing rule is named before any
// write), their bindings, a ConfigMap with the inventory (no secret: the
// inventory holds none) and a Job that runs 'maasctl install' with the
// in-cluster config. Files: 00-namespaces.yaml, 01-rbac.yaml,
// 02-job.yaml, README.md.
//
// The Namespaces the Roles are bound in must exist before the Roles, so
// they are rendered: maasctl then finds them existing and records them as
// adopted, so uninstall keeps them (delete them by hand after an
// uninstall).
func RenderInCluster(inv *inventory.Inventory, f assets.Facts, o InClusterOptions) ([]ManifestFile, error) {
	if err := inv.Validate(); err != nil {
		return nil, InvalidInventory(err)
	}
	if o.Namespace == "" {
		o.Namespace = StateNamespace
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = DefaultInstallerServiceAccount
	}
	if o.Image == "" {
		o.Image = DefaultInstallerImage
	}
	list, err := InstallerAccess(inv, f)
	if err != nil {
		return nil, err
	}
	cluster, byNS := RBACRules(list)
	labels := map[string]any{"app.kubernetes.io/name": "maasctl-installer", "app.kubernetes.io/part-of": "maasctl"}
	if o.Version != "" {
		labels["app.kubernetes.io/version"] = o.Version
	}
	meta := func(name, ns string) map[string]any {
		m := map[string]any{"name": name, "labels": labels}
		if ns != "" {
			m["namespace"] = ns
		}
		return m
	}
	nsDocs, rbac := installerRBAC(o, cluster, byNS, meta)
	job, err := installerJob(inv, o, labels, meta)
	if err != nil {
		return nil, err
	}
	var files []ManifestFile
	for _, part := range []struct {
		name string
		docs []map[string]any
		what string
	}{
		{"00-namespaces.yaml", nsDocs, "the Namespaces the Roles are bound in (they must exist first)"},
		{"01-rbac.yaml", rbac, "the ServiceAccount, its ClusterRole and Roles (exactly what preflight checks) and their bindings"},
		{"02-job.yaml", job, "the inventory and the Job that runs maasctl install"},
	} {
		var b bytes.Buffer
		fmt.Fprintf(&b, "# %s\n", part.what)
		for _, d := range part.docs {
			y, err := yaml.Marshal(d)
			if err != nil {
				return nil, err
			}
			b.WriteString("---\n")
			b.Write(y)
		}
		files = append(files, ManifestFile{Name: part.name, Data: b.Bytes()})
	}
	files = append(files, ManifestFile{Name: "README.md", Data: inClusterReadme(inv, o, len(cluster), len(byNS))})
	return files, nil
}

func toAnyMaps(l []map[string]any) []any {
	out := make([]any, len(l))
	for i, m := range l {
		out[i] = m
	}
	return out
}

// installerRBAC returns the Namespaces the Roles live in (the state
// namespace first) and the ServiceAccount, ClusterRole, Roles and their
// bindings of the in-cluster run.
func installerRBAC(o InClusterOptions, cluster []map[string]any, byNS map[string][]map[string]any, meta func(name, ns string) map[string]any) (nsDocs, rbac []map[string]any) {
	nss := []string{o.Namespace}
	for ns := range byNS {
		if ns != o.Namespace {
			nss = append(nss, ns)
		}
	}
	slices.Sort(nss[1:])
	for _, ns := range nss {
		nsDocs = append(nsDocs, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}})
	}
	subject := []any{map[string]any{"kind": "ServiceAccount", "name": o.ServiceAccount, "namespace": o.Namespace}}
	rbac = []map[string]any{
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(o.ServiceAccount, o.Namespace)},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(installerRoleName, ""), "rules": toAnyMaps(cluster)},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(installerRoleName, ""),
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": installerRoleName},
			"subjects": subject},
	}
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		rbac = append(rbac,
			map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(installerRoleName, ns), "rules": toAnyMaps(byNS[ns])},
			map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(installerRoleName, ns),
				"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": installerRoleName},
				"subjects": subject})
	}
	return nsDocs, rbac
}

// installerJob returns the inventory ConfigMap and the Job that runs
// maasctl install in the cluster.
func installerJob(inv *inventory.Inventory, o InClusterOptions, labels map[string]any, meta func(name, ns string) map[string]any) ([]map[string]any, error) {
	invYAML, err := yaml.Marshal(inv.Redacted())
	if err != nil {
		return nil, err
	}
	env := []any{}
	if inv.Vault.Address != "" {
		env = append(env, map[string]any{"name": "VAULT_ADDR", "value": inv.Vault.Address})
	}
	job := []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("maasctl-inventory", o.Namespace), "data": map[string]any{"inventory.yaml": string(invYAML)}},
		{"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("maasctl-install", o.Namespace), "spec": map[string]any{
			// A failed run is resumed by the next attempt: finished steps
			// are not repeated.
			"backoffLimit": int64(3),
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{
					"serviceAccountName": o.ServiceAccount,
					"restartPolicy":      "Never",
					"securityContext":    map[string]any{"runAsNonRoot": true, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
					"containers": []any{map[string]any{
						"name": "maasctl", "image": o.Image,
						"args": []any{"install", "-f", "/etc/maasctl/inventory.yaml", "-o", "plain"}, // ENTRYPOINT /maasctl (Containerfile)
						"env":  env,
						"securityContext": map[string]any{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
							"capabilities": map[string]any{"drop": []any{"ALL"}}},
						"volumeMounts": []any{map[string]any{"name": "inventory", "mountPath": "/etc/maasctl", "readOnly": true}},
					}},
					"volumes": []any{map[string]any{"name": "inventory", "configMap": map[string]any{"name": "maasctl-inventory"}}},
				},
			},
		}},
	}
	return job, nil
}

// inClusterReadme is the README.md of the in-cluster run.
func inClusterReadme(inv *inventory.Inventory, o InClusterOptions, clusterRules, namespaces int) []byte {
	var readme bytes.Buffer
	fmt.Fprintf(&readme, "# maasctl install, in the cluster, least privilege\n\n")
	fmt.Fprintf(&readme, "Apply the files in order as a cluster administrator (`oc apply --server-side -f 00-namespaces.yaml -f 01-rbac.yaml -f 02-job.yaml`). The Job runs `maasctl install` as ServiceAccount `%s/%s` with the in-cluster config; `oc logs -n %s job/maasctl-install -f` follows it.\n\n", o.Namespace, o.ServiceAccount, o.Namespace)
	fmt.Fprintf(&readme, "The ClusterRole `%s` (%d rules) and the Roles in %d namespaces grant exactly what the install's steps need, the permissions `maasctl preflight` checks with SelfSubjectAccessReviews: remove one and preflight names it before anything is written. The same identity can re-run the install, `maasctl status` and `maasctl verify --live-only`.\n\n", installerRoleName, clusterRules, namespaces)
	fmt.Fprintf(&readme, "Vault: the Job reads the database password from Vault (%s). Give the Job a Vault login: set `vault.auth` in the inventory to the Kubernetes auth method with a role bound to this ServiceAccount; no token is rendered.\n\n", cmp.Or(inv.Vault.Address, "VAULT_ADDR, set it in the Job's env"))
	fmt.Fprintf(&readme, "The Namespaces of 00-namespaces.yaml exist before the install, so maasctl records them as adopted and uninstall keeps them; delete them by hand after an uninstall. The image is built from the project's Containerfile.\n")
	return readme.Bytes()
}
