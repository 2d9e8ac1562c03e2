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

// policySections returns the rule bodies of a Kuadrant policy spec: the
// spec itself (implicit defaults) and its defaults and overrides blocks
// where present (Kuadrant AuthPolicy / TokenRateLimitPolicy APIs).
func policySections(spec map[string]any) []map[string]any {
	var out []map[string]any
	if spec != nil {
		out = append(out, spec)
	}
	for _, section := range []string{"defaults", "overrides"} {
		if body, _ := spec[section].(map[string]any); body != nil {
			out = append(out, body)
		}
	}
	return out
}

// gatewayAccess evaluates the old gateway AuthPolicies: the tiers their
// authorization lets through.
func (pl *planner) gatewayAccess() tierSet {
	access := pl.all.union(nil)
	for _, u := range pl.st.OldPolicies() {
		if u.GetKind() != "AuthPolicy" {
			continue
		}
		obj := key(u)
		spec, _ := u.Object["spec"].(map[string]any)
		for _, body := range policySections(spec) {
			applies, err := pl.whenSet(body["when"], spec)
			if err != nil {
				pl.block(obj, "when: %v", err)
				continue
			}
			rules, _ := body["rules"].(map[string]any)
			authz, _ := rules["authorization"].(map[string]any)
			granted := pl.all.union(nil)
			for _, name := range sortedKeys(authz) {
				rule, _ := authz[name].(map[string]any)
				set, err := pl.authorizationRule(rule, spec)
				if err != nil {
					pl.block(obj, "authorization rule %s: %v", name, err)
					continue
				}
				granted = granted.intersect(set)
			}
			access = access.intersect(granted.union(pl.all.minus(applies)))
		}
	}
	return access
}

// authorizationRule returns the tiers one Authorino authorization rule
// lets through.
func (pl *planner) authorizationRule(rule, spec map[string]any) (tierSet, error) {
	set := pl.all.union(nil)
	switch {
	case rule["patternMatching"] != nil:
		pm, _ := rule["patternMatching"].(map[string]any)
		pats, _ := pm["patterns"].([]any)
		for _, p := range pats {
			pm, _ := p.(map[string]any)
			s, err := pl.pattern(pm, spec)
			if err != nil {
				return nil, err
			}
			set = set.intersect(s)
		}
	case rule["kubernetesSubjectAccessReview"] != nil:
		// The 3.2 gateway checked RBAC that odh-model-controller derived
		// from the tier annotations; the MaaSAuthPolicy model lists carry
		// the same grants.
	default:
		var kinds []string
		for k := range rule {
			if k != "when" && k != "cache" && k != "metrics" && k != "priority" {
				kinds = append(kinds, k)
			}
		}
		sort.Strings(kinds)
		return nil, fmt.Errorf("%s authorization has no subscription equivalent", strings.Join(kinds, ", "))
	}
	applies, err := pl.whenSet(rule["when"], spec)
	if err != nil {
		return nil, fmt.Errorf("when: %w", err)
	}
	return set.union(pl.all.minus(applies)), nil
}

// whenSet evaluates a list of Authorino/Kuadrant conditions (all must
// hold): the tiers for which they are true. A nil list is true for all.
func (pl *planner) whenSet(v any, spec map[string]any) (tierSet, error) {
	set := pl.all.union(nil)
	l, _ := v.([]any)
	for _, item := range l {
		m, _ := item.(map[string]any)
		s, err := pl.pattern(m, spec)
		if err != nil {
			return nil, err
		}
		set = set.intersect(s)
	}
	return set, nil
}

// pattern evaluates one Authorino pattern expression: a CEL predicate, a
// selector/operator/value triple on the tier attribute, a reference to a
// named pattern (spec.patterns), or all/any of nested expressions.
func (pl *planner) pattern(m map[string]any, spec map[string]any) (tierSet, error) {
	switch {
	case m["predicate"] != nil:
		p, _ := m["predicate"].(string)
		return parseTierPredicate(p, pl.all)
	case m["selector"] != nil:
		sel, _ := m["selector"].(string)
		op, _ := m["operator"].(string)
		val, _ := m["value"].(string)
		if sel != tierAttribute || (op != "eq" && op != "neq") {
			return nil, fmt.Errorf("pattern %s %s %q is not a plain comparison of %s", sel, op, val, tierAttribute)
		}
		return compareTier(map[string]string{"eq": "==", "neq": "!="}[op], val, pl.all), nil
	case m["patternRef"] != nil:
		name, _ := m["patternRef"].(string)
		named, _ := spec["patterns"].(map[string]any)
		ref, ok := named[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("patternRef %q not found in spec.patterns", name)
		}
		all, _ := ref["allOf"].([]any)
		return pl.combine(all, spec, true)
	case m["all"] != nil:
		l, _ := m["all"].([]any)
		return pl.combine(l, spec, true)
	case m["any"] != nil:
		l, _ := m["any"].([]any)
		return pl.combine(l, spec, false)
	}
	return nil, fmt.Errorf("empty pattern expression")
}

func (pl *planner) combine(l []any, spec map[string]any, and bool) (tierSet, error) {
	set := tierSet{}
	if and {
		set = pl.all.union(nil)
	}
	for _, item := range l {
		m, _ := item.(map[string]any)
		s, err := pl.pattern(m, spec)
		if err != nil {
			return nil, err
		}
		if and {
			set = set.intersect(s)
		} else {
			set = set.union(s)
		}
	}
	return set, nil
}

// tokenLimits evaluates the old TokenRateLimitPolicies: per tier the rates
// of every limit whose conditions select it, and where they come from.
func (pl *planner) tokenLimits() (map[string][]TokenLimit, map[string][]string) {
	limits, sources := map[string][]TokenLimit{}, map[string][]string{}
	before := len(pl.p.Blockers)
	defer func() { pl.limitsBlocked = len(pl.p.Blockers) > before }()
	for _, u := range pl.st.OldPolicies() {
		if u.GetKind() != "TokenRateLimitPolicy" {
			continue
		}
		obj := key(u)
		spec, _ := u.Object["spec"].(map[string]any)
		for _, body := range policySections(spec) {
			policyWhen, err := pl.whenSet(body["when"], spec)
			if err != nil {
				pl.block(obj, "when: %v", err)
				continue
			}
			ls, _ := body["limits"].(map[string]any)
			for _, name := range sortedKeys(ls) {
				lm, _ := ls[name].(map[string]any)
				sel, rates, ok := pl.limit(obj, name, lm)
				if !ok {
					continue
				}
				sel = sel.intersect(policyWhen)
				if len(sel) == 0 {
					pl.note("%s limit %s selects no defined tier; not carried over", obj, name)
					continue
				}
				for _, t := range sel.sorted() {
					for _, r := range rates {
						if !containsLimit(limits[t], r) {
							limits[t] = append(limits[t], r)
						}
					}
					sources[t] = append(sources[t], obj+" limit "+name)
				}
			}
		}
	}
	return limits, sources
}

// limit evaluates one TokenRateLimitPolicy limit.
func (pl *planner) limit(obj, name string, lm map[string]any) (tierSet, []TokenLimit, bool) {
	ok := true
	sel, err := pl.whenSet(lm["when"], nil)
	if err != nil {
		pl.block(obj, "limit %s: %v", name, err)
		ok = false
	}
	counters, _ := lm["counters"].([]any)
	var exprs []string
	for _, c := range counters {
		cm, _ := c.(map[string]any)
		e, _ := cm["expression"].(string)
		exprs = append(exprs, strings.TrimSpace(e))
	}
	if len(exprs) != 1 || exprs[0] != "auth.identity.userid" {
		pl.block(obj, "limit %s counts by %v; a MaaSSubscription counts tokens per user (auth.identity.userid) only", name, exprs)
		ok = false
	}
	var out []TokenLimit
	rates, _ := lm["rates"].([]any)
	if len(rates) == 0 {
		pl.block(obj, "limit %s has no rates", name)
		ok = false
	}
	for _, r := range rates {
		rm, _ := r.(map[string]any)
		n, _ := rm["limit"].(int64)
		if f, isFloat := rm["limit"].(float64); isFloat {
			n = int64(f)
		}
		w, _ := rm["window"].(string)
		win, err := subscriptionWindow(w)
		if err != nil {
			pl.block(obj, "limit %s: %v", name, err)
			ok = false
			continue
		}
		if n < 1 || n > maxTokenLimit {
			pl.block(obj, "limit %s: %d tokens is outside the MaaSSubscription range 1-%d", name, n, maxTokenLimit)
			ok = false
			continue
		}
		out = append(out, TokenLimit{Limit: n, Window: win})
	}
	return sel, out, ok
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
