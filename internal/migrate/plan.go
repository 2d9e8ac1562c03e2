package migrate

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	maasnames "github.com/maasctl/maasctl/internal/names"
)

// Blocker is one thing the subscription model cannot express, naming the
// object it comes from. Any blocker stops the migration before it changes
// anything.
type Blocker struct {
	Object string `json:"object"`
	Reason string `json:"reason"`
}

func (b Blocker) String() string { return b.Object + ": " + b.Reason }

// UnmappableError lists the blockers of a plan.
type UnmappableError struct{ Blockers []Blocker }

func (e *UnmappableError) Error() string {
	parts := make([]string, 0, len(e.Blockers))
	for _, b := range e.Blockers {
		parts = append(parts, "  - "+b.String())
	}
	return "the tier configuration cannot be expressed with subscriptions; nothing was changed:\n" + strings.Join(parts, "\n")
}

// TierPlan is what one tier becomes.
type TierPlan struct {
	Tier Tier `json:"tier"`
	// GatewayAccess is false when the old gateway AuthPolicy denied the tier.
	GatewayAccess bool `json:"gatewayAccess"`
	// Models are the models whose tier annotation lists the tier.
	Models []types.NamespacedName `json:"models"`
	// Limits are the token rates of the TokenRateLimitPolicy limits whose
	// predicates select the tier; LimitSources names those limits.
	Limits       []TokenLimit `json:"limits"`
	LimitSources []string     `json:"limitSources"`
	// Priority is the MaaSSubscription priority: the tier's level, so a
	// user in several tiers' groups gets the highest tier, as in 3.2.
	Priority int32 `json:"priority"`
	// AuthPolicy and Subscription are the objects to create; nil when the
	// tier grants no model.
	AuthPolicy   *unstructured.Unstructured `json:"-"`
	Subscription *unstructured.Unstructured `json:"-"`
}

// SkippedModel is a model left out of the migration (PlanOptions.SkipInvalid)
// because its tier annotation cannot be used: it gets no MaaSModelRef, is
// in no tier's objects, and its annotation is left exactly as it is.
type SkippedModel struct {
	Ref   ObjectRef `json:"ref"`
	Value string    `json:"value"`
	// Reason says why the annotation cannot be used.
	Reason string `json:"reason"`
}

func (s SkippedModel) String() string { return s.Ref.String() + ": " + s.Reason }

// SkipInvalidFlag is the command-line flag that sets PlanOptions.SkipInvalid;
// blockers of invalid annotations name it as the way on.
const SkipInvalidFlag = "--skip-invalid"

// Unannotation is the removal of the tier annotation from one model.
type Unannotation struct {
	Ref   ObjectRef `json:"ref"`
	Value string    `json:"value"`
}

// Plan is the migration derived from a State: what to create, what to
// delete after the new objects are ready, and what blocks it.
type Plan struct {
	Tiers []TierPlan
	// ModelRefs are the MaaSModelRefs to create, one per governed model.
	ModelRefs []*unstructured.Unstructured
	// Reused are existing MaaSModelRefs the plan relies on instead of
	// creating them; apply waits for them to be Ready too.
	Reused []ObjectRef
	// Delete lists the old policies and ConfigMaps, in deletion order.
	Delete []ObjectRef
	// Unannotate lists the models whose tier annotation goes.
	Unannotate []Unannotation
	// Skipped are the models with an unusable tier annotation left out
	// (PlanOptions.SkipInvalid); without SkipInvalid each is a blocker.
	Skipped []SkippedModel
	// Notes are facts worth reading that do not block.
	Notes []string
	// Blockers stop the migration.
	Blockers []Blocker
}

// Objects returns the objects to create, in apply order: model refs, auth
// policies, subscriptions.
func (p *Plan) Objects() []*unstructured.Unstructured {
	out := append([]*unstructured.Unstructured{}, p.ModelRefs...)
	for _, t := range p.Tiers {
		if t.AuthPolicy != nil {
			out = append(out, t.AuthPolicy)
		}
	}
	for _, t := range p.Tiers {
		if t.Subscription != nil {
			out = append(out, t.Subscription)
		}
	}
	return out
}

// Empty reports whether the plan changes nothing in the cluster: nothing
// to create, reuse, delete or unannotate (a re-run after a migration that
// skipped models).
func (p *Plan) Empty() bool {
	return len(p.Objects()) == 0 && len(p.Reused) == 0 && len(p.Delete) == 0 && len(p.Unannotate) == 0
}

// Err returns an *UnmappableError when the plan has blockers.
func (p *Plan) Err() error {
	if len(p.Blockers) == 0 {
		return nil
	}
	return &UnmappableError{Blockers: p.Blockers}
}

// PlanOptions are the inputs of BuildPlan besides the State.
type PlanOptions struct {
	// BackupID is recorded on every created object (annotation
	// BackupAnnotation) so it can be traced to its backup directory.
	BackupID string
	// SkipInvalid leaves out, instead of blocking on, every model whose
	// tier annotation cannot be used: not a JSON array of tier names, a
	// tier the ConfigMap does not define, or any tier once no tier
	// configuration is left (no ConfigMap and no tier policy: a migration
	// already ran). Each is listed in Plan.Skipped and keeps its
	// annotation.
	SkipInvalid bool
}

type planner struct {
	st    *State
	o     PlanOptions
	p     *Plan
	tiers []Tier
	all   tierSet
	// limitsBlocked is set when a TokenRateLimitPolicy could not be read;
	// then "no limit selects tier X" would be a consequence, not a cause.
	limitsBlocked bool
	// gone is set when no tier configuration is left (no ConfigMap and no
	// tier policy); skipped are the models left out (SkipInvalid).
	gone    bool
	skipped map[types.NamespacedName]bool
}

func (pl *planner) block(obj, format string, args ...any) {
	pl.p.Blockers = append(pl.p.Blockers, Blocker{Object: obj, Reason: fmt.Sprintf(format, args...)})
}

func (pl *planner) note(format string, args ...any) {
	pl.p.Notes = append(pl.p.Notes, fmt.Sprintf(format, args...))
}

// BuildPlan derives the migration from st (upgrade guide Phase 5, one
// MaaSAuthPolicy and one MaaSSubscription per tier instead of per model and
// group). It is a pure function: every input comes from st.
//
//   - Tiers, groups and levels come from the tier-to-group-mapping
//     ConfigMap; a tier without groups blocks.
//   - A tier's models are the annotated LLMInferenceServices whose
//     annotation lists it (an empty list means every tier); an annotation
//     that is not a JSON array of tier names, or lists a tier the ConfigMap
//     does not define, blocks naming the model and SkipInvalidFlag, or,
//     with SkipInvalid, leaves the model out (Plan.Skipped). Tiers must
//     have distinct levels: they become the subscriptions' priorities.
//   - A tier's token limits are the rates of every TokenRateLimitPolicy
//     limit whose predicates select it; limits must count per user
//     (auth.identity.userid), like a MaaSSubscription does.
//   - Tiers the old gateway AuthPolicy denied get nothing.
//   - Any predicate that is not a plain tier comparison, and any
//     authorization rule other than tier pattern matching or the tier RBAC
//     check, blocks.
func BuildPlan(st *State, o PlanOptions) *Plan {
	pl := &planner{st: st, o: o, p: &Plan{}, skipped: map[types.NamespacedName]bool{}}
	if !st.HasTierObjects() {
		return pl.p
	}
	pl.gone = len(st.TierConfigMaps) == 0 && len(st.OldPolicies()) == 0
	if !st.MaaSServed && !pl.gone {
		pl.block("MaaSModelRef/MaaSAuthPolicy/MaaSSubscription", "the maas.opendatahub.io kinds are not served: upgrade the operator to 3.4 or later and set modelsAsService to Managed first (upgrade guide Phase 3)")
	}
	if !st.MaaSNamespaceExists && !pl.gone {
		pl.block("Namespace "+st.MaaSNamespace, "not found: MaaSAuthPolicy and MaaSSubscription objects go there (is MaaS enabled?)")
	}
	models := map[string][]types.NamespacedName{}
	if pl.gone {
		// Only annotated models are left, and none can be resolved to
		// tiers: nothing would be created, so the MaaS kinds are not
		// needed either.
		pl.models()
	} else {
		pl.loadTiers()
		models = pl.models()
	}
	access := pl.gatewayAccess()
	limits, sources := pl.tokenLimits()

	for _, t := range pl.tiers {
		tp := TierPlan{Tier: t, GatewayAccess: access[t.Name], Models: models[t.Name], Priority: t.Level}
		tp.Limits, tp.LimitSources = limits[t.Name], sources[t.Name]
		switch {
		case len(tp.Models) == 0:
			pl.note("tier %s: no model lists it; nothing to create", t.Name)
		case !tp.GatewayAccess:
			pl.note("tier %s: the old gateway AuthPolicy denied it; its models stay closed to its groups", t.Name)
		case len(tp.Limits) == 0 && !pl.limitsBlocked:
			pl.block("tier "+t.Name, "no TokenRateLimitPolicy limit selects it; an unlimited tier cannot be expressed as a MaaSSubscription (token limits are required)")
		case len(tp.Limits) == 0:
			// A limit that blocked may be the one selecting this tier.
		default:
			tp.AuthPolicy = pl.authPolicy(tp)
			tp.Subscription = pl.subscription(tp)
		}
		pl.p.Tiers = append(pl.p.Tiers, tp)
	}
	pl.modelRefs()
	for _, kind := range []string{"AuthPolicy", "TokenRateLimitPolicy"} {
		for _, u := range st.OldPolicies() {
			if u.GetKind() == kind {
				pl.p.Delete = append(pl.p.Delete, refOf(u))
			}
		}
	}
	for _, cm := range st.TierConfigMaps {
		pl.p.Delete = append(pl.p.Delete, refOf(cm))
	}
	for _, m := range st.Models {
		if pl.skipped[types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}] {
			continue // left exactly as it is
		}
		pl.p.Unannotate = append(pl.p.Unannotate, Unannotation{Ref: refOf(m), Value: m.GetAnnotations()[TierAnnotation]})
	}
	return pl.p
}

// loadTiers reads the tier definitions; copies in several namespaces must
// agree.
func (pl *planner) loadTiers() {
	st := pl.st
	if len(st.TierConfigMaps) == 0 {
		pl.block("ConfigMap "+TierConfigMapName, "not found in any namespace: the tiers and their groups are unknown")
		return
	}
	var first *unstructured.Unstructured
	for _, cm := range st.TierConfigMaps {
		tiers, err := ParseTiers(cm)
		if err != nil {
			pl.block(key(cm), "%v", err)
			continue
		}
		if first == nil {
			first, pl.tiers = cm, tiers
			continue
		}
		if !reflect.DeepEqual(tiers, pl.tiers) {
			pl.block(key(cm), "defines other tiers than %s; decide which is right and delete the other first", key(first))
		}
	}
	levels := map[int32]string{}
	for _, t := range pl.tiers {
		if other, ok := levels[t.Level]; ok {
			pl.block(key(first), "tiers %s and %s share level %d: the level becomes the MaaSSubscription priority, and equal priorities leave the subscription a user in both gets undefined (maas-controller reports SpecPriorityDuplicate); give each tier its own level", other, t.Name, t.Level)
		}
		levels[t.Level] = t.Name
		if len(t.Groups) == 0 {
			pl.block(key(first), "tier %s has no groups: nobody would own its subscription", t.Name)
		}
		if !validName(t.Name) {
			pl.block(key(first), "tier name %q cannot form object names (lowercase letters, digits and '-')", t.Name)
		}
	}
	pl.all = allTiers(pl.tiers)
}

// models maps each tier to the models whose annotation lists it. A model
// whose annotation cannot be used blocks, or with SkipInvalid is skipped.
func (pl *planner) models() map[string][]types.NamespacedName {
	out := map[string][]types.NamespacedName{}
	for _, m := range pl.st.Models {
		obj := key(m)
		value := m.GetAnnotations()[TierAnnotation]
		names, reason := pl.annotationTiers(value)
		if reason != "" {
			nn := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
			if pl.o.SkipInvalid {
				pl.skipped[nn] = true
				pl.p.Skipped = append(pl.p.Skipped, SkippedModel{Ref: refOf(m), Value: value, Reason: reason})
				continue
			}
			fix := fmt.Sprintf("fix the annotation (a JSON array of the tier names %s defines, e.g. [\"free\"])", TierConfigMapName)
			if pl.gone {
				fix = fmt.Sprintf("remove the annotation (oc annotate llminferenceservice %s -n %s %s-)", m.GetName(), m.GetNamespace(), TierAnnotation)
			}
			pl.block(obj, "%s; %s, or re-run with %s to migrate without this model (its annotation is then left as it is)", reason, fix, SkipInvalidFlag)
			continue
		}
		if len(m.GetName()) > 63 || !validName(m.GetName()) {
			pl.block(obj, "name is longer than 63 characters or not a DNS label; MaaSModelRef references cannot name it")
			continue
		}
		set := tierSet{}
		if len(names) == 0 {
			set = pl.all.union(nil)
		}
		for _, n := range names {
			set[n] = true
		}
		for _, t := range set.sorted() {
			out[t] = append(out[t], types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()})
		}
	}
	return out
}

// annotationTiers parses a tier annotation value and checks its tiers
// against the ConfigMap; reason is "" when the annotation can be used.
func (pl *planner) annotationTiers(value string) (names []string, reason string) {
	names, err := ParseTierAnnotation(value)
	switch {
	case err != nil:
		return nil, err.Error()
	case pl.gone:
		return nil, fmt.Sprintf("annotation %s=%q names tiers, but no tier configuration is left (no %s ConfigMap and no tier policy on the Gateway: migrated already, or deleted)", TierAnnotation, value, TierConfigMapName)
	}
	var unknown []string
	for _, n := range names {
		if pl.all != nil && !pl.all[n] {
			unknown = append(unknown, strconv.Quote(n))
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Sprintf("annotation %s lists tier %s, which %s does not define (value %s)", TierAnnotation, strings.Join(unknown, ", "), TierConfigMapName, value)
	}
	return names, ""
}

// modelRefs plans a MaaSModelRef for every model some planned tier
// governs, reusing an existing one that references the same
// LLMInferenceService.
func (pl *planner) modelRefs() {
	governed := map[types.NamespacedName]bool{}
	for _, t := range pl.p.Tiers {
		if t.AuthPolicy == nil {
			continue
		}
		for _, m := range t.Models {
			governed[m] = true
		}
	}
	for _, m := range pl.st.Models {
		nn := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
		if pl.skipped[nn] {
			continue
		}
		if !governed[nn] {
			if len(pl.p.Blockers) == 0 {
				pl.note("model %s: no tier with access lists it; no MaaSModelRef created", nn)
			}
			continue
		}
		ref := pl.object(maasModelRefKind, nn.Namespace, nn.Name, map[string]any{
			"modelRef": map[string]any{"kind": llmisvcModelRefKind, "name": nn.Name},
		})
		if live, ok := pl.st.Existing[key(ref)]; ok {
			kind, _, _ := unstructured.NestedString(live.Object, "spec", "modelRef", "kind")
			name, _, _ := unstructured.NestedString(live.Object, "spec", "modelRef", "name")
			switch {
			case live.GetLabels()[MigrationLabel] == MigrationLabelValue:
			case kind == llmisvcModelRefKind && name == nn.Name:
				pl.p.Reused = append(pl.p.Reused, refOf(live))
				continue
			default:
				pl.block(key(live), "exists and references %s %s, not LLMInferenceService %s", kind, name, nn.Name)
				continue
			}
		}
		pl.p.ModelRefs = append(pl.p.ModelRefs, ref)
	}
}

func (pl *planner) authPolicy(tp TierPlan) *unstructured.Unstructured {
	var refs []any
	for _, m := range tp.Models {
		refs = append(refs, map[string]any{"name": m.Name, "namespace": m.Namespace})
	}
	u := pl.object(maasAuthPolicyKind, pl.st.MaaSNamespace, "tier-"+tp.Tier.Name+"-access", map[string]any{
		"modelRefs": refs,
		"subjects":  map[string]any{"groups": groupRefs(tp.Tier.Groups), "users": []any{}},
	})
	pl.checkOwned(u)
	return u
}

func (pl *planner) subscription(tp TierPlan) *unstructured.Unstructured {
	var rates []any
	for _, l := range tp.Limits {
		rates = append(rates, map[string]any{"limit": l.Limit, "window": l.Window})
	}
	var refs []any
	for _, m := range tp.Models {
		refs = append(refs, map[string]any{"name": m.Name, "namespace": m.Namespace, "tokenRateLimits": rates})
	}
	u := pl.object(maasSubscriptionKind, pl.st.MaaSNamespace, "tier-"+tp.Tier.Name+"-subscription", map[string]any{
		"owner":     map[string]any{"groups": groupRefs(tp.Tier.Groups), "users": []any{}},
		"priority":  int64(tp.Priority),
		"modelRefs": refs,
	})
	pl.checkOwned(u)
	return u
}

// checkOwned blocks when an object of the planned name exists that an
// earlier migration did not create: applying would take it over.
//
// An object an earlier migration created keeps that migration's
// BackupAnnotation, so that its rollback (not this one's) removes it and
// this one's rollback can name it.
func (pl *planner) checkOwned(u *unstructured.Unstructured) {
	live, ok := pl.st.Existing[key(u)]
	if !ok {
		return
	}
	if live.GetLabels()[MigrationLabel] != MigrationLabelValue {
		pl.block(key(live), "already exists and was not created by maasctl migrate; rename or delete it first")
		return
	}
	if id := live.GetAnnotations()[BackupAnnotation]; id != "" {
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[BackupAnnotation] = id
		u.SetAnnotations(ann)
	}
}

func (pl *planner) object(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": maasAPIVersion, "kind": kind,
		"metadata": map[string]any{
			"name": name, "namespace": ns,
			"labels": map[string]any{ManagedByLabel: maasnames.ManagedByValue, MigrationLabel: MigrationLabelValue},
		},
		"spec": spec,
	}}
	if pl.o.BackupID != "" {
		u.SetAnnotations(map[string]string{BackupAnnotation: pl.o.BackupID})
	}
	return u
}

func groupRefs(groups []string) []any {
	out := make([]any, 0, len(groups))
	for _, g := range groups {
		out = append(out, map[string]any{"name": g})
	}
	return out
}

func containsLimit(l []TokenLimit, x TokenLimit) bool {
	for _, y := range l {
		if y == x {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
