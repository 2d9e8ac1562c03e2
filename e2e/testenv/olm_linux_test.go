package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// TestCatalogValidates generates both catalogs and runs `opm validate` on
// each (operator-registry's own check of a file-based catalog).
func TestCatalogValidates(t *testing.T) {
	t.Parallel()
	bin, err := defaultBinDir()
	if err == nil {
		err = checkBinaries(bin, Opm)
	}
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but: %v", EnvRequire, err)
		}
		t.Skipf("opm not built: %v", err)
	}
	crdDir, err := defaultCRDDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{CatalogRedHat, CatalogCertified} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), name)
			if err := WriteCatalog(dir, crdDir, name, 0); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(filepath.Join(bin, Opm), "validate", dir).CombinedOutput()
			if err != nil {
				t.Fatalf("opm validate %s: %v\n%s", dir, err, out)
			}
		})
	}
	if err := WriteCatalog(t.TempDir(), crdDir, "no-such-catalog", 0); err == nil || !strings.Contains(err.Error(), "no-such-catalog") {
		t.Errorf("unknown catalog: err %v, want one naming it", err)
	}
}

var (
	gvrSubscription = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "subscriptions"}
	gvrCSV          = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "clusterserviceversions"}
)

// TestRealOLM starts two control planes at once, each with the real olm
// and catalog operators, and checks that:
//   - both come up (their olm and catalog, which hard-code :8080, do not
//     collide: each runs in a network namespace of its own, a different one
//     per control plane, while the rest of the control plane stays in the
//     host's);
//   - a Subscription in one resolves from the generated catalog, OLM's
//     InstallPlan creates the bundle's CRDs and CSV, and the real CSV
//     reaches Succeeded with the Subscription AtLatestKnown;
//   - no TCP socket of any component or its children (opm) has a remote
//     end beyond loopback (issue 12, item 6), checked from
//     /proc/<pid>/net/tcp{,6} after the install.
func TestRealOLM(t *testing.T) {
	t.Parallel()
	envs := make([]*Env, 2)
	var wg sync.WaitGroup
	for i := range envs {
		wg.Go(func() { envs[i] = startEnv(t, Options{}) })
	}
	wg.Wait()
	if t.Failed() || t.Skipped() {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dyn := dynamic.NewForConfigOrDie(envs[0].RESTConfig())
	sub := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
		"metadata": map[string]any{"name": "rhcl-operator", "namespace": "openshift-operators"},
		"spec": map[string]any{"name": "rhcl-operator", "channel": "stable-1.4", "source": CatalogRedHat,
			"sourceNamespace": CatalogNamespace, "installPlanApproval": "Automatic"},
	}}
	t0 := time.Now()
	if _, err := dyn.Resource(gvrSubscription).Namespace("openshift-operators").Create(ctx, sub, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := waitFor(ctx, dyn.Resource(gvrCSV).Namespace("openshift-operators"), "rhcl-operator.v1.4.1", func(u *unstructured.Unstructured) (bool, error) {
		p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return p == "Succeeded", nil
	})
	if err != nil {
		t.Fatalf("wait for CSV rhcl-operator.v1.4.1 Succeeded: %v\nolm log:\n%s\ncatalog log:\n%s", err, tail(envs[0].LogFile(OLMOperator), 20), tail(envs[0].LogFile(CatalogOperator), 20))
	}
	t.Logf("CSV Succeeded %d ms after the Subscription", time.Since(t0).Milliseconds())
	err = waitFor(ctx, dyn.Resource(gvrSubscription).Namespace("openshift-operators"), "rhcl-operator", func(u *unstructured.Unstructured) (bool, error) {
		s, _, _ := unstructured.NestedString(u.Object, "status", "state")
		c, _, _ := unstructured.NestedString(u.Object, "status", "installedCSV")
		return s == "AtLatestKnown" && c == "rhcl-operator.v1.4.1", nil
	})
	if err != nil {
		t.Fatalf("wait for Subscription AtLatestKnown: %v", err)
	}
	if _, err := dyn.Resource(crdGVR).Get(ctx, "kuadrants.kuadrant.io", metav1.GetOptions{}); err != nil {
		t.Errorf("CRD kuadrants.kuadrant.io from the bundle: %v", err)
	}

	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	olmNS := map[string]string{}
	for i, e := range envs {
		conns, err := e.Connections()
		if err != nil {
			t.Fatal(err)
		}
		if len(conns) == 0 {
			t.Fatalf("control plane %d: no sockets found; the check would pass vacuously", i)
		}
		seen := map[string]bool{}
		for _, c := range conns {
			seen[c.Component] = true
			if c.LeavesLoopback() {
				t.Errorf("control plane %d: connection leaves loopback: %s", i, c)
			}
			switch c.Component {
			case OLMOperator, CatalogOperator:
				if c.Program == NetnsRun {
					continue // its host-side dials to the apiserver are checked above
				}
				if c.NetNS == host {
					t.Errorf("control plane %d: %s runs in the host's network namespace", i, c)
				}
				if other, ok := olmNS[c.NetNS]; ok && other != c.Component+string(rune('0'+i)) {
					t.Errorf("control plane %d: %s shares network namespace %s with %s", i, c, c.NetNS, other)
				}
				olmNS[c.NetNS] = c.Component + string(rune('0'+i))
			default:
				if c.NetNS != host {
					t.Errorf("control plane %d: %s not in the host's network namespace", i, c)
				}
			}
		}
		for _, comp := range []string{Etcd, KubeAPIServer, OLMOperator, CatalogOperator} {
			if !seen[comp] {
				t.Errorf("control plane %d: no sockets of %s found", i, comp)
			}
		}
		t.Logf("control plane %d: %d sockets, none beyond loopback", i, len(conns))
	}
	if len(olmNS) != 4 {
		t.Errorf("%d distinct OLM network namespaces, want 4 (olm and catalog of each control plane): %v", len(olmNS), olmNS)
	}
	checkOLMCrashRestart(ctx, t, envs[1])
}

// checkOLMCrashRestart kills the olm operator of env (SIGSEGV, a crash)
// and checks that netns-run starts it again after the kubelet's 10 s
// back-off, that the restart is counted, and that the new olm works: it
// syncs an OperatorGroup made after the crash.
func checkOLMCrashRestart(ctx context.Context, t *testing.T, env *Env) {
	t.Helper()
	olmPID := func() int {
		p := env.proc(OLMOperator)
		for pid, comp := range descendants(map[int]string{p.pid: OLMOperator}) {
			if comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm")); comp == OLMOperator && strings.TrimSpace(string(comm)) == OLMOperator {
				return pid
			}
		}
		return 0
	}
	first := olmPID()
	if first == 0 {
		t.Fatal("no olm process below its netns-run")
	}
	if err := syscall.Kill(first, syscall.SIGSEGV); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var second int
	for second == 0 || second == first {
		if time.Since(t0) > 2*time.Minute {
			t.Fatalf("olm not started again 2 minutes after its crash; log:\n%s", tail(env.LogFile(OLMOperator), 10))
		}
		time.Sleep(100 * time.Millisecond)
		second = olmPID()
	}
	if d := time.Since(t0); d < 10*time.Second {
		t.Errorf("olm started again after %s, before the kubelet's 10 s back-off", d)
	}
	restarts := -1
	for _, c := range env.Components() {
		if c.Name == OLMOperator {
			restarts = c.Restarts
		}
	}
	if restarts != 1 {
		t.Errorf("ComponentStatus.Restarts of olm = %d, want 1", restarts)
	}
	dyn := dynamic.NewForConfigOrDie(env.RESTConfig())
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "after-crash"}}}
	og := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
		"metadata": map[string]any{"name": "og", "namespace": "after-crash"},
		"spec":     map[string]any{"targetNamespaces": []any{"after-crash"}},
	}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(gvrOperatorGroup).Namespace("after-crash").Create(ctx, og, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := waitFor(ctx, dyn.Resource(gvrOperatorGroup).Namespace("after-crash"), "og", func(u *unstructured.Unstructured) (bool, error) {
		_, found, _ := unstructured.NestedSlice(u.Object, "status", "namespaces")
		return found, nil
	})
	if err != nil {
		t.Fatalf("OperatorGroup after the crash not synced by the restarted olm: %v\nolm log:\n%s", err, tail(env.LogFile(OLMOperator), 10))
	}
	t.Logf("olm (pid %d) killed with SIGSEGV, started again as pid %d after %d ms, then synced a new OperatorGroup", first, second, time.Since(t0).Milliseconds())
}

// TestOLMModuleVersions: the module versions testenv reads CRDs of match
// the olm tools module that builds the binaries.
func TestOLMModuleVersions(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "e2e", "testenv", "olm", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for mod, v := range map[string]string{
		"github.com/operator-framework/operator-lifecycle-manager": OLMVersion,
		"github.com/openshift/api":                                 OpenShiftAPIVersion,
	} {
		if !strings.Contains(string(b), mod+" "+v) {
			t.Errorf("e2e/testenv/olm/go.mod does not require %s %s", mod, v)
		}
	}
}

// TestWithReadyDelay: the fast pod-ready stage gains a delay read from
// PodReadyDelayAnnotation, so Options.OperatorPodReadyDelay (the OLM
// delay of the e2e tests and bench) really holds the operator pods back.
func TestWithReadyDelay(t *testing.T) {
	stage := []byte("spec:\n  selector: {}\n  next:\n    statusTemplate: x\n")
	got, err := withReadyDelay(stage)
	if err != nil {
		t.Fatal(err)
	}
	want := "spec:\n  selector: {}\n" + readyDelayStanza + "    statusTemplate: x\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := withReadyDelay(got); err == nil {
		t.Error("a second insertion was not refused")
	}
}

// TestPodReadyDelayLive: under kwok, a pod annotated with
// PodReadyDelayAnnotation turns Ready no earlier than the delay after its
// creation, and one without it at once.
func TestPodReadyDelayLive(t *testing.T) {
	t.Parallel()
	env := startEnv(t, Options{NoOLM: true, NoFixture: true})
	cs := kubernetes.NewForConfigOrDie(env.RESTConfig())
	const delay = 6 * time.Second
	ready := map[string]time.Duration{}
	for _, name := range []string{"slow", "fast"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: NodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c:1"}}},
		}
		if name == "slow" {
			pod.Annotations = map[string]string{PodReadyDelayAnnotation: delay.String()}
		}
		t0 := time.Now()
		if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err := waitFor(ctx, dynamic.NewForConfigOrDie(env.RESTConfig()).Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace("default"), name,
			func(u *unstructured.Unstructured) (bool, error) { return hasCondition(u, "Ready", "True"), nil })
		cancel()
		if err != nil {
			t.Fatalf("pod %s Ready: %v", name, err)
		}
		ready[name] = time.Since(t0)
	}
	t.Logf("Ready after: annotated %s (delay %s), plain %s", ready["slow"], delay, ready["fast"])
	if ready["slow"] < delay {
		t.Errorf("annotated pod Ready after %s, before its %s delay", ready["slow"], delay)
	}
	if ready["fast"] >= delay {
		t.Errorf("plain pod Ready only after %s", ready["fast"])
	}
}

// TestKuadrantModuleVersions: the versions testenv reads files of (the
// RHCL bundle's CRDs and ClusterRoles, the Istio and GRPCRoute CRDs) match
// the tools modules that build the real operators.
func TestKuadrantModuleVersions(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for file, mods := range map[string]map[string]string{
		"kuadrant": {
			"github.com/kuadrant/kuadrant-operator":  KuadrantOperatorVersion,
			"github.com/kuadrant/authorino-operator": AuthorinoOperatorVersion,
			"istio.io/api":                           IstioAPIVersion,
			"sigs.k8s.io/gateway-api":                GatewayAPIVersion,
		},
		"limitador": {"github.com/kuadrant/limitador-operator": LimitadorOperatorVersion},
		"authorino": {"github.com/kuadrant/authorino": AuthorinoVersion},
	} {
		b, err := os.ReadFile(filepath.Join(root, "e2e", "testenv", file, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for mod, v := range mods {
			if !strings.Contains(string(b), mod+" "+v) {
				t.Errorf("e2e/testenv/%s/go.mod does not require %s %s", file, mod, v)
			}
		}
	}
}
