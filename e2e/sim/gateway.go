package sim

import (
	"context"
	"crypto/tls"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// The simulated OpenShift Gateway API implementation: the ingress operator's
// gatewayclass controller installs OSSM 3 (Istio) for GatewayClasses with
// controllerName openshift.io/gateway-controller/v1, creating the Istio
// control plane (Deployment istiod-openshift-gateway in openshift-ingress);
// istiod then accepts the class and deploys each Gateway as a Deployment
// plus a Service named <gateway>-<class> (OpenShift docs "Gateway API with
// OpenShift Container Platform networking"; openshift/cluster-ingress-operator
// pkg/operator/controller/gatewayclass). Gateway and route status follow the
// Gateway API spec (kubernetes-sigs/gateway-api apis/v1, conformance
// reasons: InvalidCertificateRef for a listener whose Secret is missing,
// PR #1334) and istio/istio pilot/pkg/config/kube/gateway (service type from
// the networking.istio.io/service-type annotation, default LoadBalancer;
// Programmed=False AddressNotAssigned while a LoadBalancer has no address;
// Service ports named after the listeners plus status-port 15021).
type gatewayCtl struct {
	m                *manager
	class, gw, route *reconciler
}

const (
	openshiftGatewayController = "openshift.io/gateway-controller/v1"
	istiodNamespace            = "openshift-ingress"
	istiodDeployment           = "istiod-openshift-gateway"
	serviceTypeAnnotation      = "networking.istio.io/service-type"
	gatewayNameLabel           = "gateway.networking.k8s.io/gateway-name"
	gatewayAPIGroup            = "gateway.networking.k8s.io"
)

func registerGateway(m *manager) {
	g := &gatewayCtl{m: m}
	g.class = &reconciler{
		name: "gateway/gatewayclass", delayKey: Gateway, primary: gvrGatewayClass,
		watches: []watch{
			{gvr: gvrDeployment, mapFn: func(u *unstructured.Unstructured) []key {
				if u.GetNamespace() == istiodNamespace && u.GetName() == istiodDeployment {
					return m.allOf(gvrGatewayClass, false)(u)
				}
				return nil
			}},
			{gvr: gvrNamespace},
		},
		reconcile: g.reconcileClass,
	}
	m.add(g.class)
	g.gw = &reconciler{
		name: "gateway/gateway", delayKey: Gateway, primary: gvrGateway,
		watches: []watch{
			{gvr: gvrGatewayClass, mapFn: m.allOf(gvrGateway, false)},
			{gvr: gvrSecret, mapFn: m.allOf(gvrGateway, true)},
			{gvr: gvrService, mapFn: ownerKeys("Gateway")},
			{gvr: gvrHTTPRoute, mapFn: routeParents},
			{gvr: gvrNamespace, mapFn: m.allOf(gvrGateway, false)},
			{gvr: gvrDeployment},
		},
		reconcile: g.reconcileGateway,
	}
	m.add(g.gw)
	g.route = &reconciler{
		name: "gateway/httproute", delayKey: Gateway, primary: gvrHTTPRoute,
		watches: []watch{
			// Every route is judged again on a Gateway event, except the
			// Gateway status write that only recounts attachedRoutes
			// (one per route that attaches): reconcileRoute derives a
			// route's status from the Gateway's spec and class
			// (routeAllowed), never from the Gateway's status, so that
			// write changes no route. (Whether istiod filters the same
			// way was not checked against its source.)
			{gvr: gvrGateway, mapFn: m.allOf(gvrHTTPRoute, false), changed: notOnlyAttachedRoutes},
			{gvr: gvrService, mapFn: m.allOf(gvrHTTPRoute, false)},
			{gvr: gvrNamespace, mapFn: m.allOf(gvrHTTPRoute, false)},
		},
		reconcile: g.reconcileRoute,
	}
	m.add(g.route)
}

// notOnlyAttachedRoutes is an update filter (watch.changed) that drops a
// Gateway update whose only change is the attachedRoutes count of its
// listeners' status (besides resourceVersion and managedFields), and
// informer resyncs; every other update passes.
func notOnlyAttachedRoutes(old, new *unstructured.Unstructured) bool {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy()
		unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
		for _, l := range sliceView(c, "status", "listeners") {
			if lm, ok := l.(map[string]any); ok {
				delete(lm, "attachedRoutes")
			}
		}
		return c.Object
	}
	return !equality.Semantic.DeepEqual(strip(old), strip(new))
}

// routeParents maps an HTTPRoute to the Gateways it names.
func routeParents(u *unstructured.Unstructured) []key {
	var out []key
	for _, p := range sliceView(u, "spec", "parentRefs") {
		pm, _ := p.(map[string]any)
		if k := mstr(pm, "kind"); k != "" && k != "Gateway" {
			continue
		}
		ns := mstr(pm, "namespace")
		if ns == "" {
			ns = u.GetNamespace()
		}
		out = append(out, key{Namespace: ns, Name: mstr(pm, "name")})
	}
	return out
}

func (g *gatewayCtl) reconcileClass(ctx context.Context, k key) error {
	m := g.m
	gc := m.get(gvrGatewayClass, "", k.Name)
	if gc == nil || str(gc, "spec", "controllerName") != openshiftGatewayController {
		return nil
	}
	// The delay stands for installing Istio (the ingress operator installs
	// OSSM and its Istio when an openshift.io/gateway-controller class
	// appears) up to the class's Accepted, which the controller writes
	// once istiod runs. istiod therefore appears late in the delay, not at
	// its start (case B01: a Kuadrant operator pod that started before
	// Istio existed), but early enough for its rollout through
	// kube-controller-manager, kube-scheduler and kwok to fit inside it:
	// rolloutLead before the end. Accepted itself waits for the whole delay
	// and for istiod to be Available.
	left := m.delayLeft(g.class, gc, "accept")
	if lead := rolloutLead(m.opts.Delay[g.class.delayKey]); left > lead {
		g.class.queue.AddAfter(k, left-lead)
		return nil
	}
	istiod := m.get(gvrDeployment, istiodNamespace, istiodDeployment)
	if istiod == nil && m.opts.Faults.IstioAfterKuadrantOperator && !g.kuadrantOperatorStarted(ctx) {
		g.class.queue.AddAfter(k, istioPollInterval) // pods do not requeue classes
		return nil
	}
	if istiod == nil {
		if len(m.istioCRDs) > 0 && !m.opts.Faults.KuadrantStuckMissingDependency {
			// OSSM registers Istio's CRDs before it deploys istiod.
			all, err := m.ensureCRDs(ctx, m.istioCRDs)
			if err != nil {
				return err
			}
			if !all {
				g.class.queue.AddAfter(k, istioPollInterval) // CRDs do not requeue classes
				return nil
			}
		}
		if err := m.ensureNamespace(ctx, istiodNamespace); err != nil {
			return err
		}
		if err := g.createIstiod(ctx); err != nil {
			return err
		}
		return nil // the Deployment's events requeue the class
	}
	if !deploymentAvailable(istiod) {
		return nil
	}
	if left > 0 {
		g.class.log.Debug("holding status", zap.Stringer("key", k), zap.Duration("left", left))
		g.class.queue.AddAfter(k, left)
		return nil
	}
	status := map[string]any{
		"conditions": conditions(statusConditions(gc),
			cond("Accepted", true, "Accepted", "Handled by Istio controller").gen(gc.GetGeneration())),
	}
	return m.updateStatus(ctx, gvrGatewayClass, gc, status)
}

// kuadrantOperatorStarted reports whether the real Kuadrant operator runs
// and has read its dependencies: its pod has been Running for
// realKuadrantBoot (the harness starts the process for the Running pod; it
// checks its dependencies during its start).
func (g *gatewayCtl) kuadrantOperatorStarted(ctx context.Context) bool {
	pods, err := g.m.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app=kuadrant,control-plane=controller-manager"})
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.StartTime == nil {
			continue
		}
		if time.Since(p.Status.StartTime.Time) >= realKuadrantBoot {
			return true
		}
	}
	return false
}

// realKuadrantBoot is how long after its pod started the real Kuadrant
// operator is taken to have read its dependencies: TestRealKuadrantOperator
// saw it report MissingDependency within 5 s of its process start; the
// margin is for a loaded machine.
const realKuadrantBoot = 8 * time.Second

// istioPollInterval is how often a class held by
// Faults.IstioAfterKuadrantOperator looks for the Kuadrant operator pod.
const istioPollInterval = 200 * time.Millisecond

// rolloutLead is how long before the end of a delay d a simulator creates
// a Deployment whose pod, on a cluster, starts only at the end of the work
// the delay stands for (istiod at the end of the gateway delay, an
// operator's Deployment at the end of the OLM delay): half the delay, at
// most one second (the time a Deployment takes to become Available on a
// loaded local control plane).
func rolloutLead(d time.Duration) time.Duration {
	return min(d/2, time.Second)
}

func (g *gatewayCtl) createIstiod(ctx context.Context) error {
	lbl := map[string]string{"app": "istiod", "istio.io/rev": "openshift-gateway"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: istiodDeployment, Namespace: istiodNamespace, Labels: lbl},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "discovery", Image: "registry.invalid/maasctl-sim/istio-pilot:1.27",
				}}},
			},
		},
	}
	_, err := g.m.kube.AppsV1().Deployments(istiodNamespace).Create(ctx, dep, metaCreate)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create istiod: %w", err)
	}
	return nil
}

// ourClass returns the Gateway's class when it is an accepted OpenShift class.
func (g *gatewayCtl) ourClass(gw *unstructured.Unstructured) *unstructured.Unstructured {
	if gw == nil {
		return nil
	}
	gc := g.m.get(gvrGatewayClass, "", str(gw, "spec", "gatewayClassName"))
	if gc == nil || str(gc, "spec", "controllerName") != openshiftGatewayController || !conditionTrue(gc, "Accepted") {
		return nil
	}
	return gc
}

func (g *gatewayCtl) reconcileGateway(ctx context.Context, k key) error {
	m := g.m
	gw := m.get(gvrGateway, k.Namespace, k.Name)
	if gw == nil || gw.GetDeletionTimestamp() != nil {
		return nil
	}
	gc := g.ourClass(gw)
	if gc == nil {
		return nil
	}
	// The Gateway's Service and Deployment are made at once; its status
	// waits for the gateway delay (hold).
	ctx = m.hold(ctx, g.gw, gw, "program")
	gen := gw.GetGeneration()
	svcName := gw.GetName() + "-" + gc.GetName()
	svcType := corev1.ServiceTypeLoadBalancer
	if t := gw.GetAnnotations()[serviceTypeAnnotation]; t != "" {
		svcType = corev1.ServiceType(t)
	}
	listeners := sliceView(gw, "spec", "listeners")
	if err := g.ensureService(ctx, gw, svcName, svcType, listeners); err != nil {
		return err
	}
	if err := g.ensureDeployment(ctx, gw, svcName); err != nil {
		return err
	}
	old := mapOf(gw, "status")
	oldListeners := map[string]any{}
	if l, ok := old["listeners"].([]any); ok {
		for _, x := range l {
			xm, _ := x.(map[string]any)
			oldListeners[mstr(xm, "name")] = xm["conditions"]
		}
	}
	routes := m.unsorted(gvrHTTPRoute, "")
	var lstatus []any
	var invalid []string
	var ports []string
	for _, l := range listeners {
		lm, _ := l.(map[string]any)
		name := mstr(lm, "name")
		ok, reason, msg := g.listenerRefs(gw, lm)
		conds := []condition{
			cond("Accepted", true, "Accepted", "No errors found").gen(gen),
			cond("Conflicted", false, "NoConflicts", "No errors found").gen(gen),
		}
		if ok {
			conds = append(conds,
				cond("Programmed", true, "Programmed", "No errors found").gen(gen),
				cond("ResolvedRefs", true, "ResolvedRefs", "No errors found").gen(gen))
		} else {
			invalid = append(invalid, name)
			conds = append(conds,
				cond("Programmed", false, "Invalid", "Bad TLS configuration").gen(gen),
				cond("ResolvedRefs", false, reason, msg).gen(gen))
		}
		attached := int64(0)
		for _, r := range routes {
			if acc, _, _ := g.routeAllowed(r, gw, lm); acc {
				attached++
			}
		}
		lstatus = append(lstatus, map[string]any{
			"name":           name,
			"attachedRoutes": attached,
			"supportedKinds": supportedKinds(mstr(lm, "protocol")),
			"conditions":     ownConditions(oldListeners[name], conds...),
		})
		if p, ok := lm["port"].(int64); ok {
			ports = append(ports, fmt.Sprintf("%s.%s.svc.cluster.local:%d", svcName, gw.GetNamespace(), p))
		}
	}

	accepted := cond("Accepted", true, "Accepted", "Resource accepted").gen(gen)
	if len(invalid) > 0 {
		accepted = cond("Accepted", true, "ListenersNotValid", "Invalid listeners: "+strings.Join(invalid, ", ")).gen(gen)
	}
	svc := m.get(gvrService, gw.GetNamespace(), svcName)
	addresses, addrMsg := serviceAddresses(svc)
	var programmed condition
	switch {
	case len(invalid) > 0:
		programmed = cond("Programmed", false, "Invalid", "Invalid listeners: "+strings.Join(invalid, ", ")).gen(gen)
	case addrMsg != "":
		programmed = cond("Programmed", false, "AddressNotAssigned",
			fmt.Sprintf("Assigned to service(s) %s, but failed to assign to all requested addresses: %s", strings.Join(ports, ", "), addrMsg)).gen(gen)
	default:
		programmed = cond("Programmed", true, "Programmed",
			fmt.Sprintf("Resource programmed, assigned to service(s) %s", strings.Join(ports, ", "))).gen(gen)
	}
	status := map[string]any{
		"conditions": ownConditions(old["conditions"], accepted, programmed),
		"listeners":  lstatus,
	}
	if len(addresses) > 0 {
		status["addresses"] = addresses
	}
	return m.updateStatus(ctx, gvrGateway, gw, status)
}

func supportedKinds(protocol string) []any {
	switch protocol {
	case "TLS":
		return []any{map[string]any{"group": gatewayAPIGroup, "kind": "TLSRoute"}}
	case "TCP":
		return []any{map[string]any{"group": gatewayAPIGroup, "kind": "TCPRoute"}}
	default:
		return []any{
			map[string]any{"group": gatewayAPIGroup, "kind": "HTTPRoute"},
			map[string]any{"group": gatewayAPIGroup, "kind": "GRPCRoute"},
		}
	}
}

// listenerRefs resolves a listener's TLS certificateRefs: each must name an
// existing Secret in the Gateway's namespace holding a valid key pair.
func (g *gatewayCtl) listenerRefs(gw *unstructured.Unstructured, l map[string]any) (bool, string, string) {
	tlsCfg, _ := l["tls"].(map[string]any)
	if tlsCfg == nil {
		return true, "", ""
	}
	if mode := mstr(tlsCfg, "mode"); mode == "Passthrough" {
		return true, "", ""
	}
	refs, _ := tlsCfg["certificateRefs"].([]any)
	if len(refs) == 0 && mstr(l, "protocol") == "HTTPS" {
		return false, "InvalidCertificateRef", "no certificateRefs on a TLS listener"
	}
	for _, r := range refs {
		rm, _ := r.(map[string]any)
		if kind := mstr(rm, "kind"); kind != "" && kind != "Secret" {
			return false, "InvalidCertificateRef", fmt.Sprintf("invalid certificate reference %s/%s/%s: unsupported kind", mstr(rm, "group"), kind, mstr(rm, "name"))
		}
		ns := mstr(rm, "namespace")
		if ns != "" && ns != gw.GetNamespace() {
			return false, "RefNotPermitted", fmt.Sprintf("certificate reference %s/%s is in another namespace and no ReferenceGrant is simulated", ns, mstr(rm, "name"))
		}
		name := mstr(rm, "name")
		s := g.m.get(gvrSecret, gw.GetNamespace(), name)
		if s == nil {
			return false, "InvalidCertificateRef", fmt.Sprintf("invalid certificate reference /Secret/%s. secret %s/%s not found", name, gw.GetNamespace(), name)
		}
		crt, err1 := secretValue(s, corev1.TLSCertKey)
		k, err2 := secretValue(s, corev1.TLSPrivateKeyKey)
		if err1 != nil || err2 != nil {
			return false, "InvalidCertificateRef", fmt.Sprintf("invalid certificate reference /Secret/%s. secret %s/%s has no tls.crt/tls.key", name, gw.GetNamespace(), name)
		}
		if _, err := tls.X509KeyPair([]byte(crt), []byte(k)); err != nil {
			return false, "InvalidCertificateRef", fmt.Sprintf("invalid certificate reference /Secret/%s. the certificate is malformed", name)
		}
	}
	return true, "", ""
}

// serviceAddresses returns the Gateway addresses of its Service: the load
// balancer ingress for a LoadBalancer (none until one is assigned), the
// cluster IP otherwise.
func serviceAddresses(svc *unstructured.Unstructured) ([]any, string) {
	if svc == nil {
		return nil, "service not created"
	}
	if str(svc, "spec", "type") == "LoadBalancer" {
		var out []any
		for _, in := range sliceOf(svc, "status", "loadBalancer", "ingress") {
			im, _ := in.(map[string]any)
			if ip := mstr(im, "ip"); ip != "" {
				out = append(out, map[string]any{"type": "IPAddress", "value": ip})
			} else if h := mstr(im, "hostname"); h != "" {
				out = append(out, map[string]any{"type": "Hostname", "value": h})
			}
		}
		if len(out) == 0 {
			return nil, fmt.Sprintf("address pending for hostname %q", svc.GetName()+"."+svc.GetNamespace()+".svc.cluster.local")
		}
		return out, ""
	}
	ip := str(svc, "spec", "clusterIP")
	if ip == "" || ip == "None" {
		return nil, "service has no cluster IP"
	}
	return []any{map[string]any{"type": "IPAddress", "value": ip}}, ""
}

func gatewayOwner(gw *unstructured.Unstructured) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Name: gw.GetName(), UID: gw.GetUID(),
		Controller: new(true),
	}}
}

func (g *gatewayCtl) ensureService(ctx context.Context, gw *unstructured.Unstructured, name string, typ corev1.ServiceType, listeners []any) error {
	ports := []corev1.ServicePort{{Name: "status-port", Port: 15021, Protocol: corev1.ProtocolTCP, AppProtocol: new("tcp")}}
	seen := map[int64]bool{}
	for i, l := range listeners {
		lm, _ := l.(map[string]any)
		p, _ := lm["port"].(int64)
		if seen[p] {
			continue
		}
		seen[p] = true
		pn := mstr(lm, "name")
		if pn == "" {
			pn = fmt.Sprintf("%s-%d", strings.ToLower(mstr(lm, "protocol")), i)
		}
		ports = append(ports, corev1.ServicePort{
			Name: pn, Port: int32(p), Protocol: corev1.ProtocolTCP,
			AppProtocol: new(strings.ToLower(mstr(lm, "protocol"))),
		})
	}
	// The cached Service, when it already has the type and ports, needs
	// no request (every route that attaches reconciles the Gateway); any
	// other case reads the live one. A change the cache has not delivered
	// yet requeues the Gateway when it does (the Service watch).
	if u := g.m.get(gvrService, gw.GetNamespace(), name); u != nil {
		if cached, err := fromUnstructured[corev1.Service](u); err == nil && cached.Spec.Type == typ && samePorts(cached.Spec.Ports, ports) {
			return nil
		}
	}
	svcs := g.m.kube.CoreV1().Services(gw.GetNamespace())
	live, err := svcs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: gw.GetNamespace(),
				Labels:          map[string]string{gatewayNameLabel: gw.GetName(), "gateway.istio.io/managed": "openshift.io-gateway-controller-v1"},
				OwnerReferences: gatewayOwner(gw),
			},
			Spec: corev1.ServiceSpec{Type: typ, Ports: ports, Selector: map[string]string{gatewayNameLabel: gw.GetName()}},
		}
		_, err = svcs.Create(ctx, svc, metaCreate)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create gateway service %s/%s: %w", gw.GetNamespace(), name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get gateway service %s/%s: %w", gw.GetNamespace(), name, err)
	}
	if live.Spec.Type == typ && samePorts(live.Spec.Ports, ports) {
		return nil
	}
	live.Spec.Type = typ
	live.Spec.Ports = ports
	if typ != corev1.ServiceTypeLoadBalancer && typ != corev1.ServiceTypeNodePort {
		for i := range live.Spec.Ports {
			live.Spec.Ports[i].NodePort = 0
		}
		live.Spec.ExternalTrafficPolicy = ""
		live.Spec.AllocateLoadBalancerNodePorts = nil
	}
	if _, err := svcs.Update(ctx, live, metaUpdate); err != nil {
		return fmt.Errorf("update gateway service %s/%s: %w", gw.GetNamespace(), name, err)
	}
	return nil
}

func samePorts(a, b []corev1.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Port != b[i].Port {
			return false
		}
	}
	return true
}

func (g *gatewayCtl) ensureDeployment(ctx context.Context, gw *unstructured.Unstructured, name string) error {
	if g.m.get(gvrDeployment, gw.GetNamespace(), name) != nil {
		return nil
	}
	lbl := map[string]string{gatewayNameLabel: gw.GetName(), "istio.io/gateway-name": gw.GetName()}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gw.GetNamespace(), Labels: lbl, OwnerReferences: gatewayOwner(gw)},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{gatewayNameLabel: gw.GetName()}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "istio-proxy", Image: "registry.invalid/maasctl-sim/istio-proxyv2:1.27",
				}}},
			},
		},
	}
	_, err := g.m.kube.AppsV1().Deployments(gw.GetNamespace()).Create(ctx, dep, metaCreate)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create gateway deployment %s/%s: %w", gw.GetNamespace(), name, err)
	}
	return nil
}

// routeAllowed reports whether an HTTPRoute attaches to listener l of gw:
// it names gw (and the listener, if it gives a sectionName or port), the
// listener's allowedRoutes admits the route's namespace and kind, and the
// hostnames intersect.
func (g *gatewayCtl) routeAllowed(route, gw *unstructured.Unstructured, l map[string]any) (bool, string, string) {
	named := false
	for _, p := range sliceView(route, "spec", "parentRefs") {
		pm, _ := p.(map[string]any)
		if mstr(pm, "name") != gw.GetName() {
			continue
		}
		ns := mstr(pm, "namespace")
		if ns == "" {
			ns = route.GetNamespace()
		}
		if ns != gw.GetNamespace() {
			continue
		}
		if sn := mstr(pm, "sectionName"); sn != "" && sn != mstr(l, "name") {
			continue
		}
		if port, ok := pm["port"].(int64); ok && port != l["port"] {
			continue
		}
		named = true
	}
	if !named {
		return false, "NoMatchingParent", "route does not reference this listener"
	}
	if p := mstr(l, "protocol"); p != "HTTP" && p != "HTTPS" {
		return false, "NotAllowedByListeners", "listener protocol does not accept HTTPRoute"
	}
	from := "Same"
	var sel map[string]any
	if ar, ok := l["allowedRoutes"].(map[string]any); ok {
		if nsm, ok := ar["namespaces"].(map[string]any); ok {
			if f := mstr(nsm, "from"); f != "" {
				from = f
			}
			sel, _ = nsm["selector"].(map[string]any)
		}
	}
	switch from {
	case "Same":
		if route.GetNamespace() != gw.GetNamespace() {
			return false, "NotAllowedByListeners", fmt.Sprintf("listener %s allows routes from namespace %s only", mstr(l, "name"), gw.GetNamespace())
		}
	case "Selector":
		ns := g.m.get(gvrNamespace, "", route.GetNamespace())
		ls, err := metav1.LabelSelectorAsSelector(toLabelSelector(sel))
		if ns == nil || err != nil || !ls.Matches(labels.Set(ns.GetLabels())) {
			return false, "NotAllowedByListeners", fmt.Sprintf("namespace %s does not match the namespace selector of listener %s", route.GetNamespace(), mstr(l, "name"))
		}
	}
	lh := mstr(l, "hostname")
	hosts, _, _ := unstructured.NestedStringSlice(route.Object, "spec", "hostnames")
	if lh != "" && len(hosts) > 0 {
		match := false
		for _, h := range hosts {
			if hostsIntersect(lh, h) {
				match = true
			}
		}
		if !match {
			return false, "NoMatchingListenerHostname", fmt.Sprintf("no hostname of the route matches listener %s (%s)", mstr(l, "name"), lh)
		}
	}
	return true, "Accepted", "Route was valid"
}

func hostsIntersect(a, b string) bool {
	if a == b {
		return true
	}
	wild := func(w, h string) bool {
		return strings.HasPrefix(w, "*.") && strings.HasSuffix(h, w[1:]) && h != w[2:]
	}
	return wild(a, b) || wild(b, a)
}

func (g *gatewayCtl) reconcileRoute(ctx context.Context, k key) error {
	m := g.m
	route := m.get(gvrHTTPRoute, k.Namespace, k.Name)
	if route == nil || route.GetDeletionTimestamp() != nil {
		return nil
	}
	gen := route.GetGeneration()
	var others, ours []any
	oldOurs := map[string]any{}
	for _, p := range sliceView(route, "status", "parents") {
		pm, _ := p.(map[string]any)
		if mstr(pm, "controllerName") != openshiftGatewayController {
			others = append(others, p)
			continue
		}
		ref, _ := pm["parentRef"].(map[string]any)
		oldOurs[mstr(ref, "namespace")+"/"+mstr(ref, "name")+"/"+mstr(ref, "sectionName")] = pm["conditions"]
	}
	resolved, rreason, rmsg := g.backendRefs(route)
	for _, p := range sliceView(route, "spec", "parentRefs") {
		pm, _ := p.(map[string]any)
		if kind := mstr(pm, "kind"); kind != "" && kind != "Gateway" {
			continue
		}
		ns := mstr(pm, "namespace")
		if ns == "" {
			ns = k.Namespace
		}
		gw := m.get(gvrGateway, ns, mstr(pm, "name"))
		if g.ourClass(gw) == nil {
			continue
		}
		acc, reason, msg := false, "NoMatchingParent", "no listener matches this parent reference"
		for _, l := range sliceView(gw, "spec", "listeners") {
			lm, _ := l.(map[string]any)
			if sn := mstr(pm, "sectionName"); sn != "" && sn != mstr(lm, "name") {
				continue
			}
			a, r, mm := g.routeAllowed(route, gw, lm)
			if a {
				acc, reason, msg = true, r, mm
				break
			}
			reason, msg = r, mm
		}
		ref := map[string]any{"group": gatewayAPIGroup, "kind": "Gateway", "name": gw.GetName(), "namespace": ns}
		if sn := mstr(pm, "sectionName"); sn != "" {
			ref["sectionName"] = sn
		}
		if port, ok := pm["port"].(int64); ok {
			ref["port"] = port
		}
		var rc condition
		if resolved {
			rc = cond("ResolvedRefs", true, "ResolvedRefs", "All references resolved").gen(gen)
		} else {
			rc = cond("ResolvedRefs", false, rreason, rmsg).gen(gen)
		}
		ours = append(ours, map[string]any{
			"parentRef":      ref,
			"controllerName": openshiftGatewayController,
			"conditions": conditions(oldOurs[ns+"/"+gw.GetName()+"/"+mstr(pm, "sectionName")],
				cond("Accepted", acc, reason, msg).gen(gen), rc),
		})
	}
	if len(ours) == 0 && len(oldOurs) == 0 {
		return nil
	}
	sort.SliceStable(ours, func(i, j int) bool {
		a := ours[i].(map[string]any)["parentRef"].(map[string]any)
		b := ours[j].(map[string]any)["parentRef"].(map[string]any)
		return mstr(a, "namespace")+"/"+mstr(a, "name") < mstr(b, "namespace")+"/"+mstr(b, "name")
	})
	parents := append(others, ours...)
	if parents == nil {
		parents = []any{}
	}
	return m.updateStatus(ctx, gvrHTTPRoute, route, map[string]any{"parents": parents})
}

// backendRefs resolves an HTTPRoute's backendRefs: core Services must exist
// (in the route's namespace); Istio's networking.istio.io Hostname kind is
// accepted as is; other kinds are InvalidKind.
func (g *gatewayCtl) backendRefs(route *unstructured.Unstructured) (bool, string, string) {
	for _, rule := range sliceView(route, "spec", "rules") {
		rm, _ := rule.(map[string]any)
		refs, _ := rm["backendRefs"].([]any)
		for _, b := range refs {
			bm, _ := b.(map[string]any)
			group, kind, name := mstr(bm, "group"), mstr(bm, "kind"), mstr(bm, "name")
			if kind == "" {
				kind = "Service"
			}
			switch {
			case group == "" && kind == "Service":
				ns := mstr(bm, "namespace")
				if ns == "" {
					ns = route.GetNamespace()
				}
				if ns != route.GetNamespace() {
					return false, "RefNotPermitted", fmt.Sprintf("backend %s/%s is in another namespace and no ReferenceGrant is simulated", ns, name)
				}
				if g.m.get(gvrService, ns, name) == nil {
					return false, "BackendNotFound", fmt.Sprintf("backend(%s.%s.svc.cluster.local) not found", name, ns)
				}
			case group == "networking.istio.io" && kind == "Hostname":
			default:
				return false, "InvalidKind", fmt.Sprintf("referencing unsupported backendRef: group %q kind %q", group, kind)
			}
		}
	}
	return true, "", ""
}
