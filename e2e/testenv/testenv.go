// Package testenv runs a local Kubernetes control plane for maasctl's
// integration and end-to-end tests and for `make demo`: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok (one fake
// node), all on 127.0.0.1 and on ports picked at start, loaded with the CRDs
// a fresh OpenShift 4.22 cluster with cert-manager serves and with a fixture
// that makes it look like such a cluster meeting maasctl's prerequisites;
// beside it a real PostgreSQL server (Debian's, postgres.go) for the
// database the CNPG Cluster of the inventory stands for.
//
// The binaries are built by `make testenv` into <repo>/bin/testenv; the way
// they are run follows /work/shared/testenv/RECIPE.md (§3, §5, §8).
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// Environment variables read by [Start] and by the tests of this package.
const (
	// EnvBinDir overrides the default binary folder (<repo>/bin/testenv).
	EnvBinDir = "MAASCTL_TESTENV_BIN"
	// EnvCRDDir overrides the default CRD folder (<repo>/../shared/crds).
	EnvCRDDir = "MAASCTL_CRDS"
	// EnvRequire, set to "1", turns "binaries missing, skipping" into a test
	// failure; CI sets it so that a broken `make testenv` cannot pass silently.
	EnvRequire = "MAASCTL_REQUIRE_TESTENV"
)

// Component names. Each is also the binary name in Options.BinDir and the
// base name of the component's StateDir/<name>.log and StateDir/<name>.pid.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kwok                  = "kwok"
)

// NodeName is the name of the one kwok-managed Node [Start] creates.
const NodeName = "kwok-node-0"

// KwokVersion is the sigs.k8s.io/kwok module version whose stage files
// (kustomize/stage/...) are read from the module cache; it must match the
// kwok binary that `make testenv` installs.
const KwokVersion = "v0.8.0"

// DefaultStartTimeout bounds [Start] when Options.StartTimeout is zero.
// The recipe measured 4.6 s idle and 7–8 s on a busy 2-core machine; in
// a CI run with the e2e tests on the real Kuadrant operators beside it
// (load average 14 on 2 cores, 2026-12-04) kube-apiserver alone took 47 s
// to answer /readyz and the platform CRDs were not Established within 2
// minutes (TestDetachedLoadStop).
const DefaultStartTimeout = 5 * time.Minute

// stopGrace is how long a component gets after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// allComponents are the component names in start order.
var allComponents = []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kwok, OLMOperator, CatalogOperator}

// ErrNotBuilt is wrapped by the error [Start] returns when a binary or the
// kwok stage files are missing; `make testenv` provides both. Tests use
// errors.Is(err, ErrNotBuilt) to skip (unless EnvRequire is "1").
var ErrNotBuilt = errors.New("local control plane not built (run `make testenv`)")

// Options configures [Start]. The zero value starts the full control plane
// with the platform CRDs and the fixture in a new temporary folder.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kwok. Default: $MAASCTL_TESTENV_BIN, else
	// <repo>/bin/testenv where <repo> is the folder of the go.mod of module
	// github.com/maasctl/maasctl found by walking up from the working folder
	// (then from the running executable's folder).
	BinDir string
	// StateDir receives etcd data, certificates, keys, the kubeconfig and
	// the components' *.log and *.pid files. Default: a new temporary
	// folder, removed by a successful [Env.Stop] (kept if Start fails, for
	// its logs). An existing folder is reused: the files testenv owns in it
	// are removed first; Start fails if components recorded there still run.
	StateDir string
	// CRDDir is the CRD tree (see /work/shared/crds/SOURCES.md). Default:
	// $MAASCTL_CRDS, else <repo>/../shared/crds.
	CRDDir string
	// NoFixture skips [ApplyFixture]; platform CRDs are still installed.
	NoFixture bool
	// Fixture, when non-nil, is applied instead of [FixtureObjects]
	// (ignored with NoFixture). Tests needing another starting point edit a
	// copy of FixtureObjects() and pass it here.
	Fixture []*unstructured.Unstructured
	// NoControllers starts only etcd and kube-apiserver: no
	// kube-controller-manager, kube-scheduler, kwok or Node, and Start does
	// not wait for the default ServiceAccount. (Controllers are on by
	// default; the field is negative so that the zero value means default.)
	NoControllers bool
	// NoPostgres skips the PostgreSQL server (postgres.go); it is also
	// not started with NoControllers.
	NoPostgres bool
	// Detach starts the components in their own session without a
	// parent-death signal, so they outlive the calling process; used by
	// `testenv up`. Without it (tests), every component is killed when the
	// calling process dies (Linux PR_SET_PDEATHSIG) and put in its own
	// process group so a terminal's Ctrl-C does not reach it out of order.
	Detach bool
	// NoOLM starts no OLM (olm and catalog operators, opm): the fixture's
	// CatalogSources then keep their recorded status, and nothing installs
	// Subscriptions. OLM runs only with controllers.
	NoOLM bool
	// RealKuadrant runs the real Kuadrant, Authorino and Limitador
	// operators (kuadrant.go) for the pods of the RHCL CSV's Deployments
	// once that CSV is Succeeded, each in a network namespace of its own;
	// deleting the Kuadrant operator's pod restarts its process. The
	// Authorino server (AuthorinoServer) runs the same way for the pod of
	// the Authorino CR's Deployment. Needs OLM
	// (and so root). With Detach, Start only prepares for them (their
	// binaries, the GRPCRoute CRD): they follow pods for as long as the
	// control plane runs, so a process that lives that long runs them
	// (Env.RunOperators, `testenv operators`).
	RealKuadrant bool
	// RealCNPG runs the real CloudNativePG operator (cnpg-manager
	// controller, cnpg.go) for the pod of the cloudnative-pg CSV's
	// Deployment once that CSV is Succeeded, in a network namespace of its
	// own with the pod and Service ranges on its lo; the harness does for
	// its Clusters what kubelets and the Job controller would (the initdb
	// Job against the real PostgreSQL, a PV for the PVC, an instance
	// manager stand-in on the instance pod's IP). Needs OLM (and so root).
	// Not with Detach.
	RealCNPG bool
	// OperatorPodReadyDelay, when positive, makes kwok report the pods of
	// every operator the catalogs install Ready that long after they start
	// (standing for an image pull and start), so their CSVs stay Installing
	// that long (see WriteCatalog).
	OperatorPodReadyDelay time.Duration
	// OLMVia, when set, is called once the API server is ready and before
	// OLM starts, with an admin config of the API server. It returns the
	// server OLM's two operators (and, with RealKuadrant, the Kuadrant,
	// Authorino and Limitador operators and the Authorino server) use
	// instead, as an http or https URL of a port on 127.0.0.1 that needs no
	// credentials (a recording proxy in front of the API server, for
	// example, so the proxy sees their writes as well). netns-run forwards
	// that port into their network namespaces. Its ctx ends when Start
	// returns. Not with Detach.
	OLMVia func(ctx context.Context, apiServer *rest.Config) (server string, err error)
	// AuditLog makes kube-apiserver write an audit log of every request
	// (level Metadata: program, verb, resource, code; no bodies) to
	// StateDir/audit.log, read with Env.AuditLog and AuditSummary. For
	// finding which component sends what (issue 12: the API server is most
	// of a test's CPU). Also on with EnvAudit=1.
	AuditLog bool
	// StartTimeout bounds Start as a whole. Default: DefaultStartTimeout.
	StartTimeout time.Duration
	// Logf, if set, receives progress lines (component started, ready
	// after N ms). It never receives secrets.
	Logf func(format string, args ...any)
}

// Env is a running local control plane, returned by [Start] or [Load].
type Env struct {
	stateDir     string
	removeState  bool
	kubeconfig   string
	cfg          *rest.Config
	procs        []*process // in start order
	logf         func(string, ...any)
	stopOnce     sync.Once
	stopErr      error
	startElapsed time.Duration
	pg           *PostgresServer     // nil without one
	ops          *operatorSupervisor // nil without Options.RealKuadrant or RealCNPG
}

// Kubeconfig returns the path of the admin kubeconfig
// (StateDir/kubeconfig, mode 0600). Its user is a static bearer token in
// group system:masters; its CA is the apiserver's self-signed CA.
func (e *Env) Kubeconfig() string { return e.kubeconfig }

// RESTConfig returns a new copy of the admin client configuration
// (QPS 100, burst 200), safe for the caller to modify. It is nil only for
// an Env from [Load] whose state folder has no kubeconfig.
func (e *Env) RESTConfig() *rest.Config {
	if e.cfg == nil {
		return nil
	}
	return rest.CopyConfig(e.cfg)
}

// StateDir returns the folder holding the components' state, logs and pid
// files.
func (e *Env) StateDir() string { return e.stateDir }

// LogFile returns the path of a component's log (component is one of
// Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kwok,
// OLMOperator, CatalogOperator; the OLM logs hold netns-run's programs: olm,
// or catalog and its two opm servers).
func (e *Env) LogFile(component string) string {
	return filepath.Join(e.stateDir, component+".log")
}

// Postgres returns the control plane's PostgreSQL server, nil when it was
// started with NoPostgres or NoControllers.
func (e *Env) Postgres() *PostgresServer { return e.pg }

// StartDuration is how long [Start] took from launching etcd until the
// control plane was ready (zero for an Env from [Load]).
func (e *Env) StartDuration() time.Duration { return e.startElapsed }

// Stop stops the components in dependency order: PostgreSQL (SIGINT, a
// fast shutdown; its cluster folder is removed), kwok, kube-scheduler,
// kube-controller-manager, then kube-apiserver (waiting until it exited, so
// it does not outlive etcd), then etcd. Each gets SIGTERM and, after 10 s,
// SIGKILL. A temporary StateDir created by Start is removed afterwards.
// Stop is idempotent; later calls return the first result. The error joins
// every component that could not be stopped.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() { e.stopErr = e.stop() })
	return e.stopErr
}

func (e *Env) stop() error {
	var errs []error
	if e.ops != nil {
		if err := e.ops.shutdown(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.pg.stop(); err != nil {
		errs = append(errs, err)
	}
	for _, name := range []string{CatalogOperator, OLMOperator, Kwok, KubeScheduler, KubeControllerManager, KubeAPIServer, Etcd} {
		p := e.proc(name)
		if p == nil {
			continue
		}
		if !p.alive() {
			_ = os.Remove(p.pidFile)
			continue
		}
		t0 := time.Now()
		if err := p.stop(stopGrace); err != nil {
			// Keep going: etcd must still stop if a client would not.
			errs = append(errs, err)
			continue
		}
		e.log("%s stopped in %d ms", name, time.Since(t0).Milliseconds())
		_ = os.Remove(p.pidFile)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop local control plane in %s: %w", e.stateDir, err)
	}
	if e.removeState {
		if err := os.RemoveAll(e.stateDir); err != nil {
			return fmt.Errorf("remove state folder: %w", err)
		}
	}
	return nil
}

func (e *Env) proc(name string) *process {
	for _, p := range e.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (e *Env) log(format string, args ...any) {
	if e.logf != nil {
		e.logf(format, args...)
	}
}

// ComponentStatus describes one component recorded in a StateDir.
type ComponentStatus struct {
	// Name is the component (Etcd, KubeAPIServer, ...).
	Name string
	// PID is the recorded process id (0 if none was recorded).
	PID int
	// Running reports whether that process still runs as this component
	// (checked against /proc/<pid>/cmdline on Linux, so a reused pid does
	// not count).
	Running bool
	// Log is the path of the component's log file.
	Log string
	// Restarts is how often netns-run started the component's programs
	// again after they exited (OLM's operators and opm servers, which it
	// restarts as the kubelet would; 0 for the others).
	Restarts int
}

// Components reports the components recorded in StateDir, in start order.
func (e *Env) Components() []ComponentStatus {
	var out []ComponentStatus
	for _, name := range allComponents {
		s := ComponentStatus{Name: name, Log: e.LogFile(name)}
		if e.proc(name) == nil && (name == OLMOperator || name == CatalogOperator) {
			if _, err := os.Stat(s.Log); err != nil {
				continue // started only with OLM; its log says it ran (a stopped one is listed)
			}
		}
		if p := e.proc(name); p != nil {
			s.PID = p.pid
			s.Running = p.alive()
		}
		s.Restarts = countLines(s.Log, "netns-run: restart ")
		out = append(out, s)
	}
	if e.pg != nil {
		s := ComponentStatus{Name: Postgres, Log: e.LogFile(Postgres)}
		if e.pg.proc != nil {
			s.PID, s.Running = e.pg.proc.pid, e.pg.proc.alive()
		}
		out = append(out, s)
	}
	return out
}

// Ready returns nil when kube-apiserver answers /readyz with "ok"; it makes
// one request, without retrying.
func (e *Env) Ready(ctx context.Context) error {
	return probeReadyz(ctx, e.cfg)
}

// Load returns the Env recorded in stateDir by a [Start] with Detach
// (`testenv up`): its pid files and kubeconfig. Stop on the result stops
// those processes (`testenv down`); it never removes stateDir. A missing
// kubeconfig is not an error (RESTConfig is then nil), so that a
// half-started environment can still be stopped.
func Load(stateDir string) (*Env, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("resolve state folder %s: %w", stateDir, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("state folder: %w", err)
	}
	e := &Env{stateDir: abs, kubeconfig: filepath.Join(abs, "kubeconfig")}
	for _, name := range allComponents {
		p, err := loadProcess(abs, name)
		if err != nil {
			return nil, err
		}
		if p != nil {
			e.procs = append(e.procs, p)
		}
	}
	if e.pg, err = loadPostgres(abs); err != nil {
		return nil, err
	}
	if _, err := os.Stat(e.kubeconfig); err == nil {
		cfg, err := restConfigFromKubeconfig(e.kubeconfig)
		if err != nil {
			return nil, err
		}
		e.cfg = cfg
	}
	return e, nil
}
