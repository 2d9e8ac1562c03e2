package verify

import (
	"fmt"
	"strings"
)

// KuadrantOverriders returns the namespace/name of each policy named in a
// Kuadrant policy's Enforced=False message of reason Overridden:
// kuadrant-operator v1.5.2 writes "<Kind> is overridden by [ns/name
// ns/name]" (internal/kuadrant/errors.go ErrOverridden, a list of
// NamespacedName printed with %s) when every rule of the policy lost to
// other policies of its kind (internal/controller/
// auth_policy_status_updater.go and the rate-limit ones, enforcedCondition).
// nil when msg has another shape.
func KuadrantOverriders(msg string) []string {
	_, list, ok := strings.Cut(msg, " is overridden by [")
	if !ok {
		return nil
	}
	list, ok = strings.CutSuffix(list, "]")
	if !ok {
		return nil
	}
	var out []string
	for _, f := range strings.Fields(list) {
		if ns, name, ok := strings.Cut(f, "/"); !ok || ns == "" || name == "" {
			return nil
		}
		out = append(out, f)
	}
	return out
}

// overriddenDiagnosis explains a Kuadrant policy of kind that another
// policy of its kind overrides: its Enforced condition is False with
// reason Overridden and msg names the winners (KuadrantOverriders). Of two
// policies with the same target the newer one's rules take effect
// (observed on kuadrant-operator v1.5.2: a tier-based gateway-auth-policy
// restored by a migration's rollback overrides the older maas-gateway-auth,
// e2e TestMigrateTiersResumes). found is false for any other message.
func overriddenDiagnosis(kind, reason, msg string) (cause, fix string, found bool) {
	if reason != "Overridden" {
		return "", "", false
	}
	by := KuadrantOverriders(msg)
	if len(by) == 0 {
		return "", "", false
	}
	lower := strings.ToLower(kind)
	var gets []string
	for _, nn := range by {
		ns, name, _ := strings.Cut(nn, "/")
		gets = append(gets, fmt.Sprintf("oc get %s %s -n %s -o yaml", lower, name, ns))
	}
	return fmt.Sprintf("%s %s on the same target overrides it, so requests follow that policy's rules, not the ones MaaS generated (of two policies on one target Kuadrant enforces the newer; the usual one is a tier-based policy of RHOAI 3.2, left by an unfinished tier migration or restored by its rollback)",
			kind, strings.Join(by, ", ")),
		"if it is the old tier configuration, finish the migration (maasctl migrate tiers, or --rollback to go back on purpose); otherwise delete the overriding policy once nothing needs it: " + strings.Join(gets, "; "), true
}
