package steps

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

// ManifestFile is one file 'maasctl render' writes.
type ManifestFile struct {
	// Name is the file name: NN-<phase>-<step>.yaml, numbered in apply
	// order, or README.md.
	Name string
	Data []byte
}

// OfflineFacts returns the rendering facts for an inventory without asking
// a cluster: the Gateway host must be set in the inventory
// (gateway.hostname) and the RHOAI layout follows the rhoai operator's
// channel (stable-3.5 → 3.5).
func OfflineFacts(inv *inventory.Inventory) (assets.Facts, error) {
	if inv.Gateway.Hostname == "" {
		return assets.Facts{}, errors.New("render works without a cluster, so the Gateway host must be set: --set gateway.hostname=maas.apps.example.com (or gateway.hostname in the inventory)")
	}
	f := assets.Facts{Host: inv.Gateway.Hostname}
	if op := inv.Operator("rhoai"); op != nil {
		if v := release.VersionOf(op.Channel); v != "" {
			f.Release = release.New(v, "the rhoai operator channel "+op.Channel)
		}
	}
	return f, nil
}

// RenderManifests returns every manifest of the install for inv, one file
// per step in apply order (dependency order of the registry), for a GitOps
// engine (Argo CD, ACM) to apply with server-side apply. What the install
// decides at run time is explained in comments instead:
//
//   - Secrets that carry the database password are not rendered, only
//     described (name, type, keys, where the value lives in Vault);
//   - the Namespace and OperatorGroup of operators installed in
//     openshift-operators for all namespaces are not rendered: OpenShift
//     ships them (global-operators);
//   - the monitoring ConfigMap holds only enableUserWorkload, where install
//     merges it into the cluster's existing config.yaml;
//   - the Authorino TLS objects patch objects the operators create.
//
// README.md lists the files and the Secrets to provide.
func RenderManifests(inv *inventory.Inventory, f assets.Facts) ([]ManifestFile, error) {
	return RenderManifestsOf(nil, inv, f)
}

// RenderManifestsOf is RenderManifests for the steps of reg (nil: the
// inventory's registry).
func RenderManifestsOf(reg *Registry, inv *inventory.Inventory, f assets.Facts) ([]ManifestFile, error) {
	return RenderManifestsWith(reg, inv, f, RenderOptions{})
}

// RenderManifestsWith is RenderManifestsOf with options. Every document
// carries its file's Argo CD sync wave (the file number) and, when its
// kind is registered by an earlier step's operator,
// SkipDryRunOnMissingResource; kustomization.yaml lists the files in
// order. With o.Secrets = SecretsExternal the Secrets that carry the
// password are rendered as ExternalSecrets (each step's ExternalSecrets)
// reading the inventory's Vault path through ClusterSecretStore
// o.SecretStore.
func RenderManifestsWith(reg *Registry, inv *inventory.Inventory, f assets.Facts, o RenderOptions) ([]ManifestFile, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := inv.Validate(); err != nil {
		return nil, InvalidInventory(err)
	}
	reg, err := registryFor(reg, inv)
	if err != nil {
		return nil, err
	}
	order, err := reg.TopoOrder()
	if err != nil {
		return nil, err
	}
	objs, err := reg.render(inv, f)
	if err != nil {
		return nil, err
	}
	var files []ManifestFile
	var readme bytes.Buffer
	readme.WriteString("# maasctl render\n\n")
	fmt.Fprintf(&readme, "Manifests of `maasctl install` for Gateway host %s, one file per install step (two for a step whose objects take effect one after the other), numbered in apply order. ", f.Host)
	readme.WriteString("Apply them in that order with server-side apply (`kubectl apply --server-side -f FILE`, or Argo CD with `ServerSideApply=true` and sync waves by number); a step's kinds are served only once the operator of an earlier step is installed, so retry a file until its CRDs exist.\n\n")
	fmt.Fprintf(&readme, "Install restarts the Kuadrant operator once when Kuadrant reports `MissingDependency` because the operator started before Istio existed. The `platform-kuadrant` file holds an Argo CD PostSync hook, the Job `maasctl-kuadrant-restart`, that does the same; without Argo CD, run `oc delete pod -n %s -l %s` once `platform-gatewayclass` is accepted and Kuadrant reports `MissingDependency`.\n\n", inv.Kuadrant.OperatorNamespace, inv.Kuadrant.OperatorSelector)
	if o.Secrets == SecretsExternal {
		mount, _ := vaultRemoteKey(inv.Database.VaultPath)
		fmt.Fprintf(&readme, "## Secrets\n\nNo Secret value is rendered. ExternalSecrets (External Secrets Operator, external-secrets.io/v1) build the Secrets below from Vault through the ClusterSecretStore `%s`, which must read Vault's KV v2 mount `%s` (`spec.provider.vault.path: %s`, `version: v2`):\n\n", o.store(), mount, mount)
	} else {
		readme.WriteString("## Secrets to provide\n\nNo Secret value is rendered. Create these from Vault (for example with External Secrets, `maasctl render --secrets external-secrets`, or a sealed secret) before the step that names them:\n\n")
	}
	d := inv.Database
	fmt.Fprintf(&readme, "- `%s/%s` (type `kubernetes.io/basic-auth`, keys `username` = `%s`, `password` = key `password` of Vault `%s`), before `database-secret`.\n", d.Namespace, d.SecretName, d.Owner, d.VaultPath)
	for _, ns := range f.Release.DBConfigNamespaces(inv) {
		fmt.Fprintf(&readme, "- `%s/%s` (type `Opaque`, key `DB_CONNECTION_URL` = `%s`), before `dbsecret-maas-db-config`.\n", ns, inv.DBConfig.Name, connectionURLTemplate(inv))
	}
	for _, m := range inv.ExternalModels {
		fmt.Fprintf(&readme, "- `%s/%s` (key `api-key`, the model server's API key) must exist already; the manifests only label it.\n", m.Namespace, m.APIKeySecret)
	}
	readme.WriteString("\n## Files\n\n")
	n := 0
	served := operatorGroups(reg)
	for _, s := range order {
		var extra []*unstructured.Unstructured
		if o.Secrets == SecretsExternal && s.ExternalSecrets != nil {
			extra = s.ExternalSecrets(inv, f, o.store())
		}
		parts, err := renderStep(inv, f, s, objs[s.ID], extra, func(docs []*unstructured.Unstructured, part int) { annotateForArgo(docs, n+1+part, served) })
		if err != nil {
			return nil, fmt.Errorf("render step %s: %w", s.ID, err)
		}
		after := s.After
		for _, p := range parts {
			n++
			name := fmt.Sprintf("%02d-%s.yaml", n, strings.ReplaceAll(s.ID, "/", "-")+p.suffix)
			var b strings.Builder
			fmt.Fprintf(&b, "# Step %s: %s\n", s.ID, s.Title)
			if len(after) > 0 {
				fmt.Fprintf(&b, "# Apply after: %s\n", strings.Join(after, ", "))
			}
			b.WriteString(p.body)
			files = append(files, ManifestFile{Name: name, Data: []byte(b.String())})
			fmt.Fprintf(&readme, "- `%s`: %s\n", name, s.Title)
			after = []string{name}
		}
	}
	readme.WriteString("- `kustomization.yaml`: the files above, for `kustomize build` or an Argo CD Application (sync waves are the file numbers).\n")
	files = append(files, kustomization(files), ManifestFile{Name: "README.md", Data: readme.Bytes()})
	return files, nil
}

func connectionURLTemplate(inv *inventory.Inventory) string {
	d := inv.Database
	return fmt.Sprintf("postgresql://%s:<URL-encoded password>@%s-rw.%s.svc:5432/%s?%s",
		url.PathEscape(d.Owner), d.ClusterName, d.Namespace, d.Name, url.Values{"sslmode": {inv.DBConfig.SSLMode}}.Encode())
}

// renderedPart is one file of a step's manifests: its name suffix ("" or
// "-<kind>" for a step with RenderApart) and YAML body.
type renderedPart struct{ suffix, body string }

// renderStep returns the YAML documents (with explaining comments) of one
// step (its Render): one part, one part per document for a step with
// RenderApart, none when it writes nothing a GitOps engine could apply.
//
// extra are documents to add (ExternalSecrets); annotate is called on
// each part's documents (part: its index) before they are written.
func renderStep(inv *inventory.Inventory, f assets.Facts, s *Step, objs, extra []*unstructured.Unstructured, annotate func(docs []*unstructured.Unstructured, part int)) ([]renderedPart, error) {
	docs, notes, err := s.render(inv, f, objs)
	if err != nil {
		return nil, err
	}
	docs = append(docs, extra...)
	if len(docs) == 0 && len(notes) == 0 {
		return nil, nil
	}
	var head strings.Builder
	for _, n := range notes {
		head.WriteString("# " + n + "\n")
	}
	if !s.RenderApart || len(docs) < 2 {
		annotate(docs, 0)
		body, err := yamlDocs(docs)
		return []renderedPart{{body: head.String() + body}}, err
	}
	parts := make([]renderedPart, 0, len(docs))
	for i, d := range docs {
		annotate(docs[i:i+1], i)
		body, err := yamlDocs([]*unstructured.Unstructured{d})
		if err != nil {
			return nil, err
		}
		parts = append(parts, renderedPart{suffix: "-" + strings.ToLower(d.GetKind()), body: head.String() + body})
	}
	return parts, nil
}

// yamlDocs is docs as YAML documents separated by "---".
func yamlDocs(docs []*unstructured.Unstructured) (string, error) {
	var b strings.Builder
	for i, d := range docs {
		y, err := yaml.Marshal(d.Object)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.String(), nil
}
