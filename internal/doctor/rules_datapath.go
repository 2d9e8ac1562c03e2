package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// fromDataPath turns failed data-path checks into findings by their
// response class (case B17).
func fromDataPath(s *verify.State, checks []verify.Check) []Finding {
	var out []Finding
	for _, c := range checks {
		if c.Result != verify.Fail {
			continue
		}
		ev := fmt.Sprintf("%s %s: %s", c.Code, c.Object, c.Detail)
		if c.Class == "" {
			out = append(out, unexplained(s, c, ev))
			continue
		}
		switch verify.Class(c.Class) {
		case verify.ClassUnauth:
			out = append(out, unauthorized(s, c, ev))
		case verify.ClassForbidden:
			if sub := mintNotOwned(s, c); sub != "" {
				out = append(out, notInGroups(s, obj("MaaSSubscription", s.Inv.RHOAI.MaaSNamespace, sub), "", "the owners of subscription "+sub+" in the installed inventory"))
				continue
			}
			if m, ok := notGranted(s, c.Object, true); ok {
				out = append(out, notInGroups(s, modelObject(s, c.Object), m, "the groups the installed inventory's authPolicies grant"))
				continue
			}
			out = append(out, finding(Code403, modelObject(s, c.Object), ev, c.Cause,
				"maasctl install   (restores the inventory's MaaSAuthPolicy subjects), then create a new API key; to grant other groups, change authPolicies[].groups in the inventory first"))
		case verify.ClassQuota:
			if m, ok := notGranted(s, c.Object, false); ok {
				out = append(out, notInGroups(s, modelObject(s, c.Object), m, "the groups the installed inventory's subscriptions cover"))
				continue
			}
			out = append(out, finding(Code429, modelObject(s, c.Object), ev, c.Cause,
				"wait for the window to reset, or raise tokenRateLimits (inventory subscriptions[].modelRefs[].tokenRateLimits) and run maasctl install"))
		case verify.ClassUnavailable:
			f := finding(CodeModelNotServing, c.Object, ev, c.Cause, c.Fix)
			if b := firstBackend(s); b != nil && c.Code != verify.CodeHealth {
				f.Object = obj("Service", b.Namespace, b.Name)
				f.Cause = "the gateway reaches no model server: " + c.Cause
				f.Fix = fmt.Sprintf("oc get endpointslices -n %s -l kubernetes.io/service-name=%s; oc logs -n %s deploy/%s", b.Namespace, b.Name, b.Namespace, b.Name)
			}
			if c.Code == verify.CodeHealth {
				f = finding(CodeMaaSAPIMissing, obj("Deployment", s.Release.MaaSAPINamespace(s.Inv), "maas-api"), ev, c.Cause, c.Fix)
			}
			out = append(out, f)
		case verify.ClassAuthService:
			// With Kuadrant not Ready the observation is evidence of that
			// finding (it merges); otherwise it is a finding of its own.
			k := s.Inv.Kuadrant
			if rc, ok := cond(s.Kuadrant, "Ready"); ok && rc.Status != "True" {
				code := CodeKuadrantNotReady
				if rc.Reason == "MissingDependency" {
					code = CodeKuadrantMissingDep
				}
				out = append(out, finding(code, obj("Kuadrant", k.Namespace, k.Name), ev, "", ""))
				continue
			}
			if p := authorinoTrouble(s); p != nil {
				out = append(out, finding(CodeAuthService, p.object, ev, p.cause, p.fix))
				continue
			}
			out = append(out, finding(CodeAuthService, obj("Gateway", s.Inv.Gateway.Namespace, s.Inv.Gateway.Name), ev, c.Cause,
				fmt.Sprintf("maasctl install   (re-applies Kuadrant, Authorino's TLS settings and the policies); if AUTH_FAILURE stays, restart Authorino and the Kuadrant operator: oc rollout restart deployment/%s -n %s; %s",
					k.AuthorinoName, k.Namespace, verify.KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector))))
		case verify.ClassBodyLimit:
			out = append(out, finding(CodeServiceMeshOld, c.Object, ev, c.Cause, c.Fix))
		case verify.ClassAuthBypass:
			out = append(out, finding(CodeAuthBypass, c.Object, ev, c.Cause,
				"maasctl install   (re-applies the Kuadrant operator env and the policies); upgrade RHCL to 1.4.1 or later when it runs 1.4.0"))
		default:
			out = append(out, unexplained(s, c, ev))
		}
	}
	return out
}

// unexplained turns a failed data-path check of no class doctor has a
// rule for into a finding: an endpoint that does not answer, answers 404
// or is not MaaS (MAAS-D026), else the check itself (MAAS-D029). Doctor
// never drops a failed probe.
func unexplained(s *verify.State, c verify.Check, ev string) Finding {
	switch verify.Class(c.Class) {
	case verify.ClassNoResponse, verify.ClassNotFound, verify.ClassOther, verify.ClassBadRequest, "":
		if c.Class != "" || c.Code == verify.CodeHealth || strings.Contains(c.Cause, "unreachable") || strings.Contains(c.Cause, "not maas-api") || strings.Contains(c.Cause, "not the MaaS gateway") {
			return endpointFinding(s, c.Object, ev, c.Cause)
		}
	}
	return finding(CodeDataPathFailed, c.Object, ev, orUnknown(c.Cause), convergingFix(c.Fix))
}

// endpointFinding: the MaaS endpoint does not answer as MaaS. The fix
// names the endpoint the Route publishes.
func endpointFinding(s *verify.State, object, ev, cause string) Finding {
	g := s.Inv.Gateway
	fix := "pass the MaaS base URL with --endpoint https://<gateway host>"
	if h := str(s.Route, "spec", "host"); h != "" {
		fix = fmt.Sprintf("the Route %s/%s publishes https://%s: pass --endpoint https://%s (or leave --endpoint out), and check that it resolves to the cluster's router from here", g.Namespace, g.RouteName, h, h)
	} else if g.CreateRoute {
		fix = fmt.Sprintf("maasctl install   (re-creates the Route %s/%s that publishes the Gateway)", g.Namespace, g.RouteName)
	}
	return finding(CodeEndpointUnreachable, object, ev, "the MaaS endpoint did not answer as the MaaS gateway: "+orUnknown(cause), fix)
}

// mintNotOwned returns the inventory subscription a refused key mint
// (MAAS-V021, 403) was for when the installed inventory does not make the
// caller one of its owners: the refusal is then intended.
func mintNotOwned(s *verify.State, c verify.Check) string {
	if c.Code != verify.CodeMintKey || s.Caller.User == "" {
		return ""
	}
	for _, p := range s.Inv.Subscriptions {
		if strings.Contains(c.Detail, "subscription "+p.Name+":") && !grants(s.Caller, p.Groups, p.Users) {
			return p.Name
		}
	}
	return ""
}

// notGranted reports whether the model of a data-path check object is one
// the installed inventory does not grant the caller (authPolicies when
// auth, else subscriptions): the 403/429 is then intended.
func notGranted(s *verify.State, object string, auth bool) (string, bool) {
	_, name, ok := strings.Cut(object, " model=")
	if !ok || s.Caller.User == "" {
		return "", false
	}
	var groups, users []string
	n := 0
	if auth {
		for _, p := range s.Inv.AuthPolicies {
			if slices.ContainsFunc(p.ModelRefs, func(r inventory.ModelRef) bool { return r.Name == name }) {
				groups, users, n = append(groups, p.Groups...), append(users, p.Users...), n+1
			}
		}
	} else {
		for _, p := range s.Inv.Subscriptions {
			if slices.ContainsFunc(p.ModelRefs, func(r inventory.SubscriptionModel) bool { return r.Name == name }) {
				groups, users, n = append(groups, p.Groups...), append(users, p.Users...), n+1
			}
		}
	}
	return name, n > 0 && !grants(s.Caller, groups, users)
}

// modelObject names the MaaSModelRef of a data-path check whose object
// ends in "model=<name>", so observed and inferred findings about the same
// model merge; other objects are returned unchanged.
func modelObject(s *verify.State, object string) string {
	_, name, ok := strings.Cut(object, " model=")
	if !ok {
		return object
	}
	for _, m := range s.Inv.ExternalModels {
		if m.Name == name {
			return obj("MaaSModelRef", m.Namespace, m.Name)
		}
	}
	return object
}

func firstBackend(s *verify.State) *verify.Backend {
	for _, k := range sortedKeys(s.Backends) {
		return s.Backends[k]
	}
	return nil
}

// gatewayAuth: the MaaS controller protects every model with one
// Gateway-level AuthPolicy (release.Release.MaaSControllerFacts
// GatewayAuthPolicy; maas-controller v0.2.1 makes no per-model AuthPolicy).
// Once a MaaSAuthPolicy exists that AuthPolicy must exist and be Accepted
// and Enforced; the MaaSAuthPolicy itself is Active before that, so its
// phase hides the problem (issue 18).
func gatewayAuth(s *verify.State) []Finding {
	if len(s.AuthPolicies) == 0 {
		return nil // MaaS access not configured yet: nothing to generate
	}
	f := s.Release.MaaSControllerFacts()
	ns, name := s.Inv.Gateway.Namespace, f.GatewayAuthPolicy
	o := obj("AuthPolicy", ns, name)
	var pols []string
	for _, p := range s.AuthPolicies {
		pols = append(pols, p.GetName()+" (phase "+orUnknown(str(p, "status", "phase"))+")")
	}
	p := s.GatewayAuthPolicy
	if p == nil {
		return []Finding{finding(CodeGatewayAuth, o,
			s.MissingReason("AuthPolicy", ns, name)+"; MaaSAuthPolicies: "+strings.Join(pols, ", "),
			"the MaaS controller has not created the Gateway-level AuthPolicy every MaaSAuthPolicy converges on, so no MaaS authentication runs on model requests (the controller is not running, or it failed to reconcile)",
			fmt.Sprintf("oc get pods -n %s; oc describe maasauthpolicy -n %s", s.Release.MaaSAPINamespace(s.Inv), s.Inv.RHOAI.MaaSNamespace))}
	}
	var ev []string
	ok := true
	for _, typ := range []string{"Accepted", "Enforced"} {
		c, found := cond(p, typ)
		if !found {
			ev, ok = append(ev, "no "+typ+" condition"), false
			continue
		}
		ev = append(ev, c.String())
		ok = ok && c.Status == "True"
	}
	if ok {
		stale := verify.PolicyStale(p)
		if stale == "" {
			return nil
		}
		// Accepted and Enforced for an older spec: Kuadrant has not
		// judged the new one yet; nothing to restart.
		cause, fix := verify.StaleDiagnosis("AuthPolicy", ns, name)
		return []Finding{finding(CodeGatewayAuth, o, stale+"; "+strings.Join(ev, "; "), cause, fix)}
	}
	cause, fix := verify.GatewayAuthDiagnosis(p, s.Inv, ns, name)
	return []Finding{finding(CodeGatewayAuth, o, strings.Join(ev, "; "), cause, fix)}
}

// unauthorized is the finding of a 401: which credential the gateway or
// maas-api rejected, and how to get a good one.
func unauthorized(s *verify.State, c verify.Check, ev string) Finding {
	cause := "the gateway rejected the key: it is missing, expired or revoked, or an OpenShift token was used instead of an sk-oai- key"
	fix := `create a new key: curl -s -X POST "$MAAS/maas-api/v1/api-keys" -H "Authorization: Bearer $(oc whoami -t)" -H "Content-Type: application/json" -d '{"name": "laptop", "expiresIn": "720h", "subscription": "<subscription>"}'`
	if c.Code == verify.CodeMintKey {
		cause = "maas-api rejected the caller's OpenShift token (expired or not a user token)"
		fix = "oc login again (or pass --token), then retry"
	} else if c.Code == verify.CodeChat || c.Code == verify.CodeListModels && !strings.Contains(c.Title, "your API key") {
		cause = "a key minted seconds earlier was rejected: the gateway cannot validate keys against maas-api (Authorino config or maas-api database)"
		fix = "oc get authpolicy -A; oc logs -n " + s.Release.MaaSAPINamespace(s.Inv) + " deploy/maas-api --tail=20"
	}
	return finding(Code401, c.Object, ev, cause, fix)
}
