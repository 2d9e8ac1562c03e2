package e2e

// One test per field failure case of ../shared/cases/README.md. Each drives
// the built maasctl binary against the local control plane, with the
// simulated operators set to the case's failure mode, and checks what the
// case says a good installer does. Test names carry the case id.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/e2e/vaultserver"
	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/waiters"
)

// caseOptions is the starting point of one case: the fixture, the
// simulators' version, delays and faults, and the Vault stand-in.
type caseOptions struct {
	// rhoai is the simulated RHOAI release ("" = 3.5).
	rhoai  string
	delay  map[string]time.Duration
	faults sim.Faults
	// extra objects are applied after the default fixture.
	extra []*unstructured.Unstructured
	// edit changes the default fixture objects before they are applied.
	edit func(objs []*unstructured.Unstructured)
	// noSim runs no simulated operators (preflight-only cases).
	noSim bool
	// vault configures the Vault stand-in; RootToken is set here.
	vault vaultserver.Options
}

// newCaseCluster is newCluster with a case's starting point.
func newCaseCluster(t *testing.T, o caseOptions) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := testenv.FixtureObjects()
	if o.edit != nil {
		o.edit(objs)
	}
	objs = append(objs, o.extra...)
	olmDelay, simDelay := sim.SplitOLMDelay(o.delay)
	// The Kuadrant, Authorino and Limitador operators are always the real
	// ones (e2e/sim simulates none of them).
	env, err := testenv.Start(ctx, testenv.Options{Fixture: objs, OperatorPodReadyDelay: olmDelay, RealKuadrant: true})
	if errors.Is(err, testenv.ErrNotBuilt) && os.Getenv("MAASCTL_REQUIRE_TESTENV") == "" {
		t.Skipf("local control plane not built (%v): run make testenv", err)
	}
	if err != nil {
		t.Fatalf("start local control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	logsOnFailure(t, env)
	logAudit(t, env)
	clients, err := kube.New(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if !o.noSim {
		logger := simLogger(t, dir)
		so := sim.Options{RHOAIVersion: o.rhoai, Delay: simDelay, Faults: o.faults, Logger: logger, Postgres: env.Postgres().AdminConnString()}
		if so.IstioCRDs, err = testenv.IstioCRDFile(ctx); err != nil {
			t.Fatal(err)
		}
		// The published service CA bundle (openshift-service-ca.crt) also
		// holds the CA of the servers tests put behind Service names, as
		// newCluster's: Authorino trusts it only as it is mounted.
		if ca := env.ServiceCA(); ca != nil {
			so.ServiceCABundle = ca.PEM()
		}
		h, err := sim.Start(ctx, env.RESTConfig(), so)
		if err != nil {
			t.Fatalf("start simulators: %v", err)
		}
		t.Cleanup(func() { _ = h.Stop() })
	}
	token := "e2e-root-token-" + strings.ReplaceAll(t.Name(), "/", "-")
	vo := o.vault
	vo.RootToken = token
	vs := vaultserver.New(vo)
	addr, err := vs.Start(ctx)
	if err != nil {
		t.Fatalf("start Vault-API server: %v", err)
	}
	t.Cleanup(func() { _ = vs.Close() })
	return &cluster{env: env, clients: clients, vault: vs, vaultAddr: addr, vaultToken: token, dir: dir}
}

const (
	// kuadrantSteps, for --only, are the RHCL operator and the platform
	// phase (the Gateway, the Kuadrant CR, Authorino TLS): the steps the
	// real Kuadrant, Authorino and Limitador operators act in. A case
	// about them proves nothing more with the database, the other three
	// operators, the DSC and the models installed beside (about 60
	// CPU-seconds of the control plane for a whole install).
	kuadrantSteps = "operators/rhcl,platform"
	// olmSteps, for --only, are the four steps that install an operator
	// through OLM (CNPG, RHCL, LWS, RHOAI) and the LWS instance.
	olmSteps = "database/operator,operators"
)

// install runs maasctl install with JSON events.
func (c *cluster) install(t *testing.T, args ...string) run {
	t.Helper()
	return c.maasctl(t, append([]string{"install", "-o", "json"}, args...)...)
}

// failure returns the message of step's failed event and, on a line of
// its own, its fix (when it has one); "" when the step did not fail.
func failure(r run, step string) string {
	for _, ev := range r.events {
		if ev.Type != steps.EventFailed || ev.Step != step {
			continue
		}
		if ev.Fix != "" {
			return ev.Message + "\nfix: " + ev.Fix
		}
		return ev.Message
	}
	return ""
}

// progress joins the progress messages of step.
func progress(r run, step string) string {
	var b strings.Builder
	for _, ev := range r.events {
		if ev.Type == steps.EventProgress && ev.Step == step {
			b.WriteString(ev.Message + "\n")
		}
	}
	return b.String()
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

func mustSucceed(t *testing.T, r run) {
	t.Helper()
	if r.exit != 0 {
		t.Fatalf("maasctl exit %d, want 0\n%s\nstdout:\n%s", r.exit, failedSummary(r), r.stdout)
	}
}

// failedSummary puts the failed steps and stderr first, so that a log cut
// after its first lines (CI keeps a part of the output) still says why.
func failedSummary(r run) string {
	var b strings.Builder
	last := map[string]string{} // step -> its last event while it ran
	var running []string
	for _, ev := range r.events {
		switch ev.Type {
		case steps.EventFailed:
			fmt.Fprintf(&b, "failed step %s: %s\n", ev.Step, ev.Message)
			delete(last, ev.Step)
		case steps.EventStarted:
			if _, ok := last[ev.Step]; !ok {
				running = append(running, ev.Step)
			}
			last[ev.Step] = ev.Time.Format("15:04:05") + " started"
		case steps.EventProgress:
			if _, ok := last[ev.Step]; ok {
				last[ev.Step] = ev.Time.Format("15:04:05") + " " + ev.Message
			}
		case steps.EventDone, steps.EventUnchanged, steps.EventBlocked:
			delete(last, ev.Step)
		}
	}
	// A run killed by the harness's timeout (exit -1) never says why:
	// the steps still running and what each last reported do.
	for _, id := range running {
		if msg, ok := last[id]; ok {
			fmt.Fprintf(&b, "still running at exit: %s, last: %s\n", id, msg)
		}
	}
	fmt.Fprintf(&b, "stderr:\n%s", r.stderr)
	return b.String()
}

func mustFail(t *testing.T, r run) {
	t.Helper()
	if r.exit == 0 {
		t.Fatalf("maasctl exit 0, want a failure\nstdout:\n%s", r.stdout)
	}
}

func obj(apiVersion, kind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	m := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}
	if ns != "" {
		m["metadata"].(map[string]any)["namespace"] = ns
	}
	for k, v := range fields {
		m[k] = v
	}
	return &unstructured.Unstructured{Object: m}
}

func namespace(name string) *unstructured.Unstructured { return obj("v1", "Namespace", "", name, nil) }

// exists reports whether the object exists (its kind served and found).
func (c *cluster) exists(t *testing.T, apiVersion, kind, ns, name string) bool {
	t.Helper()
	_, err := c.clients.Get(context.Background(), obj(apiVersion, kind, ns, name, nil))
	switch {
	case err == nil:
		return true
	case apierrors.IsNotFound(err), kube.IsNotServed(err):
		return false
	}
	t.Fatalf("get %s %s/%s: %v", kind, ns, name, err)
	return false
}

// cacheSees waits (up to 30 s) until a cluster-wide LIST of gvk from the
// API server's watch cache (resourceVersion 0, as maasctl's preflight and
// every informer read) holds ns/name: a test that creates an object and at
// once runs maasctl would otherwise race the cache, which trails etcd by
// milliseconds and by more on a loaded machine.
func (c *cluster) cacheSees(t *testing.T, gvk schema.GroupVersionKind, ns, name string) {
	t.Helper()
	ri, _, err := c.clients.Resource(gvk, "")
	if err != nil {
		t.Fatalf("%s: %v", gvk.Kind, err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := ri.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		for _, it := range l.Items {
			if it.GetNamespace() == ns && it.GetName() == name {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the API server's watch cache never listed %s %s/%s: %v", gvk.Kind, ns, name, err)
	}
}

// list lists a kind in ns ("" all); a kind not served lists empty.
func (c *cluster) list(t *testing.T, gvk schema.GroupVersionKind, ns string) []unstructured.Unstructured {
	t.Helper()
	ri, _, err := c.clients.Resource(gvk, ns)
	if kube.IsNotServed(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	l, err := ri.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// assertNothingWritten fails when any object carries maasctl's managed-by
// label outside its own state namespace, or a namespace of the install
// exists: preflight must stop before any write.
func assertNothingWritten(t *testing.T, c *cluster) {
	t.Helper()
	for _, ns := range []string{"rhoai-maas-db", "kuadrant-system", "redhat-ai-gateway-infra", "models-as-a-service", "openshift-lws-operator"} {
		if c.exists(t, "v1", "Namespace", "", ns) {
			t.Errorf("namespace %s exists: the install wrote before preflight passed", ns)
		}
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "Subscription"},
		{Group: "operators.coreos.com", Version: "v1", Kind: "OperatorGroup"},
		{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "GatewayClass"},
		{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"},
		{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"},
		{Version: "v1", Kind: "ConfigMap"},
		{Version: "v1", Kind: "Secret"},
	} {
		for _, it := range c.list(t, gvk, "") {
			if it.GetLabels()[assets.ManagedByLabel] == assets.ManagedByValue && it.GetNamespace() != steps.StateNamespace {
				t.Errorf("%s %s/%s was written before preflight passed", gvk.Kind, it.GetNamespace(), it.GetName())
			}
		}
	}
}

// recorder keeps every watch event of one kind, with resourceVersions: a
// single etcd orders them, so events of different kinds can be compared.
type recorder struct {
	mu     sync.Mutex
	events []recorded
}

type recorded struct {
	typ watch.EventType
	rv  int64
	obj *unstructured.Unstructured
}

// record starts watching gvr in ns ("" all) until the test ends.
func (c *cluster) record(t *testing.T, gvr schema.GroupVersionResource, ns, selector string) *recorder {
	t.Helper()
	ri := c.clients.Dynamic.Resource(gvr).Namespace(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return ri.Watch(ctx, o)
		},
	}
	r := &recorder{}
	add := func(typ watch.EventType, o any) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return
		}
		rv, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
		r.mu.Lock()
		r.events = append(r.events, recorded{typ: typ, rv: rv, obj: u.DeepCopy()})
		r.mu.Unlock()
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	start := func() bool {
		inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { add(watch.Added, o) },
			UpdateFunc: func(_, o any) { add(watch.Modified, o) },
			DeleteFunc: func(o any) { add(watch.Deleted, o) },
		}); err != nil {
			return false
		}
		go inf.Run(stop)
		return cache.WaitForCacheSync(stop, inf.HasSynced)
	}
	if _, err := ri.List(context.Background(), metav1.ListOptions{Limit: 1}); apierrors.IsNotFound(err) {
		// The kind is served only once its operator registers the CRD:
		// start watching the moment the CRD is Established, long before
		// maasctl creates an object of it.
		go func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { <-stop; cancel() }()
			crds := c.clients.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
			clw := &cache.ListWatch{
				ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return crds.List(ctx, o) },
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return crds.Watch(ctx, o) },
			}
			_, err := watchtools.UntilWithSync(ctx, clw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok || u.GetName() != gvr.Resource+"."+gvr.Group {
					return false, nil
				}
				return waiters.ConditionTrue("Established")(u).Done, nil
			})
			if err == nil {
				start()
			}
		}()
		return r
	}
	if !start() {
		t.Fatalf("sync watch of %s", gvr)
	}
	return r
}

// first returns the resourceVersion of the first event accepted by ok, or
// -1 when none was.
func (r *recorder) first(ok func(recorded) bool) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := slices.Clone(r.events)
	sort.Slice(evs, func(i, j int) bool { return evs[i].rv < evs[j].rv })
	for _, e := range evs {
		if ok(e) {
			return e.rv
		}
	}
	return -1
}

// uids returns the distinct object UIDs seen.
func (r *recorder) uids() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, e := range r.events {
		out[string(e.obj.GetUID())] = true
	}
	return out
}

// podsPerTemplate counts the recorded pods of each pod template
// (label pod-template-hash: one per ReplicaSet of a Deployment). A restart
// (pod deleted, the ReplicaSet makes another) adds a pod to its template;
// a rollout (OLM writing the Subscription's env into the Deployment)
// starts a new template.
func (r *recorder) podsPerTemplate() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	out := map[string]int{}
	for _, e := range r.events {
		if uid := string(e.obj.GetUID()); !seen[uid] {
			seen[uid] = true
			out[e.obj.GetLabels()["pod-template-hash"]]++
		}
	}
	return out
}

var (
	gvrPods       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvrSecrets    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	gvrServices   = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	gvrDSC        = schema.GroupVersionResource{Group: "datasciencecluster.opendatahub.io", Version: "v2", Resource: "datascienceclusters"}
	gvrAuthorinos = schema.GroupVersionResource{Group: "operator.authorino.kuadrant.io", Version: "v1beta1", Resource: "authorinos"}
	gvkDSCI       = schema.GroupVersionKind{Group: "dscinitialization.opendatahub.io", Version: "v2", Kind: "DSCInitialization"}
	gvkIP         = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "InstallPlan"}
	gvkSub        = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "Subscription"}
	gvkHTTPRoute  = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}
)

// TestB01KuadrantMissingDependency: the Kuadrant operator starts before
// Istio; maasctl restarts it exactly once, judging by the condition reason
// (whatever the message says: steps TestKuadrantReadyOrMissing); when the
// dependency stays missing it stops with MissingDependency, the
// GatewayClass and a bounded number of restarts, and verify and doctor
// name the state.
func TestB01KuadrantMissingDependency(t *testing.T) {
	parallel(t)
	const sel = "app=kuadrant,control-plane=controller-manager"
	t.Run("restarted once", func(t *testing.T) {
		// The real kuadrant-operator started before Istio. That the restart
		// is judged by the reason whatever the message says is pure logic
		// (steps TestKuadrantReadyOrMissing): the real operator writes its
		// one message.
		c := newCaseCluster(t, caseOptions{
			delay:  map[string]time.Duration{sim.Gateway: 8 * time.Second},
			faults: sim.Faults{IstioAfterKuadrantOperator: true},
		})
		pods := c.record(t, gvrPods, "openshift-operators", sel)
		kuadrants := c.record(t, gvrKuadrants, "kuadrant-system", "")
		r := c.install(t, "--only", kuadrantSteps, "--set", "waitTimeoutSeconds=150")
		mustSucceed(t, r)
		// The restart is owed only when the Kuadrant CR reported
		// MissingDependency: under load OLM may roll the RHCL env out (a
		// new pod template, which is a restart of its own) after Istio
		// appeared, and the operator then never reports it.
		missing := kuadrants.first(func(e recorded) bool {
			c, ok := waiters.GetCondition(e.obj, "Ready")
			return ok && c.Status == "False" && c.Reason == "MissingDependency"
		}) >= 0
		want := 0
		if missing {
			want = 1
		}
		if n := strings.Count(progress(r, "platform/kuadrant"), "restarting the Kuadrant operator (pods"); n != want {
			t.Errorf("%d restarts reported, want exactly %d (MissingDependency reported: %v):\n%s", n, want, missing, progress(r, "platform/kuadrant"))
		}
		// A restart replaces one pod of a template. A second template
		// (OLM rolling the RHCL env out when the Deployment was made before
		// the Subscription's env was in) is not a restart.
		replaced := 0
		for tmpl, n := range pods.podsPerTemplate() {
			if n > 2 {
				t.Errorf("pod template %s had %d Kuadrant operator pods, want at most 2 (one restart)", tmpl, n)
			}
			replaced += n - 1
		}
		if replaced != want {
			t.Errorf("%d Kuadrant operator pods were replaced (per template %v), want %d", replaced, pods.podsPerTemplate(), want)
		}
		kq := get(t, c, "kuadrant.io/v1beta1", "Kuadrant", "kuadrant-system", "kuadrant")
		if cond, _ := waiters.GetCondition(kq, "Ready"); cond.Status != "True" {
			t.Errorf("Kuadrant %s", cond)
		}
	})
	t.Run("dependency that stays missing", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{
			delay:  map[string]time.Duration{sim.Gateway: 5 * time.Second},
			faults: sim.Faults{KuadrantStuckMissingDependency: true},
		})
		pods := c.record(t, gvrPods, "openshift-operators", sel)
		r := c.install(t, "--set", "waitTimeoutSeconds=60")
		mustFail(t, r)
		msg := failure(r, "platform/kuadrant")
		mustContain(t, "platform/kuadrant failure", msg, "MissingDependency", "GatewayClass openshift-default", "oc delete pod -n openshift-operators -l "+sel)
		if n := strings.Count(progress(r, "platform/kuadrant"), "restarting the Kuadrant operator (pods"); n > 1 {
			t.Errorf("%d restarts reported, want at most 1 (one bounded restart):\n%s", n, progress(r, "platform/kuadrant"))
		}
		for tmpl, n := range pods.podsPerTemplate() {
			if n > 2 {
				t.Errorf("pod template %s had %d Kuadrant operator pods, want at most 2 (one bounded restart)", tmpl, n)
			}
		}
		// Independent steps finished and stay done for a re-run.
		done := stepsWith(r.events, steps.EventDone)
		for _, id := range []string{"database/cluster", "operators/rhoai", "platform/gateway"} {
			if !slices.Contains(done, id) {
				t.Errorf("independent step %s did not finish: done %v", id, done)
			}
		}
		// verify and doctor judge the real operator's MissingDependency on
		// the live cluster: the Kuadrant check fails with the B01 cause,
		// and doctor reports MAAS-D002 with the restart.
		rep, vr := verifyRun(t, c, nil)
		expectVerifyFails(t, rep, vr, verify.CodeKuadrantReady, "started before Istio")
		expectFinding(t, c, nil, doctorFinding{code: doctor.CodeKuadrantMissingDep, object: "Kuadrant kuadrant-system/kuadrant",
			evidence: "MissingDependency", fix: "oc delete pod -n openshift-operators -l " + sel})
	})
}

// TestB02OLMInstallsThatNeverFinish: a CSV that appears late is waited
// for; a Manual InstallPlan is approved only with --approve-installplans and
// only when it installs the expected CSV; two OperatorGroups stop the run
// before any Subscription exists.
func TestB02OLMInstallsThatNeverFinish(t *testing.T) {
	parallel(t)
	t.Run("csv created 20s after the subscription", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{delay: map[string]time.Duration{sim.OLM: 20 * time.Second}})
		mustSucceed(t, c.install(t, "--only", olmSteps))
	})
	t.Run("installplan requires approval", func(t *testing.T) {
		// Every Subscription is Manual, so the real OLM makes every
		// InstallPlan Manual (as when another Subscription of a namespace
		// is Manual, case B02 b);
		// next to it waits a Manual plan that no Subscription references,
		// for a CSV the channel does not resolve to, as a newer catalog
		// version leaves one (enclave PR #467).
		extra := obj("operators.coreos.com/v1alpha1", "InstallPlan", "redhat-ods-operator", "install-extra", map[string]any{
			"spec": map[string]any{
				"approval": "Manual", "approved": false, "generation": int64(2),
				"clusterServiceVersionNames": []any{"rhods-operator.3.6.0"},
				"source":                     "redhat-operators", "sourceNamespace": "openshift-marketplace",
			},
		})
		c := newCaseCluster(t, caseOptions{extra: []*unstructured.Unstructured{namespace("redhat-ods-operator"), extra}})
		manual := []string{"--set", "database.operator.approval=Manual"}
		for _, id := range []string{"rhcl", "lws", "rhoai"} {
			manual = append(manual, "--set", "operators["+id+"].approval=Manual")
		}
		r := c.install(t, append(manual, "--only", olmSteps, "--set", "waitTimeoutSeconds=60")...)
		mustFail(t, r)
		msg := failure(r, "operators/rhoai")
		mustContain(t, "operators/rhoai failure", msg, "InstallPlan redhat-ods-operator/install-", "rhods-operator.3.5.0", "--approve-installplans")
		for _, ip := range c.list(t, gvkIP, "") {
			if a, _, _ := unstructured.NestedBool(ip.Object, "spec", "approved"); a {
				t.Errorf("InstallPlan %s/%s was approved without --approve-installplans", ip.GetNamespace(), ip.GetName())
			}
		}
		r = c.install(t, append(manual, "--only", olmSteps, "--approve-installplans", "--set", "waitTimeoutSeconds=120")...)
		mustSucceed(t, r)
		extras := 0
		for _, ip := range c.list(t, gvkIP, "") {
			csvs, _, _ := unstructured.NestedStringSlice(ip.Object, "spec", "clusterServiceVersionNames")
			a, _, _ := unstructured.NestedBool(ip.Object, "spec", "approved")
			if slices.Contains(csvs, "rhods-operator.3.6.0") {
				extras++
				if a {
					t.Errorf("InstallPlan %s for the unexpected CSV rhods-operator.3.6.0 was approved", ip.GetName())
				}
			} else if !a {
				t.Errorf("InstallPlan %s/%s (%v) not approved", ip.GetNamespace(), ip.GetName(), csvs)
			}
		}
		if extras != 1 {
			t.Errorf("%d InstallPlans for the unexpected CSV, want 1 (the fault did not apply?)", extras)
		}
	})
	t.Run("two operatorgroups", func(t *testing.T) {
		og := func(name string) *unstructured.Unstructured {
			return obj("operators.coreos.com/v1", "OperatorGroup", "redhat-ods-operator", name, map[string]any{"spec": map[string]any{}})
		}
		c := newCaseCluster(t, caseOptions{noSim: true, extra: []*unstructured.Unstructured{namespace("redhat-ods-operator"), og("og-a"), og("og-b")}})
		r := c.install(t, "--set", "waitTimeoutSeconds=30")
		mustFail(t, r)
		mustContain(t, "preflight failure", failure(r, steps.PreflightStepID), "operator-groups", "og-a", "og-b", "redhat-ods-operator")
		if subs := c.list(t, gvkSub, ""); len(subs) != 0 {
			t.Errorf("%d Subscriptions exist; the run must stop before creating one", len(subs))
		}
		assertNothingWritten(t, c)
	})
}

// TestB03CRDRegisteredLate: the MaaS CRDs appear 40 s after the DSC; one
// run, with discovery warm from its start, succeeds. A CRD that never
// appears ends the run naming it and the DSC field that should register it.
func TestB03CRDRegisteredLate(t *testing.T) {
	parallel(t)
	const crd = "maassubscriptions.maas.opendatahub.io"
	t.Run("registered 40s late", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{faults: sim.Faults{CRDDelay: map[string]time.Duration{crd: 40 * time.Second}}})
		mustSucceed(t, c.install(t))
		sub := get(t, c, "maas.opendatahub.io/v1alpha1", "MaaSSubscription", "models-as-a-service", "llama-coder-default")
		if p, _, _ := unstructured.NestedString(sub.Object, "status", "phase"); p != "Active" {
			t.Errorf("MaaSSubscription phase %q, want Active", p)
		}
	})
	t.Run("never registered", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{faults: sim.Faults{MissingCRDs: []string{crd}}})
		// 45 s bounds the CRD wait; on a loaded machine the operators'
		// installs can take longer than that (a CI check, 2026-12-07:
		// rhoai/dsc not reached in the first run), and a run that timed
		// out goes on where it stopped, so it is run again until the DSC
		// step is reached (at most three runs).
		var r run
		for i := 0; i < 3; i++ {
			r = c.install(t, "--set", "waitTimeoutSeconds=45")
			mustFail(t, r)
			if failure(r, "rhoai/dsc") != "" || r.exit != 4 {
				break
			}
			t.Logf("run %d timed out before rhoai/dsc failed; running again", i+1)
		}
		mustContain(t, "rhoai/dsc failure", failure(r, "rhoai/dsc"), crd, "aigateway.modelsAsAService")
	})
}

// TestB05DSCSingletonsAndHiddenMaaS: the operator's default-dsci is adopted
// rather than a second DSCI created, an existing DSC is adopted too, and a
// DSC that says Ready while MaaS failed is not success: the run stops
// quoting the MaaS condition and telling to set llamastackoperator Removed.
func TestB05DSCSingletonsAndHiddenMaaS(t *testing.T) {
	parallel(t)
	t.Run("adopt default-dsci and an existing DSC", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{})
		r := c.install(t, "--set", "rhoai.dsciName=maasctl-dsci")
		mustSucceed(t, r)
		var names []string
		for _, d := range c.list(t, gvkDSCI, "") {
			names = append(names, d.GetName())
		}
		if strings.Join(names, ",") != "default-dsci" {
			t.Errorf("DSCInitializations %v, want only the operator's default-dsci", names)
		}
		mustContain(t, "rhoai/dsci progress", progress(r, "rhoai/dsci"), "adopting DSCInitialization default-dsci")
		// A second run with another DSC name patches the DSC that exists,
		// and verify reads the adopted DSC, not the inventory's name.
		r = c.install(t, "--set", "rhoai.dsciName=maasctl-dsci", "--set", "rhoai.dscName=maasctl-dsc")
		mustSucceed(t, r)
		v := c.maasctl(t, "verify", "--live-only", "--set", "rhoai.dscName=maasctl-dsc")
		if v.exit != 0 {
			t.Errorf("maasctl verify --live-only with rhoai.dscName=maasctl-dsc: exit %d\n%s\n%s", v.exit, v.stdout, v.stderr)
		}
		mustContain(t, "verify output", v.stdout, "DataScienceCluster default-dsc")
		if msg := failure(r, "rhoai/dsc"); msg != "" || !slices.Contains(stepsWith(r.events, steps.EventDone), "rhoai/dsc") {
			t.Fatalf("rhoai/dsc did not adopt the existing DSC: %s\n%s", msg, r.stdout)
		}
		mustContain(t, "rhoai/dsc progress", progress(r, "rhoai/dsc"), "adopting DataScienceCluster default-dsc")
		if c.exists(t, "datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "maasctl-dsc") {
			t.Errorf("a second DataScienceCluster maasctl-dsc was created")
		}
	})
	t.Run("aggregate ready hides maas", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{faults: sim.Faults{DSCReadyHidesMaaS: true}})
		comps := []string{
			"--set", "rhoai.managedComponents=[dashboard,kserve,aigateway,ogx,llamastackoperator]",
			"--set", "rhoai.removedComponents=[aipipelines,feastoperator,kueue,mcplifecycleoperator,mlflowoperator,modelregistry,ray,sparkoperator,trainer,trainingoperator,trustyai,workbenches]",
		}
		r := c.install(t, comps...)
		mustFail(t, r)
		mustContain(t, "preflight failure", failure(r, steps.PreflightStepID), "dsc:", "ogx and llamastackoperator are both Managed")
		r = c.install(t, append(comps, "--ignore-preflight", "dsc", "--set", "waitTimeoutSeconds=150")...)
		mustFail(t, r)
		msg := failure(r, "rhoai/dsc")
		mustContain(t, "rhoai/dsc failure", msg, "LlamaStackOperator is set to Managed; set it to Removed before enabling OGX", "set llamastackoperator to Removed")
		for _, ev := range r.events {
			if ev.Type == steps.EventFailed && ev.Step == "rhoai/dsc" && ev.Duration > 60*time.Second {
				t.Errorf("rhoai/dsc failed after %s; the conflict must end the wait at once", ev.Duration)
			}
		}
	})
}

// TestB06DBConfigBeforeDSC: a stale maas-db-config with a short host sits
// in the applications namespace; on 3.5 maasctl writes the Secret, with the
// service FQDN, into the applications and the gateway-infra namespaces
// before the DSC switches MaaS on (order seen by a watch).
func TestB06DBConfigBeforeDSC(t *testing.T) {
	parallel(t)
	stale := obj("v1", "Secret", "redhat-ods-applications", "maas-db-config", map[string]any{
		"type": "Opaque",
		"data": map[string]any{"DB_CONNECTION_URL": base64.StdEncoding.EncodeToString([]byte("postgresql://maas:x@maas-postgres-rw:5432/maas?sslmode=require"))},
	})
	c := newCaseCluster(t, caseOptions{extra: []*unstructured.Unstructured{namespace("redhat-ods-applications"), stale}})
	secrets := c.record(t, gvrSecrets, "", "")
	dscs := c.record(t, gvrDSC, "", "")
	mustSucceed(t, c.install(t))

	maasOn := dscs.first(func(e recorded) bool {
		s, _, _ := unstructured.NestedString(e.obj.Object, "spec", "components", "aigateway", "modelsAsAService", "managementState")
		return s == "Managed"
	})
	if maasOn < 0 {
		t.Fatal("no DataScienceCluster with aigateway.modelsAsAService Managed was seen")
	}
	for _, ns := range []string{"redhat-ods-applications", "redhat-ai-gateway-infra"} {
		written := secrets.first(func(e recorded) bool {
			if e.obj.GetNamespace() != ns || e.obj.GetName() != "maas-db-config" || e.typ == watch.Deleted {
				return false
			}
			enc, _, _ := unstructured.NestedString(e.obj.Object, "data", "DB_CONNECTION_URL")
			raw, _ := base64.StdEncoding.DecodeString(enc)
			u, err := url.Parse(string(raw))
			return err == nil && strings.HasSuffix(u.Hostname(), ".svc")
		})
		switch {
		case written < 0:
			t.Errorf("maas-db-config in %s never got a URL whose host ends in .svc", ns)
		case written > maasOn:
			t.Errorf("maas-db-config in %s written (rv %d) after MaaS was switched on (rv %d)", ns, written, maasOn)
		}
	}
}

// TestB07CNPGCredentials: maasctl builds DB_CONNECTION_URL itself from its
// basic-auth Secret, never from <cluster>-app (which CNPG does not create
// for a custom initdb secret); a password with URL delimiters is encoded so
// maas-api connects; one with a line break is refused, unprinted.
func TestB07CNPGCredentials(t *testing.T) {
	parallel(t)
	seed := func(t *testing.T, c *cluster, pw string) {
		t.Helper()
		cfg := api.DefaultConfig()
		cfg.Address = c.vaultAddr
		vc, err := api.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		vc.SetToken(c.vaultToken)
		if _, err := vc.KVv2(vaultMount).Put(context.Background(), vaultPath, map[string]any{"username": "maas", "password": pw}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("password with url delimiters", func(t *testing.T) {
		const pw = "p:s/@#?a b%&=x+y"
		c := newCaseCluster(t, caseOptions{})
		seed(t, c, pw)
		r := c.install(t, "--set", "waitTimeoutSeconds=120")
		mustSucceed(t, r)
		if c.exists(t, "v1", "Secret", "rhoai-maas-db", "maas-postgres-app") {
			t.Errorf("Secret maas-postgres-app exists; CNPG does not create it for a custom initdb secret")
		}
		sec, err := c.clients.Kube.CoreV1().Secrets("redhat-ai-gateway-infra").Get(context.Background(), "maas-db-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(string(sec.Data["DB_CONNECTION_URL"]))
		if err != nil {
			t.Fatalf("DB_CONNECTION_URL does not parse")
		}
		got, _ := u.User.Password()
		if u.User.Username() != "maas" || got != pw || u.Host != "maas-postgres-rw.rhoai-maas-db.svc:5432" || u.Path != "/maas" {
			t.Errorf("DB_CONNECTION_URL parses to user %q host %q path %q, password equal: %v", u.User.Username(), u.Host, u.Path, got == pw)
		}
		assertNoSecret(t, c, pw, map[string]string{"stdout": r.stdout, "stderr": r.stderr})
	})
	t.Run("password with a line break", func(t *testing.T) {
		const pw = "Secr3t-password-with-a-trailing-newline\n"
		c := newCaseCluster(t, caseOptions{})
		seed(t, c, pw)
		r := c.install(t, "--only", "database/secret")
		mustFail(t, r)
		mustContain(t, "database/secret failure", failure(r, "database/secret"), "line break", "kv/cloudnativepg/maas-postgres")
		if strings.Contains(r.stdout+r.stderr, strings.TrimSpace(pw)) {
			t.Errorf("the password appears in the output")
		}
		if c.exists(t, "v1", "Secret", "rhoai-maas-db", "maas-postgres-secret") {
			t.Errorf("the basic-auth Secret was written with a bad password")
		}
	})
}

// TestB09CNPGStuckSettingUpPrimary: a failed initdb Job ends the run fast
// with the Job's name, reason and logs command instead of waiting for the
// timeout; PVCs of an earlier Cluster stop the run before a Cluster exists.
func TestB09CNPGStuckSettingUpPrimary(t *testing.T) {
	parallel(t)
	t.Run("failed initdb job", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{faults: sim.Faults{CNPGInitdbFails: true}})
		r := c.install(t, "--only", "database", "--set", "waitTimeoutSeconds=240")
		mustFail(t, r)
		mustContain(t, "database/cluster failure", failure(r, "database/cluster"), "maas-postgres-1-initdb", "BackoffLimitExceeded", "kubectl logs job/maas-postgres-1-initdb")
		for _, ev := range r.events {
			if ev.Type == steps.EventFailed && ev.Step == "database/cluster" && ev.Duration > 60*time.Second {
				t.Errorf("database/cluster failed after %s; a failed Job must end the wait at once", ev.Duration)
			}
		}
	})
	t.Run("stale pvc without its cluster", func(t *testing.T) {
		pvc := obj("v1", "PersistentVolumeClaim", "rhoai-maas-db", "maas-postgres-1", map[string]any{
			"spec": map[string]any{
				"accessModes":      []any{"ReadWriteOnce"},
				"storageClassName": "standard",
				"resources":        map[string]any{"requests": map[string]any{"storage": "5Gi"}},
			},
		})
		pvc.SetLabels(map[string]string{"cnpg.io/cluster": "maas-postgres"})
		c := newCaseCluster(t, caseOptions{noSim: true, extra: []*unstructured.Unstructured{namespace("rhoai-maas-db"), pvc}})
		r := c.install(t, "--set", "waitTimeoutSeconds=30")
		mustFail(t, r)
		mustContain(t, "preflight failure", failure(r, steps.PreflightStepID), "stale-pvcs", "maas-postgres-1", "oc delete pvc -l cnpg.io/cluster=maas-postgres -n rhoai-maas-db")
		if c.exists(t, "postgresql.cnpg.io/v1", "Cluster", "rhoai-maas-db", "maas-postgres") {
			t.Errorf("the CNPG Cluster was created over stale PVCs")
		}
	})
}

// TestB11VaultPolicyWithoutDataSegment: a KV v2 policy written for the
// logical path (no data/) fails preflight before any Kubernetes write,
// naming the API path and the policy stanza; a token about to expire fails
// preflight showing its TTL.
func TestB11VaultPolicyWithoutDataSegment(t *testing.T) {
	parallel(t)
	t.Run("policy without data/", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{noSim: true, vault: vaultserver.Options{Tokens: map[string][]vaultserver.Rule{
			"b11-token": {{Path: "kv/cloudnativepg/*", Capabilities: []string{"create", "read", "update"}}},
		}}})
		c.vaultToken = "b11-token"
		r := c.install(t, "--set", "waitTimeoutSeconds=30")
		mustFail(t, r)
		mustContain(t, "preflight failure", failure(r, steps.PreflightStepID), "vault:", "kv/data/cloudnativepg/maas-postgres")
		assertNothingWritten(t, c)
		if n := c.vault.Versions(vaultMount, vaultPath); n != 0 {
			t.Errorf("Vault holds %d versions; nothing may be written", n)
		}
	})
	t.Run("token about to expire", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{noSim: true, vault: vaultserver.Options{Policies: map[string]string{
			"maasctl": `path "kv/data/cloudnativepg/*" { capabilities = ["create", "read", "update"] }
path "kv/metadata/cloudnativepg/*" { capabilities = ["read"] }`,
		}}})
		cfg := api.DefaultConfig()
		cfg.Address = c.vaultAddr
		vc, err := api.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		vc.SetToken(c.vaultToken)
		sec, err := vc.Auth().Token().Create(&api.TokenCreateRequest{Policies: []string{"maasctl"}, TTL: "30s", ExplicitMaxTTL: "30s"})
		if err != nil {
			t.Skipf("the Vault stand-in cannot create tokens with a TTL: %v", err)
		}
		c.vaultToken = sec.Auth.ClientToken
		r := c.maasctl(t, "preflight")
		mustFail(t, r)
		mustContain(t, "preflight output", r.stdout, "the Vault token expires in")
	})
	t.Run("token revoked after the Vault step", func(t *testing.T) {
		// The case's test 3: later steps don't need Vault, so the run
		// succeeds although the token is gone.
		c := newCaseCluster(t, caseOptions{delay: map[string]time.Duration{"cnpg": 3 * time.Second}, vault: vaultserver.Options{Policies: map[string]string{
			"maasctl": `path "kv/data/cloudnativepg/*" { capabilities = ["create", "read"] }`,
		}}})
		tok, err := c.vault.CreateToken(vaultserver.TokenOptions{Policies: []string{"maasctl"}, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		revoked := false
		r, err := installStreaming(t, c, []string{"VAULT_TOKEN=" + tok}, func(ev steps.Event) {
			if ev.Type == steps.EventDone && ev.Step == "database/secret" && !revoked {
				revoked = c.vault.RevokeToken(tok)
			}
		})
		if err != nil || !revoked {
			t.Fatalf("install with the token revoked after database/secret: %v (revoked=%v), want exit 0\n%s", err, revoked, failedSummary(r))
		}
		if s := summary(t, r.events); len(s.Done) != len(registryIDs(t)) {
			t.Errorf("%d steps done, want %d", len(s.Done), len(registryIDs(t)))
		}
	})
}

// TestB12AuthorinoTLS: the Service is annotated, the service CA's Secret
// awaited, then Authorino patched (order seen by watches) and Ready; run as
// an identity without get on namespace kuadrant-system, maasctl names that
// permission and reports no success.
func TestB12AuthorinoTLS(t *testing.T) {
	parallel(t)
	t.Run("annotate, wait for the secret, then patch", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{delay: map[string]time.Duration{sim.ServiceCA: 10 * time.Second}})
		svcs := c.record(t, gvrServices, "kuadrant-system", "")
		secrets := c.record(t, gvrSecrets, "kuadrant-system", "")
		authorinos := c.record(t, gvrAuthorinos, "", "")
		mustSucceed(t, c.install(t, "--only", kuadrantSteps))
		annotated := svcs.first(func(e recorded) bool {
			return e.obj.GetName() == "authorino-authorino-authorization" && e.obj.GetAnnotations()["service.beta.openshift.io/serving-cert-secret-name"] == "authorino-server-cert"
		})
		created := secrets.first(func(e recorded) bool { return e.obj.GetName() == "authorino-server-cert" })
		patched := authorinos.first(func(e recorded) bool {
			on, _, _ := unstructured.NestedBool(e.obj.Object, "spec", "listener", "tls", "enabled")
			return on
		})
		if annotated < 0 || created < 0 || patched < 0 || !(annotated < created && created < patched) {
			t.Errorf("write order Service annotated (rv %d) < Secret created (rv %d) < Authorino TLS on (rv %d) does not hold", annotated, created, patched)
		}
		a := get(t, c, "operator.authorino.kuadrant.io/v1beta1", "Authorino", "kuadrant-system", "authorino")
		if cond, _ := waiters.GetCondition(a, "Ready"); cond.Status != "True" {
			t.Errorf("Authorino %s", cond)
		}
	})
	t.Run("permission missing", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{noSim: true})
		kubeconfig := limitedKubeconfig(t, c)
		r := c.maasctl(t, "preflight", "--kubeconfig", kubeconfig)
		mustFail(t, r)
		mustContain(t, "preflight output", r.stdout, "cannot get namespaces kuadrant-system")
		if strings.Contains(r.stdout, " 0 error(s)") {
			t.Errorf("preflight reported success:\n%s", r.stdout)
		}
		// install stops too, naming the permission (before any step when
		// the runner's record of adopted objects already needs it).
		r = c.install(t, "--kubeconfig", kubeconfig)
		mustFail(t, r)
		mustContain(t, "install output", r.stderr+failure(r, steps.PreflightStepID), "namespaces", "kuadrant-system")
		if stepsWith(r.events, steps.EventDone) != nil {
			t.Errorf("steps reported done: %v", stepsWith(r.events, steps.EventDone))
		}
	})
}

// limitedKubeconfig creates a ServiceAccount that may do everything the
// install does except get Namespace kuadrant-system, and returns a
// kubeconfig with its token.
func limitedKubeconfig(t *testing.T, c *cluster) string {
	t.Helper()
	ctx := context.Background()
	k := c.clients.Kube
	const ns, name = "default", "maasctl-limited"
	if _, err := k.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	groups := []string{"apps", "batch", "coordination.k8s.io", "apiextensions.k8s.io", "storage.k8s.io", "operators.coreos.com",
		"packages.operators.coreos.com", "cert-manager.io", "acme.cert-manager.io", "gateway.networking.k8s.io", "route.openshift.io",
		"config.openshift.io", "kuadrant.io", "operator.authorino.kuadrant.io", "postgresql.cnpg.io", "operator.openshift.io",
		"dscinitialization.opendatahub.io", "datasciencecluster.opendatahub.io", "opendatahub.io", "maas.opendatahub.io",
		"inference.opendatahub.io", "components.platform.opendatahub.io"}
	gettable := []string{"rhoai-maas-db", "openshift-operators", "openshift-lws-operator", "redhat-ods-operator", "redhat-ai-gateway-infra",
		"redhat-ods-applications", "llm-coding-assistant", "models-as-a-service", "openshift-ingress", "openshift-monitoring", steps.StateNamespace}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services", "pods", "persistentvolumeclaims", "events", "serviceaccounts", "endpoints"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch", "create", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: gettable, Verbs: []string{"get"}},
			{APIGroups: groups, Resources: []string{"*"}, Verbs: []string{"*"}},
		},
	}
	if _, err := k.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}
	if _, err := k.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return tokenKubeconfig(t, c, ns, name, "limited.kubeconfig")
}

// TestB13CertificateNotReady: a Certificate stuck on DNS-01 ends the run
// naming the Certificate and the challenge reason (not a bare gateway
// timeout) while other steps finish; a ClusterIssuer that is not Ready
// fails preflight before the Gateway exists.
func TestB13CertificateNotReady(t *testing.T) {
	parallel(t)
	t.Run("dns-01 pending", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{faults: sim.Faults{CertificatePending: true}})
		// The database phase is the independent work that must finish;
		// the rest of the install would prove nothing more here.
		r := c.install(t, "--only", "database,platform/certificate,platform/gatewayclass,platform/gateway", "--set", "waitTimeoutSeconds=90")
		mustFail(t, r)
		mustContain(t, "platform/certificate failure", failure(r, "platform/certificate"), "maas-default-gateway-cert", "Waiting for DNS-01 challenge propagation")
		if !slices.Contains(stepsWith(r.events, steps.EventDone), "database/cluster") {
			t.Errorf("independent step database/cluster did not finish")
		}
		if c.exists(t, "gateway.networking.k8s.io/v1", "Gateway", "openshift-ingress", "maas-default-gateway") {
			t.Errorf("the Gateway was created although its certificate is not Ready")
		}
	})
	t.Run("webhook not serving yet", func(t *testing.T) {
		// The case's variant: cert-manager's admission webhook answers 500
		// at first; the Certificate must still be created and the step
		// succeed. 8 failures outlast the client's own bounded retries of a 500
		// (6 attempts, internal/kube), so the step's webhook retry
		// (applyRetryingWebhook) is exercised as well.
		const failures = 8
		c := newCaseCluster(t, caseOptions{})
		w := newFlakyWebhook(t, failures)
		w.register(t, c)
		r := c.install(t, "--only", "platform/certificate")
		mustSucceed(t, r)
		mustContain(t, "platform/certificate progress", progress(r, "platform/certificate"),
			"Certificate openshift-ingress/maas-default-gateway-cert: the apiserver or an admission webhook is not ready, retrying",
			"webhook.cert-manager.io", "applied Certificate openshift-ingress/maas-default-gateway-cert")
		var failed, allowed int
		seen := w.requests()
		for _, s := range seen {
			if strings.HasPrefix(s, "500 ") {
				failed++
			} else {
				allowed++
			}
		}
		if failed != failures || allowed == 0 {
			t.Errorf("webhook saw %v, want the %d failures and then an allowed request", seen, failures)
		}
		if !c.exists(t, "cert-manager.io/v1", "Certificate", "openshift-ingress", "maas-default-gateway-cert") {
			t.Errorf("the Certificate was not created")
		}
	})
	t.Run("cluster issuer not ready", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{noSim: true, edit: func(objs []*unstructured.Unstructured) {
			for _, o := range objs {
				if o.GetKind() == "ClusterIssuer" {
					_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{
						"type": "Ready", "status": "False", "reason": "ErrRegisterACMEAccount",
						"message": "Failed to register ACME account", "lastTransitionTime": "2026-11-01T08:12:41Z",
					}}, "status", "conditions")
				}
			}
		}})
		r := c.install(t, "--set", "waitTimeoutSeconds=30")
		mustFail(t, r)
		mustContain(t, "preflight failure", failure(r, steps.PreflightStepID), "cert-manager:", "ClusterIssuer letsencrypt-production is not Ready")
		assertNothingWritten(t, c)
	})
}

// TestB14WildcardCertBehindPassthroughRoute: the generated Certificate names
// the MaaS host only; a user-supplied wildcard certificate behind the
// passthrough Route fails preflight explaining HTTP/2 connection
// coalescing; an exact-host certificate passes.
func TestB14WildcardCertBehindPassthroughRoute(t *testing.T) {
	parallel(t)
	r, err := assets.Render(inventory.Default(), assets.Facts{Host: appsHost})
	if err != nil {
		t.Fatal(err)
	}
	names, _, _ := unstructured.NestedStringSlice(r["platform/certificate"][0].Object, "spec", "dnsNames")
	if strings.Join(names, ",") != appsHost {
		t.Errorf("generated Certificate dnsNames %v, want [%s]", names, appsHost)
	}
	c := newCaseCluster(t, caseOptions{noSim: true})
	for _, tt := range []struct {
		name  string
		sans  []string
		fails bool
	}{
		{"wildcard", []string{"*.apps.openshift.example.com"}, true},
		{"exact host", []string{appsHost}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			putTLSSecret(t, c, "openshift-ingress", "maas-gateway-tls", tt.sans)
			out := c.maasctl(t, "preflight", "--set", "gateway.certIssuer=")
			line := ""
			for _, l := range strings.Split(out.stdout, "\n") {
				if strings.Contains(l, "gateway-cert") {
					line += l + "\n"
				}
			}
			if tt.fails {
				mustFail(t, out)
				mustContain(t, "gateway-cert", line, "FAIL", "HTTP/2 connection coalescing")
			} else if !strings.HasPrefix(line, "PASS") {
				t.Errorf("an exact-host certificate must pass gateway-cert:\n%s", out.stdout)
			}
		})
	}
}

// putTLSSecret stores a self-signed certificate for sans.
func putTLSSecret(t *testing.T, c *cluster, ns, name string, sans []string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: sans[0]}, DNSNames: sans,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
		},
	}
	ctx := context.Background()
	secrets := c.clients.Kube.CoreV1().Secrets(ns)
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

// TestB15GatewayHostnameAndRouteNamespaces: every Gateway listener has the
// MaaS hostname and every HTTPRoute of the models is Accepted; a model
// namespace added on a re-run is labelled and its route accepted too.
func TestB15GatewayHostnameAndRouteNamespaces(t *testing.T) {
	parallel(t)
	apiKey := obj("v1", "Secret", "llm-extra", "extra-api-key", map[string]any{
		"type": "Opaque", "data": map[string]any{"api-key": base64.StdEncoding.EncodeToString([]byte("not-a-real-key"))},
	})
	c := newCaseCluster(t, caseOptions{extra: []*unstructured.Unstructured{namespace("llm-extra"), apiKey}})
	mustSucceed(t, c.install(t))
	checkRoutes := func(t *testing.T, namespaces ...string) {
		t.Helper()
		gw := get(t, c, "gateway.networking.k8s.io/v1", "Gateway", "openshift-ingress", "maas-default-gateway")
		listeners, _, _ := unstructured.NestedSlice(gw.Object, "spec", "listeners")
		for _, l := range listeners {
			if h, _ := l.(map[string]any)["hostname"].(string); h != appsHost {
				t.Errorf("listener %v hostname %q, want %s", l.(map[string]any)["name"], h, appsHost)
			}
		}
		for _, ns := range namespaces {
			routes := c.list(t, gvkHTTPRoute, ns)
			if len(routes) == 0 {
				t.Errorf("no HTTPRoute in model namespace %s", ns)
			}
			for _, rt := range routes {
				parents, _, _ := unstructured.NestedSlice(rt.Object, "status", "parents")
				accepted := false
				for _, p := range parents {
					for _, cd := range p.(map[string]any)["conditions"].([]any) {
						cm := cd.(map[string]any)
						if cm["type"] == "Accepted" && cm["status"] == "True" {
							accepted = true
						}
					}
				}
				if !accepted {
					t.Errorf("HTTPRoute %s/%s is not Accepted: %v", ns, rt.GetName(), parents)
				}
			}
		}
	}
	checkRoutes(t, "llm-coding-assistant")

	inv := filepath.Join(c.dir, "extra-model.yaml")
	if err := os.WriteFile(inv, []byte(`externalModels:
- name: qwen35-9b-coder
  namespace: llm-coding-assistant
  providerName: llama-coder-provider
  providerType: openai
  endpoint: llama-coder.llm-coding-assistant.svc.cluster.local
  port: 8080
  tls: false
  apiKeySecret: llama-coder-api-key
  targetModel: qwen35-9b-coder
  apiFormat: openai-chat
  path: /v1/chat/completions
- name: extra-model
  namespace: llm-extra
  providerName: extra-provider
  providerType: openai
  endpoint: api.extra.example.com
  port: 443
  tls: true
  apiKeySecret: extra-api-key
  targetModel: extra-model
  apiFormat: openai-chat
  path: /v1/chat/completions
authPolicies:
- name: llama-coder-access
  groups: ["system:authenticated"]
  modelRefs:
  - {name: qwen35-9b-coder, namespace: llm-coding-assistant}
  - {name: extra-model, namespace: llm-extra}
subscriptions:
- name: llama-coder-default
  displayName: Default
  priority: 0
  groups: ["system:authenticated"]
  modelRefs:
  - name: qwen35-9b-coder
    namespace: llm-coding-assistant
    tokenRateLimits: [{limit: 200000, window: 1h}]
  - name: extra-model
    namespace: llm-extra
    tokenRateLimits: [{limit: 200000, window: 1h}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, c.install(t, "-f", inv))
	ns := get(t, c, "v1", "Namespace", "", "llm-extra")
	if ns.GetLabels()["inference.llm-d.ai/ipp-managed"] != "true" {
		t.Errorf("namespace llm-extra labels %v, want inference.llm-d.ai/ipp-managed=true", ns.GetLabels())
	}
	checkRoutes(t, "llm-coding-assistant", "llm-extra")
	// Nothing of the legacy API group on 3.5 (case B16).
	if n := len(c.list(t, schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "ExternalModel"}, "")); n != 0 {
		t.Errorf("%d maas.opendatahub.io ExternalModels exist on 3.5, want none", n)
	}
}

// TestB16ExternalModelNamesAndAPIGroup: a dotted API-key Secret name is
// refused before anything is created, naming the CRD pattern; on 3.5 no
// maas.opendatahub.io ExternalModel is ever created (also checked by
// TestB15 and TestInstallRHOAIVersions); an ExternalModel the MaaS
// controller fails ends the models step at once, naming it.
func TestB16ExternalModelNamesAndAPIGroup(t *testing.T) {
	parallel(t)
	t.Run("dotted secret name", func(t *testing.T) {
		dotted := obj("v1", "Secret", "llm-coding-assistant", "gpt4.1-key", map[string]any{
			"type": "Opaque", "data": map[string]any{"api-key": base64.StdEncoding.EncodeToString([]byte("not-a-real-key"))},
		})
		c := newCaseCluster(t, caseOptions{noSim: true, extra: []*unstructured.Unstructured{dotted}})
		r := c.install(t, "--set", "externalModels[0].apiKeySecret=gpt4.1-key")
		if r.exit != 2 {
			t.Fatalf("exit %d, want 2 (invalid inventory)\n%s", r.exit, r.stderr)
		}
		mustContain(t, "stderr", r.stderr, "gpt4.1-key", `^[a-z0-9]([a-z0-9\-]*[a-z0-9])?$`)
		assertNothingWritten(t, c)
	})
	t.Run("failed external model", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{faults: sim.Faults{MaaSFailures: map[string]string{
			"ExternalModel/llm-coding-assistant/qwen35-9b-coder": "upstream endpoint rejected the provider configuration",
		}}})
		r := c.install(t, "--set", "waitTimeoutSeconds=180")
		mustFail(t, r)
		mustContain(t, "models/model failure", failure(r, "models/model"), "ExternalModel llm-coding-assistant/qwen35-9b-coder", "phase Failed", "ReconcileFailed", "oc describe externalmodel.inference.opendatahub.io qwen35-9b-coder -n llm-coding-assistant")
		if c.exists(t, "maas.opendatahub.io/v1alpha1", "MaaSModelRef", "llm-coding-assistant", "qwen35-9b-coder") {
			t.Errorf("the MaaSModelRef was created although its ExternalModel failed")
		}
		for _, ev := range r.events {
			if ev.Type == steps.EventFailed && ev.Step == "models/model" && ev.Duration > 60*time.Second {
				t.Errorf("models/model failed after %s; a Failed phase must end the wait at once", ev.Duration)
			}
		}
	})
}

// TestB17AccessPairing: a MaaSSubscription in the cluster lists a model no
// MaaSAuthPolicy grants: preflight fails naming the model and
// MaaSAuthPolicy. (Classifying gateway responses in verify is issue 4's.)
func TestB17AccessPairing(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{noSim: true})
	files, err := filepath.Glob(filepath.Join(crdDir(t), "maas", "maas.opendatahub.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("MaaS CRDs: %v", err)
	}
	ctx := context.Background()
	if err := testenv.InstallCRDs(ctx, c.env.RESTConfig(), files...); err != nil {
		t.Fatal(err)
	}
	sub := obj("maas.opendatahub.io/v1alpha1", "MaaSSubscription", "models-as-a-service", "team-a", map[string]any{
		"spec": map[string]any{
			"owner":     map[string]any{"groups": []any{map[string]any{"name": "team-a"}}},
			"modelRefs": []any{map[string]any{"name": "gpt-4-1-mini", "namespace": "llm-coding-assistant", "tokenRateLimits": []any{map[string]any{"limit": int64(1000), "window": "1h"}}}},
		},
	})
	if err := testenv.ApplyObjects(ctx, c.env.RESTConfig(), namespace("models-as-a-service"), sub); err != nil {
		t.Fatal(err)
	}
	c.cacheSees(t, sub.GroupVersionKind(), "models-as-a-service", "team-a")
	r := c.maasctl(t, "preflight")
	mustFail(t, r)
	line := ""
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, "access-pairing") {
			line += l + "\n"
		}
	}
	mustContain(t, "access-pairing", line, "FAIL", "llm-coding-assistant/gpt-4-1-mini", "MaaSSubscription models-as-a-service/team-a", "no MaaSAuthPolicy")
	// The inventory's own subscription names a model no auth policy has:
	// refused before the cluster is touched.
	r = c.install(t, "--set", "authPolicies[llama-coder-access].modelRefs=[]")
	if r.exit != 2 {
		t.Errorf("exit %d for an unpaired inventory model, want 2\n%s", r.exit, r.stderr)
	}
}

// TestB20OrphanCSVBlocksReinstall: a CSV left by an uninstall that removed
// only the Subscription makes install preflight fail, naming the CSV and
// the cleanup, before any Subscription is created. (Uninstall ordering and
// finalizers are issue 5's.)
func TestB20OrphanCSVBlocksReinstall(t *testing.T) {
	parallel(t)
	csv := obj("operators.coreos.com/v1alpha1", "ClusterServiceVersion", "redhat-ods-operator", "rhods-operator.3.5.0", map[string]any{
		"spec": map[string]any{"displayName": "Red Hat OpenShift AI", "version": "3.5.0", "install": map[string]any{"strategy": "deployment"}},
	})
	c := newCaseCluster(t, caseOptions{noSim: true, extra: []*unstructured.Unstructured{namespace("redhat-ods-operator"), csv}})
	r := c.install(t, "--set", "waitTimeoutSeconds=30")
	mustFail(t, r)
	mustContain(t, "preflight failure", failure(r, steps.PreflightStepID), "orphan-csvs", "rhods-operator.3.5.0", "oc delete csv rhods-operator.3.5.0 -n redhat-ods-operator")
	if subs := c.list(t, gvkSub, ""); len(subs) != 0 {
		t.Errorf("%d Subscriptions exist; preflight must stop the install first", len(subs))
	}
	assertNothingWritten(t, c)
}
