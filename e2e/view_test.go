package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/kube"
)

// TestReadViewAnswersAsTheAPIServer reads through a kube.ReadView on a
// real kube-apiserver, with the typed (protobuf) and the dynamic (JSON)
// clients, and compares every answer with the same read sent straight to
// the server by other Clients: GETs of objects a LIST holds, of an object
// absent from a LIST without selector (NotFound), LISTs filtered from a
// wider LIST by namespace and label selector. It counts the requests sent:
// one per Whole resource and one per other object, each once. Then the
// view's end: a Lease write and a dry run leave it open, the first other
// write ends it, and the read after it sees the change; a read without
// kube.ViewReads and a watch always go to the server.
func TestReadViewAnswersAsTheAPIServer(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, direct := bareAPIServer(t, ctx)
	for _, ns := range []string{"view-a", "view-b"} {
		if _, err := direct.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			d := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("d%d", i), Labels: map[string]string{"app": fmt.Sprintf("a%d", i%2)}},
				Spec: appsv1.DeploymentSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"d": fmt.Sprint(i)}},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"d": fmt.Sprint(i)}},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
					},
				},
			}
			if _, err := direct.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"v": "1"}}
		if _, err := direct.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	c, err := kube.New(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	view := c.BeginView(kube.ViewOptions{Whole: map[schema.GroupResource]kube.WholeList{
		{Resource: "namespaces"}:                 {},
		{Group: "apps", Resource: "deployments"}: {PerNamespace: true},
	}})
	defer view.End()
	vctx := kube.ViewReads(ctx)
	deployGVK := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	dyn := func(cl *kube.Clients, ns string) interface {
		Get(context.Context, string, metav1.GetOptions, ...string) (*unstructured.Unstructured, error)
		List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error)
	} {
		ri, _, err := cl.Resource(deployGVK, ns)
		if err != nil {
			t.Fatal(err)
		}
		return ri
	}
	// Discovery for the REST mappings first, so that the count below is
	// only the reads of objects.
	dyn(c, "view-a")
	dyn(direct, "view-a")
	reads0 := c.Requests.Reads()

	// Typed GETs: the first LISTs the namespace's Deployments, the others
	// are answered from that LIST; an absent one is NotFound as the
	// server says it.
	for _, ns := range []string{"view-a", "view-b"} {
		for _, name := range []string{"d0", "d1", "d2"} {
			got, err := c.Kube.AppsV1().Deployments(ns).Get(vctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("view GET %s/%s: %v", ns, name, err)
			}
			want, err := direct.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("view GET %s/%s differs from the server's (-server +view):\n%s", ns, name, diff)
			}
		}
	}
	_, verr := c.Kube.AppsV1().Deployments("view-a").Get(vctx, "absent", metav1.GetOptions{})
	_, serr := direct.Kube.AppsV1().Deployments("view-a").Get(ctx, "absent", metav1.GetOptions{})
	if !apierrors.IsNotFound(verr) || !apierrors.IsNotFound(serr) {
		t.Fatalf("GET of an absent Deployment: view %v, server %v; want NotFound from both", verr, serr)
	}
	if verr.Error() != serr.Error() {
		t.Errorf("NotFound message: view %q, server %q", verr.Error(), serr.Error())
	}
	if vs, ss := verr.(apierrors.APIStatus).Status(), serr.(apierrors.APIStatus).Status(); !cmp.Equal(vs.Details, ss.Details) || vs.Reason != ss.Reason || vs.Code != ss.Code {
		t.Errorf("NotFound status: view %+v, server %+v", vs, ss)
	}
	// Dynamic GET and a label-selected LIST from the same namespace LIST.
	got, err := dyn(c, "view-b").Get(vctx, "d1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := dyn(direct, "view-b").Get(ctx, "d1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Object, got.Object); diff != "" {
		t.Errorf("dynamic view GET differs (-server +view):\n%s", diff)
	}
	for _, sel := range []string{"app=a0", "app=a1", "app!=a0", ""} {
		gl, err := dyn(c, "view-a").List(vctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		wl, err := dyn(direct, "view-a").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wl.Items, gl.Items); diff != "" {
			t.Errorf("view LIST %q differs (-server +view):\n%s", sel, diff)
		}
		if len(wl.Items) == 0 {
			t.Fatalf("selector %q matches nothing: the comparison proves little", sel)
		}
	}
	// Namespaces: one LIST answers both GETs, and a missing one.
	for _, ns := range []string{"view-a", "view-b"} {
		if _, err := c.Kube.CoreV1().Namespaces().Get(vctx, ns, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Kube.CoreV1().Namespaces().Get(vctx, "view-none", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("GET of a missing Namespace through the view: %v, want NotFound", err)
	}
	// A ConfigMap is not Whole: one GET, then the same GET is answered.
	for range 3 {
		cm, err := c.Kube.CoreV1().ConfigMaps("view-a").Get(vctx, "cm", metav1.GetOptions{})
		if err != nil || cm.Data["v"] != "1" {
			t.Fatalf("ConfigMap through the view: %v %v", cm, err)
		}
	}
	// 2 Deployment LISTs (one per namespace), 1 Namespace LIST, 1 GET.
	if got, want := c.Requests.Reads()-reads0, int64(4); got != want {
		t.Errorf("the reads through the view sent %d requests, want %d", got, want)
	}
	if view.Answered() < 15 {
		t.Errorf("the view answered %d reads, want at least 15", view.Answered())
	}

	// A metadata-only read (kube.Clients.GetMetadata) is always sent,
	// even of an object the view holds, and answers metadata only; the
	// view's later whole answers stay whole.
	r := c.Requests.Reads()
	md, err := c.GetMetadata(vctx, deployGVK, "view-a", "d0")
	if err != nil || md == nil {
		t.Fatalf("GetMetadata of Deployment view-a/d0 through the view: %v %v", md, err)
	}
	if md.Name != "d0" || md.Labels["app"] != "a0" || md.UID == "" {
		t.Errorf("GetMetadata answered name %q labels %v uid %q, want d0, app=a0 and a UID", md.Name, md.Labels, md.UID)
	}
	if absent, err := c.GetMetadata(vctx, deployGVK, "view-a", "absent"); absent != nil || err != nil {
		t.Errorf("GetMetadata of an absent Deployment: %v %v, want nil and no error", absent, err)
	}
	if c.Requests.Reads() != r+2 {
		t.Errorf("the two metadata reads sent %d requests, want 2 (the view must not answer them)", c.Requests.Reads()-r)
	}
	if d, err := c.Kube.AppsV1().Deployments("view-a").Get(vctx, "d0", metav1.GetOptions{}); err != nil || d.Spec.Selector == nil {
		t.Errorf("whole GET through the view after a metadata read: %v (selector %v)", err, d.Spec.Selector)
	}

	// Unmarked reads go to the server.
	r = c.Requests.Reads()
	if _, err := c.Kube.CoreV1().ConfigMaps("view-a").Get(ctx, "cm", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if c.Requests.Reads() != r+1 {
		t.Error("a read without kube.ViewReads was answered by the view")
	}

	// Changes by others are not seen while the view is open: it is one
	// moment of the cluster.
	if _, err := direct.Kube.CoreV1().ConfigMaps("view-a").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"v": "2"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Lease write and a dry run leave the view open.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "view-a"}}
	if _, err := c.Kube.CoordinationV1().Leases("view-a").Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().ConfigMaps("view-b").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dry"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if !view.Open() {
		t.Fatal("a Lease write or a dry run ended the view")
	}
	cm, err := c.Kube.CoreV1().ConfigMaps("view-a").Get(vctx, "cm", metav1.GetOptions{})
	if err != nil || cm.Data["v"] != "1" {
		t.Fatalf("ConfigMap through the open view: %v %v, want the kept v=1", cm.Data, err)
	}
	// The run's first write ends the view: the next read is sent.
	if _, err := c.Kube.CoreV1().ConfigMaps("view-b").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if view.Open() {
		t.Fatal("the view is still open after a write")
	}
	r = c.Requests.Reads()
	cm, err = c.Kube.CoreV1().ConfigMaps("view-a").Get(vctx, "cm", metav1.GetOptions{})
	if err != nil || cm.Data["v"] != "2" {
		t.Fatalf("ConfigMap after the view ended: %v %v, want v=2", cm.Data, err)
	}
	if c.Requests.Reads() != r+1 {
		t.Error("a read after the view ended was not sent")
	}
}

// TestReadViewMaxAge: a view stops answering MaxAge after it began, and a
// watch through an open view is the server's.
func TestReadViewMaxAge(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, c := bareAPIServer(t, ctx)
	const age = 500 * time.Millisecond
	view := c.BeginView(kube.ViewOptions{MaxAge: age})
	defer view.End()
	vctx := kube.ViewReads(ctx)
	begun := time.Now()
	if _, err := c.Kube.CoreV1().Namespaces().Get(vctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	r := c.Requests.Reads()
	if _, err := c.Kube.CoreV1().Namespaces().Get(vctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if time.Since(begun) < age && c.Requests.Reads() != r {
		t.Fatal("the second GET within MaxAge was sent")
	}
	r = c.Requests.Reads()
	w, err := c.Kube.CoreV1().Namespaces().Watch(vctx, metav1.ListOptions{FieldSelector: "metadata.name=default"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ns, ok := ev.Object.(*corev1.Namespace); !ok || ns.Name != "default" {
			t.Errorf("first watch event %s %T, want the default Namespace", ev.Type, ev.Object)
		}
	case <-time.After(time.Minute):
		t.Error("no watch event through the view")
	}
	w.Stop()
	if c.Requests.Reads() != r+1 {
		t.Error("a watch through the open view was not sent")
	}
	time.Sleep(time.Until(begun.Add(age + 50*time.Millisecond)))
	if view.Open() {
		t.Fatal("the view is open past its MaxAge")
	}
	r = c.Requests.Reads()
	if _, err := c.Kube.CoreV1().Namespaces().Get(vctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if c.Requests.Reads() != r+1 {
		t.Error("a GET past MaxAge was answered by the view")
	}
}

// TestReadViewKeepView: a write marked kube.KeepView (maasctl's own
// bookkeeping) leaves the view open: reads of other resources are still
// answered, and the written resource is read again from the server, in
// every namespace, so the read after the write sees it. An unmarked write
// then ends the view.
func TestReadViewKeepView(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, c := bareAPIServer(t, ctx)
	view := c.BeginView(kube.ViewOptions{Whole: map[schema.GroupResource]kube.WholeList{{Resource: "namespaces"}: {}}})
	defer view.End()
	vctx := kube.ViewReads(ctx)
	cms := c.Kube.CoreV1().ConfigMaps("default")
	read := func() (nsSent, cmSent bool, cm *corev1.ConfigMap) {
		t.Helper()
		r := c.Requests.Reads()
		if _, err := c.Kube.CoreV1().Namespaces().Get(vctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		nsSent = c.Requests.Reads() != r
		r = c.Requests.Reads()
		l, err := c.Kube.CoreV1().ConfigMaps("").List(vctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cmSent = c.Requests.Reads() != r
		for i := range l.Items {
			if l.Items[i].Namespace == "default" && l.Items[i].Name == "bookkeeping" {
				cm = &l.Items[i]
			}
		}
		return nsSent, cmSent, cm
	}
	read()
	if ns, cm, _ := read(); ns || cm {
		t.Fatalf("repeated reads sent (Namespace %v, ConfigMaps %v), want both answered", ns, cm)
	}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bookkeeping"}, Data: map[string]string{"v": "1"}}
	if _, err := cms.Create(kube.KeepView(ctx), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !view.Open() {
		t.Fatal("a write marked KeepView ended the view")
	}
	ns, cmSent, got := read()
	if ns {
		t.Error("the Namespace GET after a ConfigMap write was sent, want it answered")
	}
	if !cmSent || got == nil || got.Data["v"] != "1" {
		t.Errorf("the ConfigMap LIST after the write: sent %v, found %v; want sent and holding the new ConfigMap", cmSent, got)
	}
	if _, _, again := read(); again == nil {
		t.Error("the ConfigMap LIST kept after the write lacks the new ConfigMap")
	}
	obj.Data["v"] = "2"
	if _, err := cms.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if view.Open() {
		t.Fatal("an unmarked write left the view open")
	}
	if ns, cmSent, got := read(); !ns || !cmSent || got == nil || got.Data["v"] != "2" {
		t.Errorf("after the view ended: Namespace sent %v, ConfigMaps sent %v, found %v; want both sent and v=2", ns, cmSent, got)
	}
}
