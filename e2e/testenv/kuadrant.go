package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The real Kuadrant operators of the local control plane (issue 12, item
// 3): Kuadrant/kuadrant-operator, authorino-operator and
// limitador-operator, built by `make testenv` from the tools modules
// e2e/testenv/kuadrant and e2e/testenv/limitador, run as processes of the
// test harness standing for the containers of the RHCL CSV's Deployments
// (olmcatalog.go, rhclBundle). kwok runs no containers, so the harness does
// what a kubelet would: once the RHCL CSV has reached Succeeded, for each
// operator's newest Running pod it starts the operator with that pod's
// container env (the CSV's env, and what OLM merged in from the
// Subscription's spec.config.env; fieldRef values resolved against the
// pod) and args, and KUBECONFIG pointing at the control plane. When that
// pod is deleted (maasctl's restart of case B01) the process is stopped,
// and a process is started for the pod that replaces it; a process that
// exits on its own is started again (a container restart). The same is
// done for Authorino itself (AuthorinoServer, `authorino server` with the
// args the authorino-operator gives its Deployment), once the Kuadrant
// operator has made the Authorino CR: it writes the AuthConfigs' status.
//
// The operators hard-code listeners (:8080 metrics, :8081 health, :9443
// webhooks; the Kuadrant operator also :50051 and :8082), so each runs
// through netns-run in a network namespace of its own with only the
// kube-apiserver's port forwarded: they cannot collide with another
// control plane's, and they can reach nothing but the apiserver.

// Component names of the real Kuadrant operators (their binaries in
// Options.BinDir and the base names of their logs in StateDir).
const (
	KuadrantOperator  = "kuadrant-operator"
	AuthorinoOperator = "authorino-operator"
	LimitadorOperator = "limitador-operator"
	// AuthorinoServer is Authorino itself (github.com/kuadrant/authorino,
	// `authorino server`), run for the pod of the Deployment the
	// authorino-operator makes for the Authorino CR: it reconciles the
	// AuthConfigs the Kuadrant operator generates and writes their Ready
	// status, which the real AuthPolicy Enforced condition waits for.
	AuthorinoServer = "authorino"
)

// Module versions of the real Kuadrant operators and of the modules whose
// files the RHCL bundle and the simulated Istio read from the module
// cache; they match e2e/testenv/kuadrant, limitador and authorino go.mod.
const (
	KuadrantOperatorVersion  = "v1.5.2"
	AuthorinoOperatorVersion = "v0.21.0"
	LimitadorOperatorVersion = "v0.15.0"
	AuthorinoVersion         = "v0.27.0"
	// IstioAPIVersion is the istio.io/api version kuadrant-operator
	// v1.5.2 builds against; kubernetes/customresourcedefinitions.gen.yaml
	// of it holds the Istio CRDs (see IstioCRDFile).
	IstioAPIVersion = "v1.22.3-0.20240703105953-437a88321a16"
)

// GatewayAPIVersion is the sigs.k8s.io/gateway-api version kuadrant-operator
// v1.5.2 builds against; its GRPCRoute CRD is installed with
// Options.RealKuadrant (see grpcRouteCRDFile).
const GatewayAPIVersion = "v1.2.1"

// grpcRouteCRDFile is the GRPCRoute CRD (standard channel) of
// GatewayAPIVersion in the module cache. OpenShift serves GRPCRoute with
// the other Gateway API CRDs; the CRD folder has only the kinds maasctl
// uses, and the Kuadrant operator waits for a GRPCRoute watch to sync
// before it reconciles anything.
func grpcRouteCRDFile(ctx context.Context) (string, error) {
	cache, err := goModCache(ctx)
	if err != nil {
		return "", err
	}
	p := filepath.Join(cache, "sigs.k8s.io", "gateway-api@"+GatewayAPIVersion, "config", "crd", "standard", "gateway.networking.k8s.io_grpcroutes.yaml")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: GRPCRoute CRD not in the module cache: %w", ErrNotBuilt, err)
	}
	return p, nil
}

// IstioCRDFile returns the path, in the module cache, of the Istio CRDs
// file of IstioAPIVersion (every istio.io CRD; the Kuadrant operator
// checks WasmPlugin, EnvoyFilter and PeerAuthentication at start). The
// error wraps ErrNotBuilt when the module is not in the cache.
func IstioCRDFile(ctx context.Context) (string, error) {
	cache, err := goModCache(ctx)
	if err != nil {
		return "", err
	}
	p := filepath.Join(cache, "istio.io", "api@"+IstioAPIVersion, "kubernetes", "customresourcedefinitions.gen.yaml")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: Istio CRDs not in the module cache: %w", ErrNotBuilt, err)
	}
	return p, nil
}

var gvrCSVs = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "clusterserviceversions"}

// realOperator is one operator of the RHCL CSV run as a process.
type realOperator struct {
	component string
	selector  labels.Selector
	// argsPrefix goes before the container's args: the image's
	// ENTRYPOINT arguments after the binary (Authorino's Dockerfile:
	// ["authorino", "server"]).
	argsPrefix []string
	// exposed, when set, is the port of container c that the test harness
	// reaches from the host: netns-run --expose publishes it on a free
	// port of the host's loopback (Env.ExposedAddr).
	exposed func(c corev1.Container) int
	// callsServices: the process calls cluster Services by DNS name over
	// https (Authorino's HTTP metadata and authorization calls): it gets
	// the supervisor's ServiceProxy (forwarded into its namespace,
	// HTTPS_PROXY, NO_PROXY for the API server), which stands in for
	// cluster DNS and kube-proxy. It is not made to trust the ServiceCA:
	// as on OpenShift, it trusts only what its pod is configured to (an
	// installer mounts the service CA ConfigMap and sets SSL_CERT_FILE on
	// the container; podVolumes and podEnv carry both to the process).
	callsServices bool
	// csvPrefix is the name prefix of the CSV whose Succeeded phase the
	// process waits for (default "rhcl-operator.").
	csvPrefix string
	// restartBackoff waits, before starting an exited process again, as
	// the kubelet does for a container that exits (10 s, doubled each
	// time up to 5 min, back to 10 s after 10 min of running; Kubernetes
	// docs, "Pod Lifecycle", Container restarts; netns-run's
	// nextBackoff). Without it the process is started again at the next
	// poll (the Kuadrant operators).
	restartBackoff bool
	// prepare, when set, gives what the process needs beyond its pod's
	// container: more netns-run flags (before "--"), env, args (after the
	// container's) and the working folder (default StateDir).
	prepare func(s *operatorSupervisor, ctx context.Context, pod *corev1.Pod) (launchExtras, error)
}

// launchExtras is what realOperator.prepare adds to a launch.
type launchExtras struct {
	netns, env, args []string
	dir              string
}

// AuthorinoExtAuthzPort is the port of Authorino's ext_authz gRPC listener
// (the envoy.service.auth.v3.Authorization service Envoy and Kuadrant's
// wasm-shim call): the container's --ext-auth-grpc-port, which the
// authorino-operator sets from the Authorino CR's spec.listener.ports.grpc
// (pkg/reconcilers/deployment_mutator.go), else Authorino's default,
// 50051 (authorino main.go, flag ext-auth-grpc-port).
func AuthorinoExtAuthzPort(c corev1.Container) int {
	port := 50051
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--ext-auth-grpc-port="); ok {
			if p, err := strconv.Atoi(v); err == nil {
				port = p
			}
		}
	}
	return port
}

// realOperators returns the operators of the RHCL bundle and the
// Authorino server, with the selectors of their pods.
func realOperators() []realOperator {
	b := rhclBundle("1.4.1", "")
	out := []realOperator{{component: KuadrantOperator, selector: labels.SelectorFromSet(b.PodLabels)}}
	for _, d := range b.MoreDeployments {
		c := AuthorinoOperator
		if strings.HasPrefix(d.Name, "limitador") {
			c = LimitadorOperator
		}
		out = append(out, realOperator{component: c, selector: labels.SelectorFromSet(d.PodLabels)})
	}
	// The authorino-operator labels the pods of an Authorino CR's
	// Deployment so (authorino-operator pkg/resources k8s_util.go,
	// defaultAuthorinoLabels); the Kuadrant operator names its CR
	// "authorino" (internal/controller/authorino_reconciler.go).
	out = append(out, realOperator{component: AuthorinoServer, argsPrefix: []string{"server"}, exposed: AuthorinoExtAuthzPort, callsServices: true,
		selector: labels.SelectorFromSet(labels.Set{"control-plane": "controller-manager", "authorino-resource": "authorino"})})
	return out
}

// OperatorStart records one start of a real operator process.
type OperatorStart struct {
	// Component is KuadrantOperator, AuthorinoOperator or LimitadorOperator.
	Component string
	// Pod is namespace/name of the pod the process stands for; PodUID its UID.
	Pod    string
	PodUID types.UID
	// PID is netns-run's pid; At is when it was started.
	PID int
	At  time.Time
}

// operatorSupervisor runs the real operators for their pods.
type operatorSupervisor struct {
	o       *resolved
	apiPort int
	kubecfg string
	kube    kubernetes.Interface
	logf    func(string, ...any)
	// pods and csvs are informer caches of every pod and every CSV: the
	// loop looks at them every supervisorPoll without a request (it used
	// to LIST the pods of each operator and every CSV at each poll, about
	// 20 LISTs a second for a whole test, the API server's busiest
	// client).
	pods   corelisters.PodLister
	csvs   cache.GenericLister
	synced []cache.InformerSynced

	// proxy: how the processes with callsServices reach the Services a
	// test puts on the host's loopback (Env.ServiceProxy); ca signs those
	// Services' certificates (Env.ServiceCA), trusted only as the pod is
	// configured to.
	proxy *ServiceProxy
	ca    *ServiceCA

	cancel context.CancelFunc
	done   chan struct{}

	// cfg is the control plane's admin config; pgAdmin the superuser
	// connection string of its PostgreSQL ("" without one). Used with
	// Options.RealCNPG (cnpg.go).
	cfg     *rest.Config
	pgAdmin string

	mu      sync.Mutex
	cnpg    *cnpgState // with Options.RealCNPG, once its operator is prepared
	running map[string]*runningOperator
	starts  []OperatorStart
	all     []*process
}

type runningOperator struct {
	podUID types.UID
	p      *process
	// exposed is the host's loopback address of the operator's exposed
	// port (realOperator.exposed), "" for none.
	exposed string
	// startedAt is when p was started; backoff the wait before the
	// restart that started it (0 for a first start). Used with
	// realOperator.restartBackoff.
	startedAt time.Time
	backoff   time.Duration
	// seenExit is when the loop first saw p exited.
	seenExit time.Time
}

// startOperatorSupervisor starts the loop that runs the real operators;
// they reach the API server through kubeconfig and the loopback port
// apiPort (forwarded into their network namespaces): the control plane's,
// or the server of Options.OLMVia, as OLM's operators do.
func startOperatorSupervisor(o *resolved, env *Env, kubeconfig string, apiPort int) (*operatorSupervisor, error) {
	kube, err := kubernetes.NewForConfig(env.cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(env.cfg)
	if err != nil {
		return nil, err
	}
	proxy, err := startServiceProxy()
	if err != nil {
		return nil, err
	}
	ca, err := newServiceCA(o.StateDir)
	if err != nil {
		_ = proxy.Close()
		return nil, fmt.Errorf("service CA: %w", err)
	}
	proxy.routesFile = serviceRoutesFile(o.StateDir)
	_ = os.Remove(proxy.routesFile) // routes of an earlier run name servers that are gone
	ctx, cancel := context.WithCancel(context.Background())
	pf := informers.NewSharedInformerFactory(kube, 0)
	pods := pf.Core().V1().Pods()
	df := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	csvs := df.ForResource(gvrCSVs)
	s := &operatorSupervisor{
		o: o, apiPort: apiPort, kubecfg: kubeconfig, kube: kube, logf: o.logf,
		pods: pods.Lister(), csvs: csvs.Lister(), synced: []cache.InformerSynced{pods.Informer().HasSynced, csvs.Informer().HasSynced},
		cancel: cancel, done: make(chan struct{}), running: map[string]*runningOperator{},
		proxy: proxy, ca: ca, cfg: env.cfg,
	}
	if env.pg != nil {
		s.pgAdmin = env.pg.AdminConnString()
	}
	pf.Start(ctx.Done())
	df.Start(ctx.Done())
	go s.loop(ctx)
	return s, nil
}

// RunOperators runs the real Kuadrant, Authorino and Limitador operators
// and the Authorino server for their pods, as Start does with
// Options.RealKuadrant, on a control plane started with Detach and
// RealKuadrant (`testenv up --real-kuadrant`) and loaded with [Load]. It
// returns when ctx ends, after stopping the processes it started (SIGTERM,
// SIGKILL after stopGrace); they also die with the calling process
// (PR_SET_PDEATHSIG), as a pod's containers die with its kubelet. binDir
// holds their binaries (Options.BinDir; empty: the default); logf, if not
// nil, gets one line per start and stop. Errors: a missing binary (wraps
// ErrNotBuilt), an Env without a kubeconfig, and the stop of a process.
func (e *Env) RunOperators(ctx context.Context, binDir string, logf func(string, ...any)) error {
	if e.cfg == nil {
		return fmt.Errorf("run the Kuadrant operators: no kubeconfig in %s", e.stateDir)
	}
	o := &resolved{Options: Options{StateDir: e.stateDir, BinDir: binDir, Logf: logf, RealKuadrant: true}}
	if o.BinDir == "" {
		d, err := defaultBinDir()
		if err != nil {
			return err
		}
		o.BinDir = d
	}
	// The processes run in the state folder (exec.Cmd.Dir), where a
	// relative path would no longer name the binaries.
	abs, err := filepath.Abs(o.BinDir)
	if err != nil {
		return fmt.Errorf("run the Kuadrant operators: %w", err)
	}
	o.BinDir = abs
	if err := checkBinaries(o.BinDir, NetnsRun, KuadrantOperator, AuthorinoOperator, LimitadorOperator, AuthorinoServer); err != nil {
		return fmt.Errorf("run the Kuadrant operators: %w", err)
	}
	u, err := url.Parse(e.cfg.Host)
	if err != nil {
		return fmt.Errorf("run the Kuadrant operators: API server %q: %w", e.cfg.Host, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || u.Hostname() != "127.0.0.1" {
		return fmt.Errorf("run the Kuadrant operators: API server %q is not 127.0.0.1:PORT", e.cfg.Host)
	}
	s, err := startOperatorSupervisor(o, e, e.kubeconfig, port)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return s.shutdown()
}

// supervisorPoll is how often the supervisor looks at the operators' pods.
const supervisorPoll = 200 * time.Millisecond

func (s *operatorSupervisor) loop(ctx context.Context) {
	defer close(s.done)
	var ops []realOperator
	if s.o.RealKuadrant {
		ops = realOperators()
	}
	if s.o.RealCNPG {
		ops = append(ops, s.cnpgOperator())
	}
	csvSeen := map[string]bool{}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return
	}
	tick := time.NewTicker(supervisorPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, op := range ops {
			prefix := op.csvPrefix
			if prefix == "" {
				prefix = "rhcl-operator."
			}
			if !csvSeen[prefix] {
				if csvSeen[prefix] = s.csvSucceeded(prefix); !csvSeen[prefix] {
					continue
				}
			}
			s.sync(ctx, op)
		}
		if s.o.RealCNPG {
			s.cnpgKubelet(ctx)
		}
	}
}

// csvSucceeded reports whether a CSV named prefix* (not a copy) is
// Succeeded.
func (s *operatorSupervisor) csvSucceeded(prefix string) bool {
	l, err := s.csvs.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, o := range l {
		c, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		phase, _, _ := unstructured.NestedString(c.Object, "status", "phase")
		reason, _, _ := unstructured.NestedString(c.Object, "status", "reason")
		if strings.HasPrefix(c.GetName(), prefix) && phase == "Succeeded" && reason != "Copied" {
			return true
		}
	}
	return false
}

// sync makes op's process match its newest Running pod.
func (s *operatorSupervisor) sync(ctx context.Context, op realOperator) {
	pods, err := s.pods.List(op.selector)
	if err != nil {
		return
	}
	var pod *corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if pod == nil || pod.CreationTimestamp.Before(&p.CreationTimestamp) ||
			pod.CreationTimestamp.Equal(&p.CreationTimestamp) && pod.Name < p.Name {
			pod = p
		}
	}
	s.mu.Lock()
	cur := s.running[op.component]
	s.mu.Unlock()
	if cur != nil && (pod == nil || pod.UID != cur.podUID) {
		t0 := time.Now()
		if err := cur.p.stop(5 * time.Second); err != nil {
			s.logf("%s: %v", op.component, err)
		}
		s.logf("%s stopped in %d ms (its pod is gone)", op.component, time.Since(t0).Milliseconds())
		s.mu.Lock()
		delete(s.running, op.component)
		s.mu.Unlock()
		cur = nil
	}
	if pod == nil || ctx.Err() != nil {
		return
	}
	if cur != nil && !cur.p.exited() {
		return
	}
	var backoff time.Duration
	if cur != nil && op.restartBackoff {
		if cur.seenExit.IsZero() {
			cur.seenExit = time.Now()
		}
		backoff = 10 * time.Second
		if ran := cur.seenExit.Sub(cur.startedAt); cur.backoff > 0 && ran < 10*time.Minute {
			backoff = min(2*cur.backoff, 5*time.Minute)
		}
		if time.Since(cur.seenExit) < backoff {
			return
		}
	}
	if cur != nil {
		s.logf("%s exited (%v); starting it again for pod %s/%s", op.component, cur.p.waitErr, pod.Namespace, pod.Name)
	}
	p, exposed, err := s.launch(ctx, op, pod)
	if err != nil {
		s.logf("%s: %v", op.component, err)
		return
	}
	s.mu.Lock()
	s.running[op.component] = &runningOperator{podUID: pod.UID, p: p, exposed: exposed, startedAt: time.Now(), backoff: backoff}
	s.all = append(s.all, p)
	s.starts = append(s.starts, OperatorStart{Component: op.component, Pod: pod.Namespace + "/" + pod.Name, PodUID: pod.UID, PID: p.pid, At: time.Now()})
	s.mu.Unlock()
	s.logf("%s started (pid %d) for pod %s/%s", op.component, p.pid, pod.Namespace, pod.Name)
	if exposed != "" {
		// For other processes (ReadExposedAddr); renamed into place.
		f := exposedAddrFile(s.o.StateDir, op.component)
		if err := os.WriteFile(f+".tmp", []byte(exposed+"\n"), 0o644); err == nil {
			_ = os.Rename(f+".tmp", f)
		}
	}
}

func exposedAddrFile(stateDir, component string) string {
	return filepath.Join(stateDir, component+".exposed")
}

// ReadExposedAddr is Env.ExposedAddr for another process: the host address
// of component's exposed port as the operators run for the control plane
// of stateDir (`testenv-ctl operators`) last started it. ok is false
// before the first start.
func ReadExposedAddr(stateDir, component string) (addr string, ok bool) {
	b, err := os.ReadFile(exposedAddrFile(stateDir, component))
	if err != nil {
		return "", false
	}
	addr = strings.TrimSpace(string(b))
	return addr, addr != ""
}

// launch starts op for pod through netns-run, its log appended to
// StateDir/<component>.log. exposed is the host's loopback address of the
// op's exposed port ("" when it has none). That port is picked free just
// before; should another process take it first, netns-run exits ("address
// already in use") and the next poll starts it again on another.
func (s *operatorSupervisor) launch(ctx context.Context, op realOperator, pod *corev1.Pod) (p *process, exposed string, err error) {
	if len(pod.Spec.Containers) == 0 {
		return nil, "", fmt.Errorf("pod %s/%s has no container", pod.Namespace, pod.Name)
	}
	c := pod.Spec.Containers[0]
	mounts, err := s.podVolumes(ctx, pod, c)
	if err != nil {
		return nil, "", err
	}
	env := append(podEnv(pod, c, mounts), "KUBECONFIG="+s.kubecfg)
	args := []string{"--forward=" + strconv.Itoa(s.apiPort)}
	var extra launchExtras
	if op.prepare != nil {
		if extra, err = op.prepare(s, ctx, pod); err != nil {
			return nil, "", err
		}
		env = append(env, extra.env...)
		args = append(args, extra.netns...)
	}
	if op.callsServices {
		// Go's proxy selection leaves loopback (the API server) direct.
		proxy := "http://127.0.0.1:" + strconv.Itoa(s.proxy.Port())
		args = append(args, "--forward="+strconv.Itoa(s.proxy.Port()))
		env = append(env, "HTTPS_PROXY="+proxy, "NO_PROXY=127.0.0.1,localhost")
	}
	if op.exposed != nil {
		ports, err := freePorts(1)
		if err != nil {
			return nil, "", err
		}
		args = append(args, fmt.Sprintf("--expose=%d:%d", op.exposed(c), ports[0]))
		exposed = "127.0.0.1:" + strconv.Itoa(ports[0])
	}
	args = append(append(args, "--", filepath.Join(s.o.BinDir, op.component)), op.argsPrefix...)
	for _, a := range c.Args {
		args = append(args, mounts.rewrite(a))
	}
	args = append(args, extra.args...)
	cmd := exec.Command(filepath.Join(s.o.BinDir, NetnsRun), args...)
	cmd.Env = env
	cmd.Dir = s.o.StateDir
	if extra.dir != "" {
		cmd.Dir = extra.dir
	}
	cmd.SysProcAttr = sysProcAttr(false)
	p, err = launchLog(s.o.StateDir, op.component, false, cmd, true)
	return p, exposed, err
}

// volumeDirs maps the mountPath of each volume mount of a container
// (Secret, ConfigMap and projected volumes, see podVolumes) to where its
// files were written: the volume's folder, or with a subPath the file (or
// folder) of that subPath in it.
type volumeDirs map[string]string

// rewrite replaces, in one container argument or env value, each
// mountPath (the whole path, or a path under it, at the start of the value
// or after one of pathStarts) with where its files are (the longest
// mountPath wins).
func (v volumeDirs) rewrite(arg string) string {
	var b strings.Builder
	for i := 0; i < len(arg); {
		best := ""
		if i == 0 || strings.IndexByte(pathStarts, arg[i-1]) >= 0 {
			for mp := range v {
				if len(mp) > len(best) && strings.HasPrefix(arg[i:], mp) && (len(arg) == i+len(mp) || arg[i+len(mp)] == '/') {
					best = mp
				}
			}
		}
		if best == "" {
			b.WriteByte(arg[i])
			i++
			continue
		}
		b.WriteString(v[best])
		i += len(best)
	}
	return b.String()
}

// pathStarts are the bytes after which a path may start in an argument or
// env value (--flag=/path, a:/b lists, "a /b"): a mountPath matches only
// there, and only up to a slash or the end, so /usr/etc/ssl is not
// rewritten for a mount at /etc/ssl.
const pathStarts = "=:, "

// volumeFile is one file of a volume: its content and mode.
type volumeFile struct {
	data []byte
	mode os.FileMode
}

// podVolumes does what a kubelet does for the Secret, ConfigMap and
// projected volumes container c of pod mounts: it writes each volume's
// files in StateDir/pods/<pod UID>/<volume>/ (made afresh at each start of
// the process). The processes run without a mount namespace, so a file
// the container would read at a mountPath is named by its folder instead:
// launch rewrites the container's args and env values (e.g. Authorino's
// --tls-cert=/etc/ssl/certs/tls.crt, which the authorino-operator sets
// when listener TLS is on, or the SSL_CERT_FILE an installer sets on its
// Deployment to trust OpenShift's service CA). A subPath mount (the
// authorino-operator mounts tls.crt and tls.key so, at the two file
// paths) names the file of that subPath.
//
// As a kubelet does (k8s.io/kubernetes, pkg/volume/secret, the configmap
// plugin in pkg/volume/configmap and the projected plugin in
// pkg/volume/projected, each building the payload of a volume from the
// objects it names): a Secret or ConfigMap gives every key as a file, or
// with items only those keys, each at its item's path; a projected
// volume merges the files of its sources in order (a later source's file
// wins a path). A Secret or ConfigMap that does not exist, or an item's
// key it lacks, is an error unless the volume (or the projected source) is
// optional, and the next poll tries again (a kubelet keeps such a pod in
// ContainerCreating); an optional one that is missing gives no files (its
// key: no file). Projected sources other than ConfigMap and Secret
// (serviceAccountToken, downwardAPI, clusterTrustBundle) and other volume
// kinds are left out: the processes reach the API server through
// KUBECONFIG.
func (s *operatorSupervisor) podVolumes(ctx context.Context, pod *corev1.Pod, c corev1.Container) (volumeDirs, error) {
	out := volumeDirs{}
	written := map[string]bool{}
	for _, m := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == m.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			continue
		}
		dir := filepath.Join(s.o.StateDir, "pods", string(pod.UID), m.Name)
		if !written[m.Name] {
			files, ok, err := s.volumeFiles(ctx, pod.Namespace, vol)
			if err != nil {
				return nil, fmt.Errorf("pod %s/%s volume %s: %w", pod.Namespace, pod.Name, m.Name, err)
			}
			if !ok {
				continue
			}
			if err := writeVolume(dir, files); err != nil {
				return nil, fmt.Errorf("pod %s/%s volume %s: %w", pod.Namespace, pod.Name, m.Name, err)
			}
			written[m.Name] = true
		}
		out[strings.TrimSuffix(m.MountPath, "/")] = filepath.Join(dir, m.SubPath)
	}
	return out, nil
}

// volumeFiles returns the files of vol, a volume of a pod in namespace ns,
// by path in the volume; ok is false for a kind podVolumes leaves out.
func (s *operatorSupervisor) volumeFiles(ctx context.Context, ns string, vol *corev1.Volume) (files map[string]volumeFile, ok bool, err error) {
	switch {
	case vol.Secret != nil:
		files, err = s.secretFiles(ctx, ns, vol.Secret.SecretName, vol.Secret.Items, vol.Secret.Optional)
		return files, true, err
	case vol.ConfigMap != nil:
		files, err = s.configMapFiles(ctx, ns, vol.ConfigMap.Name, vol.ConfigMap.Items, vol.ConfigMap.Optional)
		return files, true, err
	case vol.Projected != nil:
		files = map[string]volumeFile{}
		for i, src := range vol.Projected.Sources {
			var part map[string]volumeFile
			switch {
			case src.Secret != nil:
				part, err = s.secretFiles(ctx, ns, src.Secret.Name, src.Secret.Items, src.Secret.Optional)
			case src.ConfigMap != nil:
				part, err = s.configMapFiles(ctx, ns, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional)
			}
			if err != nil {
				return nil, true, fmt.Errorf("projected source %d: %w", i, err)
			}
			for p, f := range part {
				files[p] = f
			}
		}
		return files, true, nil
	}
	return nil, false, nil
}

// secretFiles are the files of Secret name in ns (mode 0600), see
// podVolumes.
func (s *operatorSupervisor) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string]volumeFile, error) {
	opt := optional != nil && *optional
	sec, err := s.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && opt {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return keyFiles("secret "+name, sec.Data, items, opt, 0o600)
}

// configMapFiles are the files of ConfigMap name in ns (its data and
// binaryData; mode 0644), see podVolumes.
func (s *operatorSupervisor) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string]volumeFile, error) {
	opt := optional != nil && *optional
	cm, err := s.kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && opt {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configmap %s: %w", name, err)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	return keyFiles("configmap "+name, data, items, opt, 0o644)
}

// keyFiles maps the keys of data to files: every key at its own name, or
// with items each item's key at its path (an item's mode, when set,
// replaces mode). what names the object for errors.
func keyFiles(what string, data map[string][]byte, items []corev1.KeyToPath, optional bool, mode os.FileMode) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = volumeFile{data: v, mode: mode}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q", what, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode) & os.ModePerm
		}
		out[it.Path] = volumeFile{data: v, mode: m}
	}
	return out, nil
}

// writeVolume makes dir afresh with files in it (a path with slashes in
// its folders).
func writeVolume(dir string, files map[string]volumeFile) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, f := range files {
		if !filepath.IsLocal(name) {
			return fmt.Errorf("file %q is not a path inside the volume", name)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// podEnv is the process environment of container c of pod: PATH, HOME and
// TMPDIR of this process, then c's env in order, valueFrom.fieldRef
// resolved (metadata.namespace, metadata.name, spec.serviceAccountName,
// spec.nodeName, status.podIP; other valueFrom sources are not resolved),
// each of c's values with its mountPaths rewritten by mounts (as the args
// are: a file the container would read at a mountPath is in the folder
// podVolumes wrote).
func podEnv(pod *corev1.Pod, c corev1.Container, mounts volumeDirs) []string {
	var out []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				continue
			}
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.name":
				v = pod.Name
			case "spec.serviceAccountName":
				v = pod.Spec.ServiceAccountName
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "status.podIP":
				v = pod.Status.PodIP
			default:
				continue
			}
		}
		out = append(out, e.Name+"="+mounts.rewrite(v))
	}
	return out
}

// processes returns every operator process started so far.
func (s *operatorSupervisor) processes() []*process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*process(nil), s.all...)
}

// shutdown ends the loop and stops the running operators.
func (s *operatorSupervisor) shutdown() error {
	s.cancel()
	_ = s.proxy.Close()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	names := make([]string, 0, len(s.running))
	for n := range s.running {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := s.running[n].p.stop(stopGrace); err != nil {
			errs = append(errs, err)
		}
		_ = os.Remove(s.running[n].p.pidFile)
	}
	s.running = map[string]*runningOperator{}
	s.cnpg.close()
	return errors.Join(errs...)
}

// ExposedAddr is the host's loopback address ("127.0.0.1:PORT") at which
// the running process of component serves its exposed port: for
// AuthorinoServer, Authorino's ext_authz gRPC listener
// (AuthorinoExtAuthzPort), copied by netns-run --expose into the process's
// network namespace. ok is false while no such process runs (none started
// yet, or it exited and the supervisor has not started it again; each
// start picks a new port).
func (e *Env) ExposedAddr(component string) (addr string, ok bool) {
	if e.ops == nil {
		return "", false
	}
	e.ops.mu.Lock()
	defer e.ops.mu.Unlock()
	r := e.ops.running[component]
	if r == nil || r.exposed == "" || r.p.exited() {
		return "", false
	}
	return r.exposed, true
}

// ServiceProxy is the proxy through which the real Authorino server calls
// cluster Services by name (register a test's server with Route), nil
// without Options.RealKuadrant.
func (e *Env) ServiceProxy() *ServiceProxy {
	if e.ops == nil {
		return nil
	}
	return e.ops.proxy
}

// ServiceCA is the CA that signs the certificates of the Services behind
// ServiceProxy (OpenShift's service CA), nil without Options.RealKuadrant.
// The real Authorino server trusts it only as an installer configures it
// to (a volume of a ConfigMap holding its PEM, and SSL_CERT_FILE naming
// the file, on Authorino's pod), not by itself.
func (e *Env) ServiceCA() *ServiceCA {
	if e.ops == nil {
		return nil
	}
	return e.ops.ca
}

// OperatorStarts lists the starts of the real Kuadrant operators so far, in
// order (empty without Options.RealKuadrant).
func (e *Env) OperatorStarts() []OperatorStart {
	if e.ops == nil {
		return nil
	}
	e.ops.mu.Lock()
	defer e.ops.mu.Unlock()
	return append([]OperatorStart(nil), e.ops.starts...)
}
