package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
//     is accepted by a programmed Gateway: RuntimeReady) AND a
//     MaaSAuthPolicy and a MaaSSubscription both reference it
//     (GovernanceAttached, whatever their phase); Pending while either is
//     missing ("Pending = awaiting governance pairing or backend readiness").
//   - MaaSAuthPolicy: no per-model AuthPolicy; every MaaSAuthPolicy
//     converges on one Gateway-level AuthPolicy openshift-ingress/
//     maas-gateway-auth (pkg/controller/maas/maasauthpolicy_controller.go
//     reconcileGatewayAuthPolicy). Phase Active at once (Ready=True
//     Reconciled, ConflictingAuthPolicy=False NoConflict), before Kuadrant
//     enforces anything; Failed when no referenced MaaSModelRef exists.
//   - MaaSSubscription: one TokenRateLimitPolicy maas-trlp-<model> per
//     model, owned by the model's HTTPRoute
//     (pkg/controller/maas/maassubscription_controller.go). Failed
//     (ReconcileFailed; modelRefStatuses reason NotFound) while the model's
//     HTTPRoute is missing, Degraded while its policy is not Accepted,
//     Active once it is.
//     Every subscription carries SpecPriorityDuplicate (True, SharedPriority,
//     naming the peers, while another one has the same spec.priority;
//     False, NoDuplicatePeers, otherwise), re-judged when a subscription
//     of the same priority is created, deleted or given a new spec
//     (priorityDuplicate, subscriptionPeers).
//   - Finalizers maas.opendatahub.io/model-cleanup, authpolicy-cleanup and
//     subscription-cleanup on the three kinds, removed only by the running
//     controller (see finalize).
//   - Watches (SetupWithManager of pkg/controller/maas/*_controller.go;
//     controller_watches_int_test.go "drops HTTPRoute status writes but
//     not label changes"): an update of an HTTPRoute, Gateway or
//     ExternalModel requeues only when its generation, labels or
//     annotations change or its deletion starts, never on a status write
//     (objectChanged); an LLMInferenceService on generation or Ready
//     status. cmd/manager/main.go sets no SyncPeriod (controller-runtime's
//     default, 10 h), and those predicates drop resync events anyway: no
//     periodic requeue is simulated.
//
// Measured against the real v0.2.1 on the same CRDs (issue 18, 2026-12-01).
type maasCtl struct {
	m                     *manager
	provider, model, ref  *reconciler
	authPolicy, subscript *reconciler
	legacy                *reconciler

	// written remembers, per object applySpec wrote, the spec it wrote
	// and the resourceVersion the API server answered (writtenSpec).
	writtenMu sync.Mutex
	written   map[string]writtenSpec
}

// writtenSpec is what applySpec last wrote to one object: the desired
// spec (its JSON) and the resourceVersion of the API server's answer.
type writtenSpec struct{ spec, rv string }

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
			{gvr: gvrHTTPRoute, mapFn: ownerKeys("ExternalModel"), changed: objectChanged},
		},
		reconcile: c.reconcileModel,
	}
	c.ref = &reconciler{
		name: "maas/maasmodelref", delayKey: MaaS, primary: gvrMaaSModelRef,
		watches: []watch{
			{gvr: gvrHTTPRoute, mapFn: m.allOf(gvrMaaSModelRef, true), changed: objectChanged},
			{gvr: gvrGateway, mapFn: m.allOf(gvrMaaSModelRef, false), changed: objectChanged},
			{gvr: gvrMaaSAuthPolicy, mapFn: referencedRefs},
			{gvr: gvrMaaSSubscription, mapFn: referencedRefs},
			c.maasAPIWatch(gvrMaaSModelRef),
		},
		reconcile: c.reconcileRef,
	}
	c.authPolicy = &reconciler{
		name: "maas/maasauthpolicy", delayKey: MaaS, primary: gvrMaaSAuthPolicy,
		watches: []watch{
			{gvr: gvrMaaSModelRef, mapFn: m.referencing(gvrMaaSAuthPolicy, refName)},
			{gvr: gvrAuthPolicy, mapFn: m.allOf(gvrMaaSAuthPolicy, false)},
			{gvr: gvrGateway, mapFn: m.allOf(gvrMaaSAuthPolicy, false), changed: objectChanged},
			c.maasAPIWatch(gvrMaaSAuthPolicy),
		},
		reconcile: c.reconcileAuthPolicy,
	}
	c.subscript = &reconciler{
		name: "maas/maassubscription", delayKey: MaaS, primary: gvrMaaSSubscription,
		watches: []watch{
			{gvr: gvrMaaSModelRef, mapFn: m.referencing(gvrMaaSSubscription, refName)},
			{gvr: gvrTokenPolicy, mapFn: m.referencing(gvrMaaSSubscription, trlpModel)},
			{gvr: gvrHTTPRoute, mapFn: c.routeSubscriptions, changed: objectChanged},
			// duplicatePriorityScanHandler: a subscription created,
			// deleted or given a new spec re-judges the SpecPriorityDuplicate
			// of the subscriptions it can change (see subscriptionPeers).
			{gvr: gvrMaaSSubscription, mapFn: c.subscriptionPeers, changed: generationOrDeletion},
			c.maasAPIWatch(gvrMaaSSubscription),
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

// routeSubscriptions maps an HTTPRoute event to the MaaSSubscriptions that
// reference a MaaSModelRef existing in the route's namespace, as
// maas-controller's mapHTTPRouteToMaaSSubscriptions does
// (maassubscription_controller.go: it lists the MaaSModelRefs of the
// route's namespace, then the subscriptions naming any of them), rather
// than every subscription of the cluster.
func (c *maasCtl) routeSubscriptions(u *unstructured.Unstructured) []key {
	seen := map[key]bool{}
	var out []key
	for _, ref := range c.m.list(gvrMaaSModelRef, u.GetNamespace()) {
		for _, s := range c.m.byIndex(gvrMaaSSubscription, indexModelRefs, modelRefKey(ref.GetNamespace(), ref.GetName())) {
			if k := keyOf(s); !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// subscriptionPeers maps an event on a MaaSSubscription (created, deleted,
// its spec changed; old and new object both, see updateHandler) to the
// subscriptions whose reconcile reads it: those with the same spec.priority
// (the peers of priorityDuplicate) and those naming one of its models (the
// model's TokenRateLimitPolicy aggregates every subscription of the model,
// applyTokenPolicy). No other subscription's status depends on it.
// maas-controller's duplicatePriorityScanHandler (maassubscription_controller.go)
// enqueues no reconcile at all: it patches only the SpecPriorityDuplicate
// condition, which changes only on subscriptions of the same priority.
func (c *maasCtl) subscriptionPeers(u *unstructured.Unstructured) []key {
	seen := map[key]bool{}
	var out []key
	add := func(l []*unstructured.Unstructured) {
		for _, s := range l {
			if k := keyOf(s); !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	add([]*unstructured.Unstructured{u})
	add(c.m.byIndex(gvrMaaSSubscription, indexPriority, priorityKey(u)))
	refs, _ := modelRefIndex(u)
	for _, r := range refs {
		add(c.m.byIndex(gvrMaaSSubscription, indexModelRefs, r))
	}
	return out
}

// refName names the model a MaaSModelRef event is about: the ref itself.
func refName(u *unstructured.Unstructured) (ns, name string) { return u.GetNamespace(), u.GetName() }

// trlpModel names the model a TokenRateLimitPolicy is generated for (its
// model label, maas-trlp-<model>); "" (every subscription) without one.
func trlpModel(u *unstructured.Unstructured) (ns, name string) {
	return u.GetNamespace(), u.GetLabels()[maasModelLabel]
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
//
// The API server adds the CRD's defaults to what it stores (the
// AuthPolicy's metadata http contentType, cache TTLs, priorities), so a
// desired spec without them never equals the live one. The object is
// then not written again while it is exactly what the last write of the
// same spec made (same resourceVersion): such an Update changes nothing
// (the API server keeps the resourceVersion), and the Gateway-level
// AuthPolicy, written on every MaaSAuthPolicy's reconcile, took 2,182 of
// them at 1,000 models (issue 16). Any change by anyone else gives the
// object a new resourceVersion, and the spec is compared and written
// again as before.
func (c *maasCtl) applySpec(ctx context.Context, g schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	key := g.String() + " " + obj.GetNamespace() + "/" + obj.GetName()
	spec, _ := obj.Object["spec"].(map[string]any)
	specJSON, _ := json.Marshal(spec)
	live := c.m.get(g, obj.GetNamespace(), obj.GetName())
	if live == nil {
		out, err := c.m.create(ctx, g, obj)
		if err == nil {
			c.wrote(key, string(specJSON), out)
		}
		return err
	}
	c.writtenMu.Lock()
	w, ok := c.written[key]
	c.writtenMu.Unlock()
	if ok && w.spec == string(specJSON) && w.rv == live.GetResourceVersion() {
		return nil
	}
	if ns, err := normalize(spec); err == nil && equalJSON(live.Object["spec"], ns) {
		return nil
	}
	u := live.DeepCopy()
	u.Object["spec"] = spec
	u.SetManagedFields(nil) // the API server keeps the live ones (see manager.writeStatus)
	out, err := c.m.dyn.Resource(g).Namespace(obj.GetNamespace()).Update(ctx, u, metav1.UpdateOptions{FieldManager: "maasctl-sim"})
	if err != nil {
		return fmt.Errorf("update %s %s: %w", g.Resource, keyOf(obj), err)
	}
	c.wrote(key, string(specJSON), out)
	return nil
}

// wrote records that spec was written to the object of key and the API
// server answered with out.
func (c *maasCtl) wrote(key, spec string, out *unstructured.Unstructured) {
	if out == nil {
		return
	}
	c.writtenMu.Lock()
	defer c.writtenMu.Unlock()
	if c.written == nil {
		c.written = map[string]writtenSpec{}
	}
	c.written[key] = writtenSpec{spec: spec, rv: out.GetResourceVersion()}
}

// governed reports whether a MaaSAuthPolicy and a MaaSSubscription both
// reference model ns/name. maas-controller v0.2.1 pairs them whatever their
// phase (measured, issue 18: GovernancePaired while the subscription was
// Failed).
func (c *maasCtl) governed(ns, name string) bool {
	refers := func(g schema.GroupVersionResource) bool {
		for _, o := range c.m.byIndex(g, indexModelRefs, modelRefKey(ns, name)) {
			if o.GetDeletionTimestamp() == nil {
				return true
			}
		}
		return false
	}
	return refers(gvrMaaSAuthPolicy) && refers(gvrMaaSSubscription)
}

func (c *maasCtl) reconcileRef(ctx context.Context, k key) error {
	m := c.m
	ref := m.get(gvrMaaSModelRef, k.Namespace, k.Name)
	if ref == nil {
		return nil
	}
	ref, err := c.finalize(ctx, gvrMaaSModelRef, ref, finalizerModelRef, nil)
	if ref == nil || err != nil {
		return err
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
	if !c.m.observeChanged(c.ref, emGVR, m.allOf(gvrMaaSModelRef, true), objectChanged, k) {
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
	for _, p := range sliceView(route, "status", "parents") {
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
		for _, li := range sliceView(gw, "spec", "listeners") {
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

// The MaaS controller's finalizers (maas-controller v0.2.1,
// pkg/controller/maas/maasmodelref_controller.go,
// maasauthpolicy_controller.go maasAuthPolicyFinalizer,
// maassubscription_controller.go maasSubscriptionFinalizer): added on the
// first reconcile, removed by the controller after its cleanup when the
// object is deleted. Nobody else removes them: with the controller gone
// (its DataScienceCluster deleted first) a deleted MaaS object stays.
const (
	finalizerModelRef     = "maas.opendatahub.io/model-cleanup"
	finalizerAuthPolicy   = "maas.opendatahub.io/authpolicy-cleanup"
	finalizerSubscription = "maas.opendatahub.io/subscription-cleanup"
)

// The one Gateway-level AuthPolicy every MaaSAuthPolicy converges on
// (maas-controller v0.2.1 pkg/controller/maas/maasauthpolicy_controller.go:
// maasGatewayAuthPolicyName, reconcileGatewayAuthPolicy,
// buildGatewayAuthPolicySpec). No per-model AuthPolicy is generated:
// reconcileModelAuthPolicies only deletes legacy maas-auth-<model> ones.
const (
	gatewayAuthPolicyName    = "maas-gateway-auth"
	gatewayAuthPartOf        = "maas-gateway-auth"
	gatewayAuthComponent     = "gateway-auth"
	maasPartOfLabel          = "app.kubernetes.io/part-of"
	maasComponentLabel       = "app.kubernetes.io/component"
	trlpPartOf               = "maas-subscription"
	trlpComponent            = "token-rate-limit-policy"
	trlpSubscriptionsAnnot   = "maas.opendatahub.io/subscriptions"
	conditionConflictingAuth = "ConflictingAuthPolicy"
)

// running reports whether the MaaS controller runs: the RHOAI operator
// deploys it with maas-api from one manifest set, both owned by the
// DataScienceCluster, so it runs while maas-api's Deployment exists and is
// not being deleted.
func (c *maasCtl) running() bool {
	ns := aiGatewayInfraNS
	if c.m.opts.RHOAIVersion != RHOAI35 {
		ns = defaultAppsNamespace
		if l := c.m.list(gvrDSCI, ""); len(l) > 0 {
			if a := str(l[0], "spec", "applicationsNamespace"); a != "" {
				ns = a
			}
		}
	}
	d := c.m.get(gvrDeployment, ns, maasAPIDeployment)
	return d != nil && d.GetDeletionTimestamp() == nil
}

// maasAPIWatch requeues every object of g when maas-api's Deployment
// changes (the controller starting or stopping).
func (c *maasCtl) maasAPIWatch(g schema.GroupVersionResource) watch {
	return watch{gvr: gvrDeployment, mapFn: func(u *unstructured.Unstructured) []key {
		if u.GetName() != maasAPIDeployment {
			return nil
		}
		return c.m.allOf(g, false)(u)
	}}
}

// finalize handles obj's finalizer fin: on a deleted object it runs
// cleanup and removes fin, but only while the controller runs (see
// running); on a live one it adds fin. It returns the object to continue
// with (nil when the reconcile is over: the object is being deleted).
//
// Live objects are reconciled even without maas-api: fixtures without
// RHOAI (the tier-migration tests) create MaaS objects directly; they get
// no finalizer then. Adding and removing finalizers needs the deployed
// controller, and that is what the uninstall order depends on.
func (c *maasCtl) finalize(ctx context.Context, g schema.GroupVersionResource, obj *unstructured.Unstructured, fin string, cleanup func() error) (*unstructured.Unstructured, error) {
	fins := obj.GetFinalizers()
	has := slices.Contains(fins, fin)
	if obj.GetDeletionTimestamp() != nil {
		if !has || !c.running() {
			return nil, nil
		}
		if cleanup != nil {
			if err := cleanup(); err != nil {
				return nil, err
			}
		}
		u := obj.DeepCopy()
		u.SetFinalizers(slices.DeleteFunc(slices.Clone(fins), func(f string) bool { return f == fin }))
		u.SetManagedFields(nil) // the API server keeps the live ones (see manager.writeStatus)
		if _, err := c.m.dyn.Resource(g).Namespace(obj.GetNamespace()).Update(ctx, u, metaUpdate); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("remove finalizer %s of %s %s: %w", fin, g.Resource, keyOf(obj), err)
		}
		return nil, nil
	}
	if has || !c.running() {
		// Without the deployed controller (a fixture without RHOAI) the
		// object is reconciled but gets no finalizer, so that deleting it
		// does not hang on one nobody could remove.
		return obj, nil
	}
	u := obj.DeepCopy()
	u.SetFinalizers(append(slices.Clone(fins), fin))
	u.SetManagedFields(nil) // the API server keeps the live ones (see manager.writeStatus)
	out, err := c.m.dyn.Resource(g).Namespace(obj.GetNamespace()).Update(ctx, u, metaUpdate)
	if err != nil {
		return nil, fmt.Errorf("add finalizer %s to %s %s: %w", fin, g.Resource, keyOf(obj), err)
	}
	return out, nil
}

// routeOf resolves the HTTPRoute of MaaSModelRef ns/name the way
// maas-controller's findHTTPRouteForModel does (pkg/controller/maas
// providers.go): the MaaSModelRef (not being deleted), its backend's route
// (an ExternalModel's status.httpRouteName, named after the model on
// 3.3/3.4; an LLMInferenceService's labelled route as the MaaSModelRef
// status records it), and that the HTTPRoute exists. reason is
// "NotFound" for a missing MaaSModelRef, "BackendNotReady" for a missing
// route; msg says which.
func (c *maasCtl) routeOf(ns, name string) (route, reason, msg string) {
	m := c.m
	ref := m.get(gvrMaaSModelRef, ns, name)
	if ref == nil || ref.GetDeletionTimestamp() != nil {
		return "", "NotFound", fmt.Sprintf("MaaSModelRef %s/%s not found", ns, name)
	}
	switch str(ref, "spec", "modelRef", "kind") {
	case "ExternalModel":
		if em := m.get(c.externalModelGVR(), ns, str(ref, "spec", "modelRef", "name")); em != nil {
			route = str(em, "status", "httpRouteName")
			if c.externalModelGVR() == gvrLegacyExternalMdl {
				route = em.GetName()
			}
		}
	default:
		route = str(ref, "status", "httpRouteName")
	}
	if route == "" || m.get(gvrHTTPRoute, ns, route) == nil {
		return "", "BackendNotReady", fmt.Sprintf("HTTPRoute not found yet for model %s/%s; TokenRateLimitPolicy cannot be created", ns, name)
	}
	return route, "", ""
}

func (c *maasCtl) reconcileAuthPolicy(ctx context.Context, k key) error {
	m := c.m
	pol := m.get(gvrMaaSAuthPolicy, k.Namespace, k.Name)
	if pol == nil {
		return nil
	}
	// Deleting a MaaSAuthPolicy leaves the Gateway-level policy (it is
	// shared, owned by the Gateway) but renders it again without the
	// deleted policy's subjects (handleDeletion).
	pol, err := c.finalize(ctx, gvrMaaSAuthPolicy, pol, finalizerAuthPolicy, func() error {
		// The policy's grants leave the Gateway policy's access map.
		return c.applyGatewayAuthPolicy(ctx)
	})
	if pol == nil || err != nil {
		return err
	}
	if failed, err := c.injectedFailure(ctx, gvrMaaSAuthPolicy, pol); failed || err != nil {
		return err
	}
	// The Gateway AuthPolicy is made at once; the status waits for the
	// MaaS delay (hold).
	ctx = m.hold(ctx, c.authPolicy, pol, "policy")
	if err := c.applyGatewayAuthPolicy(ctx); err != nil {
		return err
	}
	// deriveAuthPolicyPhase: Failed when no referenced MaaSModelRef exists,
	// Degraded when some are missing, otherwise Active at once: the phase
	// does not wait for Kuadrant to enforce the Gateway policy.
	var missing []string
	refs := sliceOf(pol, "spec", "modelRefs")
	for _, r := range refs {
		rm, _ := r.(map[string]any)
		if ref := m.get(gvrMaaSModelRef, mstr(rm, "namespace"), mstr(rm, "name")); ref == nil {
			missing = append(missing, mstr(rm, "namespace")+"/"+mstr(rm, "name"))
		}
	}
	gen := pol.GetGeneration()
	phase, ready := "Active", cond("Ready", true, "Reconciled", "successfully reconciled").gen(gen)
	switch {
	case len(missing) == len(refs):
		phase = "Failed"
		ready = cond("Ready", false, "ReconcileFailed", fmt.Sprintf("all %d model references are invalid or missing: %s", len(refs), strings.Join(missing, ", "))).gen(gen)
	case len(missing) > 0:
		phase = "Degraded"
		ready = cond("Ready", true, "Reconciled", fmt.Sprintf("%d of %d model references are missing: %s", len(missing), len(refs), strings.Join(missing, ", "))).gen(gen)
	}
	noConflict := cond(conditionConflictingAuth, false, "NoConflict", "no conflicting AuthPolicies on MaaS auth surfaces").gen(gen)
	return m.updateStatus(ctx, gvrMaaSAuthPolicy, pol, map[string]any{
		"phase":      phase,
		"conditions": conditions(statusConditions(pol), ready, noConflict),
	})
}

// applyGatewayAuthPolicy creates or updates openshift-ingress/
// maas-gateway-auth in the shape of maas-controller's
// buildGatewayAuthPolicySpec (pkg/controller/maas/
// maasauthpolicy_controller.go): it targets the MaaS Gateway (owned by it
// once the Gateway exists); authenticates sk-oai- API keys (plain) and
// other bearer tokens through a TokenReview; fetches the key's identity
// from maas-api's /internal/v1/api-keys/validate and, on model paths, the
// subscription from /internal/v1/subscriptions/select; and authorizes by
// three OPA rules: the key is valid, the subscription was selected and is
// Active or Degraded, and the caller's user or one of its groups is listed
// for the model in the access map aggregated from every MaaSAuthPolicy
// (gatewayModelAccess); and two deny rules: an sk-oai- key on the API-key
// management paths, and a request that sends X-MaaS-Username or
// X-MaaS-Group itself. The identity filter (userid, groups,
// selected_subscription_key, ...) is what the TokenRateLimitPolicies'
// predicates read; the X-MaaS-Username, -Group and -Subscription headers
// it adds to an allowed request are what maas-api reads of its caller.
// Denials are 401 "Authentication required" and 403 with the subscription
// selector's message.
//
// The shape is that of the newest version of the controller in the public
// sources consulted; it is not pinned to the v0.2.1 tag named above, whose
// tree the stored sources do not hold (searched 2026-12-06: neither
// opendatahub-io/models-as-a-service nor its red-hat-data-services mirror
// at a tagged commit). The project's release notes credit to v0.2.1
// changes this shape lacks, which later trees have: model access decided
// by maas-api's subscription-selection answer (accessAllowed) instead of
// the access map in the Rego; 403 for an sk-oai- key on the API-key
// management paths and for a request that sends X-MaaS-Username or
// -Group itself; JSON denial bodies. The two deny rules are simulated
// (deny-api-key-management, deny-client-identity-headers; the simulator is
// never more lenient); accessAllowed, which moves the access decision to
// maas-api, and the bodies, which change no status, are not.
//
// Left out, so the simulation is never more lenient: the evaluators'
// cache blocks (the controller's metadata and authz cache TTLs; a cached
// validation would let a revoked key pass until it expires), the OIDC
// identity (no OIDC provider is configured here) and the multi-tenant
// isolation rule (a stub that always allows).
func (c *maasCtl) applyGatewayAuthPolicy(ctx context.Context) error {
	api := "https://maas-api." + aiGatewayInfraNS + ".svc.cluster.local:8443/internal/v1"
	meta := map[string]any{
		"name": gatewayAuthPolicyName, "namespace": maasGatewayNamespace,
		"labels": map[string]any{maasManagedByLabel: maasControllerName, maasPartOfLabel: gatewayAuthPartOf, maasComponentLabel: gatewayAuthComponent},
	}
	gw := c.m.get(gvrGateway, maasGatewayNamespace, maasGatewayName)
	if gw != nil {
		meta["ownerReferences"] = []any{ownerRef(gw, false)}
	}
	access, err := json.Marshal(c.gatewayModelAccess())
	if err != nil {
		return fmt.Errorf("gateway AuthPolicy: model access map: %w", err)
	}
	isKey := []any{map[string]any{"selector": "request.headers.authorization", "operator": "matches", "value": "^Bearer sk-oai-.*"}}
	notKey := []any{map[string]any{"predicate": `!request.headers.authorization.startsWith("Bearer sk-oai-")`}}
	onModel := []any{map[string]any{"predicate": celModelIdentityAvailable}}
	want := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kuadrant.io/v1", "kind": "AuthPolicy", "metadata": meta,
		"spec": map[string]any{
			"targetRef": map[string]any{"group": gatewayAPIGroup, "kind": "Gateway", "name": maasGatewayName},
			"defaults": map[string]any{
				"when": []any{map[string]any{"predicate": `request.path != "/maas-api/health" || request.method != "GET"`}},
				"rules": map[string]any{
					"authentication": map[string]any{
						"api-keys": map[string]any{
							"plain": map[string]any{"selector": "request.headers.authorization"},
							"when":  isKey, "metrics": false, "priority": int64(0),
						},
						"openshift-identities": map[string]any{
							"kubernetesTokenReview": map[string]any{"audiences": []any{"https://kubernetes.default.svc"}},
							"when":                  notKey, "metrics": false, "priority": int64(2),
						},
					},
					"metadata": map[string]any{
						"apiKeyValidation": map[string]any{
							"when": isKey,
							"http": map[string]any{"url": api + "/api-keys/validate", "method": "POST", "contentType": "application/json",
								"body": map[string]any{"expression": `{"key": request.headers.authorization.replace("Bearer ", "")}`}},
							"metrics": false, "priority": int64(0),
						},
						"subscription-info": map[string]any{
							"when": onModel,
							"http": map[string]any{"url": api + "/subscriptions/select", "method": "POST", "contentType": "application/json",
								"body": map[string]any{"expression": `{"groups": ` + celGroups + `, "username": ` + celUsername +
									`, "requestedSubscription": ` + celSubscription + `, "requestedModel": ` + celModelIdentity + `}`}},
							"metrics": false, "priority": int64(1),
						},
					},
					"authorization": map[string]any{
						"auth-valid": map[string]any{
							"opa":     map[string]any{"rego": "allow {\n  object.get(input.auth.metadata, \"apiKeyValidation\", {})\n  input.auth.metadata.apiKeyValidation.valid == true\n}\nallow {\n  not input.auth.metadata.apiKeyValidation\n}"},
							"metrics": false, "priority": int64(0),
						},
						"subscription-valid": map[string]any{
							"when":    onModel,
							"opa":     map[string]any{"rego": subscriptionValidRego},
							"metrics": false, "priority": int64(0),
						},
						"require-group-membership": map[string]any{
							"opa":     map[string]any{"rego": c.groupMembershipRego(string(access))},
							"metrics": false, "priority": int64(0),
						},
						// An API key cannot manage API keys (only a user's
						// token can), and a client cannot send the identity
						// headers the policy adds (maas-api trusts them):
						// each denies with a pattern that never holds.
						"deny-api-key-management": map[string]any{
							"when":            []any{map[string]any{"predicate": `request.path.startsWith("/maas-api/v1/api-keys") && "authorization" in request.headers && request.headers.authorization.startsWith("Bearer sk-oai-")`}},
							"patternMatching": map[string]any{"patterns": []any{map[string]any{"predicate": "false"}}},
							"metrics":         false, "priority": int64(0),
						},
						"deny-client-identity-headers": map[string]any{
							"when":            []any{map[string]any{"predicate": `"x-maas-username" in request.headers || "x-maas-group" in request.headers`}},
							"patternMatching": map[string]any{"patterns": []any{map[string]any{"predicate": "false"}}},
							"metrics":         false, "priority": int64(0),
						},
					},
					"response": map[string]any{
						"success": map[string]any{
							// What maas-api reads of the caller (X-MaaS-*),
							// injected into the request on the way in.
							"headers": map[string]any{
								"X-MaaS-Username":       map[string]any{"when": isKey, "plain": map[string]any{"selector": "auth.metadata.apiKeyValidation.username"}, "metrics": false, "priority": int64(0)},
								"X-MaaS-Username-Token": map[string]any{"when": notKey, "key": "X-MaaS-Username", "plain": map[string]any{"expression": "auth.identity.user.username"}, "metrics": false, "priority": int64(1)},
								"X-MaaS-Group": map[string]any{"when": isKey, "metrics": false, "priority": int64(0),
									"plain": map[string]any{"expression": `size(auth.metadata.apiKeyValidation.groups) > 0 ? '["' + auth.metadata.apiKeyValidation.groups.join('","') + '"]' : '[]'`}},
								"X-MaaS-Group-Token": map[string]any{"when": notKey, "key": "X-MaaS-Group", "metrics": false, "priority": int64(1),
									"plain": map[string]any{"expression": `'["' + auth.identity.user.groups.join('","') + '"]'`}},
								"X-MaaS-Subscription": map[string]any{"metrics": false, "priority": int64(0),
									"when":  []any{map[string]any{"predicate": `(has(auth.metadata) && has(auth.metadata.apiKeyValidation) && auth.metadata.apiKeyValidation.subscription != "") || "x-maas-subscription" in request.headers`}},
									"plain": map[string]any{"expression": celSubscription}},
							},
							"filters": map[string]any{
								"identity": map[string]any{
									"json": map[string]any{"properties": map[string]any{
										"userid":                map[string]any{"expression": celUsername},
										"groups":                map[string]any{"expression": celGroups},
										"keyId":                 map[string]any{"expression": `(has(auth.metadata) && has(auth.metadata.apiKeyValidation)) ? auth.metadata.apiKeyValidation.keyId : ""`},
										"selected_subscription": map[string]any{"expression": `has(auth.metadata["subscription-info"].name) ? auth.metadata["subscription-info"].name : ""`},
										"selected_subscription_key": map[string]any{"expression": `(has(auth.metadata["subscription-info"].namespace) && has(auth.metadata["subscription-info"].name)) ? ` +
											`auth.metadata["subscription-info"].namespace + "/" + auth.metadata["subscription-info"].name + "@" + ` + celModelIdentity + ` : ""`},
									}},
									"metrics": true, "priority": int64(0),
								},
							},
						},
						"unauthenticated": map[string]any{"code": int64(401), "message": map[string]any{"value": "Authentication required"}},
						"unauthorized": map[string]any{
							"code": int64(403),
							"body": map[string]any{"expression": `has(auth.metadata["subscription-info"].message) ? auth.metadata["subscription-info"].message : "Access denied"`},
							"headers": map[string]any{
								"x-ext-auth-reason": map[string]any{"expression": `has(auth.metadata["subscription-info"].error) ? auth.metadata["subscription-info"].error : "unauthorized"`},
								"content-type":      map[string]any{"value": "text/plain"},
							},
						},
					},
				},
			},
		},
	}}
	live := c.m.get(gvrAuthPolicy, maasGatewayNamespace, gatewayAuthPolicyName)
	if live != nil && gw != nil && !ownedBy(live, gw.GetUID()) {
		u := live.DeepCopy()
		u.SetOwnerReferences(append(u.GetOwnerReferences(), metav1.OwnerReference{
			APIVersion: gw.GetAPIVersion(), Kind: gw.GetKind(), Name: gw.GetName(), UID: gw.GetUID(),
		}))
		if _, err := c.m.dyn.Resource(gvrAuthPolicy).Namespace(maasGatewayNamespace).Update(ctx, u, metaUpdate); err != nil {
			return fmt.Errorf("set owner of authpolicies %s/%s: %w", maasGatewayNamespace, gatewayAuthPolicyName, err)
		}
		return nil // the update requeues; the spec is compared then
	}
	return c.applySpec(ctx, gvrAuthPolicy, want)
}

// modelSubjects is one model's entry in the gateway policy's access map:
// the users and groups any MaaSAuthPolicy grants it (maas-controller
// modelSubjectAllowlist).
type modelSubjects struct {
	Users  []string `json:"users"`
	Groups []string `json:"groups"`
}

// gatewayModelAccess aggregates the subjects of every MaaSAuthPolicy by
// model "namespace/name" (maas-controller aggregateModelSubjectAllowlists),
// sorted and without duplicates so the rendered policy is stable. Policies
// being deleted, and those the controller failed (phase Failed or Invalid),
// grant nothing.
func (c *maasCtl) gatewayModelAccess() map[string]*modelSubjects {
	out := map[string]*modelSubjects{}
	for _, p := range c.m.list(gvrMaaSAuthPolicy, "") {
		if p.GetDeletionTimestamp() != nil {
			continue
		}
		if ph := str(p, "status", "phase"); ph == "Failed" || ph == "Invalid" {
			continue
		}
		users, _, _ := unstructured.NestedStringSlice(p.Object, "spec", "subjects", "users")
		var groups []string
		for _, g := range sliceOf(p, "spec", "subjects", "groups") {
			gm, _ := g.(map[string]any)
			if n := mstr(gm, "name"); n != "" {
				groups = append(groups, n)
			}
		}
		for _, r := range sliceOf(p, "spec", "modelRefs") {
			rm, _ := r.(map[string]any)
			id := mstr(rm, "namespace") + "/" + mstr(rm, "name")
			e := out[id]
			if e == nil {
				e = &modelSubjects{Users: []string{}, Groups: []string{}}
				out[id] = e
			}
			e.Users = append(e.Users, users...)
			e.Groups = append(e.Groups, groups...)
		}
	}
	for _, e := range out {
		slices.Sort(e.Users)
		e.Users = slices.Compact(e.Users)
		slices.Sort(e.Groups)
		e.Groups = slices.Compact(e.Groups)
	}
	return out
}

// The CEL expressions of the gateway policy (maas-controller
// maasauthpolicy_controller.go: celUsername, celGroups, celSubscription,
// celModelIdentity). An API key's identity is what maas-api's validation
// returned (the key's owner and the groups snapshot taken when it was
// minted, and the subscription bound to it); another token's is the
// TokenReview's user. The model is the first two path segments of a
// path-routed inference call (/<namespace>/<model>/...), or the
// X-Gateway-Model-Name header that body-based routing sets.
const (
	celFromKey      = `(has(auth.metadata) && has(auth.metadata.apiKeyValidation))`
	celUsername     = celFromKey + ` ? auth.metadata.apiKeyValidation.username : auth.identity.user.username`
	celGroups       = celFromKey + ` ? auth.metadata.apiKeyValidation.groups : auth.identity.user.groups`
	celSubscription = celFromKey + ` ? auth.metadata.apiKeyValidation.subscription : ("x-maas-subscription" in request.headers ? request.headers["x-maas-subscription"] : "")`

	celPathParts              = `request.path.split("/").filter(x, x != "")`
	celPathModel              = `size(` + celPathParts + `) >= 2 && ` + celPathParts + `[0] != "v1" && ` + celPathParts + `[0] != "maas-api"`
	celModelIdentityAvailable = `(` + celPathModel + ` || "x-gateway-model-name" in request.headers)`
	celModelIdentity          = `(` + celPathModel + ` ? ` + celPathParts + `[0] + "/" + ` + celPathParts + `[1] : ("x-gateway-model-name" in request.headers ? request.headers["x-gateway-model-name"] : ""))`
)

// subscriptionValidRego allows a model call only with a subscription the
// selector returned without error, Active or Degraded, not being deleted.
const subscriptionValidRego = `allow {
  object.get(input.auth.metadata["subscription-info"], "name", "") != ""
  object.get(input.auth.metadata["subscription-info"], "error", "") == ""
  phase := object.get(input.auth.metadata["subscription-info"], "phase", "")
  any([phase == "Active", phase == "Degraded"])
  object.get(input.auth.metadata["subscription-info"], "deletionTimestamp", "") == ""
}`

// groupMembershipRego renders the rule with the access map; with
// Faults.GatewayAuthPolicyRuleInvalid the rule ends in a body that is never
// closed, which Rego does not compile.
func (c *maasCtl) groupMembershipRego(access string) string {
	rego := fmt.Sprintf(groupMembershipRego, access)
	if c.m.opts.Faults.GatewayAuthPolicyRuleInvalid {
		rego += "\nallow {\n  model_identity != \"\"\n"
	}
	return rego
}

// tokenPolicyTarget is the HTTPRoute a model's TokenRateLimitPolicy
// targets: the model's route, or with
// Faults.TokenRateLimitPolicyTargetMissing one that does not exist.
func (c *maasCtl) tokenPolicyTarget(route string) string {
	if c.m.opts.Faults.TokenRateLimitPolicyTargetMissing {
		return route + "-missing"
	}
	return route
}

// groupMembershipRego (a fmt format: %s is the JSON access map) allows
// calls that name no model (listing, maas-api), and a model call when the
// caller's user or one of its groups is listed for that model; a model no
// MaaSAuthPolicy lists is denied.
const groupMembershipRego = `
model_access := %s

request_path := object.get(input.context.request.http, "path", "")
request_headers := object.get(input.context.request.http, "headers", {})
path_parts := [p | p := split(request_path, "/")[_]; p != ""]

path_model := sprintf("%%s/%%s", [path_parts[0], path_parts[1]]) {
  count(path_parts) >= 2
  path_parts[0] != "v1"
  path_parts[0] != "maas-api"
}

model_identity := path_model {
  path_model != ""
} else := object.get(request_headers, "x-gateway-model-name", "")

username := input.auth.metadata.apiKeyValidation.username {
  object.get(input.auth, "metadata", {}).apiKeyValidation.username != ""
} else := input.auth.identity.user.username {
  object.get(input.auth, "identity", {}).user.username != ""
} else := ""

groups := input.auth.metadata.apiKeyValidation.groups {
  object.get(input.auth, "metadata", {}).apiKeyValidation.groups != []
} else := input.auth.identity.user.groups {
  object.get(input.auth, "identity", {}).user.groups != []
} else := []

model_rules := object.get(model_access, model_identity, null)

allow {
  model_identity == ""
}

allow {
  model_rules != null
  model_rules.users[_] == username
}

allow {
  model_rules != null
  g := groups[_]
  model_rules.groups[_] == g
}
`

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
	if sub == nil {
		return nil
	}
	// handleDeletion: each model's aggregated TokenRateLimitPolicy is
	// deleted (the remaining subscriptions rebuild it), then the finalizer
	// goes.
	cleanup := func() error {
		for _, r := range sliceOf(sub, "spec", "modelRefs") {
			rm, _ := r.(map[string]any)
			err := m.dyn.Resource(gvrTokenPolicy).Namespace(mstr(rm, "namespace")).Delete(ctx, "maas-trlp-"+mstr(rm, "name"), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete tokenratelimitpolicies %s/maas-trlp-%s: %w", mstr(rm, "namespace"), mstr(rm, "name"), err)
			}
		}
		return nil
	}
	sub, err := c.finalize(ctx, gvrMaaSSubscription, sub, finalizerSubscription, cleanup)
	if sub == nil || err != nil {
		return err
	}
	if failed, err := c.injectedFailure(ctx, gvrMaaSSubscription, sub); failed || err != nil {
		return err
	}
	// The TokenRateLimitPolicies are made at once (Kuadrant's acceptance
	// runs alongside); the status waits for the MaaS delay (hold).
	ctx = m.hold(ctx, c.subscript, sub, "subscription")
	var refStatuses, trl []any
	valid, refs := 0, sliceOf(sub, "spec", "modelRefs")
	anyRef := false
	var notAccepted []string
	for _, r := range refs {
		rm, _ := r.(map[string]any)
		ns, name := mstr(rm, "namespace"), mstr(rm, "name")
		pname := "maas-trlp-" + name
		route, reason, msg := c.routeOf(ns, name)
		if reason != "NotFound" {
			anyRef = true
		}
		rs := map[string]any{"name": name, "namespace": ns, "ready": false, "reason": "NotFound", "message": msg}
		ts := map[string]any{"name": pname, "namespace": ns, "model": name, "ready": false}
		if route == "" {
			ts["reason"], ts["message"] = "BackendNotReady", msg
			refStatuses, trl = append(refStatuses, rs), append(trl, ts)
			continue
		}
		valid++
		rs["ready"], rs["reason"] = true, "Valid"
		delete(rs, "message")
		if err := c.applyTokenPolicy(ctx, ns, name, route); err != nil {
			return err
		}
		// checkTokenRateLimitHealth: only Accepted is read, not Enforced. A
		// policy the cache does not hold yet (just created) is not healthy
		// either: the subscription is Active only once Kuadrant accepted
		// every policy, never before, so nobody who saw Active sees it turn
		// Degraded when the creation event arrives.
		switch p := m.get(gvrTokenPolicy, ns, pname); {
		case p == nil:
			ts["reason"], ts["message"] = "NotFound", "TokenRateLimitPolicy not created yet"
			notAccepted = append(notAccepted, pname+": not created yet")
		case conditionTrue(p, "Accepted"):
			ts["ready"], ts["reason"] = true, "Accepted"
		default:
			why := "Accepted condition not found"
			if a := findCondition(p, "Accepted"); a != nil {
				why = mstr(a, "message")
			}
			ts["reason"], ts["message"] = "NotAccepted", why
			notAccepted = append(notAccepted, pname+": "+why)
		}
		refStatuses, trl = append(refStatuses, rs), append(trl, ts)
	}
	if !anyRef && len(refs) > 0 {
		// Measured on maas-controller v0.2.1 (issue 18): a subscription
		// whose models do not exist gets no phase and no condition at all
		// (its status update conflicts), so none is written here either.
		return nil
	}
	gen := sub.GetGeneration()
	// deriveFinalPhase and updateStatus: Ready is False (ReconcileFailed)
	// only for Failed; Degraded keeps Ready=True Reconciled.
	phase, ready := "Active", cond("Ready", true, "Reconciled", "successfully reconciled").gen(gen)
	switch {
	case valid == 0:
		phase = "Failed"
		ready = cond("Ready", false, "ReconcileFailed", fmt.Sprintf("all %d model references are invalid or unavailable", len(refs))).gen(gen)
	case valid < len(refs):
		phase = "Degraded"
		ready = cond("Ready", true, "Reconciled", fmt.Sprintf("%d of %d model references are invalid or unavailable", len(refs)-valid, len(refs))).gen(gen)
	case len(notAccepted) > 0:
		phase = "Degraded"
		ready = cond("Ready", true, "Reconciled", fmt.Sprintf("%d of %d TokenRateLimitPolicies not accepted", len(notAccepted), len(trl))).gen(gen)
	}
	st := map[string]any{"phase": phase, "conditions": conditions(statusConditions(sub), ready, c.priorityDuplicate(sub).gen(gen))}
	if len(refStatuses) > 0 {
		st["modelRefStatuses"] = refStatuses
	}
	if len(trl) > 0 {
		st["tokenRateLimitStatuses"] = trl
	}
	return m.updateStatus(ctx, gvrMaaSSubscription, sub, st)
}

// priorityDuplicate is the SpecPriorityDuplicate condition maas-controller
// writes on every MaaSSubscription (maassubscription_controller.go,
// duplicatePriorityScanHandler; ConditionSpecPriorityDuplicate): True with
// reason SharedPriority and the message "spec.priority N is shared with:
// ns/a, ns/b" when another subscription not being deleted has the same
// spec.priority, else False with reason NoDuplicatePeers and no message.
// The peers are judged across all namespaces (the scan of the release that
// keys its map by priority alone; a later one scopes it to a namespace,
// which flags fewer).
func (c *maasCtl) priorityDuplicate(sub *unstructured.Unstructured) condition {
	p, _, _ := unstructured.NestedInt64(sub.Object, "spec", "priority")
	var peers []string
	for _, o := range c.m.byIndex(gvrMaaSSubscription, indexPriority, priorityKey(sub)) {
		if o.GetDeletionTimestamp() != nil || (o.GetNamespace() == sub.GetNamespace() && o.GetName() == sub.GetName()) {
			continue
		}
		peers = append(peers, o.GetNamespace()+"/"+o.GetName())
	}
	if len(peers) == 0 {
		return cond("SpecPriorityDuplicate", false, "NoDuplicatePeers", "")
	}
	sort.Strings(peers)
	return cond("SpecPriorityDuplicate", true, "SharedPriority", fmt.Sprintf("spec.priority %d is shared with: %s", p, strings.Join(peers, ", ")))
}

// applyTokenPolicy creates or updates the TokenRateLimitPolicy of model
// ns/name (maas-controller v0.2.1 pkg/controller/maas/
// maassubscription_controller.go reconcileTRLPForModel): one per model,
// in the route's namespace, owned by the model's HTTPRoute, with one limit
// per MaaSSubscription that lists the model, applying when the
// subscription maas-api selected for the request is that one
// (auth.identity.selected_subscription_key, set by maas-gateway-auth),
// counted per user. Labels and the subscriptions annotation are the real
// controller's.
func (c *maasCtl) applyTokenPolicy(ctx context.Context, ns, name, routeName string) error {
	route := c.m.get(gvrHTTPRoute, ns, routeName)
	limits := map[string]any{}
	var subs []string
	for _, s := range c.m.byIndex(gvrMaaSSubscription, indexModelRefs, modelRefKey(ns, name)) {
		if s.GetDeletionTimestamp() != nil {
			continue
		}
		for _, r := range sliceOf(s, "spec", "modelRefs") {
			rm, _ := r.(map[string]any)
			if mstr(rm, "name") != name || mstr(rm, "namespace") != ns {
				continue
			}
			var rates []any
			tl, _ := rm["tokenRateLimits"].([]any)
			for _, t := range tl {
				tm, _ := t.(map[string]any)
				rates = append(rates, map[string]any{"limit": tm["limit"], "window": tm["window"]})
			}
			if len(rates) == 0 {
				rates = []any{map[string]any{"limit": int64(100), "window": "1m"}}
			}
			subs = append(subs, s.GetName())
			limits[s.GetNamespace()+"-"+s.GetName()+"-"+name+"-tokens"] = map[string]any{
				"rates":    rates,
				"counters": []any{map[string]any{"expression": "auth.identity.userid"}},
				"when": []any{map[string]any{"predicate": fmt.Sprintf(`auth.identity.selected_subscription_key == "%s/%s@%s/%s"`,
					s.GetNamespace(), s.GetName(), ns, name)}},
			}
			break
		}
	}
	sort.Strings(subs)
	meta := map[string]any{
		"name": "maas-trlp-" + name, "namespace": ns,
		"labels": map[string]any{maasModelLabel: name, maasManagedByLabel: maasControllerName,
			maasPartOfLabel: trlpPartOf, maasComponentLabel: trlpComponent},
		"annotations": map[string]any{trlpSubscriptionsAnnot: strings.Join(subs, ",")},
	}
	if route != nil {
		meta["ownerReferences"] = []any{ownerRef(route, true)}
	}
	want := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kuadrant.io/v1alpha1", "kind": "TokenRateLimitPolicy", "metadata": meta,
		"spec": map[string]any{
			"targetRef": map[string]any{"group": gatewayAPIGroup, "kind": "HTTPRoute", "name": c.tokenPolicyTarget(routeName)},
			"limits":    limits,
		},
	}}
	live := c.m.get(gvrTokenPolicy, ns, "maas-trlp-"+name)
	if live != nil && live.GetAnnotations()[trlpSubscriptionsAnnot] != strings.Join(subs, ",") {
		u := live.DeepCopy()
		an := u.GetAnnotations()
		if an == nil {
			an = map[string]string{}
		}
		an[trlpSubscriptionsAnnot] = strings.Join(subs, ",")
		u.SetAnnotations(an)
		u.Object["spec"] = want.Object["spec"]
		if _, err := c.m.dyn.Resource(gvrTokenPolicy).Namespace(ns).Update(ctx, u, metaUpdate); err != nil {
			return fmt.Errorf("update tokenratelimitpolicies %s/maas-trlp-%s: %w", ns, name, err)
		}
		return nil
	}
	return c.applySpec(ctx, gvrTokenPolicy, want)
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
