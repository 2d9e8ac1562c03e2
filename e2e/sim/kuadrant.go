package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The simulated Kuadrant operator (Kuadrant/kuadrant-operator v1.x as shipped
// in RHCL 1.4). Case B01 (../shared/cases/README.md; Kuadrant/kuadrant-operator
// #1784, opendatahub-io/models-as-a-service #330): the operator detects its
// Gateway API provider once, when its pod starts. A pod that started before
// the Istio control plane existed keeps reporting Ready=False, reason
// MissingDependency, until the pod is replaced. A pod started afterwards
// creates the Authorino CR "authorino" in the Kuadrant namespace
// (internal/controller/authorino_reconciler.go) and reports Ready once
// Authorino is ready (reasons from internal/controller/kuadrant_status_updater.go).
// Limitador is out of scope (its CRD is not in the CRD set).
//
// Policies (AuthPolicy kuadrant.io/v1, TokenRateLimitPolicy
// kuadrant.io/v1alpha1) get Accepted and Enforced conditions
// (api/v1/types.go policy condition reasons: TargetNotFound, Accepted,
// Enforced, Unknown) while a Ready Kuadrant exists; without one the policy
// machinery does not run and policies get no status.
//
// The e2e tests run the real operators by default (kuadrant-operator
// v1.5.2, authorino-operator v0.21.0; e2e MAASCTL_REAL_KUADRANT). This
// simulator and the Authorino one stay for what the real ones cannot do
// here: a case whose fault is a policy status only the Kuadrant operator
// writes (nothing may write it beside the real operator), the benchmarks
// unless -real-kuadrant, and MAASCTL_REAL_KUADRANT=0 (REAL_KUADRANT=0 for
// `make demo`).
type kuadrantCtl struct {
	m *manager
	r *reconciler
}

const (
	kuadrantMissingDependencyMessage = "[Gateway API provider (istio / envoy gateway)] is not installed, please restart Kuadrant Operator pod once dependency has been installed"
)

func registerKuadrant(m *manager) {
	kc := &kuadrantCtl{m: m}
	kc.r = &reconciler{
		name: "kuadrant/kuadrant", delayKey: Kuadrant, primary: gvrKuadrant,
		watches: []watch{
			{gvr: gvrPod, mapFn: func(u *unstructured.Unstructured) []key {
				l := u.GetLabels()
				if l["app"] == "kuadrant" && l["control-plane"] == "controller-manager" {
					return m.allOf(gvrKuadrant, false)(u)
				}
				return nil
			}},
			{gvr: gvrDeployment, mapFn: func(u *unstructured.Unstructured) []key {
				if u.GetNamespace() == istiodNamespace && u.GetName() == istiodDeployment {
					return m.allOf(gvrKuadrant, false)(u)
				}
				return nil
			}},
			{gvr: gvrAuthorino, mapFn: m.allOf(gvrKuadrant, true)},
		},
		reconcile: kc.reconcile,
	}
	m.add(kc.r)
	registerKuadrantPolicies(m)
}

// registerKuadrantPolicies registers the policy status writers. They do
// not run with Options.RealKuadrant: the real operator writes the same
// conditions, and two writers of one status fight (each rewrites the
// other's). The real AuthPolicy Enforced waits for the AuthConfigs it
// generates to be Ready (kuadrant-operator
// internal/controller/auth_policy_status_updater.go), which the real
// Authorino server the harness runs then writes (testenv AuthorinoServer).
func registerKuadrantPolicies(m *manager) {
	for _, g := range []schema.GroupVersionResource{gvrAuthPolicy, gvrTokenPolicy} {
		pc := &policyCtl{m: m, gvr: g}
		pc.r = &reconciler{
			name: "kuadrant/" + g.Resource, delayKey: Kuadrant, primary: g,
			watches: []watch{
				{gvr: gvrKuadrant, mapFn: m.allOf(g, false)},
				{gvr: gvrGateway, mapFn: m.allOf(g, true)},
				{gvr: gvrHTTPRoute, mapFn: m.allOf(g, true)},
				{gvr: gvrAuthorino, mapFn: m.allOf(g, false)},
			},
			reconcile: pc.reconcile,
		}
		m.add(pc.r)
	}
}

// operatorPod returns the newest running Kuadrant operator pod, or nil.
func (kc *kuadrantCtl) operatorPod() *unstructured.Unstructured {
	var newest *unstructured.Unstructured
	for _, p := range kc.m.list(gvrPod, "") {
		l := p.GetLabels()
		if l["app"] != "kuadrant" || l["control-plane"] != "controller-manager" {
			continue
		}
		if p.GetDeletionTimestamp() != nil || str(p, "status", "phase") != "Running" {
			continue
		}
		if newest == nil || kc.createdAfter(p, newest) {
			newest = p
		}
	}
	return newest
}

// createdAfter reports whether a was created after b. creationTimestamp has
// one-second resolution; within one second the order in which this process
// saw the two objects created decides, and when that is unknown the answer
// is false (the strict choice).
func (kc *kuadrantCtl) createdAfter(a, b *unstructured.Unstructured) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return tb.Before(&ta)
	}
	sa, okA := kc.m.liveSeen.Load(a.GetUID())
	sb, okB := kc.m.liveSeen.Load(b.GetUID())
	if okA && okB {
		return sa.(time.Time).After(sb.(time.Time))
	}
	return false
}

func (kc *kuadrantCtl) reconcile(ctx context.Context, k key) error {
	m := kc.m
	kd := m.get(gvrKuadrant, k.Namespace, k.Name)
	if kd == nil || kd.GetDeletionTimestamp() != nil {
		return nil
	}
	pod := kc.operatorPod()
	if pod == nil {
		return nil // no operator running: nothing reconciles the CR
	}
	// Authorino is created at once (when the dependency is there); the
	// Kuadrant status, MissingDependency or Ready, waits for the Kuadrant
	// delay of this operator pod (hold).
	ctx = m.hold(ctx, kc.r, kd, "pod="+string(pod.GetUID()))
	gen := kd.GetGeneration()
	old := mapOf(kd, "status")
	status := map[string]any{"observedGeneration": gen, "mtlsAuthorino": false, "mtlsLimitador": false}
	istiod := m.get(gvrDeployment, istiodNamespace, istiodDeployment)
	if istiod == nil || !kc.createdAfter(pod, istiod) || m.opts.Faults.KuadrantStuckMissingDependency {
		status["conditions"] = conditions(old["conditions"], cond("Ready", false, "MissingDependency", kuadrantMissingDependencyMessage).gen(gen))
		return m.updateStatus(ctx, gvrKuadrant, kd, status)
	}
	az := m.get(gvrAuthorino, k.Namespace, "authorino")
	if az == nil {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "operator.authorino.kuadrant.io/v1beta1", "kind": "Authorino",
			"metadata": map[string]any{
				"name": "authorino", "namespace": k.Namespace,
				"ownerReferences": []any{ownerRef(kd, true)},
			},
			// No spec.replicas, as kuadrant-operator v1.5.2
			// internal/controller/authorino_reconciler.go writes it: the
			// Authorino operator then leaves its Deployment's replicas as
			// they are.
			"spec": map[string]any{
				"clusterWide":            true,
				"supersedingHostSubsets": true,
				"listener":               map[string]any{"tls": map[string]any{"enabled": false}},
				"oidcServer":             map[string]any{"tls": map[string]any{"enabled": false}},
			},
		}}
		if _, err := m.create(ctx, gvrAuthorino, obj); err != nil {
			return err
		}
	}
	ready := cond("Ready", true, "Ready", "Kuadrant is ready").gen(gen)
	if !conditionTrue(az, "Ready") {
		ready = cond("Ready", false, "AuthorinoNotReady", "Authorino is not ready").gen(gen)
	}
	status["conditions"] = conditions(old["conditions"], ready)
	return m.updateStatus(ctx, gvrKuadrant, kd, status)
}

// policyCtl writes the status of one Kuadrant policy kind.
type policyCtl struct {
	m   *manager
	gvr schema.GroupVersionResource
	r   *reconciler
	// limits holds, per TokenRateLimitPolicy, the generation whose limits
	// were last handed to Limitador and when (limitadorSync).
	limitsMu sync.Mutex
	limits   map[key]limitsSync
}

type limitsSync struct {
	gen int64
	at  time.Time
}

// LimitadorSyncDelay is how long a TokenRateLimitPolicy stays at
// Enforced=False after each change of its spec. kuadrant-operator v1.5.2
// writes the policy's limits into the Limitador CR and, in the same pass,
// reports the policy "waiting for the following components to sync:
// [Limitador]" (tokenratelimitpolicy_status_updater.go,
// StateLimitadorLimitsModified); it reports Enforced=True at its next pass,
// once limitador-operator has applied them and the Limitador CR is Ready.
// With the real operators the harness runs, verify saw the policy back
// within about a second.
const LimitadorSyncDelay = 300 * time.Millisecond

const limitadorSyncMessage = "TokenRateLimitPolicy waiting for the following components to sync: [Limitador]"

// limitadorSync reports how long the TokenRateLimitPolicy k at generation
// gen still waits for Limitador: the first reconcile of a generation
// starts LimitadorSyncDelay.
func (pc *policyCtl) limitadorSync(k key, gen int64) time.Duration {
	pc.limitsMu.Lock()
	defer pc.limitsMu.Unlock()
	if pc.limits == nil {
		pc.limits = map[key]limitsSync{}
	}
	l, ok := pc.limits[k]
	if !ok || l.gen != gen {
		l = limitsSync{gen: gen, at: time.Now()}
		pc.limits[k] = l
	}
	return LimitadorSyncDelay - time.Since(l.at)
}

func (pc *policyCtl) reconcile(ctx context.Context, k key) error {
	m := pc.m
	p := m.get(pc.gvr, k.Namespace, k.Name)
	if p == nil || p.GetDeletionTimestamp() != nil {
		return nil
	}
	var kuadrantReady bool
	for _, kd := range m.list(gvrKuadrant, "") {
		if conditionTrue(kd, "Ready") {
			kuadrantReady = true
		}
	}
	if !kuadrantReady {
		return nil
	}
	if m.delayed(pc.r, p, "enforce") {
		return nil
	}
	kind := p.GetKind()
	gen := p.GetGeneration()
	tkind, tname := str(p, "spec", "targetRef", "kind"), str(p, "spec", "targetRef", "name")
	var target *unstructured.Unstructured
	switch tkind {
	case "Gateway":
		target = m.get(gvrGateway, k.Namespace, tname)
	case "HTTPRoute":
		target = m.get(gvrHTTPRoute, k.Namespace, tname)
	}
	old := statusConditions(p)
	if target == nil {
		return m.updateStatus(ctx, pc.gvr, p, map[string]any{
			"observedGeneration": gen,
			"conditions": conditions(old, cond("Accepted", false, "TargetNotFound",
				fmt.Sprintf("%s target %s was not found", kind, tname)).gen(gen)),
		})
	}
	accepted := cond("Accepted", true, "Accepted", kind+" has been accepted").gen(gen)
	enforced := cond("Enforced", true, "Enforced", kind+" has been successfully enforced").gen(gen)
	if why := pc.notEnforced(target); why != "" {
		enforced = cond("Enforced", false, "Unknown", kind+" has encountered some issues: "+why).gen(gen)
	} else if pc.gvr == gvrTokenPolicy {
		if left := pc.limitadorSync(k, gen); left > 0 {
			enforced = cond("Enforced", false, "Unknown", limitadorSyncMessage).gen(gen)
			pc.r.queue.AddAfter(k, left)
		}
	}
	return m.updateStatus(ctx, pc.gvr, p, map[string]any{
		"observedGeneration": gen,
		"conditions":         conditions(old, accepted, enforced),
	})
}

// notEnforced says why a policy on target cannot be enforced yet: the data
// plane must serve the target (a Programmed Gateway, or an HTTPRoute
// accepted by one), and an AuthPolicy needs a Ready Authorino.
func (pc *policyCtl) notEnforced(target *unstructured.Unstructured) string {
	m := pc.m
	if pc.gvr == gvrAuthPolicy {
		ok := false
		for _, a := range m.list(gvrAuthorino, "") {
			if conditionTrue(a, "Ready") {
				ok = true
			}
		}
		if !ok {
			return "no ready Authorino instance"
		}
	}
	if target.GetKind() == "Gateway" {
		if !conditionTrue(target, "Programmed") {
			return fmt.Sprintf("gateway %s is not programmed", target.GetName())
		}
		return ""
	}
	for _, pr := range sliceOf(target, "status", "parents") {
		prm, _ := pr.(map[string]any)
		if mstr(prm, "controllerName") != openshiftGatewayController {
			continue
		}
		l, _ := prm["conditions"].([]any)
		for _, c := range l {
			cm, _ := c.(map[string]any)
			if cm["type"] == "Accepted" && cm["status"] == "True" {
				ref, _ := prm["parentRef"].(map[string]any)
				if conditionTrue(m.get(gvrGateway, mstr(ref, "namespace"), mstr(ref, "name")), "Programmed") {
					return ""
				}
			}
		}
	}
	return fmt.Sprintf("route %s is not accepted by a programmed gateway", target.GetName())
}
