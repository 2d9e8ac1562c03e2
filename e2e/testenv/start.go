package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// maxPortAttempts is how often Start picks new ports when a component
// could not bind one (another process took it between pick and bind).
const maxPortAttempts = 3

// ownedStateFiles are removed from a reused StateDir before a start.
var ownedStateFiles = []string{
	"etcd", "certs", "catalogs", "kubeconfig", "ca.crt", "sa.key", "sa.pub", "tokens.csv", "kwok-stages.yaml",
	auditLogName, "audit-policy.yaml",
	Postgres + ".json", Postgres + "-admin.conn", Postgres + ".log", Postgres + ".pid",
}

// kcmControllers are the kube-controller-manager controllers the local
// control plane runs (its --controllers): those that act on what the tests
// create. Deployments and ReplicaSets (every operator's Deployment, and
// OLM waits for their availability); garbage collection (OLM's and the
// simulators' owner references, uninstall's cascades); namespaces
// (deletion, with their content); ServiceAccounts, their legacy token
// Secrets and kube-root-ca.crt in every namespace; Endpoints and
// EndpointSlices of Services (the data path reads them); PVC and PV
// binding and protection (the CloudNativePG simulator's PVC); the nodes'
// lifecycle, taint eviction and pod garbage collection (kwok's node).
//
// Not run, because nothing in the tests creates what they act on or reads
// what they write: the Job controller (kwok runs no containers and its
// pod-complete stage would complete every Job pod, so Jobs that must
// really run, maasctl's database Jobs, are run by the simulators:
// e2e/sim/dbjobs.go); CronJobs, StatefulSets, DaemonSets,
// ReplicationControllers, HorizontalPodAutoscalers, PodDisruptionBudgets,
// ResourceQuotas, CertificateSigningRequests, TTLs, volume attach, expand
// and ephemeral volumes, DRA, storage versions, ValidatingAdmissionPolicy
// status, Service CIDRs, node IPAM; and the ClusterRole aggregation
// controller, which on every OLM install rewrites the aggregated admin,
// edit and view ClusterRoles (about 150 patches of large objects per
// install, measured with MAASCTL_TESTENV_AUDIT) that no test binds. The
// names are kube-controller-manager's (--help lists them); an unknown one
// makes it exit at start.
var kcmControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"endpoints-controller",
	"endpointslice-controller",
	"persistentvolume-binder-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	"node-lifecycle-controller",
	"taint-eviction-controller",
	"pod-garbage-collector-controller",
}

// resolved is Options with defaults filled in and paths made absolute.
type resolved struct {
	Options
	crdFiles    []string
	removeState bool
	// seed, when set, is the etcd data folder each attempt starts from
	// (seed.go); the CRDs are then already stored.
	seed string
}

// Start launches the local control plane and returns once it is ready:
// kube-apiserver answers /readyz, the platform CRDs (PlatformCRDDirs under
// CRDDir) are Established, the fixture is applied, and (with controllers)
// the `default` ServiceAccount exists and Node NodeName is Ready.
//
// Unless MAASCTL_TESTENV_SEED=off, etcd starts from a copy of the etcd
// seed (seed.go), which already holds the CRDs; the first Start for given
// binaries and CRD files makes it.
//
// Every component listens on 127.0.0.1 only, on a port free at start, so
// several test binaries can each run their own. On failure everything
// started is stopped again and the error names the component and quotes
// the end of its log; StateDir is kept for inspection. A missing binary or
// kwok stage file gives an error wrapping ErrNotBuilt before anything runs.
func Start(ctx context.Context, opts Options) (*Env, error) {
	o, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	var stages string
	if !o.NoControllers {
		if stages, err = writeKwokStages(ctx, o.StateDir); err != nil {
			if o.removeState {
				_ = os.RemoveAll(o.StateDir) // nothing ran; no logs to keep
			}
			return nil, fmt.Errorf("start local control plane: %w", err)
		}
	}
	if o.seed, err = ensureSeed(ctx, o); err != nil {
		o.logf("%v; creating the CRDs instead", err)
		o.seed = ""
	}
	for attempt := 1; ; attempt++ {
		env, err := startOnce(ctx, o, stages)
		var ex *exitedError
		if err != nil && errors.As(err, &ex) && ex.portInUse() && attempt < maxPortAttempts {
			o.logf("%s could not bind its port (taken meanwhile); retrying with new ports", ex.p.name)
			if err := clearState(o.StateDir); err != nil {
				return nil, fmt.Errorf("start local control plane: %w", err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("start local control plane (state and logs in %s): %w", o.StateDir, err)
		}
		return env, nil
	}
}

// resolve fills in defaults, checks the binaries and CRD files, and
// prepares StateDir.
func resolve(opts Options) (*resolved, error) {
	o := &resolved{Options: opts}
	var err error
	if o.BinDir == "" {
		if o.BinDir, err = defaultBinDir(); err != nil {
			return nil, fmt.Errorf("start local control plane: %w", err)
		}
	}
	if o.CRDDir == "" {
		if o.CRDDir, err = defaultCRDDir(); err != nil {
			return nil, fmt.Errorf("start local control plane: %w", err)
		}
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if os.Getenv(EnvAudit) == "1" {
		o.AuditLog = true
	}
	bins := []string{Etcd, KubeAPIServer}
	if !o.NoControllers {
		bins = append(bins, KubeControllerManager, KubeScheduler, Kwok)
		if !o.NoOLM {
			if err := checkRoot(); err != nil {
				return nil, fmt.Errorf("start local control plane: %w", err)
			}
			bins = append(bins, OLMOperator, CatalogOperator, Opm, NetnsRun)
			if o.RealKuadrant {
				bins = append(bins, KuadrantOperator, AuthorinoOperator, LimitadorOperator, AuthorinoServer)
			}
			if o.RealCNPG {
				bins = append(bins, CNPGManager)
			}
		}
	}
	if o.RealKuadrant && (o.NoControllers || o.NoOLM) {
		return nil, errors.New("start local control plane: Options.RealKuadrant needs controllers and OLM")
	}
	if o.RealCNPG && (o.NoControllers || o.NoOLM || o.NoPostgres || o.Detach) {
		return nil, errors.New("start local control plane: Options.RealCNPG needs controllers, OLM and PostgreSQL, and not Detach")
	}
	if err := checkBinaries(o.BinDir, bins...); err != nil {
		return nil, fmt.Errorf("start local control plane: %w", err)
	}
	if o.crdFiles, err = PlatformCRDFiles(o.CRDDir); err != nil {
		return nil, fmt.Errorf("start local control plane: %w", err)
	}
	olmCRDs, err := OLMCRDFiles(context.Background())
	if err != nil {
		return nil, fmt.Errorf("start local control plane: %w", err)
	}
	o.crdFiles = append(o.crdFiles, olmCRDs...)
	if o.RealKuadrant {
		f, err := grpcRouteCRDFile(context.Background())
		if err != nil {
			return nil, fmt.Errorf("start local control plane: %w", err)
		}
		o.crdFiles = append(o.crdFiles, f)
	}
	if o.RealCNPG {
		fs, err := cnpgMoreCRDFiles(context.Background())
		if err != nil {
			return nil, fmt.Errorf("start local control plane: %w", err)
		}
		o.crdFiles = append(o.crdFiles, fs...)
	}
	if o.StateDir == "" {
		if o.StateDir, err = os.MkdirTemp("", "maasctl-testenv-"); err != nil {
			return nil, fmt.Errorf("start local control plane: create state folder: %w", err)
		}
		o.removeState = true
	} else {
		if err := prepareStateDir(o.StateDir); err != nil {
			return nil, fmt.Errorf("start local control plane: %w", err)
		}
	}
	for _, d := range []*string{&o.BinDir, &o.CRDDir, &o.StateDir} {
		if *d, err = filepath.Abs(*d); err != nil {
			return nil, fmt.Errorf("start local control plane: %w", err)
		}
	}
	return o, nil
}

func (o *resolved) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// prepareStateDir creates dir, refuses it if components recorded there
// still run, and removes the files testenv owns in it (never anything
// else, in case dir is a folder with other content).
func prepareStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state folder: %w", err)
	}
	for _, name := range append(slices.Clone(allComponents), Postgres) {
		p, err := loadProcess(dir, name)
		if err != nil {
			return err
		}
		if p != nil && p.alive() {
			return fmt.Errorf("state folder %s: %s (pid %d) still runs; stop it first (testenv down --state %s)", dir, name, p.pid, dir)
		}
	}
	return clearState(dir)
}

// clearState removes the files testenv owns in dir.
func clearState(dir string) error {
	names := append([]string(nil), ownedStateFiles...)
	for _, c := range allComponents {
		names = append(names, c+".log", c+".pid")
	}
	for _, n := range names {
		if n == "kwok-stages.yaml" {
			continue // written once per Start, before the attempts
		}
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("clean state folder: %w", err)
		}
	}
	return nil
}

// exitedError reports a component that exited while Start waited for it.
type exitedError struct{ p *process }

func (e *exitedError) Error() string { return e.p.exitError().Error() }

// portInUse reports whether the component exited because its port was
// taken: Go servers log "address already in use", PostgreSQL logs
// strerror(EADDRINUSE), "Address already in use".
func (e *exitedError) portInUse() bool {
	return logContains(e.p.logFile, "address already in use") || logContains(e.p.logFile, "Address already in use")
}

// startOnce runs one start attempt on freshly picked ports. On error it
// stops whatever it started.
func startOnce(ctx context.Context, o *resolved, stages string) (_ *Env, err error) {
	env := &Env{
		stateDir:    o.StateDir,
		removeState: o.removeState,
		kubeconfig:  filepath.Join(o.StateDir, "kubeconfig"),
		logf:        o.Logf,
	}
	// A component that exits during start cancels every wait below, with
	// its exit as the cause.
	mctx, cancelMon := context.WithCancelCause(ctx)
	defer cancelMon(nil)
	launch := func(name string, args ...string) error {
		p, err := startProcess(o.StateDir, o.BinDir, name, o.Detach, args...)
		if err != nil {
			return err
		}
		env.procs = append(env.procs, p)
		go func() {
			select {
			case <-p.done:
				cancelMon(&exitedError{p: p})
			case <-mctx.Done():
			}
		}()
		o.logf("%s started (pid %d)", name, p.pid)
		return nil
	}
	// cause turns a wait error into the exit of the component behind it.
	cause := func(err error) error {
		var ex *exitedError
		if c := context.Cause(mctx); errors.As(c, &ex) {
			return ex
		}
		return err
	}
	defer func() {
		if err != nil {
			env.removeState = false
			if serr := env.stop(); serr != nil {
				err = errors.Join(err, serr)
			}
		}
	}()

	// PostgreSQL starts beside the control plane (initdb takes about 1 s).
	pgs := beginPostgres(mctx, o)
	defer func() {
		if err != nil {
			pgs.abandon()
		}
	}()

	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	saKey, saPub, err := writeServiceAccountKeys(o.StateDir)
	if err != nil {
		return nil, err
	}
	tokenFile, token, err := writeTokenFile(o.StateDir)
	if err != nil {
		return nil, err
	}

	t0 := time.Now()
	if o.seed != "" {
		if err := copySparse(o.seed, filepath.Join(o.StateDir, "etcd")); err != nil {
			return nil, fmt.Errorf("copy the etcd seed %s: %w", o.seed, err)
		}
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	// --unsafe-no-fsync: throwaway data; RECIPE.md §1, §3.
	if err := launch(Etcd,
		"--name=testenv",
		"--data-dir="+filepath.Join(o.StateDir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=testenv="+peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	); err != nil {
		return nil, err
	}
	certDir := filepath.Join(o.StateDir, "certs")
	audit, err := auditArgs(o.AuditLog, o.StateDir)
	if err != nil {
		return nil, err
	}
	if err := launch(KubeAPIServer, append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + certDir,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		// OpenShift's API server accepts tokens for the in-cluster audience
		// https://kubernetes.default.svc, the one the MaaS Gateway
		// AuthPolicy's kubernetesTokenReview asks for; without it a
		// TokenReview of the kubeconfig's static token for that audience
		// is unauthenticated (static tokens count for the API audiences).
		"--api-audiences=https://kubernetes.default.svc,https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=Node,RBAC",
		// The "kubernetes" Service would point at 127.0.0.1; nothing uses it.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
	}, append(audit, strings.Fields(os.Getenv(EnvAPIServerFlags))...)...)...); err != nil {
		return nil, err
	}

	server := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	caFile := filepath.Join(o.StateDir, "ca.crt")
	if err := waitAPIServer(mctx, filepath.Join(certDir, "apiserver.crt"), caFile, env.kubeconfig, server, token, &env.cfg); err != nil {
		return nil, fmt.Errorf("wait for kube-apiserver /readyz: %w", cause(err))
	}
	o.logf("kube-apiserver ready after %d ms", time.Since(t0).Milliseconds())

	if !o.NoControllers {
		// No --authentication/authorization-kubeconfig: kube-apiserver here
		// has no client CA, so the extension-apiserver-authentication
		// ConfigMap they read never exists (an error loop in the logs);
		// /healthz is served without them.
		k := "--kubeconfig=" + env.kubeconfig
		if err := launch(KubeControllerManager, k,
			"--bind-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(kcmPort),
			"--leader-elect=false",
			"--service-account-private-key-file="+saKey,
			"--root-ca-file="+caFile,
			"--controllers="+strings.Join(kcmControllers, ","),
		); err != nil {
			return nil, err
		}
		if err := launch(KubeScheduler, k,
			"--bind-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(schedPort),
			"--leader-elect=false",
		); err != nil {
			return nil, err
		}
		// kwok's fake kubelet stays on loopback; pod IPs from --cidr are
		// only written into status (RECIPE.md §5).
		if err := launch(Kwok, k,
			"--config="+stages,
			"--manage-all-nodes=true",
			"--node-ip=127.0.0.1",
			"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
			"--node-lease-duration-seconds=40",
			"--cidr=10.244.0.1/16",
		); err != nil {
			return nil, err
		}
		node, err := decodeObjects(kwokNodeYAML, "kwok/node.yaml")
		if err != nil {
			return nil, err
		}
		if err := ApplyObjects(mctx, env.cfg, node...); err != nil {
			return nil, cause(err)
		}
	}

	if err := installCRDs(mctx, env.cfg, o.seed == "", o.crdFiles...); err != nil {
		return nil, cause(err)
	}
	from := ""
	if o.seed != "" {
		from = " (stored in the etcd seed)"
	}
	o.logf("%d platform CRDs established after %d ms%s", len(o.crdFiles), time.Since(t0).Milliseconds(), from)
	withOLM := !o.NoControllers && !o.NoOLM
	var objs []*unstructured.Unstructured
	if !o.NoFixture {
		objs = o.Fixture
		if objs == nil {
			objs = FixtureObjects()
		}
		if withOLM {
			objs = olmFixture(objs)
		}
		if err := ApplyObjects(mctx, env.cfg, objs...); err != nil {
			return nil, fmt.Errorf("apply fixture: %w", cause(err))
		}
		o.logf("fixture applied (%d objects)", len(objs))
	}

	if !o.NoControllers {
		dyn, err := dynamic.NewForConfig(env.cfg)
		if err != nil {
			return nil, err
		}
		sa := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace("default")
		if err := waitFor(mctx, sa, "default", func(*unstructured.Unstructured) (bool, error) { return true, nil }); err != nil {
			return nil, fmt.Errorf("wait for ServiceAccount default/default: %w", cause(err))
		}
		nodes := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
		if err := waitFor(mctx, nodes, NodeName, func(u *unstructured.Unstructured) (bool, error) {
			return hasCondition(u, "Ready", "True"), nil
		}); err != nil {
			return nil, fmt.Errorf("wait for Node %s Ready: %w", NodeName, cause(err))
		}
	}
	if env.pg, err = pgs.wait(); err != nil {
		return nil, fmt.Errorf("start PostgreSQL (log %s): %w", env.LogFile(Postgres), err)
	}
	if withOLM {
		olmKubeconfig, olmPort, err := olmServer(mctx, o, env.cfg, env.kubeconfig, apiPort)
		if err != nil {
			return nil, err
		}
		launches, err := olmLaunches(o, o.StateDir, olmKubeconfig, olmPort)
		if err != nil {
			return nil, err
		}
		for _, l := range launches {
			p, err := startProcessEnv(o.StateDir, filepath.Join(o.BinDir, NetnsRun), l.name, o.Detach, l.env, l.args...)
			if err != nil {
				return nil, err
			}
			env.procs = append(env.procs, p)
			go func() {
				select {
				case <-p.done:
					cancelMon(&exitedError{p: p})
				case <-mctx.Done():
				}
			}()
			o.logf("%s started (pid %d)", l.name, p.pid)
		}
		dyn, err := dynamic.NewForConfig(env.cfg)
		if err != nil {
			return nil, err
		}
		if err := waitOLMReady(mctx, dyn, objs); err != nil {
			return nil, withRestarts(o.StateDir, cause(err), OLMOperator, CatalogOperator)
		}
		o.logf("OLM ready after %d ms (catalogs: %s; %s)", time.Since(t0).Milliseconds(), catalogChannels(CatalogRedHat), catalogChannels(CatalogCertified))
		if (o.RealKuadrant || o.RealCNPG) && !o.Detach {
			if env.ops, err = startOperatorSupervisor(o, env, olmKubeconfig, olmPort); err != nil {
				return nil, err
			}
		}
	}
	env.startElapsed = time.Since(t0)
	o.logf("local control plane ready after %d ms; KUBECONFIG=%s", env.startElapsed.Milliseconds(), env.kubeconfig)
	return env, nil
}

// waitAPIServer polls until kube-apiserver's generated CA can be read and
// /readyz answers "ok" (a process start: there is nothing to watch yet).
// Once the CA is there it writes caFile and the kubeconfig and sets *cfg.
func waitAPIServer(ctx context.Context, certFile, caFile, kubeconfig, server, token string, cfg **rest.Config) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if *cfg == nil {
			// The apiserver writes apiserver.crt before it listens; a read
			// racing the write just fails and is retried.
			if ca, err := caFromServingCert(certFile); err == nil {
				if err := os.WriteFile(caFile, ca, 0o600); err != nil {
					return fmt.Errorf("write CA: %w", err)
				}
				if err := writeKubeconfig(kubeconfig, server, ca, token); err != nil {
					return err
				}
				c, err := restConfigFromKubeconfig(kubeconfig)
				if err != nil {
					return err
				}
				*cfg = c
			} else {
				last = err
			}
		}
		if *cfg != nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			last = probeReadyz(rctx, *cfg)
			cancel()
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}
