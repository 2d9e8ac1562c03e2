package doctor

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// Finding codes added so that every verify check has a rule (issue 17).
// MAAS-D021 (CodeGatewayAuth) is the Gateway-level AuthPolicy rule.
const (
	CodeObjectMissing        = "MAAS-D022"
	CodeNotReady             = "MAAS-D023"
	CodeKuadrantOperatorDown = "MAAS-D024"
	CodeOperatorEnv          = "MAAS-D025"
	CodeEndpointUnreachable  = "MAAS-D026"
	CodeAuthBypass           = "MAAS-D027"
	CodeNotInGroups          = "MAAS-D028"
	CodeDataPathFailed       = "MAAS-D029"
)

// VerifyCoverage maps every verify check code (verify.Codes) to the doctor
// rules that explain its failures. The first rule is the one doctor
// reports, with the check's own observation, when a check fails and no
// more specific rule fired: doctor never says "no problems found" while a
// verify check fails. TestVerifyCoverage fails for a verify code without
// an entry.
var VerifyCoverage = map[string][]string{
	verify.CodeDSCReady:          {CodeNotReady, CodeObjectMissing, CodeMaaSNotEnabled, CodeDBConfigMissing, CodeMonitoringOff},
	verify.CodeKuadrantReady:     {CodeKuadrantNotReady, CodeObjectMissing, CodeKuadrantMissingDep, CodeKuadrantOperatorDown},
	verify.CodeGatewayProgrammed: {CodeGatewayNotProgrammed, CodeObjectMissing},
	verify.CodeMaaSAPIAvailable:  {CodeMaaSAPIMissing},
	verify.CodeDBConfig:          {CodeDBConfigMissing},
	verify.CodeProviderReady:     {CodeProviderNotReady, CodeObjectMissing, CodeProviderSecret, CodeProviderSecretKey, CodeProviderSecretLabel},
	verify.CodeModelReady:        {CodeNotReady, CodeObjectMissing, CodeProviderNotReady, CodeProviderSecret, CodeProviderSecretKey, CodeProviderSecretLabel},
	verify.CodeModelRefReady:     {CodeNotReady, CodeObjectMissing, CodeGovernanceGap, CodeModelNotServing},
	verify.CodeAuthPolicyActive:  {CodeNotReady, CodeObjectMissing},
	verify.CodeAuthEnforced:      {CodeGatewayAuth, CodeNotReady, CodeObjectMissing, CodeKuadrantNotReady, CodeKuadrantMissingDep},
	verify.CodeSubscriptionAct:   {CodeNotReady, CodeObjectMissing},
	verify.CodeTokenLimitEnf:     {CodeNotReady, CodeObjectMissing, CodeKuadrantNotReady, CodeKuadrantMissingDep},
	verify.CodeOperatorEnv:       {CodeOperatorEnv, CodeObjectMissing, CodeKuadrantOperatorDown},
	verify.CodeRoute:             {CodeObjectMissing},
	verify.CodeMaaSAPIMigrations: {CodeMaaSAPIMissing, CodeDBNotOwner, CodeDBDirty},
	verify.CodeDBSchema:          {CodeDBIndexInvalid, CodeDBNotOwner, CodeDBDirty},
	verify.CodeFailureModes:      {CodeOperatorEnv, CodeKuadrantOperatorDown},
	verify.CodeAuthorinoTrust:    {CodeAuthorinoTrust, CodeObjectMissing, CodeKuadrantNotReady},
	verify.CodeHealth:            {CodeEndpointUnreachable, CodeMaaSAPIMissing, CodeAuthService, CodeKuadrantNotReady, CodeKuadrantMissingDep, CodeObjectMissing},
	verify.CodeMintKey:           {CodeDataPathFailed, Code401, CodeEndpointUnreachable, CodeMaaSAPIMissing, CodeAuthService, CodeKuadrantNotReady, CodeKuadrantMissingDep, CodeNotInGroups, Code429},
	verify.CodeListModels:        {CodeDataPathFailed, Code401, Code403, Code429, CodeEndpointUnreachable, CodeModelNotServing, CodeAuthService, CodeKuadrantNotReady, CodeKuadrantMissingDep, CodeNotInGroups, CodeAuthorinoTrust},
	verify.CodeChat:              {CodeDataPathFailed, Code401, Code403, Code429, CodeEndpointUnreachable, CodeModelNotServing, CodeAuthService, CodeKuadrantNotReady, CodeKuadrantMissingDep, CodeNotInGroups, CodeAuthorinoTrust},
	verify.CodeNoKey401:          {CodeAuthBypass, CodeEndpointUnreachable, CodeAuthService, CodeKuadrantNotReady, CodeKuadrantMissingDep, CodeDataPathFailed},
	verify.CodeBogusKey:          {CodeAuthBypass, CodeEndpointUnreachable, CodeAuthService, CodeKuadrantNotReady, CodeKuadrantMissingDep, CodeDataPathFailed},
	verify.CodeQuota429:          {CodeDataPathFailed, Code429, CodeEndpointUnreachable},
	verify.CodeBodySize:          {CodeServiceMeshOld, CodeEndpointUnreachable, CodeDataPathFailed},
	verify.CodeKeysRevoked:       {CodeDataPathFailed},
}

// missingObjects: an object maasctl install creates from the inventory is
// gone (deleted by hand, or never created). Re-running the install
// re-creates it; the verify checks fail "not found" meanwhile.
func missingObjects(s *verify.State) []Finding {
	var out []Finding
	miss := func(kind, ns, name, effect string) {
		out = append(out, finding(CodeObjectMissing, obj(kind, ns, name), kind+" "+s.MissingReason(kind, ns, name),
			"the "+kind+" that maasctl install creates from the inventory does not exist (deleted, or the install has not run): "+effect,
			"maasctl install   (re-creates it from the inventory)"))
	}
	if s.DSC == nil {
		miss("DataScienceCluster", "", s.Release.DSC(s.Inv), "RHOAI deploys no MaaS component")
	}
	k := s.Inv.Kuadrant
	if s.Kuadrant == nil {
		miss("Kuadrant", k.Namespace, k.Name, "no Authorino or Limitador is deployed, so no AuthPolicy or TokenRateLimitPolicy is enforced")
	}
	g := s.Inv.Gateway
	if s.Gateway == nil {
		miss("Gateway", g.Namespace, g.Name, "no gateway serves the MaaS endpoint")
	}
	if g.CreateRoute && s.Route == nil {
		miss("Route", g.Namespace, g.RouteName, "clients reach no MaaS endpoint (the Gateway is published only through this passthrough Route)")
	}
	for _, key := range sortedKeys(s.Providers) {
		if s.Providers[key] == nil {
			ns, name, _ := strings.Cut(key, "/")
			miss("ExternalProvider", ns, name, "its models have no upstream")
		}
	}
	for _, m := range s.Inv.ExternalModels {
		key := verify.Key(m.Namespace, m.Name)
		if v, ok := s.Models[key]; ok && v == nil {
			miss("ExternalModel", m.Namespace, m.Name, "the model is not routed")
		}
		if v, ok := s.ModelRefs[key]; ok && v == nil {
			miss("MaaSModelRef", m.Namespace, m.Name, "the model is not offered through MaaS")
		}
	}
	ns := s.Inv.RHOAI.MaaSNamespace
	if !s.NotServed["MaaSAuthPolicy"] {
		for _, p := range s.Inv.AuthPolicies {
			if byName(s.AuthPolicies, p.Name) == nil {
				miss("MaaSAuthPolicy", ns, p.Name, "nobody is granted its models")
			}
		}
	}
	if !s.NotServed["MaaSSubscription"] {
		for _, p := range s.Inv.Subscriptions {
			if byName(s.Subscriptions, p.Name) == nil {
				miss("MaaSSubscription", ns, p.Name, "its owners get 429 for its models")
			}
		}
	}
	if op := s.Inv.Operator("rhcl"); op != nil && len(s.Inv.KuadrantOperatorEnv()) > 0 && s.RHCLSubscription == nil {
		miss("Subscription", op.Namespace, op.Package, "the RHCL (Kuadrant) operator is not installed or not kept up to date")
	}
	return out
}

func byName(l []*unstructured.Unstructured, name string) *unstructured.Unstructured {
	for _, p := range l {
		if p.GetName() == name {
			return p
		}
	}
	return nil
}

// kuadrantOperator: the Kuadrant operator Deployment is scaled to zero or
// runs no pod, so nothing reconciles Kuadrant, its policies or the gateway
// wasm config (the verify checks MAAS-V013 and, later, MAAS-V002 fail).
func kuadrantOperator(s *verify.State) []Finding {
	k := s.Inv.Kuadrant
	running := 0
	for _, p := range s.KuadrantPods {
		if str(p, "status", "phase") == "Running" && p.GetDeletionTimestamp() == nil {
			running++
		}
	}
	var out []Finding
	for _, d := range s.KuadrantOperators {
		want, found, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
		if !found {
			want = 1
		}
		ready, _, _ := unstructured.NestedInt64(d.Object, "status", "readyReplicas")
		if want > 0 && (ready > 0 || running > 0) {
			return nil
		}
		ev := fmt.Sprintf("spec.replicas %d, %d ready; %d Running pod(s) match %s", want, ready, running, k.OperatorSelector)
		if want == 0 {
			out = append(out, finding(CodeKuadrantOperatorDown, obj("Deployment", d.GetNamespace(), d.GetName()), ev,
				"the Kuadrant operator Deployment is scaled to 0: nothing reconciles Kuadrant, Authorino, Limitador or the policies MaaS generates",
				fmt.Sprintf("oc scale deployment %s -n %s --replicas=1   (maasctl install does not manage the operator's Deployment; OLM created it)", d.GetName(), d.GetNamespace())))
			continue
		}
		out = append(out, finding(CodeKuadrantOperatorDown, obj("Deployment", d.GetNamespace(), d.GetName()), ev,
			"the Kuadrant operator Deployment has no ready pod: nothing reconciles Kuadrant or its policies",
			fmt.Sprintf("oc rollout restart deployment %s -n %s; if it does not become ready: oc logs -n %s deploy/%s", d.GetName(), d.GetNamespace(), d.GetNamespace(), d.GetName())))
	}
	if len(out) > 0 || running > 0 || len(s.KuadrantOperators) > 0 {
		return out
	}
	if s.Inv.Operator("rhcl") == nil || len(s.KuadrantPods) > 0 || s.Kuadrant == nil {
		return nil
	}
	return []Finding{finding(CodeKuadrantOperatorDown, "Pod "+k.OperatorNamespace+" "+k.OperatorSelector,
		"no Deployment or pod in "+k.OperatorNamespace+" matches "+k.OperatorSelector,
		"the Kuadrant (RHCL) operator is not running, or kuadrant.operatorSelector does not match its pods",
		"maasctl install   (installs the RHCL operator through its Subscription); if it runs with other labels, set kuadrant.operatorSelector in the inventory")}
}

// fromChecks is the backstop of VerifyCoverage: every failed live verify
// check that no rule of its coverage explained becomes a finding of its
// first rule, with the check's observation, cause and a fix that
// converges.
func fromChecks(s *verify.State, have []Finding) []Finding {
	var out []Finding
	for _, c := range verify.LiveChecks(s) {
		if c.Result != verify.Fail {
			continue
		}
		rules := VerifyCoverage[c.Code]
		if len(rules) == 0 || slices.ContainsFunc(append(have, out...), func(f Finding) bool { return slices.Contains(rules, f.Code) }) {
			continue
		}
		out = append(out, finding(rules[0], c.Object, c.Code+" "+c.Title+": "+c.Detail, c.Cause, convergingFix(c.Fix)))
	}
	return out
}

// convergingFix turns a check's fix into one that converges: maasctl
// install re-applies what the inventory says; a fix that only says where
// to look (or points back at doctor) gets the install first. A fix that
// says to wait (Kuadrant has not judged a new spec yet) converges by
// itself: an install would only re-render what Kuadrant is judging.
func convergingFix(fix string) string {
	if strings.HasPrefix(fix, "maasctl install") || strings.HasPrefix(fix, "oc delete pod") || strings.HasPrefix(fix, "wait ") {
		return fix
	}
	fix = strings.TrimPrefix(strings.TrimPrefix(fix, "maasctl doctor; "), "maasctl doctor")
	if fix == "" {
		return "maasctl install   (re-applies the inventory and waits for it to be ready)"
	}
	return "maasctl install   (re-applies the inventory and waits for it to be ready); if it stays so: " + fix
}

// authorinoProblem is what is wrong with Authorino, the auth service the
// gateway's Wasm shim calls on every request: its Service, its ready
// endpoints, its Deployment, its CR and its operator.
type authorinoProblem struct {
	object, evidence, cause, fix string
}

// authorinoTrouble judges Authorino from live state; nil when its
// authorization Service has ready endpoints and its CR is Ready.
//
// Causes, first match wins: the Authorino operator is scaled to 0 or has
// no ready pod (nothing restores the Deployment or Services: scaling it up
// converges); the CR reports TlsSecretNotProvided (the listener's
// service-CA Secret is gone, e.g. with its Service, and the operator
// makes no Service while TLS names a missing Secret: listener TLS off,
// then maasctl install re-annotates the re-created Service, waits for the
// Secret and turns TLS on); the CR is scaled to
// 0 replicas (a patch of its spec.replicas converges; neither maasctl nor
// Kuadrant sets it on an existing CR); the pods are not ready (only
// Authorino's own status and logs tell why).
func authorinoTrouble(s *verify.State) *authorinoProblem {
	k := s.Inv.Kuadrant
	b := s.AuthorinoService
	az := byName(s.Authorinos, k.AuthorinoName)
	azc, azok := cond(az, "Ready")
	svcOK := b == nil || (b.Service != nil && b.ReadyEndpoints > 0)
	if svcOK && (az == nil || !azok || azc.Status == "True") {
		return nil
	}
	p := &authorinoProblem{object: obj("Service", k.Namespace, k.AuthorinoService)}
	var ev []string
	switch {
	case b == nil:
	case b.Service == nil:
		ev = append(ev, "Service "+s.MissingReason("Service", k.Namespace, k.AuthorinoService))
	case b.ReadyEndpoints == 0:
		e := fmt.Sprintf("Service %s: %d endpoints, 0 ready", k.AuthorinoService, b.Endpoints)
		for _, w := range b.Workloads {
			e += fmt.Sprintf("; Deployment %s: %d of %d replicas ready", w.Name, w.Ready, w.Replicas)
		}
		ev = append(ev, e)
	}
	if az == nil {
		ev = append(ev, "Authorino "+k.Namespace+"/"+k.AuthorinoName+" "+s.MissingReason("Authorino", k.Namespace, k.AuthorinoName))
	} else if azok {
		ev = append(ev, "Authorino "+k.AuthorinoName+" "+azc.String())
	} else {
		ev = append(ev, "Authorino "+k.AuthorinoName+" has no Ready condition")
	}
	if op := s.AuthorinoOperator; op != nil {
		want, found, _ := unstructured.NestedInt64(op.Object, "spec", "replicas")
		if !found {
			want = 1
		}
		ready, _, _ := unstructured.NestedInt64(op.Object, "status", "readyReplicas")
		if want == 0 || ready == 0 {
			ev = append(ev, fmt.Sprintf("Deployment %s/%s: spec.replicas %d, %d ready", op.GetNamespace(), op.GetName(), want, ready))
			p.evidence = strings.Join(ev, "; ")
			p.cause = "the Authorino operator runs no pod, so nothing restores Authorino's Deployment, Services or status from the Authorino CR: the gateway reaches no Authorino and authenticated requests fail with 500 AUTH_FAILURE"
			p.fix = fmt.Sprintf("oc scale deployment %s -n %s --replicas=1   (the operator then restores Authorino as its CR says; OLM created the operator's Deployment, maasctl install does not manage it)", op.GetName(), op.GetNamespace())
			if scaledToZero(b) && !authorinoReplicasSet(az) {
				p.fix = fmt.Sprintf(`oc scale deployment %s -n %s --replicas=1; oc patch authorino %s -n %s --type merge -p '{"spec":{"replicas":1}}'   (the operator restores the replicas of Authorino's Deployment only when the Authorino CR sets spec.replicas, authorino-operator v0.21.0 pkg/reconcilers/authorino_reconciler.go; Kuadrant's CR sets none, so a Deployment scaled to 0 stays at 0 until the CR says 1; OLM created the operator's Deployment, maasctl install manages neither)`,
					op.GetName(), op.GetNamespace(), k.AuthorinoName, k.Namespace)
			}
			if want > 0 {
				p.fix = fmt.Sprintf("oc rollout restart deployment %s -n %s; if it does not become ready: oc logs -n %s deploy/%s", op.GetName(), op.GetNamespace(), op.GetNamespace(), op.GetName())
			}
			return p
		}
	}
	p.evidence = strings.Join(ev, "; ")
	switch {
	case azok && azc.Reason == "TlsSecretNotProvided":
		p.cause = fmt.Sprintf("Authorino's listener TLS Secret %s is missing (it is issued by the service CA for the annotated Service %s, and is deleted with that Service): the Authorino operator stops, the Authorino reports not Ready and Kuadrant with it", k.AuthorinoCertSecret, k.AuthorinoService)
		p.fix = authorinoTLSFix(k)
	case b != nil && b.Service == nil && azok && azc.Status == "True":
		p.cause = fmt.Sprintf("Service %s is gone while Authorino %s still reports Ready: the Authorino operator re-creates its Services only when it reconciles the CR, and it reconciles on changes to the CR and its Deployment, not to Services (authorino-operator v0.21.0 controllers/authorino_controller.go SetupWithManager); with listener TLS on, the service-CA Secret %s went with the Service and the operator's TLS preflight then blocks the re-creation too",
			k.AuthorinoService, k.AuthorinoName, k.AuthorinoCertSecret)
		p.fix = authorinoTLSFix(k)
	case az != nil && b != nil && b.Service != nil && b.ReadyEndpoints == 0 && authorinoReplicas(az) == 0:
		p.cause = fmt.Sprintf("Authorino %s is scaled to 0 replicas (spec.replicas): nothing answers the gateway's auth calls", k.AuthorinoName)
		p.fix = fmt.Sprintf(`oc patch authorino %s -n %s --type merge -p '{"spec":{"replicas":1}}'`, k.AuthorinoName, k.Namespace)
	case az != nil && b != nil && b.Service != nil && b.ReadyEndpoints == 0 && scaledToZero(b) && !authorinoReplicasSet(az):
		p.cause = fmt.Sprintf("Authorino's Deployment was scaled to 0 and its CR %s sets no spec.replicas, so the Authorino operator leaves the Deployment at 0 (authorino-operator v0.21.0 restores replicas only from spec.replicas): nothing answers the gateway's auth calls", k.AuthorinoName)
		p.fix = fmt.Sprintf(`oc patch authorino %s -n %s --type merge -p '{"spec":{"replicas":1}}'   (the operator then scales its Deployment to 1 and keeps it there)`, k.AuthorinoName, k.Namespace)
	default:
		p.cause = "Authorino's pods are not ready or its Service has no ready endpoints: the gateway reaches no Authorino and authenticated requests fail with 500 AUTH_FAILURE"
		p.fix = fmt.Sprintf("oc rollout status deployment/%s -n %s; oc logs -n %s deploy/%s   (maasctl does not manage Authorino's pods; the Authorino operator does)", k.AuthorinoName, k.Namespace, k.Namespace, k.AuthorinoName)
	}
	return p
}

// authorinoTLSFix is the fix for an Authorino Service that its operator
// does not re-create. With the inventory's kuadrant.authorinoTLS,
// maasctl install's platform/authorino-tls step unblocks the operator
// itself (listener TLS off while its Secret is missing, else a
// reconcile-request annotation) and turns TLS on again; without it, the
// CR is annotated by hand (any change to it starts a reconcile).
func authorinoTLSFix(k inventory.Kuadrant) string {
	if k.AuthorinoTLS {
		return fmt.Sprintf("maasctl install   (its step platform/authorino-tls turns Authorino's listener TLS off while Secret %s is missing, so the Authorino operator re-creates Service %s; it then annotates the Service, waits for the service CA's %s and turns TLS on again)",
			k.AuthorinoCertSecret, k.AuthorinoService, k.AuthorinoCertSecret)
	}
	return fmt.Sprintf(`oc annotate authorino %s -n %s --overwrite maasctl.io/reconcile-requested-at="$(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)"   (any change to the CR makes the Authorino operator reconcile it and re-create Service %s)`,
		k.AuthorinoName, k.Namespace, k.AuthorinoService)
}

// authorinoReplicasSet reports whether the Authorino CR az sets
// spec.replicas.
func authorinoReplicasSet(az *unstructured.Unstructured) bool {
	if az == nil {
		return false
	}
	_, found, _ := unstructured.NestedInt64(az.Object, "spec", "replicas")
	return found
}

// scaledToZero reports whether a Deployment behind the Service b has
// spec.replicas 0.
func scaledToZero(b *verify.Backend) bool {
	if b == nil {
		return false
	}
	for _, w := range b.Workloads {
		if w.Replicas == 0 {
			return true
		}
	}
	return false
}

func authorinoReplicas(az *unstructured.Unstructured) int64 {
	n, found, _ := unstructured.NestedInt64(az.Object, "spec", "replicas")
	if !found {
		return 1
	}
	return n
}

// authService (MAAS-D019): Kuadrant reports Ready but Authorino, which it
// relies on, serves nothing (its status is stale while its operator is
// down). With Kuadrant not Ready the same cause is part of MAAS-D020.
func authService(s *verify.State) []Finding {
	if rc, ok := cond(s.Kuadrant, "Ready"); s.Kuadrant == nil || !ok || rc.Status != "True" {
		return nil
	}
	p := authorinoTrouble(s)
	if p == nil {
		return nil
	}
	return []Finding{finding(CodeAuthService, p.object, p.evidence, p.cause, p.fix)}
}
