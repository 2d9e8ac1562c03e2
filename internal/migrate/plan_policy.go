package migrate

import (
	"fmt"
	"sort"
	"strings"
)

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
