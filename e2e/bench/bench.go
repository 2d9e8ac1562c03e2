// Package bench measures maasctl against the local control plane with
// simulated operators (e2e/testenv, e2e/sim): install wall time against
// the critical path of the simulated operator delays, the same with steps
// forced serial, condition detection latency, the no-op re-run, the same
// objects applied by an Ansible playbook (e2e/bench/ansible), scale in external
// models, and peak memory. `make bench` runs cmd/maasctl-bench, which
// prints a table and writes e2e/bench/results.json. Benchmarks report; they
// are not timed tests (the smoke test only checks that every figure is
// produced).
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

// RealisticDelays are the times the real operators take on OpenShift for
// the work each simulator stands in for, before scaling: OLM resolves and
// installs an operator in 1-3 minutes, the DSC reconciles in about 4. The
// Kuadrant, Authorino and Limitador operators and the Authorino server are
// real in every control plane (testenv.Options.RealKuadrant): they take
// what they take, so the critical path of the configured delays leaves
// them out and only the observed path counts them.
var RealisticDelays = map[string]time.Duration{
	sim.OLM:         2 * time.Minute,
	sim.CNPG:        2 * time.Minute,
	sim.CertManager: time.Minute,
	sim.Gateway:     time.Minute,
	sim.Router:      5 * time.Second,
	sim.ServiceCA:   5 * time.Second,
	sim.LWS:         time.Minute,
	sim.DSCI:        time.Minute,
	sim.DSC:         4 * time.Minute,
	sim.MaaS:        10 * time.Second,
}

// Options configures Run.
type Options struct {
	// Maasctl is the binary to measure. Required.
	Maasctl string
	// Dir receives the control planes' state, logs and the Ansible files.
	Dir string
	// Scale divides RealisticDelays (default 100).
	Scale float64
	// Models are the external-model counts of the scale figure (default
	// 1, 10, 100; each model with its own provider, auth policy and
	// subscription). 1000 is measured only when asked for: on the real
	// Kuadrant of this machine the install then waits minutes for Kuadrant
	// (2026-12-06: 1000 TokenRateLimitPolicies Accepted after about 9
	// minutes, and not Enforced, "waiting for the following components to
	// sync: [Limitador]", when verify/status gave up).
	Models []int
	// Ansible runs the Ansible comparison; InstallAnsible lets the bench
	// install Debian's ansible and python3-kubernetes when missing.
	Ansible, InstallAnsible bool
	// Playbook is e2e/bench/ansible/install.yaml.
	Playbook string
	// TierFixtures is e2e/testdata/tiers, the tier-based state of the
	// migrate figure (default: found from the working directory's module).
	TierFixtures string
	// Smoke is the short mode of CI: one control plane, steps serial,
	// delays scaled 1000x, the no-op re-run and a 2-model scale step on the
	// same cluster; no Ansible.
	Smoke bool
	// Figures limits a full run to these groups: install (with detection
	// latency and the no-op re-run), slow (delays SlowFactor× longer), serial,
	// ansible, scale, migrate (`migrate tiers` with Models annotated
	// models). Empty: all.
	Figures []string
	// Profile records the scale points' requests through the proxy,
	// writes maasctl's CPU profile (MAASCTL_CPUPROFILE) beside them and
	// prints a breakdown (Breakdown) of each.
	Profile bool
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

func (o *Options) wants(group string) bool {
	return len(o.Figures) == 0 || slices.Contains(o.Figures, group)
}

// Results are every figure of a run; the JSON of e2e/bench/results.json.
type Results struct {
	When    time.Time     `json:"when"`
	Machine Machine       `json:"machine"`
	Smoke   bool          `json:"smoke"`
	Scale   float64       `json:"delayScale"`
	Delays  map[string]ms `json:"simulatedDelaysMs"`

	Install *InstallFigures `json:"install,omitempty"`
	// Slow is the first install with delays SlowFactor times longer (the
	// "slow" group): the same ratio where the control plane's own work
	// (CRDs becoming Established, Deployments rolling out) fits inside
	// the delays.
	Slow      *InstallFigures `json:"slowInstall,omitempty"`
	SlowScale float64         `json:"slowDelayScale,omitempty"`
	Serial    *InstallFigures `json:"serial,omitempty"`
	Detection *Detection      `json:"detection,omitempty"`
	NoOp      *NoOp           `json:"noOp,omitempty"`
	Ansible   *Ansible        `json:"ansible,omitempty"`
	Models    []ScalePoint    `json:"scale,omitempty"`
	Linearity *Linearity      `json:"linearity,omitempty"`
	// Migrate is `maasctl migrate tiers` with each of Options.Models
	// annotated models; MigrateLinearity its fit.
	Migrate          []MigratePoint `json:"migrate,omitempty"`
	MigrateLinearity *Linearity     `json:"migrateLinearity,omitempty"`
	Errors           []string       `json:"errors,omitempty"`
}

// ms is a duration in milliseconds in JSON.
type ms float64

func toMS(d time.Duration) ms { return ms(float64(d) / float64(time.Millisecond)) }

// Machine describes where the figures were measured.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GoVersion  string `json:"goVersion"`
	LoadBefore string `json:"loadavgBefore"`
	LoadAfter  string `json:"loadavgAfter"`
}

// StepFigure is one step of an install.
type StepFigure struct {
	ID string `json:"id"`
	// Configured is the step's configured simulated delay (stepChains,
	// configuredDelay); Observed its wall time from started to done.
	Configured ms `json:"configuredMs"`
	Observed   ms `json:"observedMs"`
}

// InstallFigures is one first install on a fresh cluster.
type InstallFigures struct {
	Wall ms `json:"wallMs"`
	// CriticalPath is the longest DAG path when each step takes its
	// configured delay (configuredDelay: the simulated operator delays it
	// waits out, stages in sequence, delays that run side by side counted
	// once), i.e. the install time of a runner with no overhead against
	// simulators whose own work fits inside their delays. Ratio = Wall /
	// CriticalPath (target ≤ 1.02 for the parallel run). ObservedPath is
	// the same path over the observed step times; Wall / ObservedPath is
	// the runner's own overhead.
	CriticalPath     ms            `json:"criticalPathMs"`
	CriticalPathIDs  []string      `json:"criticalPath"`
	Ratio            float64       `json:"ratio"`
	ObservedPath     ms            `json:"observedCriticalPathMs"`
	ObservedPathIDs  []string      `json:"observedCriticalPath"`
	ObservedRatio    float64       `json:"observedRatio"`
	SumOfSteps       ms            `json:"sumOfStepsMs"`
	PeakRSSBytes     int64         `json:"peakRssBytes"`
	Requests         requestCounts `json:"requests"`
	Steps            []StepFigure  `json:"steps"`
	OverParallel     float64       `json:"overParallel,omitempty"`
	OverlappingSteps int           `json:"overlappingSteps"`
}

// Detection is condition detection latency: a simulator's status write to
// maasctl's first request for the dependent step.
type Detection struct {
	P50     ms              `json:"p50Ms"`
	P95     ms              `json:"p95Ms"`
	Max     ms              `json:"maxMs"`
	N       int             `json:"n"`
	Samples []latencySample `json:"samples"`
}

// NoOp is a re-run on an installed cluster.
type NoOp struct {
	Wall           ms    `json:"wallMs"`
	Reads          int64 `json:"reads"`
	Writes         int64 `json:"writes"`
	LockWrites     int64 `json:"lockWrites"`
	ManagedObjects int   `json:"managedObjects"`
	// ReadsPerObject is Reads / ManagedObjects (target ≤ 1.2, issue 16).
	ReadsPerObject float64       `json:"readsPerObject"`
	Proxy          requestCounts `json:"proxyCounted"`
	Unchanged      int           `json:"unchangedSteps"`
	// CPUSeconds is the re-run's user plus system CPU time (its own
	// process; what a converged re-run costs beside its requests).
	CPUSeconds float64 `json:"cpuSeconds"`
}

// Ansible is the playbook's first apply and no-op re-run, and maasctl's
// time divided by Ansible's.
type Ansible struct {
	Skipped        string        `json:"skipped,omitempty"`
	FirstApply     ms            `json:"firstApplyMs"`
	NoOp           ms            `json:"noOpMs"`
	NoOpRequests   requestCounts `json:"noOpRequests"`
	FirstRequests  requestCounts `json:"firstApplyRequests"`
	RatioFirst     float64       `json:"maasctlOverAnsibleFirst"`
	RatioNoOp      float64       `json:"maasctlOverAnsibleNoOp"`
	RetryDelaySecs int           `json:"retryDelaySeconds"`
}

// ScalePoint is one first install with Models external models.
type ScalePoint struct {
	Models       int   `json:"models"`
	Objects      int   `json:"objects"`
	Wall         ms    `json:"wallMs"`
	Reads        int64 `json:"reads"`
	Writes       int64 `json:"writes"`
	PeakRSSBytes int64 `json:"peakRssBytes"`
	// CPUSeconds is maasctl's user plus system CPU time.
	CPUSeconds float64 `json:"cpuSeconds"`
	// Breakdown is filled with Options.Profile.
	Breakdown *Breakdown `json:"breakdown,omitempty"`
	// Phases are maasctl's applies of each per-model kind (at least one
	// per model) and the wait after them, from its debug log (from 10
	// models on).
	Phases []ApplyPhase `json:"applyPhases,omitempty"`
}

func (o *Options) defaults() error {
	if o.Maasctl == "" {
		return errors.New("bench: no maasctl binary")
	}
	if o.Scale <= 0 {
		o.Scale = 100
		if o.Smoke {
			o.Scale = 1000
		}
	}
	if len(o.Models) == 0 {
		o.Models = []int{1, 10, 100}
		if o.Smoke {
			o.Models = []int{2}
		}
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "maasctl-bench")
		if err != nil {
			return err
		}
		o.Dir = d
	}
	if o.TierFixtures == "" && o.wants("migrate") && !o.Smoke {
		d, err := defaultTierFixtures()
		if err != nil {
			return err
		}
		o.TierFixtures = d
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// Delays returns RealisticDelays divided by scale.
func Delays(scale float64) map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, d := range RealisticDelays {
		out[k] = time.Duration(float64(d) / scale)
	}
	return out
}

// Run measures every figure. A figure that fails is reported in
// Results.Errors and the others still run; the error is non-nil if any
// failed.
func Run(ctx context.Context, o Options) (*Results, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	delays := Delays(o.Scale)
	res := &Results{When: time.Now().UTC(), Smoke: o.Smoke, Scale: o.Scale, Delays: map[string]ms{},
		Machine: Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadBefore: loadavg()}}
	for k, d := range delays {
		res.Delays[k] = toMS(d)
	}
	fail := func(what string, err error) {
		o.Logf("%s: %v", what, err)
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", what, err))
	}
	inv := inventory.Default()
	reg, err := steps.NewRegistry(inv)
	if err != nil {
		return nil, err
	}
	if o.Smoke {
		if err := smoke(ctx, o, reg, delays, res); err != nil {
			fail("smoke", err)
		}
	} else {
		if o.wants("install") {
			if err := parallelInstall(ctx, o, reg, delays, res); err != nil {
				fail("install", err)
			}
		}
		if o.wants("serial") {
			if err := serialInstall(ctx, o, reg, delays, res); err != nil {
				fail("serial install", err)
			}
		}
		if o.wants("slow") {
			if err := slowInstall(ctx, o, reg, res); err != nil {
				fail("slow install", err)
			}
		}
		switch {
		case !o.wants("ansible"):
		case o.Ansible:
			if err := ansibleRuns(ctx, o, delays, res); err != nil {
				fail("ansible", err)
			}
		default:
			res.Ansible = &Ansible{Skipped: "not requested (-ansible=false)"}
		}
		for _, n := range o.Models {
			if !o.wants("scale") {
				break
			}
			if err := scalePoint(ctx, o, n, res); err != nil {
				fail(fmt.Sprintf("scale %d", n), err)
			}
		}
		for _, n := range o.Models {
			if !o.wants("migrate") {
				break
			}
			if err := migratePoint(ctx, o, n, res); err != nil {
				fail(fmt.Sprintf("migrate %d", n), err)
			}
		}
	}
	res.Linearity = linearity(scaleFit(res.Models))
	res.MigrateLinearity = linearity(migrateFit(res.Migrate))
	res.Machine.LoadAfter = loadavg()
	if len(res.Errors) > 0 {
		return res, fmt.Errorf("%d figure(s) failed: %s", len(res.Errors), strings.Join(res.Errors, "; "))
	}
	return res, nil
}

// saveJSON keeps raw data beside the figures, for analysis; errors only
// lose that copy.
func saveJSON(path string, v any) {
	if b, err := json.Marshal(v); err == nil {
		_ = os.WriteFile(path, b, 0o644)
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// installFigures computes the figures of a first install.
func installFigures(reg *steps.Registry, delays map[string]time.Duration, r *runResult) *InstallFigures {
	start, end := stepTimes(r.Events)
	f := &InstallFigures{Wall: toMS(r.Wall), PeakRSSBytes: r.PeakRSS, OverlappingSteps: len(overlaps(r.Events))}
	cp, ids := criticalPath(reg, func(id string) time.Duration { return configuredDelay(id, delays) })
	f.CriticalPath, f.CriticalPathIDs = toMS(cp), ids
	obs, oids := criticalPath(reg, func(id string) time.Duration { return end[id].Sub(start[id]) })
	f.ObservedPath, f.ObservedPathIDs = toMS(obs), oids
	if cp > 0 {
		f.Ratio = float64(r.Wall) / float64(cp)
	}
	if obs > 0 {
		f.ObservedRatio = float64(r.Wall) / float64(obs)
	}
	for _, s := range reg.Steps {
		d := end[s.ID].Sub(start[s.ID])
		f.SumOfSteps += toMS(d)
		f.Steps = append(f.Steps, StepFigure{ID: s.ID, Configured: toMS(configuredDelay(s.ID, delays)), Observed: toMS(d)})
	}
	return f
}

func newDir(o Options, name string) string { return filepath.Join(o.Dir, name) }

// parallelInstall: first install (wall, critical path, detection latency,
// RSS) and the no-op re-run, on one fresh cluster behind a recording proxy.
func parallelInstall(ctx context.Context, o Options, reg *steps.Registry, delays map[string]time.Duration, res *Results) error {
	o.Logf("install (parallel DAG) on a fresh control plane")
	c, err := startCluster(ctx, newDir(o, "install"), clusterOptions{delays: delays, record: true})
	if err != nil {
		return err
	}
	defer c.stop()
	r, err := c.maasctl(ctx, o.Maasctl, nil, "--log-file", filepath.Join(c.dir, "maasctl.log"))
	if err != nil {
		return err
	}
	res.Install = installFigures(reg, delays, r)
	recs := c.proxy.Requests()
	saveJSON(filepath.Join(c.dir, "install-events.json"), r.Events)
	saveJSON(filepath.Join(c.dir, "install-requests.json"), recs)
	res.Install.Requests = countRequests(recs, isMaasctl)
	if err := detection(ctx, c, reg, r, recs, res); err != nil {
		return err
	}
	return noOp(ctx, o, c, len(recs), res)
}

func detection(ctx context.Context, c *cluster, reg *steps.Registry, r *runResult, recs []faultproxy.Request, res *Results) error {
	clients, err := kube.New(c.te.RESTConfig())
	if err != nil {
		return err
	}
	env, err := steps.NewEnv(ctx, clients, inventory.Default(), nil, nil)
	if err != nil {
		return err
	}
	samples := detectionLatencies(reg, r.Events, recs, env.Objects)
	var ds []time.Duration
	for _, s := range samples {
		ds = append(ds, s.Latency)
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i].Latency < samples[j].Latency })
	res.Detection = &Detection{P50: toMS(percentile(ds, 50)), P95: toMS(percentile(ds, 95)), Max: toMS(percentile(ds, 100)), N: len(ds), Samples: samples}
	if len(ds) == 0 {
		return errors.New("no condition detection sample: no dependency ended on a simulator's status write")
	}
	return nil
}

// noOp re-runs the install on c; skip is the number of proxy records
// before it.
func noOp(ctx context.Context, o Options, c *cluster, skip int, res *Results) error {
	o.Logf("no-op re-run")
	r, err := c.maasctl(ctx, o.Maasctl, nil)
	if err != nil {
		return err
	}
	n := &NoOp{Wall: toMS(r.Wall), ManagedObjects: managedObjects(ctx, c), CPUSeconds: r.CPU.Seconds()}
	if r.Summary != nil {
		n.Reads, n.Writes, n.LockWrites, n.Unchanged = r.Summary.Reads, r.Summary.Writes, r.Summary.LockWrites, len(r.Summary.Unchanged)
	}
	if c.proxy != nil {
		n.Proxy = countRequests(c.proxy.Requests()[skip:], isMaasctl)
	}
	if n.ManagedObjects > 0 {
		n.ReadsPerObject = float64(n.Reads) / float64(n.ManagedObjects)
	}
	res.NoOp = n
	return nil
}

// managedObjects counts the objects maasctl renders for the default
// inventory against c, plus the two Secrets it builds, that exist on c:
// the CNPG operator's OLM objects, say, are not applied when the cluster
// serves postgresql.cnpg.io already.
func managedObjects(ctx context.Context, c *cluster) int {
	clients, err := kube.New(c.te.RESTConfig())
	if err != nil {
		return 0
	}
	env, err := steps.NewEnv(ctx, clients, inventory.Default(), nil, nil)
	if err != nil {
		return 0
	}
	inv := env.Inv
	objs := []*unstructured.Unstructured{}
	for _, s := range [][2]string{{inv.Database.Namespace, inv.Database.SecretName}, {inv.DBConfig.Namespace, inv.DBConfig.Name}} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("Secret")
		u.SetNamespace(s[0])
		u.SetName(s[1])
		objs = append(objs, u)
	}
	for _, list := range env.Objects {
		objs = append(objs, list...)
	}
	n := 0
	for _, o := range objs {
		if _, err := clients.Get(ctx, o); err == nil {
			n++
		}
	}
	return n
}

// SlowFactor lengthens the delays of the "slow" figure: Scale/SlowFactor
// (10 with the default scale 100, operators 12 s, the DSC 24 s).
const SlowFactor = 10

// slowInstall: the first install with delays SlowFactor times longer, on a
// fresh cluster. At the default scale the local control plane's own work
// inside some delays (registering the 2.7 MB LLMInferenceService CRD: about
// 4 s; an OLM bundle's CRDs and Deployment: about 2 s) outlasts them, a
// floor that does not shrink with the delays; here it fits inside them.
func slowInstall(ctx context.Context, o Options, reg *steps.Registry, res *Results) error {
	scale := o.Scale / SlowFactor
	o.Logf("install with delays scaled 1/%g (%d× longer) on a fresh control plane", scale, SlowFactor)
	delays := Delays(scale)
	c, err := startCluster(ctx, newDir(o, "slow"), clusterOptions{delays: delays})
	if err != nil {
		return err
	}
	defer c.stop()
	r, err := c.maasctl(ctx, o.Maasctl, nil)
	if err != nil {
		return err
	}
	res.Slow, res.SlowScale = installFigures(reg, delays, r), scale
	return nil
}

// serialInstall: the same first install with MAASCTL_SERIAL=1.
func serialInstall(ctx context.Context, o Options, reg *steps.Registry, delays map[string]time.Duration, res *Results) error {
	o.Logf("install with steps forced serial (MAASCTL_SERIAL=1) on a fresh control plane")
	c, err := startCluster(ctx, newDir(o, "serial"), clusterOptions{delays: delays})
	if err != nil {
		return err
	}
	defer c.stop()
	r, err := c.maasctl(ctx, o.Maasctl, []string{"MAASCTL_SERIAL=1"})
	if err != nil {
		return err
	}
	res.Serial = installFigures(reg, delays, r)
	if res.Install != nil && res.Install.Wall > 0 {
		res.Serial.OverParallel = float64(res.Serial.Wall) / float64(res.Install.Wall)
	}
	if res.Serial.OverlappingSteps > 0 {
		return fmt.Errorf("MAASCTL_SERIAL=1 still ran %d pairs of steps at the same time: %v", res.Serial.OverlappingSteps, overlaps(r.Events))
	}
	return nil
}

// smoke is the CI mode: serial install, detection, no-op, and a 2-model
// run on the same cluster.
func smoke(ctx context.Context, o Options, reg *steps.Registry, delays map[string]time.Duration, res *Results) error {
	o.Logf("smoke: serial install, no-op re-run and a %d-model run on one control plane", o.Models[0])
	c, err := startCluster(ctx, newDir(o, "smoke"), clusterOptions{delays: delays, record: true})
	if err != nil {
		return err
	}
	defer c.stop()
	r, err := c.maasctl(ctx, o.Maasctl, []string{"MAASCTL_SERIAL=1"})
	if err != nil {
		return err
	}
	res.Serial = installFigures(reg, delays, r)
	if res.Serial.OverlappingSteps > 0 {
		return fmt.Errorf("MAASCTL_SERIAL=1 still ran steps at the same time: %v", overlaps(r.Events))
	}
	recs := c.proxy.Requests()
	if err := detection(ctx, c, reg, r, recs, res); err != nil {
		return err
	}
	if err := noOp(ctx, o, c, len(recs), res); err != nil {
		return err
	}
	// The Ansible files are written (not run: no ansible in CI) and
	// checked to cover every step.
	vars, err := writeAnsibleVars(ctx, c, inventory.Default(), "smoke-password", filepath.Join(c.dir, "ansible"))
	if err != nil {
		return err
	}
	if err := checkAnsibleVars(vars, reg); err != nil {
		return err
	}
	p, err := modelsRun(ctx, o, c, o.Models[0])
	if err != nil {
		return err
	}
	res.Models = append(res.Models, *p)
	return nil
}

// scalePoint: a first install with n external models on a fresh cluster
// without simulated delays, so that the figure is maasctl's own cost.
func scalePoint(ctx context.Context, o Options, n int, res *Results) error {
	o.Logf("scale: %d external models (each with a provider, an auth policy and a subscription) on a fresh control plane", n)
	c, err := startCluster(ctx, newDir(o, fmt.Sprintf("scale-%d", n)), clusterOptions{record: o.Profile})
	if err != nil {
		return err
	}
	defer c.stop()
	var env []string
	if o.Profile {
		env = append(env, "MAASCTL_CPUPROFILE="+filepath.Join(c.dir, "cpu.pprof"), "MAASCTL_MEMPROFILE="+filepath.Join(c.dir, "heap.pprof"))
	}
	p, err := modelsRun(ctx, o, c, n, env...)
	if err != nil {
		return err
	}
	if o.Profile {
		recs := c.proxy.Requests()
		saveJSON(filepath.Join(c.dir, "requests.json"), recs)
		p.Breakdown = &Breakdown{Requests: requestGroups(recs), Reconciles: c.sim.ReconcileStats(), CPUSeconds: p.CPUSeconds}
		var b strings.Builder
		writeBreakdown(&b, n, p.Breakdown)
		_ = os.WriteFile(filepath.Join(c.dir, "breakdown.txt"), []byte(b.String()), 0o644)
		o.Logf("%s(CPU profile: %s, heap profile: %s)", b.String(), filepath.Join(c.dir, "cpu.pprof"), filepath.Join(c.dir, "heap.pprof"))
	}
	res.Models = append(res.Models, *p)
	return nil
}

func modelsRun(ctx context.Context, o Options, c *cluster, n int, env ...string) (*ScalePoint, error) {
	file := filepath.Join(c.dir, fmt.Sprintf("models-%d.yaml", n))
	if err := os.WriteFile(file, modelsInventory(n), 0o600); err != nil {
		return nil, err
	}
	log := filepath.Join(c.dir, fmt.Sprintf("maasctl-models-%d.log", n))
	r, err := c.maasctl(ctx, o.Maasctl, env, "-f", file, "--log-file", log)
	if err != nil {
		return nil, err
	}
	p := &ScalePoint{Models: n, Objects: 4 * n, Wall: toMS(r.Wall), PeakRSSBytes: r.PeakRSS, CPUSeconds: r.CPU.Seconds()}
	if n >= 10 {
		p.Phases = applyPhasesOf(log, n)
	}
	if r.Summary != nil {
		p.Reads, p.Writes = r.Summary.Reads, r.Summary.Writes
	}
	return p, nil
}

// modelsInventory is an inventory file with n external models, each with
// its own provider, auth policy and subscription, on the default model
// server (same Service and API-key Secret).
func modelsInventory(n int) []byte {
	var b strings.Builder
	b.WriteString("externalModels:\n")
	for i := range n {
		fmt.Fprintf(&b, "- {name: model-%04d, providerName: provider-%04d, targetModel: model-%04d, displayName: Model %d, namespace: llm-coding-assistant, endpoint: llama-coder.llm-coding-assistant.svc.cluster.local, port: 8080, tls: false, path: /v1/chat/completions, apiFormat: openai-chat, providerType: openai, apiKeySecret: llama-coder-api-key}\n", i, i, i, i)
	}
	b.WriteString("authPolicies:\n")
	for i := range n {
		fmt.Fprintf(&b, "- {name: access-%04d, groups: [system:authenticated], modelRefs: [{name: model-%04d, namespace: llm-coding-assistant}]}\n", i, i)
	}
	b.WriteString("subscriptions:\n")
	for i := range n {
		fmt.Fprintf(&b, "- {name: sub-%04d, displayName: Sub %d, priority: %d, groups: [system:authenticated], modelRefs: [{name: model-%04d, namespace: llm-coding-assistant, tokenRateLimits: [{limit: 200000, window: 1h}]}]}\n", i, i, i, i)
	}
	return []byte(b.String())
}

// ansibleRuns: the playbook's first apply and no-op re-run on a fresh
// cluster behind a recording proxy; ratios against the parallel install
// and no-op figures.
func ansibleRuns(ctx context.Context, o Options, delays map[string]time.Duration, res *Results) error {
	a := &Ansible{}
	res.Ansible = a
	bin, python, err := ansiblePlaybook(ctx, o.InstallAnsible, o.Logf)
	if err != nil {
		a.Skipped = err.Error()
		o.Logf("Ansible figures skipped: %v", err)
		return nil
	}
	o.Logf("Ansible: first apply and no-op re-run on a fresh control plane")
	c, err := startCluster(ctx, newDir(o, "ansible"), clusterOptions{delays: delays, record: true})
	if err != nil {
		return err
	}
	defer c.stop()
	pw := make([]byte, 20)
	_, _ = rand.Read(pw)
	vars, err := writeAnsibleVars(ctx, c, inventory.Default(), hex.EncodeToString(pw), filepath.Join(c.dir, "ansible"))
	if err != nil {
		return err
	}
	notSim := func(ua string) bool { return ua != simUserAgent }
	d, err := runPlaybook(ctx, bin, python, o.Playbook, vars, filepath.Join(c.dir, "ansible-first.log"))
	if err != nil {
		return err
	}
	recs := c.proxy.Requests()
	a.FirstApply, a.FirstRequests = toMS(d), countRequests(recs, notSim)
	d, err = runPlaybook(ctx, bin, python, o.Playbook, vars, filepath.Join(c.dir, "ansible-noop.log"))
	if err != nil {
		return err
	}
	a.NoOp, a.NoOpRequests = toMS(d), countRequests(c.proxy.Requests()[len(recs):], notSim)
	a.RetryDelaySecs = 0
	if res.Install != nil && a.FirstApply > 0 {
		a.RatioFirst = float64(res.Install.Wall) / float64(a.FirstApply)
	}
	if res.NoOp != nil && a.NoOp > 0 {
		a.RatioNoOp = float64(res.NoOp.Wall) / float64(a.NoOp)
	}
	return nil
}
