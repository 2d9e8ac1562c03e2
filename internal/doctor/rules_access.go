package doctor

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

func selector(m map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func refs(p *unstructured.Unstructured) [][2]string {
	l, _, _ := unstructured.NestedSlice(p.Object, "spec", "modelRefs")
	var out [][2]string
	for _, x := range l {
		m, _ := x.(map[string]any)
		out = append(out, [2]string{fmt.Sprint(m["namespace"]), fmt.Sprint(m["name"])})
	}
	return out
}

func subjects(p *unstructured.Unstructured, field string) ([]string, []string) {
	gl, _, _ := unstructured.NestedSlice(p.Object, "spec", field, "groups")
	var groups []string
	for _, g := range gl {
		m, _ := g.(map[string]any)
		groups = append(groups, fmt.Sprint(m["name"]))
	}
	users, _, _ := unstructured.NestedStringSlice(p.Object, "spec", field, "users")
	return groups, users
}

func grants(id verify.Identity, groups, users []string) bool {
	if id.User != "" && slices.Contains(users, id.User) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(id.Groups, g) {
			return true
		}
	}
	return false
}

// governance: a model must be in both a MaaSAuthPolicy and a
// MaaSSubscription, or its MaaSModelRef stays Pending ("No active
// governance pairing found", case B17; rhoai-maas-guide#116).
func governance(s *verify.State) []Finding {
	var out []Finding
	for _, m := range s.Inv.ExternalModels {
		inAuth, inSub := false, false
		for _, p := range s.AuthPolicies {
			inAuth = inAuth || slices.Contains(refs(p), [2]string{m.Namespace, m.Name})
		}
		for _, p := range s.Subscriptions {
			inSub = inSub || slices.Contains(refs(p), [2]string{m.Namespace, m.Name})
		}
		if inAuth && inSub {
			continue
		}
		var missing []string
		if !inAuth {
			missing = append(missing, "no MaaSAuthPolicy")
		}
		if !inSub {
			missing = append(missing, "no MaaSSubscription")
		}
		ev := strings.Join(missing, " and ") + " references it"
		if c, ok := cond(s.ModelRefs[verify.Key(m.Namespace, m.Name)], "Ready"); ok {
			ev += "; " + c.String()
		}
		cause := "an auth policy decides who may call a model and a subscription how many tokens they get; a model needs both"
		fix := "add the model to inventory authPolicies[].modelRefs and subscriptions[].modelRefs (names and namespaces must match), then maasctl install"
		if invAuth, invSub := inventoryPairs(s.Inv, m); (inAuth || invAuth) && (inSub || invSub) {
			// The inventory pairs the model: the live policy or
			// subscription was deleted or changed by hand (a new user's
			// trial, session 42: the fix said to add what was there).
			cause = "the inventory pairs the model with an auth policy and a subscription, but the live one was deleted or changed outside it; a model needs both"
			fix = "maasctl install   (re-creates the inventory's MaaSAuthPolicy and MaaSSubscription for the model)"
		}
		out = append(out, finding(CodeGovernanceGap, obj("MaaSModelRef", m.Namespace, m.Name), ev, cause, fix))
	}
	return out
}

// inventoryPairs says whether the inventory lists model m in an auth
// policy and in a subscription.
func inventoryPairs(inv *inventory.Inventory, m inventory.ExternalModel) (inAuth, inSub bool) {
	for _, p := range inv.AuthPolicies {
		inAuth = inAuth || slices.ContainsFunc(p.ModelRefs, func(r inventory.ModelRef) bool { return r.Namespace == m.Namespace && r.Name == m.Name })
	}
	for _, p := range inv.Subscriptions {
		inSub = inSub || slices.ContainsFunc(p.ModelRefs, func(r inventory.SubscriptionModel) bool { return r.Namespace == m.Namespace && r.Name == m.Name })
	}
	return inAuth, inSub
}

// access judges 403 and 429 causes against the installed inventory (what
// maasctl install was given), not against the caller's own groups: a live
// MaaSAuthPolicy or MaaSSubscription whose subjects differ from the
// inventory's is an error (403/429 for the users the inventory grants;
// maasctl install restores it), while a caller outside the groups the
// inventory grants is told so as information: that is the intended
// configuration (DEPLOYMENT.md "Grant access to specific groups").
func access(s *verify.State) []Finding {
	var out []Finding
	ns := s.Inv.RHOAI.MaaSNamespace
	for _, m := range s.Inv.ExternalModels {
		key := [2]string{m.Namespace, m.Name}
		o := obj("MaaSModelRef", m.Namespace, m.Name)
		var wantG, wantU, pols []string
		drift := false
		for _, ip := range s.Inv.AuthPolicies {
			if !slices.ContainsFunc(ip.ModelRefs, func(r inventory.ModelRef) bool { return r.Namespace == m.Namespace && r.Name == m.Name }) {
				continue
			}
			wantG, wantU = append(wantG, ip.Groups...), append(wantU, ip.Users...)
			lp := byName(s.AuthPolicies, ip.Name)
			if lp == nil || !slices.Contains(refs(lp), key) {
				continue // missingObjects / governance
			}
			g, u := subjects(lp, "subjects")
			if !sameSet(g, ip.Groups) || !sameSet(u, ip.Users) {
				drift = true
				out = append(out, finding(Code403, o,
					fmt.Sprintf("MaaSAuthPolicy %s/%s grants groups %s, users %s; the installed inventory grants groups %s, users %s", ns, ip.Name, list(g), list(u), list(ip.Groups), list(ip.Users)),
					"the policy was changed outside the inventory: the users the inventory grants get 403, and the next maasctl install reverts the change anyway",
					"maasctl install   (restores the inventory's subjects); to grant other groups, change authPolicies[name="+ip.Name+"].groups in the inventory first; then create a new API key (keys keep the groups they were minted with)"))
			}
			pols = append(pols, ip.Name)
		}
		var subG, subU, subs []string
		for _, is := range s.Inv.Subscriptions {
			if !slices.ContainsFunc(is.ModelRefs, func(r inventory.SubscriptionModel) bool { return r.Namespace == m.Namespace && r.Name == m.Name }) {
				continue
			}
			subG, subU = append(subG, is.Groups...), append(subU, is.Users...)
			lp := byName(s.Subscriptions, is.Name)
			if lp == nil {
				continue
			}
			g, u := subjects(lp, "owner")
			if !sameSet(g, is.Groups) || !sameSet(u, is.Users) {
				drift = true
				out = append(out, finding(Code429, o,
					fmt.Sprintf("MaaSSubscription %s/%s is owned by groups %s, users %s; the installed inventory says groups %s, users %s", ns, is.Name, list(g), list(u), list(is.Groups), list(is.Users)),
					"the subscription was changed outside the inventory: the users the inventory names get 429, and the next maasctl install reverts the change anyway",
					"maasctl install   (restores the inventory's owners); to cover other groups, change subscriptions[name="+is.Name+"].groups in the inventory first; then create a new API key"))
			}
			subs = append(subs, is.Name)
		}
		if drift || s.Caller.User == "" {
			continue
		}
		var gaps []string
		if len(pols) > 0 && !grants(s.Caller, wantG, wantU) {
			gaps = append(gaps, fmt.Sprintf("authPolicies %s (groups %s; users %s)", strings.Join(pols, ","), list(wantG), list(wantU)))
		}
		if len(subs) > 0 && !grants(s.Caller, subG, subU) {
			gaps = append(gaps, fmt.Sprintf("subscriptions %s (groups %s; users %s)", strings.Join(subs, ","), list(subG), list(subU)))
		}
		if len(gaps) > 0 {
			out = append(out, notInGroups(s, o, m.Name, strings.Join(gaps, " and ")))
		}
	}
	return out
}

// notInGroups is the information that the caller is outside the groups
// the installed inventory grants model (what says so).
func notInGroups(s *verify.State, object, model, what string) Finding {
	granted := "model " + model
	if model == "" {
		granted = "it"
	}
	return finding(CodeNotInGroups, object,
		fmt.Sprintf("you are not in %s; you are %s (groups %s)", what, s.Caller.User, list(s.Caller.Groups)),
		"the installed inventory grants "+granted+" to other groups: your own requests get 403 or 429, as intended; nothing is broken",
		"none needed; to call the model yourself add one of your groups to the inventory's authPolicies[].groups and subscriptions[].groups, then maasctl install -f <inventory> and create a new API key")
}

func list(l []string) string {
	if len(l) == 0 {
		return "<none>"
	}
	return strings.Join(l, ",")
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func firstName(l []string) string {
	if len(l) == 0 {
		return "<policy>"
	}
	n, _, _ := strings.Cut(l[0], " ")
	return n
}

// MinTokenLimit is the smallest per-user token limit doctor accepts
// without a warning (inventory.MinUsefulTokenLimit, which preflight reads
// too).
const MinTokenLimit = inventory.MinUsefulTokenLimit

// tokenLimits warns about limits so small that one or two requests use
// them up (case B17 static preflight). The fix converges to the installed
// inventory (what doctor judges against): a live limit that differs from
// the inventory's is restored to the inventory's value, never to a
// default (a hard-coded value would itself differ from the inventory, and
// the next install would revert it); a limit the inventory itself sets
// too small is raised in the inventory.
func tokenLimits(s *verify.State) []Finding {
	var out []Finding
	for _, p := range s.Subscriptions {
		if strings.HasPrefix(p.GetName(), verify.ProbeSubscriptionPrefix) {
			continue
		}
		l, _, _ := unstructured.NestedSlice(p.Object, "spec", "modelRefs")
		for i, x := range l {
			m, _ := x.(map[string]any)
			tl, _ := m["tokenRateLimits"].([]any)
			for j, y := range tl {
				lm, _ := y.(map[string]any)
				n, ok := lm["limit"].(int64)
				if !ok || n >= MinTokenLimit {
					continue
				}
				ev := fmt.Sprintf("model %v: limit %d tokens per %v per user", m["name"], n, lm["window"])
				cause := fmt.Sprintf("a limit under %d tokens is used up by one or two chats, after which every request gets 429 until the window resets", MinTokenLimit)
				patch := func(v string) string {
					return fmt.Sprintf(`oc patch maassubscription %s -n %s --type json -p '[{"op":"replace","path":"/spec/modelRefs/%d/tokenRateLimits/%d/limit","value":%s}]'`, p.GetName(), p.GetNamespace(), i, j, v)
				}
				var fix string
				path, want, found := inventoryLimit(s.Inv, p.GetName(), fmt.Sprint(m["namespace"]), fmt.Sprint(m["name"]), j)
				switch {
				case !found && path == "":
					cause += "; maasctl does not manage this MaaSSubscription (it is not in the installed inventory)"
					fix = patch(fmt.Sprintf("<a limit of at least %d>", MinTokenLimit))
				case !found:
					ev += "; the installed inventory has no such limit under " + path
					fix = fmt.Sprintf("add a limit of at least %d tokens for model %v under %s in the inventory and run maasctl install", MinTokenLimit, m["name"], path)
				case want == n:
					ev += fmt.Sprintf("; the installed inventory's %s is %d too", path, want)
					fix = fmt.Sprintf("raise %s (now %d) in the inventory to at least %d and run maasctl install", path, want, MinTokenLimit)
				case want < MinTokenLimit:
					ev += fmt.Sprintf("; the installed inventory's %s is %d", path, want)
					cause += fmt.Sprintf("; the live limit was also changed outside the inventory (%d, the inventory says %d)", n, want)
					fix = fmt.Sprintf("raise %s (now %d) in the inventory to at least %d and run maasctl install", path, want, MinTokenLimit)
				default:
					ev += fmt.Sprintf("; the installed inventory's %s is %d", path, want)
					cause += fmt.Sprintf("; the limit was changed outside the inventory, which says %d (the next maasctl install restores it)", want)
					fix = fmt.Sprintf("maasctl install   (restores the inventory's %s, %d); or: %s", path, want, patch(fmt.Sprint(want)))
				}
				out = append(out, finding(CodeTokenLimitTooSmall, obj("MaaSSubscription", p.GetNamespace(), p.GetName()), ev, cause, fix))
			}
		}
	}
	return out
}

// inventoryLimit finds, in the installed inventory inv, the j-th token
// limit of model ns/name in subscription sub: its inventory path
// (subscriptions[SUB].modelRefs[I].tokenRateLimits[J].limit) and value.
// found is false when the inventory has no such limit; path is then the
// list it would be in, or "" when the subscription is not in the
// inventory at all.
func inventoryLimit(inv *inventory.Inventory, sub, ns, name string, j int) (path string, limit int64, found bool) {
	for _, is := range inv.Subscriptions {
		if is.Name != sub {
			continue
		}
		for i, r := range is.ModelRefs {
			if r.Namespace != ns || r.Name != name {
				continue
			}
			path = fmt.Sprintf("subscriptions[%s].modelRefs[%d].tokenRateLimits[%d].limit", sub, i, j)
			if j < len(r.TokenRateLimits) {
				return path, r.TokenRateLimits[j].Limit, true
			}
			return fmt.Sprintf("subscriptions[%s].modelRefs[%d].tokenRateLimits", sub, i), 0, false
		}
		return fmt.Sprintf("subscriptions[%s].modelRefs", sub), 0, false
	}
	return "", 0, false
}
