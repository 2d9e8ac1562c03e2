package verify

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

func checkProviders(s *State) []Check {
	var out []Check
	for _, k := range sortedKeys(s.Providers) {
		ns, name, _ := strings.Cut(k, "/")
		c := newCheck(CodeProviderReady, describe("ExternalProvider", ns, name))
		p := s.Providers[k]
		if p == nil {
			out = append(out, c.fail(s.MissingReason("ExternalProvider", ns, name), "the ExternalProvider does not exist", "maasctl install"))
			continue
		}
		phase := str(p, "status", "phase")
		if phase == "Ready" {
			out = append(out, c.pass("phase Ready"))
			continue
		}
		detail := "phase " + orNone(phase)
		if fc := falseConditions(p); fc != "" {
			detail += "; " + fc
		}
		cause, fix := ProviderCause(s, k)
		out = append(out, c.fail(detail, cause, fix))
	}
	return out
}

// ProviderCause explains an ExternalProvider that is not Ready from its
// API-key Secret (deployment README troubleshooting: the Secret must exist
// with key api-key and carry the inference.llm-d.ai/ipp-managed label).
func ProviderCause(s *State, key string) (cause, fix string) {
	sec := s.ProviderSecrets[key]
	ns := sec.Namespace
	switch {
	case !sec.Exists:
		return fmt.Sprintf("the API-key Secret %s/%s does not exist", ns, sec.Name),
			fmt.Sprintf("oc create secret generic %s -n %s --from-literal=api-key=<provider key>; maasctl install", sec.Name, ns)
	case !sec.HasKey("api-key"):
		return fmt.Sprintf("Secret %s/%s has no key api-key (keys: %s)", ns, sec.Name, orNone(strings.Join(sec.Keys, ","))),
			fmt.Sprintf("store the provider key under api-key: oc create secret generic %s -n %s --from-literal=api-key=<provider key> --dry-run=client -o yaml | oc apply -f -", sec.Name, ns)
	case sec.Labels[IPPManagedLabel] != "true":
		return fmt.Sprintf("Secret %s/%s lacks label %s=true, so the MaaS controller ignores it", ns, sec.Name, IPPManagedLabel),
			fmt.Sprintf("oc label secret %s -n %s %s=true", sec.Name, ns, IPPManagedLabel)
	}
	return "the MaaS controller has not made the provider's Service, ServiceEntry and DestinationRule",
		fmt.Sprintf("maasctl install   (re-applies the ExternalProvider and waits for it to be Ready); if it stays so: oc get service,serviceentry,destinationrule -n %s", ns)
}

// IPPManagedLabel marks model namespaces and provider key Secrets the MaaS
// controller manages (deployment README, "Models").
const IPPManagedLabel = "inference.llm-d.ai/ipp-managed"

func checkModels(s *State) []Check {
	var out []Check
	for _, m := range s.Inv.ExternalModels {
		k := Key(m.Namespace, m.Name)
		c := newCheck(CodeModelReady, describe("ExternalModel", m.Namespace, m.Name))
		if em := s.Models[k]; em == nil {
			out = append(out, c.fail(s.MissingReason("ExternalModel", m.Namespace, m.Name), "the ExternalModel does not exist", "maasctl install"))
		} else if phase := str(em, "status", "phase"); phase == "Ready" {
			out = append(out, c.pass("phase Ready"))
		} else {
			detail := "phase " + orNone(phase)
			if fc := falseConditions(em); fc != "" {
				detail += "; " + fc
			}
			out = append(out, c.fail(detail, "ExternalProvider "+m.ProviderName+" is not Ready or the model's HTTPRoute was not created",
				"oc describe externalmodel "+m.Name+" -n "+m.Namespace))
		}
	}
	for _, m := range s.Inv.ExternalModels {
		k := Key(m.Namespace, m.Name)
		c := newCheck(CodeModelRefReady, describe("MaaSModelRef", m.Namespace, m.Name))
		ref := s.ModelRefs[k]
		if ref == nil {
			out = append(out, c.fail(s.MissingReason("MaaSModelRef", m.Namespace, m.Name), "the MaaSModelRef does not exist", "maasctl install"))
			continue
		}
		phase := str(ref, "status", "phase")
		if phase == "Ready" {
			out = append(out, c.pass("phase Ready; endpoint "+orNone(str(ref, "status", "endpoint"))))
			continue
		}
		detail := "phase " + orNone(phase)
		if fc := falseConditions(ref); fc != "" {
			detail += "; " + fc
		}
		cause, fix := "the model's backend is not ready", "oc describe maasmodelref "+m.Name+" -n "+m.Namespace
		if g, ok := cond(ref, "GovernanceAttached"); ok && g.Status != "True" {
			// Case B17: a model needs both an Active MaaSAuthPolicy and an
			// Active MaaSSubscription ("governance pairing").
			cause = "no Active MaaSAuthPolicy and MaaSSubscription pair references this model (governance pairing)"
			fix = "reference " + m.Namespace + "/" + m.Name + " from both an authPolicies and a subscriptions entry of the inventory, then maasctl install"
		}
		out = append(out, c.fail(detail, cause, fix))
	}
	return out
}

// checkPolicies checks MaaSAuthPolicy / MaaSSubscription phases and, when
// enfCode is set, the Kuadrant policies the MaaS controller lists in status
// field of each (the TokenRateLimitPolicies of a MaaSSubscription; a
// MaaSAuthPolicy generates none of its own, see checkGatewayAuth).
func checkPolicies(s *State, list []*unstructured.Unstructured, code, enfCode, kind, genKind, field string) []Check {
	var out []Check
	ns := s.Inv.RHOAI.MaaSNamespace
	var names []string
	if kind == "MaaSAuthPolicy" {
		for _, p := range s.Inv.AuthPolicies {
			names = append(names, p.Name)
		}
	} else {
		for _, p := range s.Inv.Subscriptions {
			names = append(names, p.Name)
		}
	}
	byName := map[string]*unstructured.Unstructured{}
	for _, p := range list {
		byName[p.GetName()] = p
	}
	// listedBy names, for each generated policy, the objects whose status
	// lists it: the MaaS controller generates one TokenRateLimitPolicy
	// per model, so two MaaSSubscriptions of one model list the same
	// policy, which is checked (and reported) once.
	listedBy := map[[2]string][]string{}
	if enfCode != "" {
		for _, name := range names {
			if p := byName[name]; p != nil {
				for _, ref := range generatedPolicies(p, field) {
					if !slices.Contains(listedBy[ref], name) {
						listedBy[ref] = append(listedBy[ref], name)
					}
				}
			}
		}
	}
	done := map[[2]string]bool{}
	for _, name := range names {
		c := newCheck(code, describe(kind, ns, name))
		p := byName[name]
		if p == nil {
			out = append(out, c.fail(s.MissingReason(kind, ns, "*"), "the "+kind+" does not exist", "maasctl install"))
			continue
		}
		phase := str(p, "status", "phase")
		if stale := maasStale(p); stale != "" && (phase == "Active" || phase == "Failed" || phase == "Invalid") {
			// A verdict for an older spec says nothing about this one:
			// maasctl (or someone) has just changed it, and the MaaS
			// controller re-renders its Kuadrant policy before it writes
			// the new verdict (waiters.MaaSPhase waits on the same).
			out = append(out, c.fail("phase "+phase+" "+stale,
				"the MaaS controller has not reconciled the changed "+kind+" yet; its generated Kuadrant policy may still hold the old spec",
				"oc describe "+strings.ToLower(kind)+" "+name+" -n "+ns).pending())
		} else if phase == "Active" {
			out = append(out, c.pass("phase Active"))
		} else {
			detail := "phase " + orNone(phase)
			if why := waiters.MaaSReason(p); why != "" {
				detail += "; " + why
			}
			out = append(out, c.fail(detail, "the MaaS controller could not reconcile it: a referenced MaaSModelRef or its HTTPRoute is missing, or its Kuadrant policy is not accepted",
				"oc describe "+strings.ToLower(kind)+" "+name+" -n "+ns))
		}
		if enfCode == "" {
			continue
		}
		refs := generatedPolicies(p, field)
		if len(refs) == 0 {
			out = append(out, newCheck(enfCode, describe(kind, ns, name)).fail("status lists no generated "+genKind,
				"the MaaS controller has not generated the Kuadrant policy", "oc describe "+strings.ToLower(kind)+" "+name+" -n "+ns))
			continue
		}
		for _, ref := range refs {
			if done[ref] {
				continue
			}
			done[ref] = true
			out = append(out, withListedBy(checkGenerated(s, enfCode, kind, genKind, name, ref), kind, listedBy[ref]))
		}
	}
	return out
}

// withListedBy names, in a check of a generated policy, the objects of
// kind whose status lists it, when more than one does.
func withListedBy(c Check, kind string, by []string) Check {
	if len(by) > 1 {
		c.Detail += fmt.Sprintf(" (listed by %ss %s)", kind, strings.Join(by, ", "))
	}
	return c
}

// checkGenerated checks the Kuadrant policy ref (namespace, name) of kind
// genKind that the status of name, of kind, lists.
func checkGenerated(s *State, enfCode, kind, genKind, name string, ref [2]string) Check {
	ns := s.Inv.RHOAI.MaaSNamespace
	ec := newCheck(enfCode, describe(genKind, ref[0], ref[1]))
	gp := s.KuadrantPolicies[describe(genKind, ref[0], ref[1])]
	if gp == nil {
		return ec.fail(s.MissingReason(genKind, ref[0], ref[1]), "the generated "+genKind+" does not exist", "oc describe "+strings.ToLower(kind)+" "+name+" -n "+ns)
	}
	describeCmd := "oc describe " + strings.ToLower(genKind) + " " + ref[1] + " -n " + ref[0]
	if stale := policyStale(gp); stale != "" {
		// Enforced from before the MaaS controller re-rendered the
		// policy (a changed token limit or subject) says nothing
		// about the limits now in its spec.
		cause, fix := StaleDiagnosis(genKind, ref[0], ref[1])
		return ec.fail(stale, cause, fix).pending()
	}
	e, ok := cond(gp, "Enforced")
	if ok && e.Status == "True" {
		return ec.pass(e.String())
	}
	detail := "no Enforced condition"
	if ok {
		detail = e.String()
	}
	cause, fix := "Kuadrant does not enforce the policy (Kuadrant or Authorino not Ready, or its HTTPRoute is not accepted by a programmed Gateway)", describeCmd
	// Pending while Kuadrant has written no Enforced condition
	// yet (and has not refused the policy: Kuadrant drops
	// Enforced from a policy it does not accept) or reports it
	// out of sync on what loads by itself.
	a, found := cond(gp, "Accepted")
	refused := found && a.Status != "True"
	syncing := !ok && !refused
	if ok && e.Status != "True" {
		if c, f, found := policySyncDiagnosis(genKind, e.Message, s.Inv); found {
			cause, fix, syncing = c, f+"; "+describeCmd, !refused && kuadrantSyncing(e.Message)
		} else if c, f, found := overriddenDiagnosis(genKind, e.Reason, e.Message); found {
			cause, fix = c, f
		} else if authUndeclared(e.Reason, e.Message) {
			ns, name := s.Inv.Gateway.Namespace, s.Release.MaaSControllerFacts().GatewayAuthPolicy
			cause = "its predicates read auth.identity, which Kuadrant declares on a route only where an AuthPolicy is in effect; the MaaS Gateway AuthPolicy " + ns + "/" + name + " is not (yet) in effect on the model's route"
			fix = fmt.Sprintf("oc describe authpolicy %s -n %s; %s", name, ns, describeCmd)
			// Kuadrant judged the policy before it took the
			// gateway AuthPolicy, which exists: its next
			// reconcile declares auth.
			syncing = !refused && s.GatewayAuthPolicy != nil
		}
	}
	ec = ec.fail(detail, cause, fix)
	if syncing {
		ec = ec.pending()
	}
	return ec
}

// checkGatewayAuth (MAAS-V010): the one Gateway-level AuthPolicy the MaaS
// controller makes for every MaaSAuthPolicy
// (Release.MaaSControllerFacts().GatewayAuthPolicy, maas-controller v0.2.1
// maasauthpolicy_controller.go) exists, targets the MaaS Gateway and is
// Accepted and Enforced by Kuadrant. The MaaSAuthPolicy turns Active before
// that (issue 18), so its phase proves nothing about enforcement.
func checkGatewayAuth(s *State) Check {
	f := s.Release.MaaSControllerFacts()
	ns, name := s.Inv.Gateway.Namespace, f.GatewayAuthPolicy
	c := newCheck(CodeAuthEnforced, describe("AuthPolicy", ns, name))
	p := s.GatewayAuthPolicy
	if p == nil {
		return c.fail(s.MissingReason("AuthPolicy", ns, name),
			"the MaaS controller has not created its Gateway-level AuthPolicy (it is not running, or no MaaSAuthPolicy was reconciled), so model requests are not authenticated by MaaS",
			"oc describe maasauthpolicy -n "+s.Inv.RHOAI.MaaSNamespace+"; oc get pods -n "+s.Release.MaaSAPINamespace(s.Inv))
	}
	if kind, target := str(p, "spec", "targetRef", "kind"), str(p, "spec", "targetRef", "name"); kind != "Gateway" || target != s.Inv.Gateway.Name {
		return c.fail(fmt.Sprintf("targets %s %s, not Gateway %s", orNone(kind), orNone(target), s.Inv.Gateway.Name),
			"the AuthPolicy does not protect the MaaS Gateway (the MaaS controller's own policy targets it)",
			fmt.Sprintf("oc get authpolicy %s -n %s -o yaml", name, ns))
	}
	var parts []string
	ok := true
	// pending: every reason it is not ok is Kuadrant at work (an older
	// generation judged, a condition not written yet, or Enforced=False
	// out of sync while Accepted).
	pending := true
	// Kuadrant's verdict for an older spec (the MaaS controller has just
	// rendered changed subjects into it) says nothing about this one.
	if stale := policyStale(p); stale != "" {
		parts, ok = append(parts, stale), false
	}
	for _, typ := range []string{"Accepted", "Enforced"} {
		k, found := cond(p, typ)
		if !found {
			parts, ok = append(parts, "no "+typ+" condition"), false
			continue
		}
		parts = append(parts, k.String())
		if k.Status != "True" {
			ok = false
			pending = pending && typ == "Enforced" && kuadrantSyncing(k.Message)
		}
	}
	detail := strings.Join(parts, "; ")
	if ok {
		return c.pass(detail)
	}
	if onlyStale(p) {
		// Accepted and Enforced hold, but for an older spec: Kuadrant
		// has not judged the new one yet, and nothing else is wrong (a
		// restart of its operator would only delay the verdict).
		cause, fix := StaleDiagnosis("AuthPolicy", ns, name)
		return c.fail(detail, cause, fix).pending()
	}
	cause, fix := GatewayAuthDiagnosis(p, s.Inv, ns, name)
	c = c.fail(detail, cause, fix)
	if pending {
		c = c.pending()
	}
	return c
}

// GatewayAuthDiagnosis explains a Gateway-level MaaS AuthPolicy p
// (namespace ns, name name) that Kuadrant does not accept or enforce, and
// names the fix: without an enforced policy Authorino checks nothing, or
// not what MaaS wants, on model requests. Three states, by the conditions
// the kuadrant-operator writes (v1.5.2 internal/controller/
// auth_policy_status_updater.go enforcedCondition, internal/kuadrant/
// errors.go):
//   - a condition saying "restart Kuadrant Operator pod" (the field report
//     of issue 18 on AuthPolicy/maas-gateway-auth while istiod ran): the
//     operator started before its Gateway API provider; restart it;
//   - Enforced=False naming components waiting to sync (ErrOutOfSync,
//     reason Unknown): policySyncDiagnosis, e.g. an AuthConfig Authorino has
//     not loaded; a restart of the Kuadrant operator changes nothing;
//   - Enforced=False, reason Overridden: another AuthPolicy on the Gateway
//     wins (overriddenDiagnosis), e.g. the tier-based gateway-auth-policy;
//   - otherwise Kuadrant or Authorino is not Ready, or the Gateway is not
//     programmed.
func GatewayAuthDiagnosis(p *unstructured.Unstructured, inv *inventory.Inventory, ns, name string) (cause, fix string) {
	k := inv.Kuadrant
	describe := fmt.Sprintf("oc describe authpolicy %s -n %s", name, ns)
	restart := KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector)
	for _, typ := range []string{"Accepted", "Enforced"} {
		if c, ok := cond(p, typ); ok && c.Status != "True" && strings.Contains(c.Message, "restart Kuadrant Operator pod") {
			return "the Kuadrant operator started before its Gateway API provider and does not enforce the MaaS Gateway AuthPolicy: no AuthConfig exists, so Authorino checks nothing on model requests (restart the operator pod)",
				restart + "; " + describe
		}
	}
	if c, ok := cond(p, "Enforced"); ok && c.Status != "True" {
		if cause, fix, found := policySyncDiagnosis("AuthPolicy", c.Message, inv); found {
			return cause, fix + "; " + describe
		}
		if cause, fix, found := overriddenDiagnosis("AuthPolicy", c.Reason, c.Message); found {
			return cause, fix
		}
	}
	return "Kuadrant does not enforce the MaaS Gateway AuthPolicy (Kuadrant or Authorino not Ready, or the Gateway not programmed): no AuthConfig exists, so Authorino checks nothing on model requests",
		restart + "; " + describe
}

// authUndeclared reports whether an Enforced=False condition is
// kuadrant-operator v1.5.2's refusal of predicates that read `auth` on a
// route where no AuthPolicy is in effect: reason InvalidCelExpression
// (ErrCelValidation, internal/kuadrant/errors.go: "validation issues:
// [...]"), with cel-go's "undeclared reference to 'auth'". The operator
// declares the `auth` CEL variable for a route only when an effective
// AuthPolicy covers it (internal/controller/istio_extension_reconciler.go,
// PushPolicyBinding), so the MaaS controller's TokenRateLimitPolicies,
// whose predicates key on auth.identity, are refused until Kuadrant takes
// the Gateway AuthPolicy: for a moment after an install, or for good
// while that AuthPolicy is missing.
func authUndeclared(reason, msg string) bool {
	return reason == "InvalidCelExpression" && strings.Contains(msg, "undeclared reference to 'auth'")
}

// syncMarker is the text of kuadrant-operator v1.5.2's ErrOutOfSync
// (internal/kuadrant/errors.go) before the components it names.
const syncMarker = "waiting for the following components to sync:"

// kuadrantSyncing reports whether msg is Kuadrant's ErrOutOfSync naming
// only components that finish loading what Kuadrant generated by
// themselves: "AuthConfig (<name>)" (Authorino loads it) and "Limitador"
// (its CR takes the limits). Any other component it can name (kuadrant-
// operator v1.5.2: a Gateway whose class the operator does not take, see
// policySyncDiagnosis; Authorino not Ready; the gateway's EnvoyFilter,
// WasmPlugin, EnvoyPatchPolicy or EnvoyExtensionPolicy) is not waited for.
func kuadrantSyncing(msg string) bool {
	i := strings.Index(msg, syncMarker)
	return i >= 0 && selfSyncing.MatchString(strings.TrimSpace(msg[i+len(syncMarker):]))
}

// selfSyncing matches an ErrOutOfSync component list (a Go []string
// printed with %s: "[a b]") of only AuthConfigs and Limitador.
var selfSyncing = regexp.MustCompile(`^\[(?:(?:AuthConfig \([^()\s]+\)|Limitador) )*(?:AuthConfig \([^()\s]+\)|Limitador)\]$`)

// policySyncDiagnosis explains an Enforced=False condition of a Kuadrant
// policy of kind whose message is kuadrant-operator v1.5.2's ErrOutOfSync
// ("<Kind> waiting for the following components to sync: [...]",
// internal/kuadrant/errors.go; the components from the policy status
// updaters, e.g. auth_policy_status_updater.go enforcedCondition). found
// is false for any other message. The components it names, in this order:
//   - "AuthConfig (<name>)": Kuadrant generated the AuthConfig but Authorino
//     has not loaded it (Ready=False: its status says why, e.g. a rule that
//     does not compile, reason Invalid);
//   - "Gateway (<ns>/<name>)": the Gateway's class has a controller the
//     operator does not take for Istio or Envoy Gateway, so it writes no
//     gateway configuration: the operator lacks
//     ISTIO_GATEWAY_CONTROLLER_NAMES for OpenShift's class (maasctl sets
//     it in the RHCL Subscription's config);
//   - "Limitador": Kuadrant accepted the limits but the Limitador CR does
//     not hold them yet or is not Ready (with many policies this takes
//     minutes).
func policySyncDiagnosis(kind, msg string, inv *inventory.Inventory) (cause, fix string, found bool) {
	i := strings.Index(msg, syncMarker)
	if i < 0 {
		return "", "", false
	}
	components := msg[i+len(syncMarker):]
	k := inv.Kuadrant
	if names := syncAuthConfig.FindAllStringSubmatch(components, -1); len(names) > 0 {
		var list, gets []string
		for _, m := range names {
			list = append(list, m[1])
			gets = append(gets, fmt.Sprintf("oc get authconfig %s -n %s -o jsonpath='{.status.conditions}'", m[1], k.Namespace))
		}
		return fmt.Sprintf("Kuadrant generated AuthConfig %s from the %s, but Authorino has not loaded it (not Ready: its status says why, e.g. a rule that does not compile), so requests on the routes it covers are not authenticated as the policy says; restarting the Kuadrant operator does not change that",
				strings.Join(list, ", "), kind),
			strings.Join(gets, "; ") + "; the MaaS controller renders the policy, so fix what it renders from (the MaaSAuthPolicies) or its version", true
	}
	if m := syncGateway.FindStringSubmatch(components); m != nil {
		return fmt.Sprintf("the Kuadrant operator does not take Gateway %s's class for an Istio gateway, so it configures nothing on it: its ISTIO_GATEWAY_CONTROLLER_NAMES does not name the class's controller (%s)", m[1], orNone(inv.Gateway.ControllerName)),
			fmt.Sprintf("maasctl install (sets %s in the RHCL Subscription's spec.config.env and waits for the operator to run with it); check: oc get subscription -n %s -o yaml", inventory.EnvGatewayControllerNames, k.OperatorNamespace), true
	}
	if strings.Contains(components, "Limitador") {
		return "Kuadrant accepted the policy but waits for Limitador: the Limitador CR does not hold its limits yet or is not Ready (with many policies this takes minutes), so the token limits are not applied",
			fmt.Sprintf("oc get limitador -n %s -o jsonpath='{.items[*].status.conditions}'; wait and run maasctl verify again", k.Namespace), true
	}
	return fmt.Sprintf("Kuadrant waits for components to take the %s:%s", kind, components), fmt.Sprintf("oc get kuadrant -n %s -o yaml", k.Namespace), true
}

var (
	syncAuthConfig = regexp.MustCompile(`AuthConfig \(([^)\s]+)\)`)
	syncGateway    = regexp.MustCompile(`Gateway \(([^)\s]+)\)`)
)

// policyStale says why a Kuadrant policy's status judges an older spec:
// status.observedGeneration below metadata.generation (Kuadrant's policy
// conditions carry no observedGeneration of their own, kuadrant-operator
// v1.5.2 internal/kuadrant/conditions.go; the status updaters set the
// status's). "" when the status is for the current spec, or has no
// observedGeneration yet (its conditions then say what is missing).
func policyStale(p *unstructured.Unstructured) string {
	og, found, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration")
	if !found || og >= p.GetGeneration() {
		return ""
	}
	return fmt.Sprintf("status is for generation %d, the policy is at %d (Kuadrant has not judged the new spec yet)", og, p.GetGeneration())
}

// PolicyStale is policyStale for doctor: why a Kuadrant policy's status
// is for an older generation than its spec, "" when it is not.
func PolicyStale(p *unstructured.Unstructured) string { return policyStale(p) }

// onlyStale reports whether the one problem of Kuadrant policy p is that
// its status is for an older generation: Accepted and Enforced are both
// True (for the older spec).
func onlyStale(p *unstructured.Unstructured) bool {
	if policyStale(p) == "" {
		return false
	}
	for _, typ := range []string{"Accepted", "Enforced"} {
		if c, ok := cond(p, typ); !ok || c.Status != "True" {
			return false
		}
	}
	return true
}

// StaleDiagnosis is the cause and fix of a Kuadrant policy (kind, ns,
// name) whose status is for an older generation than its spec: the MaaS
// controller (or someone) has just changed the spec and Kuadrant has not
// judged it yet, which it does by itself within seconds. The fix is to
// wait and read again; only a status that stays old is worth a look, and
// a restart of the Kuadrant operator is never the fix (it only delays
// the verdict).
func StaleDiagnosis(kind, ns, name string) (cause, fix string) {
	return "Kuadrant has not judged the " + kind + "'s new spec yet: its status is for an older generation (the MaaS controller has just re-rendered it), so its conditions describe the old spec; Kuadrant writes the new verdict by itself",
		fmt.Sprintf("wait and run maasctl verify --settle 2m   (reads again every 2s while Kuadrant catches up); only if the status stays at the older generation: oc describe %s %s -n %s", strings.ToLower(kind), name, ns)
}

// maasStale says why a MaaS object's verdict (MaaSAuthPolicy,
// MaaSSubscription; maas-controller v0.2.1 writes the Ready condition's
// observedGeneration with each phase) is for an older spec: "(for
// generation N, object is at M)", else "".
func maasStale(o *unstructured.Unstructured) string {
	c, ok := cond(o, "Ready")
	if !ok || !c.HasObservedGeneration || c.ObservedGeneration >= o.GetGeneration() {
		return ""
	}
	return fmt.Sprintf("(for generation %d, object is at %d)", c.ObservedGeneration, o.GetGeneration())
}
