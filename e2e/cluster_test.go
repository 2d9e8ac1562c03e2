package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/e2e/vaultserver"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/steps"
)

// Environment variables of the e2e harness (README.md, "End-to-end tests on
// any cluster").
const (
	// envKubeconfig names the kubeconfig of an existing cluster (kind,
	// OpenShift Local, ...) to run against instead of starting the local
	// control plane.
	envKubeconfig = "E2E_KUBECONFIG"
	// envSim is "1" to run the simulated operators against the cluster and
	// "0" not to (real operators). Default: 1 on the local control plane,
	// 0 with E2E_KUBECONFIG.
	envSim = "E2E_SIM"
	// envFixture is "1" to install the platform CRDs and the
	// fresh-OpenShift fixture (e2e/testenv) on an external cluster before
	// the first test, as kind needs. Default: the value of E2E_SIM.
	envFixture = "E2E_FIXTURE"
	// envTimeout bounds one maasctl run (a Go duration). Default 10m on the
	// local control plane, 30m on an external cluster.
	envTimeout = "E2E_TIMEOUT"
	// envReset says how a test starts on an external cluster, which the
	// tests share: "state" deletes maasctl's run Lease and checkpoints;
	// "uninstall" also runs `maasctl uninstall --delete-data --yes` (with
	// this test's simulators running, so they finalise what they own) so
	// that every test starts from the fixture, as on a new local control
	// plane. Default: uninstall with E2E_SIM=1, state without.
	envReset = "E2E_RESET"
)

// maasctlBin is the binary under test: $MAASCTL_BIN/maasctl (make test sets
// it), else built into a temporary folder by TestMain.
var maasctlBin string

func TestMain(m *testing.M) {
	code := func() int {
		if dir := os.Getenv("MAASCTL_BIN"); dir != "" {
			maasctlBin = filepath.Join(dir, "maasctl")
		} else {
			tmp, err := os.MkdirTemp("", "maasctl-e2e-bin")
			if err != nil {
				panic(err)
			}
			defer os.RemoveAll(tmp)
			maasctlBin = filepath.Join(tmp, "maasctl")
			out, err := exec.Command("go", "build", "-o", maasctlBin, "../cmd/maasctl").CombinedOutput()
			if err != nil {
				os.Stderr.Write(out)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// cluster is one cluster under test with (optionally) simulated operators
// and a Vault-API server: by default a new local control plane set up as a
// fresh OpenShift cluster meeting the prerequisites, or the cluster of
// E2E_KUBECONFIG.
type cluster struct {
	// env is the local control plane; nil on an external cluster.
	env        *testenv.Env
	clients    *kube.Clients
	vault      *vaultserver.Server
	vaultAddr  string
	vaultToken string
	dir        string
	// realCNPG: the real CloudNativePG operator runs (clusterOptions.realCNPG).
	realCNPG bool

	// cfg reaches the API server directly (never through the proxy); nil
	// means env.RESTConfig().
	cfg *rest.Config
	// kubeconfig is the file maasctl gets: the cluster's, or the proxy's;
	// empty means env.Kubeconfig().
	kubeconfig string
	// external is true for an E2E_KUBECONFIG cluster.
	external bool
	// simulated is true when simulated operators run against the cluster.
	simulated bool
	// sim runs the simulated operators (nil without E2E_SIM).
	sim *sim.Handle
	// proxy is the fault proxy between maasctl and the API server, when
	// clusterOptions.proxy asked for one.
	proxy *faultproxy.Proxy
}

type clusterOptions struct {
	simDelay map[string]time.Duration
	// proxy, when set, puts a faultproxy with these options between
	// maasctl and the API server (Upstream is filled in). The test's own
	// clients (c.clients) always talk to the API server directly.
	proxy *faultproxy.Options
	// simViaProxy sends the simulators' requests through the proxy too
	// (User-Agent simUserAgent), so a recording proxy sees every write to
	// the managed objects.
	simViaProxy bool
	// realCNPG runs the real CloudNativePG operator in the local control
	// plane (testenv Options.RealCNPG) instead of the CNPG simulator; also
	// on for every test with envRealCNPG=1.
	realCNPG bool
}

// envRealCNPG, set to 1 or true, runs the real CloudNativePG operator
// (testenv Options.RealCNPG) in every test's local control plane.
const envRealCNPG = "MAASCTL_TESTENV_REAL_CNPG"

// simUserAgent is the User-Agent of the simulators' requests.
const simUserAgent = "maasctl-sim"

// restConfig is the cluster's API server, reached directly.
func (c *cluster) restConfig() *rest.Config {
	if c.cfg != nil {
		return rest.CopyConfig(c.cfg)
	}
	return c.env.RESTConfig()
}

// postgresAdmin is the superuser connection string of the local control
// plane's PostgreSQL, for the simulated CNPG's initdb; empty on an
// external cluster (its own CNPG runs the database).
func (c *cluster) postgresAdmin() string {
	if c.env == nil || c.env.Postgres() == nil {
		return ""
	}
	return c.env.Postgres().AdminConnString()
}

// kubeconfigPath is the kubeconfig maasctl runs with.
func (c *cluster) kubeconfigPath() string {
	if c.kubeconfig != "" {
		return c.kubeconfig
	}
	return c.env.Kubeconfig()
}

// envFull, set to 1 or true, also runs the e2e tests and test variants
// that `make test` leaves out to keep CI within its 90 minutes (make
// test-full sets it). On 2026-12-05 the e2e package alone reached the go
// test timeout of 80 minutes in a fresh-clone CI check on this 2-core
// machine (see docs/measurements.md, "CI checks of make test").
const envFull = "MAASCTL_E2E_FULL"

// fullOnly skips t unless envFull is set. proves says what the test
// proves, so that the skip names what a default run does not prove.
func fullOnly(t *testing.T, proves string) {
	t.Helper()
	if !envBool(envFull, false) {
		t.Skipf("left out of make test for CI's time (%s=1 or make test-full runs it); not proven in this run: %s", envFull, proves)
	}
}

func envBool(name string, def bool) bool {
	switch os.Getenv(name) {
	case "1", "true":
		return true
	case "0", "false":
		return false
	}
	return def
}

// runTimeout bounds one maasctl run.
func runTimeout(external bool) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(envTimeout)); err == nil && d > 0 {
		return d
	}
	if external {
		return 30 * time.Minute
	}
	return 10 * time.Minute // an install takes about 40 s on an idle machine and took over 5 min in a loaded CI run
}

// externalFixture installs the platform CRDs and the fixture on the
// external cluster once per test binary.
var externalFixture struct {
	once sync.Once
	err  error
}

// parallel lets top-level test t run beside the others (go test -parallel,
// default GOMAXPROCS) when each test starts its own local control plane. On
// an E2E_KUBECONFIG cluster the tests share one cluster and run one at a
// time. Tests that set environment variables (t.Setenv) or measure timing
// (TestKillAnywhere) do not call it: go test runs them first, alone.
func parallel(t *testing.T) {
	t.Helper()
	if os.Getenv(envKubeconfig) == "" {
		t.Parallel()
	}
}

func newCluster(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &cluster{dir: t.TempDir()}
	if path := os.Getenv(envKubeconfig); path != "" {
		c.external = true
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatalf("%s=%s: %v", envKubeconfig, path, err)
		}
		c.cfg, c.kubeconfig = cfg, path
		c.simulated = envBool(envSim, false)
		if envBool(envFixture, c.simulated) {
			externalFixture.once.Do(func() { externalFixture.err = installFixture(ctx, cfg) })
			if externalFixture.err != nil {
				t.Fatalf("install the platform CRDs and fixture on %s: %v", path, externalFixture.err)
			}
		}
	} else {
		olmDelay, _ := sim.SplitOLMDelay(o.simDelay)
		// Logf: the control plane's milestones (each component's start,
		// "ready after N ms") go to the test's log, where go test -v and
		// a failed test show them: where a slow test spent its time.
		// The Kuadrant, Authorino and Limitador operators are always the
		// real ones (e2e/sim simulates none of them).
		to := testenv.Options{OperatorPodReadyDelay: olmDelay, RealKuadrant: true, Logf: t.Logf}
		to.RealCNPG = o.realCNPG || envBool(envRealCNPG, false)
		c.realCNPG = to.RealCNPG
		if o.proxy != nil && o.simViaProxy {
			// The real OLM writes Subscriptions, InstallPlans and CSVs
			// maasctl also reads and applies (and the real Kuadrant
			// operators the Kuadrant CR's status, the Authorino CR and its
			// Service): a recording proxy that is to see every writer
			// starts before OLM, and they go through it.
			to.OLMVia = func(_ context.Context, api *rest.Config) (string, error) {
				// ctx, not Start's: the proxy outlives Start.
				p, err := startProxy(ctx, t, c, *o.proxy, api)
				if err != nil {
					return "", err
				}
				return p.URL(), nil
			}
		}
		env, err := testenv.Start(ctx, to)
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
		c.env = env
		c.simulated = envBool(envSim, true)
	}
	clients, err := kube.New(c.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	c.clients = clients
	if c.external {
		resetState(t, c)
	}
	c.vaultToken = "e2e-root-token-" + strings.ReplaceAll(t.Name(), "/", "-")
	c.vault = vaultserver.New(vaultserver.Options{RootToken: c.vaultToken})
	c.vaultAddr, err = c.vault.Start(ctx)
	if err != nil {
		t.Fatalf("start Vault-API server: %v", err)
	}
	t.Cleanup(func() { _ = c.vault.Close() })
	simCfg := c.restConfig()
	var proxyKubeconfig string
	if o.proxy != nil {
		p := c.proxy
		if p == nil {
			if p, err = startProxy(ctx, t, c, *o.proxy, c.restConfig()); err != nil {
				t.Fatalf("start fault proxy: %v", err)
			}
		}
		proxyKubeconfig = filepath.Join(c.dir, "proxy.kubeconfig")
		if err := p.WriteKubeconfig(proxyKubeconfig); err != nil {
			t.Fatal(err)
		}
		if o.simViaProxy {
			simCfg = p.RESTConfig()
		}
	}
	if c.simulated {
		simCfg.UserAgent = simUserAgent
		logger := simLogger(t, c.dir)
		so := sim.Options{Delay: simOnlyDelay(o.simDelay), Logger: logger, Postgres: c.postgresAdmin(), RealCNPG: c.realCNPG}
		// Against an external cluster the real Kuadrant operators must run
		// there too (testenv-ctl operators, as make demo runs them).
		if so.IstioCRDs, err = testenv.IstioCRDFile(ctx); err != nil {
			t.Fatal(err)
		}
		// The published service CA bundle also holds the CA of the
		// servers tests put behind Service names (maas-api's stand-in):
		// Authorino trusts it only as maasctl mounts that bundle.
		if c.env != nil && c.env.ServiceCA() != nil {
			so.ServiceCABundle = c.env.ServiceCA().PEM()
		}
		h, err := sim.Start(ctx, simCfg, so)
		if err != nil {
			t.Fatalf("start simulators: %v", err)
		}
		t.Cleanup(func() { _ = h.Stop() })
		c.sim = h
	}
	if c.external && os.Getenv(envReset) != "state" && (os.Getenv(envReset) == "uninstall" || c.simulated) {
		// Straight to the API server: the proxy may inject faults.
		u := c.maasctl(t, "uninstall", "--delete-data", "--yes", "-o", "json")
		if u.exit != 0 {
			t.Fatalf("reset the external cluster with maasctl uninstall: exit %d (set %s=state to skip)\n%s\n%s", u.exit, envReset, u.stdout, u.stderr)
		}
		resetState(t, c)
	}
	if proxyKubeconfig != "" {
		c.kubeconfig = proxyKubeconfig
	}
	return c
}

// startProxy starts c's fault proxy (c.proxy) in front of upstream; it is
// closed when t ends.
func startProxy(ctx context.Context, t *testing.T, c *cluster, po faultproxy.Options, upstream *rest.Config) (*faultproxy.Proxy, error) {
	po.Upstream = upstream
	p, err := faultproxy.Start(ctx, po)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = p.Close() })
	c.proxy = p
	return p, nil
}

// installFixture makes an external cluster (kind) look like the local
// control plane: the platform CRDs a fresh OpenShift serves and the fixture
// objects (e2e/testenv).
func installFixture(ctx context.Context, cfg *rest.Config) error {
	dir, err := sim.DefaultCRDDir()
	if err != nil {
		return err
	}
	files, err := testenv.PlatformCRDFiles(dir)
	if err != nil {
		return err
	}
	if err := testenv.InstallCRDs(ctx, cfg, files...); err != nil {
		return err
	}
	return testenv.ApplyFixture(ctx, cfg)
}

// resetState removes maasctl's own state (the run Lease and the
// checkpoints: the ConfigMap and those the record's shards carry) from an
// external cluster, so that each test starts without a previous run's
// hints or lock. Installed objects and the record stay: an external
// cluster is shared by the tests, and every step's Apply is idempotent.
func resetState(t *testing.T, c *cluster) {
	t.Helper()
	ctx := context.Background()
	err := c.clients.Kube.CoordinationV1().Leases(steps.StateNamespace).Delete(ctx, steps.LeaseName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("reset: delete Lease %s/%s: %v", steps.StateNamespace, steps.LeaseName, err)
	}
	err = c.clients.Kube.CoreV1().ConfigMaps(steps.StateNamespace).Delete(ctx, steps.CheckpointsConfigMap, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("reset: delete ConfigMap %s/%s: %v", steps.StateNamespace, steps.CheckpointsConfigMap, err)
	}
	shards, err := c.clients.Kube.CoreV1().ConfigMaps(steps.StateNamespace).List(ctx, metav1.ListOptions{LabelSelector: steps.RecordSelector})
	if err != nil {
		t.Fatalf("reset: list the record's shards: %v", err)
	}
	for _, cm := range shards.Items {
		if _, ok := cm.Data["checkpoint.json"]; !ok {
			continue
		}
		_, err := c.clients.Kube.CoreV1().ConfigMaps(steps.StateNamespace).Patch(ctx, cm.Name, types.MergePatchType, []byte(`{"data":{"checkpoint.json":null}}`), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("reset: drop the checkpoint of record shard %s: %v", cm.Name, err)
		}
	}
}

// run is one finished maasctl invocation.
type run struct {
	stdout, stderr string
	exit           int
	events         []steps.Event
	wall           time.Duration
}

func (c *cluster) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, maasctlBin, args...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+c.kubeconfigPath(),
		"VAULT_ADDR="+c.vaultAddr,
		"VAULT_TOKEN="+c.vaultToken,
		"HOME="+c.dir, // no ~/.vault-token or ~/.kube from the machine
	)
	// At ctx's end maasctl gets SIGTERM, not SIGKILL: it stops its steps
	// and says in their failed events what each was waiting for, which a
	// killed run never says. SIGKILL follows if it has not exited in 30 s.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	return cmd
}

// background is a maasctl run started with start: its stdout is read
// line by line from out, its stderr collected in stderr.
type background struct {
	cmd    *exec.Cmd
	out    io.ReadCloser
	lines  *bufio.Scanner
	stderr *bytes.Buffer
}

// start starts maasctl with args in the background (ended by ctx).
func (c *cluster) start(ctx context.Context, t *testing.T, args ...string) *background {
	t.Helper()
	b := &background{cmd: c.command(ctx, args...), stderr: &bytes.Buffer{}}
	b.cmd.Stderr = b.stderr
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b.out = out
	b.lines = bufio.NewScanner(out)
	b.lines.Buffer(make([]byte, 1<<20), 1<<20)
	return b
}

// maasctl runs the binary to completion.
func (c *cluster) maasctl(t *testing.T, args ...string) run {
	t.Helper()
	return c.maasctlEnv(t, nil, args...)
}

// maasctlEnv runs the binary to completion with extra environment entries,
// which override the cluster's defaults (VAULT_TOKEN=... or VAULT_TOKEN=).
func (c *cluster) maasctlEnv(t *testing.T, env []string, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout(c.external))
	defer cancel()
	cmd := c.command(ctx, args...)
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errb.String(), wall: time.Since(t0)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("run maasctl: %v", err)
	}
	r.events = parseEvents(r.stdout)
	t.Logf("maasctl %s: exit %d after %s", firstArg(args), r.exit, r.wall.Round(time.Millisecond))
	if r.wall >= slowRun {
		t.Logf("maasctl %s took %s; its slowest steps:\n%s", firstArg(args), r.wall.Round(time.Second), slowSteps(r.events, 5))
	}
	return r
}

// slowRun is the wall time from which a maasctl run's slowest steps are
// logged, so that a run that passed but stalled under load says where.
const slowRun = 2 * time.Minute

// slowSteps describes the n longest steps of evs (by their done, failed or
// unchanged event's Duration), each with its last progress message.
func slowSteps(evs []steps.Event, n int) string {
	last := map[string]string{}
	type span struct {
		step, outcome, msg string
		d                  time.Duration
	}
	var spans []span
	for _, e := range evs {
		switch e.Type {
		case steps.EventProgress:
			last[e.Step] = e.Message
		case steps.EventDone, steps.EventFailed, steps.EventUnchanged:
			spans = append(spans, span{e.Step, string(e.Type), last[e.Step], e.Duration})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].d > spans[j].d })
	var b strings.Builder
	for _, s := range spans[:min(n, len(spans))] {
		fmt.Fprintf(&b, "  %-32s %-9s %8s  last progress: %s\n", s.step, s.outcome, s.d.Round(100*time.Millisecond), s.msg)
	}
	return b.String()
}

// firstArg is maasctl's subcommand in args ("" for none), for the log.
func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func parseEvents(s string) []steps.Event {
	var evs []steps.Event
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev steps.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type != "" {
			evs = append(evs, ev)
		}
	}
	return evs
}

// stepsWith returns the step IDs of events of type typ.
func stepsWith(evs []steps.Event, typ steps.EventType) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev.Step)
		}
	}
	return out
}

// startReasons is the start message of each step of ids in evs (why a
// re-run applied it: "re-applying: ...", "inputs changed"), for a test's
// failure message.
func startReasons(evs []steps.Event, ids []string) string {
	var out []string
	for _, e := range evs {
		if e.Type == steps.EventStarted && slices.Contains(ids, e.Step) {
			out = append(out, fmt.Sprintf("%s: %q", e.Step, e.Message))
		}
	}
	return strings.Join(out, "; ")
}

func summary(t *testing.T, evs []steps.Event) *steps.Summary {
	t.Helper()
	for _, ev := range evs {
		if ev.Type == steps.EventRunDone && ev.Summary != nil {
			return ev.Summary
		}
	}
	t.Fatalf("no run-done event in output")
	return nil
}

func get(t *testing.T, c *cluster, apiVersion, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	live, err := c.clients.Get(context.Background(), u)
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", kind, ns, name, err)
	}
	return live
}

// simOnlyDelay is d without the OLM delay (which goes to the control
// plane: testenv.Options.OperatorPodReadyDelay).
func simOnlyDelay(d map[string]time.Duration) map[string]time.Duration {
	_, out := sim.SplitOLMDelay(d)
	return out
}

// assertLoopbackOnly fails t when a socket of the local control plane's
// processes (kube-apiserver, etcd, controllers, the real OLM and its opm
// servers) has a remote end beyond loopback (issue 12, item 6). A cluster
// without a local control plane (an external one) is not checked.
func assertLoopbackOnly(t *testing.T, c *cluster) {
	t.Helper()
	if c.env == nil {
		return
	}
	conns, err := c.env.Connections()
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) == 0 {
		t.Fatal("no sockets of the control plane found; the loopback check would pass vacuously")
	}
	// With the real CNPG operator, its calls to the instance pod's IP
	// stay inside its own network namespace (pod and Service ranges on its
	// lo; the stand-in's end is there too).
	hostNS, _ := os.Readlink("/proc/self/ns/net")
	for _, cn := range conns {
		if cn.LeavesLoopback() && !cn.StaysInNamespace(hostNS) {
			t.Errorf("connection leaves loopback: %s", cn)
		}
	}
}

// simLogger writes the simulators' log to dir/sim.log. When the test
// fails, the log's warnings and errors and its last lines are printed
// (the folder is removed after the test), so a wait that ran out in CI
// says what the simulated operators were doing.
func simLogger(t *testing.T, dir string) *zap.Logger {
	t.Helper()
	path := filepath.Join(dir, "sim.log")
	logger, err := zap.Config{
		Level: zap.NewAtomicLevelAt(zap.InfoLevel), Encoding: "json",
		EncoderConfig: zap.NewProductionEncoderConfig(),
		OutputPaths:   []string{path}, ErrorOutputPaths: []string{path},
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		_ = logger.Sync()
		data, err := os.ReadFile(path)
		if err != nil {
			return
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		var warn []string
		for _, l := range lines {
			if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
				warn = append(warn, l)
			}
		}
		tail := lines[max(0, len(lines)-25):]
		t.Logf("simulator log (%d lines): %d warnings and errors (last 25):\n%s\nlast lines:\n%s",
			len(lines), len(warn), strings.Join(warn[max(0, len(warn)-25):], "\n"), strings.Join(tail, "\n"))
	})
	return logger
}

// logAudit registers a cleanup, run before env stops, that logs the
// control plane's requests by program and the most frequent program, verb
// and resource, when it was started with an audit log
// (testenv.EnvAudit=1): where a test's API server time goes.
func logAudit(t *testing.T, env *testenv.Env) {
	t.Helper()
	t.Cleanup(func() {
		path := env.AuditLog()
		if path == "" {
			return
		}
		counts, err := testenv.AuditSummary(path)
		if err != nil {
			t.Logf("audit log: %v", err)
			return
		}
		var b strings.Builder
		total := 0
		for _, c := range counts {
			total += c.N
		}
		fmt.Fprintf(&b, "API requests: %d; by program:", total)
		for _, p := range testenv.AuditByProgram(counts) {
			fmt.Fprintf(&b, " %s %d,", p.Program, p.N)
		}
		b.WriteString("\nmost frequent:\n")
		for _, c := range counts[:min(len(counts), 25)] {
			fmt.Fprintf(&b, "%6d %s %s %s %v\n", c.N, c.Program, c.Verb, c.Resource, c.Code)
		}
		t.Log(b.String())
	})
}

// logsOnFailure registers a cleanup, run before env stops, that logs
// when t failed the starts of the real Kuadrant operators and, for OLM's
// and the Kuadrant operators' logs, the count of their error lines and
// the last few of them: a test stuck on an operator then says what the
// operator was doing, though CI keeps only a part of the output.
func logsOnFailure(t *testing.T, env *testenv.Env) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		for _, s := range env.OperatorStarts() {
			fmt.Fprintf(&b, "started %s for pod %s (pid %d) at %s\n", s.Component, s.Pod, s.PID, s.At.Format("15:04:05"))
		}
		for _, comp := range []string{testenv.OLMOperator, testenv.CatalogOperator, testenv.KuadrantOperator,
			testenv.AuthorinoOperator, testenv.LimitadorOperator, testenv.AuthorinoServer, testenv.CNPGManager, testenv.CNPGInstanceLog} {
			data, err := os.ReadFile(env.LogFile(comp))
			if err != nil {
				continue
			}
			var errs []string
			for _, l := range strings.Split(string(data), "\n") {
				if errorLine(l) {
					errs = append(errs, l)
				}
			}
			fmt.Fprintf(&b, "%s log: %d bytes, %d error lines; the last:\n", comp, len(data), len(errs))
			for _, l := range errs[max(0, len(errs)-8):] {
				if len(l) > 400 {
					l = l[:400] + "..."
				}
				fmt.Fprintf(&b, "  %s\n", l)
			}
		}
		if dir := os.Getenv(envKeepLogs); dir != "" {
			dst := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
			logs, _ := filepath.Glob(filepath.Join(env.StateDir(), "*.log"))
			if err := os.MkdirAll(dst, 0o755); err == nil {
				for _, l := range logs {
					if data, err := os.ReadFile(l); err == nil {
						_ = os.WriteFile(filepath.Join(dst, filepath.Base(l)), data, 0o644)
					}
				}
				fmt.Fprintf(&b, "the control plane's %d logs are kept in %s\n", len(logs), dst)
			}
		}
		t.Logf("control plane operators at the failure:\n%s", b.String())
	})
}

// errorLine reports whether l is an error line of a component log: zap's
// JSON ("level":"error") or console (ERROR), logrus (level=error), or
// klog (E and the month and day, E1204).
func errorLine(l string) bool {
	if strings.Contains(l, `"level":"error"`) || strings.Contains(l, "level=error") || strings.Contains(l, "\tERROR\t") {
		return true
	}
	return len(l) > 5 && l[0] == 'E' && strings.Trim(l[1:5], "0123456789") == ""
}

// envKeepLogs names a folder where logsOnFailure keeps a copy of a failed
// test's control-plane logs (one subfolder per test); unset, they go with
// the control plane's state folder.
const envKeepLogs = "MAASCTL_E2E_KEEP_LOGS"

// bareAPIServer starts a local kube-apiserver and etcd only (no
// controllers, PostgreSQL, fixture or OLM) for a test of client-side
// behaviour against the real server, stopped at the test's end, and
// returns Clients for it. Without the local control plane the test is
// skipped, unless MAASCTL_REQUIRE_TESTENV is set.
func bareAPIServer(t *testing.T, ctx context.Context) (*testenv.Env, *kube.Clients) {
	t.Helper()
	env, err := testenv.Start(ctx, testenv.Options{NoControllers: true, NoPostgres: true, NoFixture: true, NoOLM: true})
	if err != nil {
		if os.Getenv("MAASCTL_REQUIRE_TESTENV") == "" {
			t.Skipf("local control plane unavailable: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := kube.New(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

func TestSlowSteps(t *testing.T) {
	at := time.Unix(0, 0)
	evs := []steps.Event{
		{Time: at, Type: steps.EventStarted, Step: "operators/rhoai"},
		{Time: at, Type: steps.EventProgress, Step: "operators/rhoai", Message: "waiting for CSV rhods-operator.3.5.0"},
		{Time: at, Type: steps.EventDone, Step: "operators/rhoai", Duration: 250 * time.Second},
		{Time: at, Type: steps.EventUnchanged, Step: "preflight/cluster", Duration: 40 * time.Millisecond},
		{Time: at, Type: steps.EventFailed, Step: "access/subscription", Duration: 3 * time.Second},
	}
	got := slowSteps(evs, 2)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "operators/rhoai") || !strings.Contains(lines[0], "4m10s") ||
		!strings.Contains(lines[0], "waiting for CSV rhods-operator.3.5.0") || !strings.Contains(lines[1], "access/subscription") || !strings.Contains(lines[1], "failed") {
		t.Errorf("slowSteps = \n%s\nwant operators/rhoai (4m10s, its last progress) then access/subscription (failed)", got)
	}
}
