package sim

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The simulated OpenShift router (openshift/router, pkg/router/controller:
// the default IngressController's router admits Routes and records it in
// status.ingress with routerName "default", condition Admitted, and
// routerCanonicalHostname router-default.<apps domain>). A Route without
// spec.host gets <name>-<namespace>.<apps domain>; a host already claimed by
// an older Route in another namespace is rejected with reason
// HostAlreadyClaimed (the router's default namespace ownership check).
type router struct {
	m *manager
	r *reconciler
}

func registerRouter(m *manager) {
	rt := &router{m: m}
	rt.r = &reconciler{
		name: "router/route", delayKey: Router, primary: gvrRoute,
		watches: []watch{
			{gvr: gvrIngressConfig, mapFn: m.allOf(gvrRoute, false)},
			{gvr: gvrRoute, mapFn: m.allOf(gvrRoute, false)},
		},
		reconcile: rt.reconcile,
	}
	m.add(rt.r)
}

func (rt *router) appsDomain() string {
	if ing := rt.m.get(gvrIngressConfig, "", "cluster"); ing != nil {
		if d := str(ing, "spec", "domain"); d != "" {
			return d
		}
	}
	return rt.m.opts.AppsDomain
}

func (rt *router) reconcile(ctx context.Context, k key) error {
	m := rt.m
	route := m.get(gvrRoute, k.Namespace, k.Name)
	if route == nil || route.GetDeletionTimestamp() != nil {
		return nil
	}
	if m.delayed(rt.r, route, "admit") {
		return nil
	}
	domain := rt.appsDomain()
	host := str(route, "spec", "host")
	if host == "" {
		host = fmt.Sprintf("%s-%s.%s", k.Name, k.Namespace, domain)
	}
	path := str(route, "spec", "path")
	admitted := cond("Admitted", true, "", "")
	for _, other := range m.list(gvrRoute, "") {
		if other.GetUID() == route.GetUID() || other.GetNamespace() == k.Namespace {
			continue
		}
		if routeHost(other, domain) == host && str(other, "spec", "path") == path && olderThan(other, route) {
			admitted = cond("Admitted", false, "HostAlreadyClaimed",
				fmt.Sprintf("route %s already exposes %s and is older", other.GetNamespace()+"/"+other.GetName(), host))
			break
		}
	}
	var old any
	for _, in := range sliceOf(route, "status", "ingress") {
		if im, _ := in.(map[string]any); mstr(im, "routerName") == "default" {
			old = im["conditions"]
		}
	}
	wildcard := str(route, "spec", "wildcardPolicy")
	if wildcard == "" {
		wildcard = "None"
	}
	ingress := map[string]any{
		"host":                    host,
		"routerName":              "default",
		"routerCanonicalHostname": "router-default." + domain,
		"wildcardPolicy":          wildcard,
		"conditions":              conditions(old, admitted),
	}
	return m.updateStatus(ctx, gvrRoute, route, map[string]any{"ingress": []any{ingress}})
}

func routeHost(r *unstructured.Unstructured, domain string) string {
	if h := str(r, "spec", "host"); h != "" {
		return h
	}
	return fmt.Sprintf("%s-%s.%s", r.GetName(), r.GetNamespace(), domain)
}

func olderThan(a, b *unstructured.Unstructured) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetNamespace()+"/"+a.GetName() < b.GetNamespace()+"/"+b.GetName()
}
