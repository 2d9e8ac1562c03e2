package sim

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
)

// indexManager is a manager over a fake dynamic client holding objs, with
// the informers of gvrs started and synced: enough for the index and
// mapping functions, which read only the informer caches.
func indexManager(t *testing.T, gvrs []schema.GroupVersionResource, objs ...runtime.Object) *manager {
	t.Helper()
	lists := map[schema.GroupVersionResource]string{
		gvrMaaSSubscription: "MaaSSubscriptionList",
		gvrMaaSAuthPolicy:   "MaaSAuthPolicyList",
		gvrMaaSModelRef:     "MaaSModelRefList",
		gvrHTTPRoute:        "HTTPRouteList",
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, objs...)
	m := &manager{log: zaptest.NewLogger(t), factory: dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); m.factory.Shutdown() })
	var synced []cache.InformerSynced
	for _, g := range gvrs {
		synced = append(synced, m.factory.ForResource(g).Informer().HasSynced)
	}
	m.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("caches did not sync")
	}
	return m
}

// maasObj is a MaaS object of kind in namespace ns, created age seconds
// after a fixed moment, with the given spec.
func maasObj(kind, ns, name string, age int, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	u.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 12, 2, 0, 0, age, 0, time.UTC)))
	return u
}

func refs(nsNames ...string) []any {
	var out []any
	for i := 0; i+1 < len(nsNames); i += 2 {
		out = append(out, map[string]any{"namespace": nsNames[i], "name": nsNames[i+1]})
	}
	return out
}

func keyNames(ks []key) []string {
	var out []string
	for _, k := range ks {
		out = append(out, k.String())
	}
	return out
}

// scanReferencing is the linear scan the modelRefs index replaces: every
// object of l whose spec.modelRefs names ns/name, in list order.
func scanReferencing(l []*unstructured.Unstructured, ns, name string) []string {
	var out []string
	for _, o := range l {
		for _, r := range sliceOf(o, "spec", "modelRefs") {
			rm, _ := r.(map[string]any)
			if mstr(rm, "name") == name && mstr(rm, "namespace") == ns {
				out = append(out, keyOf(o).String())
				break
			}
		}
	}
	return out
}

// TestModelRefIndexMatchesScan: a lookup in the modelRefs index returns
// the objects (and in the order) a scan of the whole list for the
// reference returns, for references in other namespaces, shared by
// several objects, repeated within one object, and missing.
func TestModelRefIndexMatchesScan(t *testing.T) {
	objs := []runtime.Object{
		maasObj("MaaSSubscription", "a", "s1", 3, map[string]any{"modelRefs": refs("m", "x", "m", "y")}),
		maasObj("MaaSSubscription", "b", "s2", 1, map[string]any{"modelRefs": refs("m", "x")}),
		maasObj("MaaSSubscription", "a", "s3", 2, map[string]any{"modelRefs": refs("n", "x", "n", "x")}),
		maasObj("MaaSSubscription", "a", "s4", 2, map[string]any{"priority": int64(5)}),
		maasObj("MaaSSubscription", "a", "s0", 2, map[string]any{"modelRefs": refs("m", "x")}),
	}
	m := indexManager(t, []schema.GroupVersionResource{gvrMaaSSubscription}, objs...)
	all := m.list(gvrMaaSSubscription, "")
	for _, ref := range [][2]string{{"m", "x"}, {"m", "y"}, {"n", "x"}, {"m", "z"}, {"", "x"}} {
		var got []string
		for _, o := range m.byIndex(gvrMaaSSubscription, indexModelRefs, modelRefKey(ref[0], ref[1])) {
			got = append(got, keyOf(o).String())
		}
		if want := scanReferencing(all, ref[0], ref[1]); !slices.Equal(got, want) {
			t.Errorf("%s/%s: index %v, scan %v", ref[0], ref[1], got, want)
		}
		mapped := keyNames(m.referencing(gvrMaaSSubscription, refName)(maasObj("MaaSModelRef", ref[0], ref[1], 0, nil)))
		if want := scanReferencing(all, ref[0], ref[1]); !slices.Equal(mapped, want) {
			t.Errorf("%s/%s: referencing %v, scan %v", ref[0], ref[1], mapped, want)
		}
	}
	// A TokenRateLimitPolicy without the model label maps to every
	// subscription.
	if got := m.referencing(gvrMaaSSubscription, trlpModel)(maasObj("TokenRateLimitPolicy", "m", "p", 0, nil)); len(got) != len(objs) {
		t.Errorf("unlabelled policy maps to %v, want all %d subscriptions", keyNames(got), len(objs))
	}
}

// TestGovernedAndPriorityUseIndexes: governed and priorityDuplicate give
// what the scans gave: governance needs an auth policy and a subscription
// not being deleted; the peers of a priority are every other subscription
// of that priority not being deleted, across namespaces, unset counting as
// 0.
func TestGovernedAndPriorityUseIndexes(t *testing.T) {
	deleted := maasObj("MaaSSubscription", "a", "gone", 1, map[string]any{"modelRefs": refs("m", "y"), "priority": int64(1)})
	now := metav1.Now()
	deleted.SetDeletionTimestamp(&now)
	deleted.SetFinalizers([]string{finalizerSubscription})
	objs := []runtime.Object{
		maasObj("MaaSAuthPolicy", "a", "p1", 1, map[string]any{"modelRefs": refs("m", "x", "m", "y")}),
		maasObj("MaaSSubscription", "a", "s1", 1, map[string]any{"modelRefs": refs("m", "x"), "priority": int64(1)}),
		maasObj("MaaSSubscription", "b", "s2", 2, map[string]any{"modelRefs": refs("m", "z"), "priority": int64(1)}),
		maasObj("MaaSSubscription", "a", "s3", 3, map[string]any{"modelRefs": refs("m", "z")}),
		maasObj("MaaSSubscription", "a", "s4", 4, map[string]any{"modelRefs": refs("m", "z"), "priority": int64(0)}),
		deleted,
	}
	m := indexManager(t, []schema.GroupVersionResource{gvrMaaSSubscription, gvrMaaSAuthPolicy}, objs...)
	c := &maasCtl{m: m}
	for _, tc := range []struct {
		ns, name string
		want     bool
	}{
		{"m", "x", true},  // both
		{"m", "y", false}, // the only subscription is being deleted
		{"m", "z", false}, // no auth policy
		{"n", "x", false},
	} {
		if got := c.governed(tc.ns, tc.name); got != tc.want {
			t.Errorf("governed(%s/%s) = %v, want %v", tc.ns, tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		sub  *unstructured.Unstructured
		want string
	}{
		{objs[1].(*unstructured.Unstructured), "spec.priority 1 is shared with: b/s2"},
		{objs[3].(*unstructured.Unstructured), "spec.priority 0 is shared with: a/s4"},
		{maasObj("MaaSSubscription", "c", "new", 9, map[string]any{"priority": int64(7)}), ""},
	} {
		if got := c.priorityDuplicate(tc.sub).Message; got != tc.want {
			t.Errorf("priorityDuplicate(%s) = %q, want %q", keyOf(tc.sub), got, tc.want)
		}
	}
}

// TestSubscriptionMappings: an HTTPRoute maps to the subscriptions naming
// a MaaSModelRef of the route's namespace (maas-controller's
// mapHTTPRouteToMaaSSubscriptions); a subscription event maps to itself,
// the subscriptions of its priority and those sharing one of its models,
// and to no other.
func TestSubscriptionMappings(t *testing.T) {
	objs := []runtime.Object{
		maasObj("MaaSModelRef", "m", "x", 1, nil),
		maasObj("MaaSModelRef", "m", "y", 1, nil),
		maasObj("MaaSModelRef", "o", "z", 1, nil),
		maasObj("MaaSSubscription", "a", "s1", 1, map[string]any{"modelRefs": refs("m", "x"), "priority": int64(1)}),
		maasObj("MaaSSubscription", "a", "s2", 2, map[string]any{"modelRefs": refs("m", "y", "o", "z"), "priority": int64(2)}),
		maasObj("MaaSSubscription", "b", "s3", 3, map[string]any{"modelRefs": refs("o", "z"), "priority": int64(3)}),
		maasObj("MaaSSubscription", "b", "s4", 4, map[string]any{"modelRefs": refs("m", "gone"), "priority": int64(4)}),
		maasObj("MaaSSubscription", "b", "s5", 5, map[string]any{"modelRefs": refs("q", "x"), "priority": int64(1)}),
	}
	m := indexManager(t, []schema.GroupVersionResource{gvrMaaSSubscription, gvrMaaSModelRef}, objs...)
	c := &maasCtl{m: m}
	sorted := func(ks []key) []string {
		out := keyNames(ks)
		slices.Sort(out)
		return out
	}
	for ns, want := range map[string][]string{
		"m": {"a/s1", "a/s2"}, // s4 names a MaaSModelRef that does not exist
		"o": {"a/s2", "b/s3"},
		"q": nil,
	} {
		route := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "r", "namespace": ns}}}
		if got := sorted(c.routeSubscriptions(route)); !slices.Equal(got, want) {
			t.Errorf("route in %s maps to %v, want %v", ns, got, want)
		}
	}
	for i, want := range [][]string{
		{"a/s1", "b/s5"}, // s1: priority 1 is shared with s5
		{"a/s2", "b/s3"}, // s2: shares o/z with s3
		{"a/s2", "b/s3"}, // s3
		{"b/s4"},         // s4: alone
		{"a/s1", "b/s5"}, // s5
	} {
		sub := objs[3+i].(*unstructured.Unstructured)
		if got := sorted(c.subscriptionPeers(sub)); !slices.Equal(got, want) {
			t.Errorf("%s maps to %v, want %v", keyOf(sub), got, want)
		}
	}
	// A subscription being created (not in the cache yet, or deleted
	// already) still maps to itself and to its peers.
	gone := maasObj("MaaSSubscription", "c", "s6", 6, map[string]any{"modelRefs": refs("m", "x"), "priority": int64(2)})
	if got, want := sorted(c.subscriptionPeers(gone)), []string{"a/s1", "a/s2", "c/s6"}; !slices.Equal(got, want) {
		t.Errorf("%s maps to %v, want %v", keyOf(gone), got, want)
	}
}

// TestSortByAge: oldest first, then namespace, then name.
func TestSortByAge(t *testing.T) {
	l := []*unstructured.Unstructured{
		maasObj("X", "b", "n", 2, nil), maasObj("X", "a", "z", 2, nil), maasObj("X", "a", "y", 2, nil), maasObj("X", "c", "c", 1, nil),
	}
	sortByAge(l)
	var got []string
	for _, u := range l {
		got = append(got, keyOf(u).String())
	}
	if want := []string{"c/c", "a/y", "a/z", "b/n"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sortByAge = %v, want %v", got, want)
	}
}

// TestWriteStatusUnchanged: a status equal to the cached one is not
// written, whether it is built of the decoded JSON types or of others
// (int, []string) that only the normalized comparison matches; a changed
// one is.
func TestWriteStatusUnchanged(t *testing.T) {
	obj := maasObj("MaaSSubscription", "a", "s", 1, nil)
	obj.Object["status"] = map[string]any{"phase": "Active", "count": int64(2), "names": []any{"x"}, "extra": "kept"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvrMaaSSubscription: "MaaSSubscriptionList"}, obj.DeepCopy())
	m := &manager{log: zaptest.NewLogger(t), dyn: dyn}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		status map[string]any
		write  bool
	}{
		{"same, decoded types", map[string]any{"phase": "Active", "count": int64(2), "names": []any{"x"}}, false},
		{"same, other types", map[string]any{"phase": "Active", "count": 2, "names": []string{"x"}}, false},
		{"changed", map[string]any{"phase": "Degraded"}, true},
		{"changed, other types", map[string]any{"count": 3}, true},
	} {
		before := len(dyn.Actions())
		out, err := m.writeStatus(ctx, gvrMaaSSubscription, obj, tc.status)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if wrote := len(dyn.Actions()) > before; wrote != tc.write || (out != nil) != tc.write {
			t.Errorf("%s: wrote %v (returned %v), want %v", tc.name, wrote, out != nil, tc.write)
		}
	}
}

// TestConditionToMap: a condition built into a map directly equals its
// JSON round trip, for every optional field set or empty, HTML characters
// (which encoding/json escapes) and text that is not valid UTF-8.
func TestConditionToMap(t *testing.T) {
	for _, c := range []condition{
		cond("Ready", true, "Reconciled", "ok"),
		cond("Ready", false, "", ""),
		cond("Ready", false, "X", "a <b> & \"c\" é").gen(3),
		cond("Ready", true, "X", "m").gen(-1),
		{Type: "Available", Status: "True", Message: "m", LastTransitionTime: "2026-12-02T00:00:00Z", LastUpdatedTime: "2026-12-02T00:00:01Z", Severity: "Info"},
		cond("Ready", false, "X", "bad \xff utf-8"),
	} {
		got, want := c.toMap(), toMap(c)
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%+v: toMap() = %#v, JSON round trip %#v", c, got, want)
		}
	}
}

// TestNotOnlyAttachedRoutes: the routes' Gateway watch drops the status
// write that only recounts attachedRoutes (and resyncs) and admits every
// other change: spec, labels, deletion, conditions, listeners.
func TestNotOnlyAttachedRoutes(t *testing.T) {
	base := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": "gw", "namespace": "ns", "resourceVersion": "1", "generation": int64(1)},
		"spec":     map[string]any{"listeners": []any{map[string]any{"name": "https", "port": int64(443)}}},
		"status": map[string]any{
			"conditions": []any{map[string]any{"type": "Programmed", "status": "True"}},
			"listeners":  []any{map[string]any{"name": "https", "attachedRoutes": int64(1), "conditions": []any{}}},
		},
	}}
	edit := func(f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := base.DeepCopy()
		u.SetResourceVersion("2")
		f(u)
		return u
	}
	for _, tc := range []struct {
		name string
		new  *unstructured.Unstructured
		want bool
	}{
		{"resync", base.DeepCopy(), false},
		{"attachedRoutes recounted", edit(func(u *unstructured.Unstructured) {
			sliceView(u, "status", "listeners")[0].(map[string]any)["attachedRoutes"] = int64(2)
		}), false},
		{"condition changed", edit(func(u *unstructured.Unstructured) {
			sliceView(u, "status", "conditions")[0].(map[string]any)["status"] = "False"
		}), true},
		{"condition and count changed", edit(func(u *unstructured.Unstructured) {
			sliceView(u, "status", "listeners")[0].(map[string]any)["attachedRoutes"] = int64(2)
			sliceView(u, "status", "conditions")[0].(map[string]any)["reason"] = "X"
		}), true},
		{"listener status added", edit(func(u *unstructured.Unstructured) {
			u.Object["status"].(map[string]any)["listeners"] = append(sliceView(u, "status", "listeners"), map[string]any{"name": "http", "attachedRoutes": int64(0)})
		}), true},
		{"spec changed", edit(func(u *unstructured.Unstructured) { u.SetGeneration(2) }), true},
		{"label added", edit(func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "b"}) }), true},
		{"deletion starts", edit(func(u *unstructured.Unstructured) { now := metav1.Now(); u.SetDeletionTimestamp(&now) }), true},
	} {
		if got := notOnlyAttachedRoutes(base, tc.new); got != tc.want {
			t.Errorf("%s: notOnlyAttachedRoutes = %v, want %v", tc.name, got, tc.want)
		}
	}
	if sliceView(base, "status", "listeners")[0].(map[string]any)["attachedRoutes"] != int64(1) {
		t.Error("the filter changed the cached object")
	}
}
