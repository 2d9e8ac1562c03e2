package sim

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The simulated MaaS controller (opendatahub-io/models-as-a-service
// maas-controller, tag v0.2.1 as pinned by RHOAI/ODH 3.5; CRDs in
// ../shared/crds/maas, whose field descriptions define the phases used here):
//   - ExternalProvider: Ready once its auth Secret exists in the namespace
//     with key api-key and label inference.llm-d.ai/ipp-managed=true (the
//     inference provider discovery label); Failed for a missing Secret.
//   - ExternalModel: Ready when its providers are Ready; the controller
//     creates the HTTPRoute (owned by the model) on the MaaS Gateway
//     openshift-ingress/maas-default-gateway and records status.httpRouteName.
//   - MaaSModelRef: phase Ready only when the backend serves (its HTTPRoute
//     is accepted by a programmed Gateway: RuntimeReady) AND an Active
//     MaaSAuthPolicy and an Active MaaSSubscription both reference it
//     (GovernanceAttached); Pending while either is missing ("Pending =
//     awaiting governance pairing or backend readiness").
//   - MaaSAuthPolicy / MaaSSubscription: one Kuadrant AuthPolicy /
//     TokenRateLimitPolicy per referenced model, targeting the model's
//     HTTPRoute in the model's namespace; phase Active when every one is
//     enforced, Failed when a referenced MaaSModelRef does not exist. The
//     generated policies live in the model namespace, so they are tracked by
//     labels (an ownerReference cannot cross namespaces).
type maasCtl struct {
	m                     *manager
	provider, model, ref  *reconciler
	authPolicy, subscript *reconciler
	legacy                *reconciler
}

const (
	maasGatewayName      = "maas-default-gateway"
	maasGatewayNamespace = "openshift-ingress"
	ippManagedLabel      = "inference.llm-d.ai/ipp-managed"
	maasPortAnnotation   = "maas.opendatahub.io/port"
	maasModelLabel       = "maas.opendatahub.io/model"
	maasManagedByLabel   = "app.kubernetes.io/managed-by"
	maasControllerName   = "maas-controller"
)

func registerMaaS(m *manager) {
	c := &maasCtl{m: m}
	c.provider = &reconciler{
		name: "maas/externalprovider", delayKey: MaaS, primary: gvrExternalProvider,
		watches:   []watch{{gvr: gvrSecret, mapFn: m.allOf(gvrExternalProvider, true)}},
		reconcile: c.reconcileProvider,
	}
	c.model = &reconciler{
		name: "maas/externalmodel", delayKey: MaaS, primary: gvrExternalModel,
		watches: []watch{
			{gvr: gvrExternalProvider, mapFn: m.allOf(gvrExternalModel, true)},
			{gvr: gvrHTTPRoute, mapFn: ownerKeys("ExternalModel")},
		},
		reconcile: c.reconcileModel,
	}
	c.ref = &reconciler{
		name: "maas/maasmodelref", delayKey: MaaS, primary: gvrMaaSModelRef,
		watches: []watch{
			{gvr: gvrHTTPRoute, mapFn: m.allOf(gvrMaaSModelRef, true)},
			{gvr: gvrGateway, mapFn: m.allOf(gvrMaaSModelRef, false)},
			{gvr: gvrMaaSAuthPolicy, mapFn: m.allOf(gvrMaaSModelRef, false)},
			{gvr: gvrMaaSSubscription, mapFn: m.allOf(gvrMaaSModelRef, false)},
		},
		reconcile: c.reconcileRef,
	}
	c.authPolicy = &reconciler{
		name: "maas/maasauthpolicy", delayKey: MaaS, primary: gvrMaaSAuthPolicy,
		watches: []watch{
			{gvr: gvrMaaSModelRef, mapFn: m.allOf(gvrMaaSAuthPolicy, false)},
			{gvr: gvrAuthPolicy, mapFn: m.allOf(gvrMaaSAuthPolicy, false)},
		},
		reconcile: c.reconcileAuthPolicy,
	}
	c.subscript = &reconciler{
		name: "maas/maassubscription", delayKey: MaaS, primary: gvrMaaSSubscription,
		watches: []watch{
			{gvr: gvrMaaSModelRef, mapFn: m.allOf(gvrMaaSSubscription, false)},
			{gvr: gvrTokenPolicy, mapFn: m.allOf(gvrMaaSSubscription, false)},
		},
		reconcile: c.reconcileSubscription,
	}
	for _, r := range []*reconciler{c.provider, c.model, c.ref, c.authPolicy, c.subscript} {
		m.add(r)
	}
	if m.opts.RHOAIVersion != RHOAI35 {
		// RHOAI 3.3/3.4: external models are maas.opendatahub.io
		// ExternalModels; 3.5 no longer reconciles that group (case B16,
		// models-as-a-service PR #865).
		c.legacy = &reconciler{
			name: "maas/legacy-externalmodel", delayKey: MaaS, primary: gvrLegacyExternalMdl,
			watches: []watch{
				{gvr: gvrSecret, mapFn: m.allOf(gvrLegacyExternalMdl, true)},
				{gvr: gvrHTTPRoute, mapFn: ownerKeys("ExternalModel")},
			},
			reconcile: c.reconcileLegacyModel,
		}
		m.add(c.legacy)
	}
}

// externalModelGVR is the ExternalModel kind MaaSModelRefs resolve in this
// release: inference.opendatahub.io on 3.5, maas.opendatahub.io before.
func (c *maasCtl) externalModelGVR() schema.GroupVersionResource {
	if c.m.opts.RHOAIVersion == RHOAI35 {
		return gvrExternalModel
	}
	return gvrLegacyExternalMdl
}

// injectedFailure applies Faults.MaaSFailures to obj: it writes the failed
// phase and reports true when obj is listed.
func (c *maasCtl) injectedFailure(ctx context.Context, g schema.GroupVersionResource, obj *unstructured.Unstructured) (bool, error) {
	msg, ok := c.m.opts.Faults.MaaSFailures[obj.GetKind()+"/"+obj.GetNamespace()+"/"+obj.GetName()]
	if !ok {
		return false, nil
	}
	phase := "Failed"
	if obj.GetKind() == "MaaSAuthPolicy" || obj.GetKind() == "MaaSSubscription" {
		phase = "Invalid"
	}
	return true, c.m.updateStatus(ctx, g, obj, map[string]any{
		"phase":      phase,
		"conditions": conditions(statusConditions(obj), cond("Ready", false, "ReconcileFailed", msg).gen(obj.GetGeneration())),
	})
}

// reconcileLegacyModel is the 3.3/3.4 ExternalModel controller: Ready once
// its credential Secret exists with key api-key and the discovery label;
// it then owns an HTTPRoute named after the model on the MaaS Gateway.
func (c *maasCtl) reconcileLegacyModel(ctx context.Context, k key) error {
	m := c.m
	em := m.get(gvrLegacyExternalMdl, k.Namespace, k.Name)
	if em == nil || em.GetDeletionTimestamp() != nil {
		return nil
	}
	if failed, err := c.injectedFailure(ctx, gvrLegacyExternalMdl, em); failed || err != nil {
		return err
	}
	// The HTTPRoute is made at once; the status waits (hold).
	ctx = m.hold(ctx, c.legacy, em, "model")
	gen := em.GetGeneration()
	set := func(phase string, ok bool, reason, msg string) error {
		return m.updateStatus(ctx, gvrLegacyExternalMdl, em, map[string]any{
			"phase":      phase,
			"conditions": conditions(statusConditions(em), cond("Ready", ok, reason, msg).gen(gen)),
		})
	}
	name := str(em, "spec", "credentialRef", "name")
	s := m.get(gvrSecret, k.Namespace, name)
	switch {
	case s == nil:
		return set("Failed", false, "SecretNotFound", fmt.Sprintf("secret %s/%s not found", k.Namespace, name))
	case !hasDataKey(s, "api-key"):
		return set("Failed", false, "InvalidSecret", fmt.Sprintf("secret %s/%s has no key api-key", k.Namespace, name))
	case s.GetLabels()[ippManagedLabel] != "true":
		return set("Pending", false, "SecretNotLabeled", fmt.Sprintf("secret %s/%s lacks label %s=true", k.Namespace, name, ippManagedLabel))
	}
	port := int64(443)
	if v, err := strconv.ParseInt(em.GetAnnotations()[maasPortAnnotation], 10, 32); err == nil {
		port = v
	}
	backend := map[string]any{"group": "networking.istio.io", "kind": "Hostname", "name": str(em, "spec", "endpoint"), "port": port}
	if err := c.applySpec(ctx, gvrHTTPRoute, c.modelRoute(em, []any{backend})); err != nil {
		return err
	}
	return set("Ready", true, "Reconciled", "External model is ready")
}

// modelRoute is the HTTPRoute the MaaS controller generates for an
// external model: on the MaaS Gateway, path /<namespace>/<name>.
func (c *maasCtl) modelRoute(em *unstructured.Unstructured, backends []any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{
			"name": em.GetName(), "namespace": em.GetNamespace(),
			"labels":          map[string]any{maasManagedByLabel: maasControllerName, maasModelLabel: em.GetName()},
			"ownerReferences": []any{ownerRef(em, true)},
		},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{
				"group": gatewayAPIGroup, "kind": "Gateway", "name": maasGatewayName, "namespace": maasGatewayNamespace,
			}},
			"rules": []any{map[string]any{
				"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/" + em.GetNamespace() + "/" + em.GetName()}}},
				"backendRefs": backends,
			}},
		},
	}}
}

func (c *maasCtl) reconcileProvider(ctx context.Context, k key) error {
	m := c.m
	p := m.get(gvrExternalProvider, k.Namespace, k.Name)
	if p == nil || p.GetDeletionTimestamp() != nil {
		return nil
	}
	if failed, err := c.injectedFailure(ctx, gvrExternalProvider, p); failed || err != nil {
		return err
	}
	if m.delayed(c.provider, p, "provider") {
		return nil
	}
	gen := p.GetGeneration()
	set := func(phase string, ok bool, reason, msg string) error {
		return m.updateStatus(ctx, gvrExternalProvider, p, map[string]any{
			"phase":      phase,
			"conditions": conditions(statusConditions(p), cond("Ready", ok, reason, msg).gen(gen)),
		})
	}
	name := str(p, "spec", "auth", "secretRef", "name")
	s := m.get(gvrSecret, k.Namespace, name)
	switch {
	case s == nil:
		return set("Failed", false, "SecretNotFound", fmt.Sprintf("secret %s/%s not found", k.Namespace, name))
	case str(p, "spec", "auth", "type") == "apikey" && !hasDataKey(s, "api-key"):
		return set("Failed", false, "InvalidSecret", fmt.Sprintf("secret %s/%s has no key api-key", k.Namespace, name))
	case s.GetLabels()[ippManagedLabel] != "true":
		return set("Pending", false, "SecretNotLabeled", fmt.Sprintf("secret %s/%s lacks label %s=true", k.Namespace, name, ippManagedLabel))
	}
	return set("Ready", true, "Reconciled", "External provider is ready")
}

func hasDataKey(s *unstructured.Unstructured, k string) bool {
	v, err := secretValue(s, k)
	return err == nil && v != ""
}

func (c *maasCtl) reconcileModel(ctx context.Context, k key) error {
	m := c.m
	em := m.get(gvrExternalModel, k.Namespace, k.Name)
	if em == nil || em.GetDeletionTimestamp() != nil {
		return nil
	}
	if failed, err := c.injectedFailure(ctx, gvrExternalModel, em); failed || err != nil {
		return err
	}
	// The HTTPRoute is made at once; the status waits (hold).
	ctx = m.hold(ctx, c.model, em, "model")
	gen := em.GetGeneration()
	set := func(phase string, ok bool, reason, msg, route string) error {
		st := map[string]any{
			"phase":      phase,
			"conditions": conditions(statusConditions(em), cond("Ready", ok, reason, msg).gen(gen)),
		}
		if route != "" {
			st["httpRouteName"] = route
		}
		return m.updateStatus(ctx, gvrExternalModel, em, st)
	}
	refs := sliceOf(em, "spec", "externalProviderRefs")
	var backends []any
	for _, r := range refs {
		rm, _ := r.(map[string]any)
		ref, _ := rm["ref"].(map[string]any)
		pname := mstr(ref, "name")
		p := m.get(gvrExternalProvider, k.Namespace, pname)
		if p == nil {
			return set("Failed", false, "ProviderNotFound", fmt.Sprintf("ExternalProvider %s/%s not found", k.Namespace, pname), "")
		}
		if str(p, "status", "phase") != "Ready" {
			return set("Pending", false, "ProviderNotReady", fmt.Sprintf("ExternalProvider %s/%s is not Ready", k.Namespace, pname), "")
		}
		port := int64(443)
		if v, err := strconv.ParseInt(p.GetAnnotations()[maasPortAnnotation], 10, 32); err == nil {
			port = v
		}
		b := map[string]any{"group": "networking.istio.io", "kind": "Hostname", "name": str(p, "spec", "endpoint"), "port": port}
		if w, ok := rm["weight"].(int64); ok {
			b["weight"] = w
		}
		backends = append(backends, b)
	}
	route := c.modelRoute(em, backends)
	if err := c.applySpec(ctx, gvrHTTPRoute, route); err != nil {
		return err
	}
	return set("Ready", true, "Reconciled", "External model is ready", k.Name)
}

// applySpec creates obj, or updates the live object's spec and labels when
// they differ.
func (c *maasCtl) applySpec(ctx context.Context, g schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	live := c.m.get(g, obj.GetNamespace(), obj.GetName())
	if live == nil {
		_, err := c.m.create(ctx, g, obj)
		return err
	}
	spec, _ := obj.Object["spec"].(map[string]any)
	if ns, err := normalize(spec); err == nil && equalJSON(live.Object["spec"], ns) {
		return nil
	}
	u := live.DeepCopy()
	u.Object["spec"] = spec
	_, err := c.m.dyn.Resource(g).Namespace(obj.GetNamespace()).Update(ctx, u, metav1.UpdateOptions{FieldManager: "maasctl-sim"})
	if err != nil {
		return fmt.Errorf("update %s %s: %w", g.Resource, keyOf(obj), err)
	}
	return nil
}

// governed reports whether an Active MaaSAuthPolicy and an Active
// MaaSSubscription both reference model ns/name.
func (c *maasCtl) governed(ns, name string) bool {
	refers := func(g schema.GroupVersionResource) bool {
		for _, o := range c.m.list(g, "") {
			if str(o, "status", "phase") != "Active" {
				continue
			}
			for _, r := range sliceOf(o, "spec", "modelRefs") {
				rm, _ := r.(map[string]any)
				if mstr(rm, "name") == name && mstr(rm, "namespace") == ns {
					return true
				}
			}
		}
		return false
	}
	return refers(gvrMaaSAuthPolicy) && refers(gvrMaaSSubscription)
}

func (c *maasCtl) reconcileRef(ctx context.Context, k key) error {
	m := c.m
	ref := m.get(gvrMaaSModelRef, k.Namespace, k.Name)
	if ref == nil || ref.GetDeletionTimestamp() != nil {
		return nil
	}
	if failed, err := c.injectedFailure(ctx, gvrMaaSModelRef, ref); failed || err != nil {
		return err
	}
	if m.delayed(c.ref, ref, "ref") {
		return nil
	}
	gen := ref.GetGeneration()
	old := statusConditions(ref)
	kind, name := str(ref, "spec", "modelRef", "kind"), str(ref, "spec", "modelRef", "name")
	fail := func(phase, reason, msg string) error {
		return m.updateStatus(ctx, gvrMaaSModelRef, ref, map[string]any{
			"phase":      phase,
			"conditions": conditions(old, cond("Ready", false, reason, msg).gen(gen)),
		})
	}
	if kind == "LLMInferenceService" {
		return c.reconcileLLMISvcRef(ctx, k, ref) // llmisvc.go
	}
	if kind != "ExternalModel" {
		return fail("Pending", "BackendNotReady", fmt.Sprintf("%s backends are not simulated", kind))
	}
	emGVR := c.externalModelGVR()
	if !m.isServed(emGVR) {
		return fail("Failed", "NotFound", emGVR.Group+" ExternalModel is not served in this release")
	}
	if !c.m.observe(c.ref, emGVR, m.allOf(gvrMaaSModelRef, true), k) {
		return nil // the cache's initial list requeues this model
	}
	em := m.get(emGVR, k.Namespace, name)
	if em == nil {
		return fail("Failed", "NotFound", fmt.Sprintf("ExternalModel %s not found in namespace %s", name, k.Namespace))
	}
	status := map[string]any{}
	if targets := sliceOf(em, "spec", "externalProviderRefs"); len(targets) > 0 {
		status["resolvedModelAlias"] = mstr(targets[0].(map[string]any), "targetModel")
	}
	runtimeOK, runtimeReason, runtimeMsg := false, "BackendNotReady", fmt.Sprintf("ExternalModel %s/%s is not Ready", k.Namespace, name)
	if str(em, "status", "phase") == "Ready" {
		routeName := str(em, "status", "httpRouteName")
		if emGVR == gvrLegacyExternalMdl {
			routeName = em.GetName() // the 3.3/3.4 status has no httpRouteName
		}
		route := m.get(gvrHTTPRoute, k.Namespace, routeName)
		if route != nil {
			status["httpRouteName"] = routeName
			status["httpRouteNamespace"] = k.Namespace
			gw, host := c.routeGateway(route)
			if gw != nil {
				status["httpRouteGatewayName"] = gw.GetName()
				status["httpRouteGatewayNamespace"] = gw.GetNamespace()
				hosts, _, _ := unstructured.NestedStringSlice(route.Object, "spec", "hostnames")
				if len(hosts) == 0 && host != "" {
					hosts = []string{host}
				}
				if len(hosts) > 0 {
					status["httpRouteHostnames"] = hosts
				}
				endpoint := str(ref, "spec", "endpointOverride")
				if endpoint == "" && host != "" {
					endpoint = fmt.Sprintf("https://%s/%s/%s", host, k.Namespace, k.Name)
				}
				if endpoint != "" {
					status["endpoint"] = endpoint
				}
				runtimeOK, runtimeReason, runtimeMsg = true, "RuntimeHealthy", "HTTPRoute is accepted by a programmed gateway"
			} else {
				runtimeReason, runtimeMsg = "RuntimeHealthFailure", fmt.Sprintf("HTTPRoute %s/%s is not accepted by a programmed gateway", k.Namespace, routeName)
			}
		}
	}
	return c.writeModelRefStatus(ctx, k, ref, status, old, runtimeOK, runtimeReason, runtimeMsg)
}

// routeGateway returns the programmed OpenShift Gateway that accepted route
// and the hostname of the listener it attached to.
func (c *maasCtl) routeGateway(route *unstructured.Unstructured) (*unstructured.Unstructured, string) {
	for _, p := range sliceOf(route, "status", "parents") {
		pm, _ := p.(map[string]any)
		if mstr(pm, "controllerName") != openshiftGatewayController {
			continue
		}
		accepted := false
		l, _ := pm["conditions"].([]any)
		for _, x := range l {
			xm, _ := x.(map[string]any)
			if xm["type"] == "Accepted" && xm["status"] == "True" {
				accepted = true
			}
		}
		ref, _ := pm["parentRef"].(map[string]any)
		gw := c.m.get(gvrGateway, mstr(ref, "namespace"), mstr(ref, "name"))
		if !accepted || !conditionTrue(gw, "Programmed") {
			continue
		}
		for _, li := range sliceOf(gw, "spec", "listeners") {
			lm, _ := li.(map[string]any)
			if sn := mstr(ref, "sectionName"); sn != "" && sn != mstr(lm, "name") {
				continue
			}
			if h := mstr(lm, "hostname"); h != "" {
				return gw, h
			}
		}
		return gw, ""
	}
	return nil, ""
}

// policyOutcome is one generated Kuadrant policy's state for a MaaS status list.
type policyOutcome struct {
	entry    map[string]any
	ready    bool
	notFound bool
}

// modelPolicies reconciles, for each modelRef of owner, the Kuadrant policy
// made by build (nil when the model's route is not known yet) and returns
// the outcomes.
func (c *maasCtl) modelPolicies(ctx context.Context, owner *unstructured.Unstructured, g schema.GroupVersionResource, prefix string,
	build func(model *unstructured.Unstructured, route string) *unstructured.Unstructured) ([]policyOutcome, error) {
	var out []policyOutcome
	for _, r := range sliceOf(owner, "spec", "modelRefs") {
		rm, _ := r.(map[string]any)
		name, ns := mstr(rm, "name"), mstr(rm, "namespace")
		pname := prefix + name
		o := policyOutcome{entry: map[string]any{"name": pname, "namespace": ns, "model": name, "modelNamespace": ns, "ready": false}}
		model := c.m.get(gvrMaaSModelRef, ns, name)
		route := str(model, "status", "httpRouteName")
		switch {
		case model == nil:
			o.notFound = true
			o.entry["reason"], o.entry["message"] = "NotFound", fmt.Sprintf("MaaSModelRef %s/%s not found", ns, name)
		case route == "":
			o.entry["reason"], o.entry["message"] = "BackendNotReady", fmt.Sprintf("MaaSModelRef %s/%s has no HTTPRoute yet", ns, name)
		default:
			if err := c.applySpec(ctx, g, build(model, route)); err != nil {
				return nil, err
			}
			p := c.m.get(g, ns, pname)
			switch {
			case p == nil:
				o.entry["reason"], o.entry["message"] = "NotAccepted", "policy created, waiting for Kuadrant"
			case conditionTrue(p, "Enforced"):
				o.ready = true
				o.entry["ready"] = true
				o.entry["reason"], o.entry["message"] = "AcceptedEnforced", "policy is accepted and enforced"
			case conditionTrue(p, "Accepted"):
				o.entry["reason"], o.entry["message"] = "NotEnforced", mstr(findCondition(p, "Enforced"), "message")
			default:
				o.entry["reason"], o.entry["message"] = "NotAccepted", mstr(findCondition(p, "Accepted"), "message")
			}
		}
		if msg := mstr(o.entry, "message"); len(msg) > 1024 {
			o.entry["message"] = msg[:1024]
		}
		out = append(out, o)
	}
	return out, nil
}

// phaseOf sums outcomes: Failed if a model is missing, Active if every
// policy is enforced, Pending otherwise.
func phaseOf(outcomes []policyOutcome) (string, condition) {
	var missing, waiting []string
	for _, o := range outcomes {
		switch {
		case o.notFound:
			missing = append(missing, mstr(o.entry, "message"))
		case !o.ready:
			waiting = append(waiting, mstr(o.entry, "model")+": "+mstr(o.entry, "message"))
		}
	}
	switch {
	case len(missing) > 0:
		return "Failed", cond("Ready", false, "ReconcileFailed", strings.Join(missing, "; "))
	case len(waiting) > 0:
		return "Pending", cond("Ready", false, "NotEnforced", strings.Join(waiting, "; "))
	}
	return "Active", cond("Ready", true, "Reconciled", "all policies are enforced")
}

func (c *maasCtl) reconcileAuthPolicy(ctx context.Context, k key) error {
	m := c.m
	pol := m.get(gvrMaaSAuthPolicy, k.Namespace, k.Name)
	if pol == nil || pol.GetDeletionTimestamp() != nil {
		return nil
	}
	if failed, err := c.injectedFailure(ctx, gvrMaaSAuthPolicy, pol); failed || err != nil {
		return err
	}
	// The AuthPolicies are made at once (Kuadrant's enforcement delay
	// runs alongside); the status waits for the MaaS delay (hold).
	ctx = m.hold(ctx, c.authPolicy, pol, "policy")
	out, err := c.modelPolicies(ctx, pol, gvrAuthPolicy, "maas-auth-", func(model *unstructured.Unstructured, route string) *unstructured.Unstructured {
		return c.authPolicyFor(model, route)
	})
	if err != nil {
		return err
	}
	phase, ready := phaseOf(out)
	var entries []any
	for _, o := range out {
		entries = append(entries, o.entry)
	}
	st := map[string]any{"phase": phase, "conditions": conditions(statusConditions(pol), ready.gen(pol.GetGeneration()))}
	if len(entries) > 0 {
		st["authPolicies"] = entries
	}
	return m.updateStatus(ctx, gvrMaaSAuthPolicy, pol, st)
}

// authPolicyFor is the AuthPolicy of one model: Kubernetes token review for
// identity, and access for the union of the subjects of every
// MaaSAuthPolicy that references the model.
func (c *maasCtl) authPolicyFor(model *unstructured.Unstructured, route string) *unstructured.Unstructured {
	groups, users := map[string]bool{}, map[string]bool{}
	for _, p := range c.m.list(gvrMaaSAuthPolicy, "") {
		if !refersTo(p, model) {
			continue
		}
		for _, g := range sliceOf(p, "spec", "subjects", "groups") {
			groups[mstr(g.(map[string]any), "name")] = true
		}
		us, _, _ := unstructured.NestedStringSlice(p.Object, "spec", "subjects", "users")
		for _, u := range us {
			users[u] = true
		}
	}
	quote := func(set map[string]bool) string {
		var l []string
		for k := range set {
			l = append(l, strconv.Quote(k))
		}
		sort.Strings(l)
		return "[" + strings.Join(l, ", ") + "]"
	}
	predicate := fmt.Sprintf("auth.identity.user.groups.exists(g, g in %s) || auth.identity.user.username in %s", quote(groups), quote(users))
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kuadrant.io/v1", "kind": "AuthPolicy",
		"metadata": map[string]any{
			"name": "maas-auth-" + model.GetName(), "namespace": model.GetNamespace(),
			"labels": map[string]any{maasManagedByLabel: maasControllerName, maasModelLabel: model.GetName()},
		},
		"spec": map[string]any{
			"targetRef": map[string]any{"group": gatewayAPIGroup, "kind": "HTTPRoute", "name": route},
			"rules": map[string]any{
				"authentication": map[string]any{
					"openshift-identities": map[string]any{"kubernetesTokenReview": map[string]any{"audiences": []any{"https://kubernetes.default.svc"}}},
				},
				"authorization": map[string]any{
					"maas-subjects": map[string]any{"patternMatching": map[string]any{"patterns": []any{map[string]any{"predicate": predicate}}}},
				},
			},
		},
	}}
}

func refersTo(owner, model *unstructured.Unstructured) bool {
	for _, r := range sliceOf(owner, "spec", "modelRefs") {
		rm, _ := r.(map[string]any)
		if mstr(rm, "name") == model.GetName() && mstr(rm, "namespace") == model.GetNamespace() {
			return true
		}
	}
	return false
}

func (c *maasCtl) reconcileSubscription(ctx context.Context, k key) error {
	m := c.m
	sub := m.get(gvrMaaSSubscription, k.Namespace, k.Name)
	if sub == nil || sub.GetDeletionTimestamp() != nil {
		return nil
	}
	if failed, err := c.injectedFailure(ctx, gvrMaaSSubscription, sub); failed || err != nil {
		return err
	}
	// The TokenRateLimitPolicies are made at once (Kuadrant's enforcement
	// delay runs alongside); the status waits for the MaaS delay (hold).
	ctx = m.hold(ctx, c.subscript, sub, "subscription")
	out, err := c.modelPolicies(ctx, sub, gvrTokenPolicy, "maas-trlp-", func(model *unstructured.Unstructured, route string) *unstructured.Unstructured {
		return c.tokenPolicyFor(model, route)
	})
	if err != nil {
		return err
	}
	phase, ready := phaseOf(out)
	var refStatuses, trl []any
	for _, o := range out {
		e := o.entry
		refStatuses = append(refStatuses, map[string]any{
			"name": e["model"], "namespace": e["modelNamespace"], "ready": !o.notFound && mstr(e, "reason") != "BackendNotReady",
			"reason": map[bool]string{true: "NotFound", false: "Valid"}[o.notFound], "message": e["message"],
		})
		if !o.notFound {
			trl = append(trl, map[string]any{
				"name": e["name"], "namespace": e["namespace"], "model": e["model"],
				"ready": e["ready"], "reason": e["reason"], "message": e["message"],
			})
		}
	}
	st := map[string]any{"phase": phase, "conditions": conditions(statusConditions(sub), ready.gen(sub.GetGeneration()))}
	if len(refStatuses) > 0 {
		st["modelRefStatuses"] = refStatuses
	}
	if len(trl) > 0 {
		st["tokenRateLimitStatuses"] = trl
	}
	return m.updateStatus(ctx, gvrMaaSSubscription, sub, st)
}

// tokenPolicyFor is the TokenRateLimitPolicy of one model: a limit per
// MaaSSubscription that references it, counted per user, applying to the
// subscription's owners.
func (c *maasCtl) tokenPolicyFor(model *unstructured.Unstructured, route string) *unstructured.Unstructured {
	limits := map[string]any{}
	for _, s := range c.m.list(gvrMaaSSubscription, "") {
		for _, r := range sliceOf(s, "spec", "modelRefs") {
			rm, _ := r.(map[string]any)
			if mstr(rm, "name") != model.GetName() || mstr(rm, "namespace") != model.GetNamespace() {
				continue
			}
			var rates []any
			tl, _ := rm["tokenRateLimits"].([]any)
			for _, t := range tl {
				tm, _ := t.(map[string]any)
				rates = append(rates, map[string]any{"limit": tm["limit"], "window": tm["window"]})
			}
			var groups []string
			for _, g := range sliceOf(s, "spec", "owner", "groups") {
				groups = append(groups, strconv.Quote(mstr(g.(map[string]any), "name")))
			}
			sort.Strings(groups)
			limits[s.GetNamespace()+"-"+s.GetName()] = map[string]any{
				"rates":    rates,
				"counters": []any{map[string]any{"expression": "auth.identity.userid"}},
				"when":     []any{map[string]any{"predicate": fmt.Sprintf("auth.identity.groups.exists(g, g in [%s])", strings.Join(groups, ", "))}},
			}
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kuadrant.io/v1alpha1", "kind": "TokenRateLimitPolicy",
		"metadata": map[string]any{
			"name": "maas-trlp-" + model.GetName(), "namespace": model.GetNamespace(),
			"labels": map[string]any{maasManagedByLabel: maasControllerName, maasModelLabel: model.GetName()},
		},
		"spec": map[string]any{
			"targetRef": map[string]any{"group": gatewayAPIGroup, "kind": "HTTPRoute", "name": route},
			"limits":    limits,
		},
	}}
}

// writeModelRefStatus writes a MaaSModelRef's phase and its Ready,
// GovernanceAttached and RuntimeReady conditions from the runtime check
// of its backend (ExternalModel or LLMInferenceService) and the
// governance pairing (maas-controller: Ready needs both; a paired model
// whose backend is down is Unhealthy, an unpaired one Pending). status
// holds the backend fields already; old are the current conditions.
func (c *maasCtl) writeModelRefStatus(ctx context.Context, k key, ref *unstructured.Unstructured, status map[string]any, old any, runtimeOK bool, runtimeReason, runtimeMsg string) error {
	gen := ref.GetGeneration()
	paired := c.governed(k.Namespace, k.Name)
	gov := cond("GovernanceAttached", true, "GovernancePaired", "an active MaaSSubscription and MaaSAuthPolicy reference this model").gen(gen)
	if !paired {
		gov = cond("GovernanceAttached", false, "NoPairingFound", "awaiting governance pairing: no active MaaSSubscription and MaaSAuthPolicy pair references this model").gen(gen)
	}
	rt := cond("RuntimeReady", runtimeOK, runtimeReason, runtimeMsg).gen(gen)
	var ready condition
	switch {
	case runtimeOK && paired:
		status["phase"] = "Ready"
		ready = cond("Ready", true, "Reconciled", "model is governed and serving").gen(gen)
	case paired:
		status["phase"] = "Unhealthy"
		ready = cond("Ready", false, "BackendNotReady", runtimeMsg).gen(gen)
	case !runtimeOK:
		status["phase"] = "Pending"
		ready = cond("Ready", false, "BackendNotReady", runtimeMsg).gen(gen)
	default:
		status["phase"] = "Pending"
		ready = cond("Ready", false, "NoPairingFound", gov.Message).gen(gen)
	}
	status["conditions"] = conditions(old, ready, gov, rt)
	return c.m.updateStatus(ctx, gvrMaaSModelRef, ref, status)
}
