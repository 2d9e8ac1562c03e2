package migrate

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/maasctl/maasctl/internal/kube"
)

// Where the 3.4+ platform settings live (upgrade guide 3.5; maas-controller
// DefaultAITenantNamespace and DefaultAITenantName).
const (
	DefaultAITenantNamespace = "ai-tenants"
	DefaultAITenantName      = "models-as-a-service"
	// TenantConfigName is the one allowed name of MaasTenantConfig and of
	// the deprecated Tenant (their CRDs' CEL rules).
	TenantConfigName = "default-tenant"
)

// owner is the new home of a platform setting.
type owner int

const (
	ownerAITenant owner = iota
	ownerTenantConfig
)

// platformField is one row of the guide's field table (3.5, "Manual
// Steps: Re-applying Custom Configuration"): old ModelsAsService field, new
// owner and field, and the default that is left alone. hasDefault=false
// means "(not set)".
type platformField struct {
	old        []string
	owner      owner
	new        []string
	def        any
	hasDefault bool
}

var platformFields = []platformField{
	{old: []string{"spec", "gatewayRef", "name"}, owner: ownerAITenant, new: []string{"spec", "gateway", "name"}, def: DefaultGatewayName, hasDefault: true},
	{old: []string{"spec", "externalOIDC", "issuerUrl"}, owner: ownerAITenant, new: []string{"spec", "oidc", "issuerUrl"}},
	{old: []string{"spec", "externalOIDC", "clientId"}, owner: ownerAITenant, new: []string{"spec", "oidc", "clientId"}},
	{old: []string{"spec", "externalOIDC", "ttl"}, owner: ownerAITenant, new: []string{"spec", "oidc", "ttl"}, def: int64(300), hasDefault: true},
	{old: []string{"spec", "telemetry", "enabled"}, owner: ownerTenantConfig, new: []string{"spec", "telemetry", "enabled"}, def: true, hasDefault: true},
	{old: []string{"spec", "telemetry", "metrics", "captureOrganization"}, owner: ownerTenantConfig, new: []string{"spec", "telemetry", "metrics", "captureOrganization"}, def: true, hasDefault: true},
	{old: []string{"spec", "telemetry", "metrics", "captureUser"}, owner: ownerTenantConfig, new: []string{"spec", "telemetry", "metrics", "captureUser"}, def: false, hasDefault: true},
	{old: []string{"spec", "telemetry", "metrics", "captureGroup"}, owner: ownerTenantConfig, new: []string{"spec", "telemetry", "metrics", "captureGroup"}, def: false, hasDefault: true},
	{old: []string{"spec", "telemetry", "metrics", "captureModelUsage"}, owner: ownerTenantConfig, new: []string{"spec", "telemetry", "metrics", "captureModelUsage"}, def: true, hasDefault: true},
	{old: []string{"spec", "apiKeys", "maxExpirationDays"}, owner: ownerTenantConfig, new: []string{"spec", "apiKeys", "maxExpirationDays"}},
}

// MoveStatus is the outcome for one field.
type MoveStatus string

// Outcomes.
const (
	MoveMoved      MoveStatus = "moved"
	MoveWouldMove  MoveStatus = "would move (dry run)"
	MoveDefault    MoveStatus = "default, left alone"
	MoveUnset      MoveStatus = "not set"
	MoveAlreadySet MoveStatus = "already set"
	MoveConflict   MoveStatus = "conflict"
	MoveManual     MoveStatus = "manual step"
)

// FieldMove is the outcome for one old field.
type FieldMove struct {
	From   string     `json:"from"`
	To     string     `json:"to"`
	Value  any        `json:"value,omitempty"`
	Status MoveStatus `json:"status"`
	Note   string     `json:"note,omitempty"`
}

// PlatformReport lists what platform-config did per field.
type PlatformReport struct {
	Source string      `json:"source"`
	Moves  []FieldMove `json:"moves"`
}

// Moved returns the moves that changed (or, in a dry run, would change)
// the cluster.
func (r *PlatformReport) Moved() []FieldMove {
	var out []FieldMove
	for _, m := range r.Moves {
		if m.Status == MoveMoved || m.Status == MoveWouldMove {
			out = append(out, m)
		}
	}
	return out
}

// PlatformOptions configures MigratePlatformConfig.
type PlatformOptions struct {
	// FromFile reads the old ModelsAsService from a backup (YAML or JSON;
	// a single object or a List) instead of the live cluster.
	FromFile string
	// DryRun checks the changes with a server-side dry run and writes
	// nothing.
	DryRun bool
	// Overwrite replaces a custom value already set on the new owner;
	// without it such a field is a conflict and nothing is written.
	Overwrite bool
	// AITenant names the AITenant (default ai-tenants/models-as-a-service);
	// TenantNamespace holds the tenant configuration default-tenant
	// (default models-as-a-service).
	AITenant        types.NamespacedName
	TenantNamespace string
	Out             io.Writer
}

// ConflictError lists fields whose new owner already holds another custom
// value; nothing was written.
type ConflictError struct{ Moves []FieldMove }

func (e *ConflictError) Error() string {
	var parts []string
	for _, m := range e.Moves {
		parts = append(parts, fmt.Sprintf("  - %s=%v: %s (%s)", m.From, m.Value, m.To, m.Note))
	}
	return "the new owners already hold other custom values; nothing was written (use --overwrite to replace them):\n" + strings.Join(parts, "\n")
}

// MigratePlatformConfig carries the custom settings of the 3.3
// cluster-scoped ModelsAsService CR to their new owners per the guide's
// field table: gateway and external OIDC to the AITenant, API keys and
// telemetry to the tenant configuration (MaasTenantConfig/default-tenant
// when served, else the 3.4 Tenant/default-tenant). Fields at their
// default or unset are left alone. The gateway namespace is controller
// configuration and is reported as a manual step. Writes are server-side
// applies of only the moved fields (field manager maasctl).
//
// Errors: the source is missing; a needed new owner does not exist
// (maas-controller creates them when MaaS is enabled); *ConflictError.
func MigratePlatformConfig(ctx context.Context, c *kube.Clients, o PlatformOptions) (*PlatformReport, error) {
	if o.AITenant.Name == "" {
		o.AITenant = types.NamespacedName{Namespace: DefaultAITenantNamespace, Name: DefaultAITenantName}
	}
	if o.TenantNamespace == "" {
		o.TenantNamespace = DefaultMaaSNamespace
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	old, source, err := loadModelsAsService(ctx, c, o.FromFile)
	if err != nil {
		return nil, err
	}
	rep := &PlatformReport{Source: source}
	cands, needed := platformCandidates(rep, old, o)
	targets := map[owner]*unstructured.Unstructured{}
	names := map[owner]string{}
	for ow := range needed {
		t, name, err := loadOwner(ctx, c, ow, o)
		if err != nil {
			return rep, err
		}
		targets[ow], names[ow] = t, name
	}
	patches, conflicts := platformPatches(rep, cands, targets, names, o)
	if len(conflicts) > 0 {
		for i := range rep.Moves {
			if rep.Moves[i].Status == MoveMoved || rep.Moves[i].Status == MoveWouldMove {
				rep.Moves[i].Status, rep.Moves[i].Note = MoveConflict, "not written: another field conflicts"
			}
		}
		return rep, &ConflictError{Moves: conflicts}
	}
	completeOIDC(patches[ownerAITenant], old)
	for _, ow := range []owner{ownerAITenant, ownerTenantConfig} {
		p := patches[ow]
		if p == nil {
			continue
		}
		apply := c.Apply
		if o.DryRun {
			apply = c.DryRunApply
		}
		if _, err := apply(ctx, p); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// platformCandidate is a field of the old CR with a custom value to move;
// idx is its FieldMove in the report.
type platformCandidate struct {
	f     platformField
	value any
	idx   int
}

// platformCandidates adds a FieldMove per field of the old CR to rep
// (unset, default, or to move) and returns the fields to move and the
// owners they move to.
func platformCandidates(rep *PlatformReport, old *unstructured.Unstructured, o PlatformOptions) ([]platformCandidate, map[owner]bool) {
	needed := map[owner]bool{}
	var cands []platformCandidate
	for _, f := range platformFields {
		m := FieldMove{From: strings.Join(f.old, "."), To: nominal(f.owner, o) + " " + strings.Join(f.new, ".")}
		v, found, _ := unstructured.NestedFieldCopy(old.Object, f.old...)
		switch {
		case !found:
			m.Status = MoveUnset
		case f.hasDefault && sameValue(v, f.def):
			m.Status, m.Value = MoveDefault, v
		default:
			m.Value = v
			needed[f.owner] = true
			cands = append(cands, platformCandidate{f: f, value: v, idx: len(rep.Moves)})
		}
		rep.Moves = append(rep.Moves, m)
	}
	if ns, found, _ := unstructured.NestedString(old.Object, "spec", "gatewayRef", "namespace"); found && ns != DefaultGatewayNamespace {
		rep.Moves = append(rep.Moves, FieldMove{From: "spec.gatewayRef.namespace", Value: ns, Status: MoveManual,
			Note: "controller configuration, not an AITenant field: run maas-controller with --gateway-namespace=" + ns})
	}
	return cands, needed
}

// platformPatches compares each candidate with its new owner's value and
// builds one apply patch per owner; a custom value already there is a
// conflict unless o.Overwrite.
func platformPatches(rep *PlatformReport, cands []platformCandidate, targets map[owner]*unstructured.Unstructured, names map[owner]string, o PlatformOptions) (map[owner]*unstructured.Unstructured, []FieldMove) {
	patches := map[owner]*unstructured.Unstructured{}
	var conflicts []FieldMove
	for _, cd := range cands {
		m := &rep.Moves[cd.idx]
		t := targets[cd.f.owner]
		m.To = names[cd.f.owner] + " " + strings.Join(cd.f.new, ".")
		cur, found, _ := unstructured.NestedFieldCopy(t.Object, cd.f.new...)
		switch {
		case found && sameValue(cur, cd.value):
			m.Status = MoveAlreadySet
			continue
		case found && !(cd.f.hasDefault && sameValue(cur, cd.f.def)) && !o.Overwrite:
			m.Status, m.Note = MoveConflict, fmt.Sprintf("it holds %v", cur)
			conflicts = append(conflicts, *m)
			continue
		}
		p := patches[cd.f.owner]
		if p == nil {
			p = &unstructured.Unstructured{Object: map[string]any{}}
			p.SetAPIVersion(t.GetAPIVersion())
			p.SetKind(t.GetKind())
			p.SetNamespace(t.GetNamespace())
			p.SetName(t.GetName())
			patches[cd.f.owner] = p
		}
		_ = unstructured.SetNestedField(p.Object, cd.value, cd.f.new...)
		m.Status = MoveMoved
		if o.DryRun {
			m.Status = MoveWouldMove
		}
	}
	return patches, conflicts
}

// completeOIDC: AITenant.spec.oidc requires issuerUrl and clientId
// together; a partial apply would fail validation when only one of them
// moves, so the other is taken from the old CR too.
func completeOIDC(p, old *unstructured.Unstructured) {
	if p == nil {
		return
	}
	if _, ok, _ := unstructured.NestedMap(p.Object, "spec", "oidc"); !ok {
		return
	}
	for _, f := range []string{"issuerUrl", "clientId"} {
		if _, set, _ := unstructured.NestedFieldNoCopy(p.Object, "spec", "oidc", f); !set {
			if v, found, _ := unstructured.NestedFieldCopy(old.Object, "spec", "externalOIDC", f); found {
				_ = unstructured.SetNestedField(p.Object, v, "spec", "oidc", f)
			}
		}
	}
}

// loadModelsAsService reads the old CR from file (a single object or a
// List holding it) or from the cluster.
func loadModelsAsService(ctx context.Context, c *kube.Clients, file string) (*unstructured.Unstructured, string, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, "", fmt.Errorf("read --from-file: %w", err)
		}
		objs, err := decodeAll(data, file)
		if err != nil {
			return nil, "", err
		}
		for _, o := range objs {
			if o.GetKind() == "ModelsAsService" {
				return o, file, nil
			}
		}
		return nil, "", fmt.Errorf("%s holds no ModelsAsService", file)
	}
	m, ok, err := mapping(c, gkModelsAsService)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "", fmt.Errorf("ModelsAsService is not served any more (the 3.4 operator replaced it): pass --from-file with its backup (maasctl migrate tiers saves it under objects/)")
	}
	u, err := resourceFor(c, m, "").Get(ctx, ModelsAsServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", fmt.Errorf("ModelsAsService %s not found: pass --from-file with its backup", ModelsAsServiceName)
	}
	if err != nil {
		return nil, "", fmt.Errorf("get ModelsAsService %s: %w", ModelsAsServiceName, err)
	}
	return u, "ModelsAsService " + ModelsAsServiceName + " (live)", nil
}

// decodeAll decodes every object of a YAML or JSON stream, expanding Lists.
func decodeAll(data []byte, source string) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		if strings.TrimSpace(string(doc)) == "" {
			continue
		}
		u, err := decodeObject(doc, source)
		if err != nil {
			return nil, err
		}
		if items, ok, _ := unstructured.NestedSlice(u.Object, "items"); ok && strings.HasSuffix(u.GetKind(), "List") {
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					out = append(out, &unstructured.Unstructured{Object: m})
				}
			}
			continue
		}
		out = append(out, u)
	}
}

// nominal names a new owner before it is read.
func nominal(ow owner, o PlatformOptions) string {
	if ow == ownerAITenant {
		return "AITenant " + o.AITenant.String()
	}
	return "tenant config " + o.TenantNamespace + "/" + TenantConfigName
}

// loadOwner reads the new owner of a setting.
func loadOwner(ctx context.Context, c *kube.Clients, ow owner, o PlatformOptions) (*unstructured.Unstructured, string, error) {
	var gk schema.GroupKind
	var ns, name string
	switch ow {
	case ownerAITenant:
		gk, ns, name = gkAITenant, o.AITenant.Namespace, o.AITenant.Name
	default:
		gk, ns, name = gkMaasTenantConfig, o.TenantNamespace, TenantConfigName
		if _, ok, err := mapping(c, gkMaasTenantConfig); err != nil {
			return nil, "", err
		} else if !ok {
			gk = gkTenant // RHOAI 3.4: the Tenant CR holds the MaaS config
		}
	}
	m, ok, err := mapping(c, gk)
	if err != nil {
		return nil, "", err
	}
	label := gk.Kind + " " + ns + "/" + name
	if !ok {
		return nil, "", fmt.Errorf("%s: kind not served; upgrade the operator and enable MaaS first", label)
	}
	u, err := resourceFor(c, m, ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", fmt.Errorf("%s not found: maas-controller creates it once MaaS is enabled (upgrade guide 3.5)", label)
	}
	if err != nil {
		return nil, "", fmt.Errorf("get %s: %w", label, err)
	}
	return u, label, nil
}

// sameValue compares two JSON values, treating integers and floats of the
// same value as equal.
func sameValue(a, b any) bool {
	return fmt.Sprint(normalizeNumber(a)) == fmt.Sprint(normalizeNumber(b)) && kindOf(a) == kindOf(b)
}

func normalizeNumber(v any) any {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	case int32:
		return float64(n)
	}
	return v
}

func kindOf(v any) string {
	switch v.(type) {
	case int, int32, int64, float64:
		return "number"
	case bool:
		return "bool"
	case string:
		return "string"
	}
	return fmt.Sprintf("%T", v)
}

// WritePlatformReport renders the report as a table.
func WritePlatformReport(w io.Writer, r *PlatformReport) {
	fmt.Fprintf(w, "Source: %s\n", r.Source)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OLD FIELD\tVALUE\tRESULT\tNEW FIELD")
	for _, m := range r.Moves {
		v := "-"
		if m.Value != nil {
			v = fmt.Sprint(m.Value)
		}
		res := string(m.Status)
		if m.Note != "" {
			res += ": " + m.Note
		}
		to := m.To
		if to == "" {
			to = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.From, v, res, to)
	}
	_ = tw.Flush()
}
