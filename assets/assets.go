// Package assets holds maasctl's manifests (go:embed) and renders them from an
// inventory into the objects of each install step. Rendering is pure: no
// cluster access, no secrets (Secrets that carry the database password are
// built by their steps from Vault data at apply time).
package assets

import (
	"bytes"
	"embed"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/internal/names"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

//go:embed manifests
var manifests embed.FS

// ManagedByLabel (value ManagedByValue) marks every object maasctl
// creates (internal/names).
const (
	ManagedByLabel = names.ManagedByLabel
	ManagedByValue = names.ManagedByValue
)

// Facts are values read from the cluster that rendering needs.
type Facts struct {
	// Host is the Gateway host name: inventory gateway.hostname, or
	// maas.<spec.domain of config.openshift.io/v1 Ingress cluster>.
	Host string
	// Release is the RHOAI release to render for (internal/release): its
	// KServeMaaS layout (3.3/3.4: MaaS under
	// spec.components.kserve.modelsAsService and maas.opendatahub.io
	// ExternalModels with no ExternalProvider; the zero value is 3.5:
	// spec.components.aigateway.modelsAsAService and inference.opendatahub.io
	// ExternalProvider/ExternalModel, case B16) and its Components: when set,
	// inventory components outside them are left out of the DSC (the caller
	// reports them); nil keeps every inventory component.
	Release release.Release
}

// Component is one DSC component with its managementState.
type Component struct {
	Name  string
	State string
}

type data struct {
	Inv        *inventory.Inventory
	Host       string
	KServeMaaS bool
	Op         inventory.Operator
	Components []Component
	Namespaces []string
	Providers  []inventory.ExternalModel
	// KeySecrets holds one model per distinct API-key Secret (namespace
	// and apiKeySecret): models that share a Secret label it once.
	KeySecrets []inventory.ExternalModel
}

// Rendered maps a step ID to its objects in apply order.
type Rendered map[string][]*unstructured.Unstructured

// OperatorStepID returns the step ID of an operator in the operators phase.
func OperatorStepID(id string) string { return "operators/" + id }

// Render renders every step's objects for inv. Errors name the manifest.
func Render(inv *inventory.Inventory, f Facts) (Rendered, error) {
	d := data{Inv: inv, Host: f.Host, KServeMaaS: f.Release.KServeMaaS()}
	served := f.Release.Serves
	for _, c := range inv.RHOAI.ManagedComponents {
		if served(c) {
			d.Components = append(d.Components, Component{c, "Managed"})
		}
	}
	for _, c := range inv.RHOAI.RemovedComponents {
		if served(c) {
			d.Components = append(d.Components, Component{c, "Removed"})
		}
	}
	sort.Slice(d.Components, func(i, j int) bool { return d.Components[i].Name < d.Components[j].Name })
	seenNS, seenProv, seenKey := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, m := range inv.ExternalModels {
		if k := m.Namespace + "/" + m.APIKeySecret; !seenKey[k] {
			seenKey[k] = true
			d.KeySecrets = append(d.KeySecrets, m)
		}
		if !seenNS[m.Namespace] {
			seenNS[m.Namespace] = true
			d.Namespaces = append(d.Namespaces, m.Namespace)
		}
		if k := m.Namespace + "/" + m.ProviderName; !seenProv[k] {
			seenProv[k] = true
			d.Providers = append(d.Providers, m)
		}
	}

	out := Rendered{}
	add := func(stepID, file string, d data) error {
		objs, err := renderFile(file, d)
		if err != nil {
			return err
		}
		out[stepID] = append(out[stepID], objs...)
		return nil
	}
	steps := []struct{ id, file string }{
		{"database/secret", "database/secret.yaml"},
		{"database/cluster", "database/cluster.yaml"},
		{"operators/lws-instance", "operators/lws-instance.yaml"},
		{"platform/monitoring", "platform/monitoring.yaml"},
		{"platform/gatewayclass", "platform/gatewayclass.yaml"},
		{"platform/certificate", "platform/certificate.yaml"},
		{"platform/gateway", "platform/gateway.yaml"},
		{"platform/route", "platform/route.yaml"},
		{"platform/kuadrant", "platform/kuadrant.yaml"},
		{"platform/authorino-tls", "platform/authorino-tls.yaml"},
		{"dbsecret/maas-db-config", "dbsecret/maas-db-config.yaml"},
		{"rhoai/dsci", "rhoai/dsci.yaml"},
		{"rhoai/dsc", "rhoai/dsc.yaml"},
		{"rhoai/dashboard", "rhoai/dashboard.yaml"},
		{"models/prepare", "models/prepare.yaml"},
		{"models/provider", "models/provider.yaml"},
		{"models/model", "models/model.yaml"},
		{"access/auth-policy", "access/auth-policy.yaml"},
		{"access/subscription", "access/subscription.yaml"},
	}
	for _, s := range steps {
		if err := add(s.id, s.file, d); err != nil {
			return nil, err
		}
	}
	dbOp := d
	dbOp.Op = inv.Database.Operator
	if err := add("database/operator", "operators/olm.yaml", dbOp); err != nil {
		return nil, err
	}
	for _, op := range inv.Operators {
		od := d
		od.Op = op
		if err := add(OperatorStepID(op.ID), "operators/olm.yaml", od); err != nil {
			return nil, err
		}
	}
	return out, nil
}

var funcs = template.FuncMap{
	"quote": strconv.Quote,
}

func renderFile(name string, d data) ([]*unstructured.Unstructured, error) {
	src, err := manifests.ReadFile(path.Join("manifests", name))
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	tpl, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("parse manifest %s: %w", name, err)
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, d); err != nil {
		return nil, fmt.Errorf("render manifest %s: %w", name, err)
	}
	objs, err := decode(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("decode manifest %s: %w", name, err)
	}
	for _, o := range objs {
		if OperatorLabelled(o, d.Inv) {
			continue
		}
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[ManagedByLabel] = ManagedByValue
		o.SetLabels(labels)
	}
	return objs, nil
}

// OperatorLabelled reports whether another controller sets every label of
// o, so that maasctl must not label it: the Authorino Service maasctl
// annotates for its service-CA certificate. authorino-operator v0.21.0
// makes each Service's labels exactly its Authorino CR's
// (pkg/reconcilers/service_mutator.go LabelsMutator, on every reconcile
// of the CR or the Service): a label of maasctl's own would be removed
// again and again, and re-added by every maasctl run. The same holds for
// the Authorino Deployment, whose env maasctl sets: the operator makes its
// labels exactly the CR's (DeploymentLabelsMutator).
func OperatorLabelled(o *unstructured.Unstructured, inv *inventory.Inventory) bool {
	k := inv.Kuadrant
	if o.GetNamespace() != k.Namespace {
		return false
	}
	switch o.GetAPIVersion() + " " + o.GetKind() {
	case "v1 Service":
		return o.GetName() == k.AuthorinoService
	case "apps/v1 Deployment":
		return o.GetName() == k.AuthorinoName
	}
	return false
}

func decode(b []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufioReader(b))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(strings.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

func stripComments(b []byte) string {
	var sb strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		sb.WriteString(line + "\n")
	}
	return sb.String()
}

// YAML renders objects as one multi-document YAML stream.
func YAML(objs []*unstructured.Unstructured) ([]byte, error) {
	var buf bytes.Buffer
	for i, o := range objs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}
