package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/migrate"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

func TestCriticalPath(t *testing.T) {
	// a → b → d, a → c → d, e alone.
	reg := &steps.Registry{Steps: []*steps.Step{
		{ID: "a"}, {ID: "b", After: []string{"a"}}, {ID: "c", After: []string{"a"}},
		{ID: "d", After: []string{"b", "c"}}, {ID: "e"},
	}}
	tests := []struct {
		name string
		w    map[string]time.Duration
		want time.Duration
		path []string
	}{
		{name: "through the slower branch", w: map[string]time.Duration{"a": 1, "b": 5, "c": 2, "d": 1, "e": 3}, want: 7, path: []string{"a", "b", "d"}},
		{name: "other branch", w: map[string]time.Duration{"a": 1, "b": 1, "c": 4, "d": 1, "e": 3}, want: 6, path: []string{"a", "c", "d"}},
		{name: "an independent step dominates", w: map[string]time.Duration{"a": 1, "b": 1, "c": 1, "d": 1, "e": 10}, want: 10, path: []string{"e"}},
		{name: "all zero", w: map[string]time.Duration{}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, path := criticalPath(reg, func(id string) time.Duration { return tt.w[id] })
			if got != tt.want || tt.path != nil && !slices.Equal(path, tt.path) {
				t.Errorf("criticalPath = %d %v, want %d %v", got, path, tt.want, tt.path)
			}
		})
	}
}

// TestStepChainsNameRealSteps: every step of the delay table exists in the
// registry and every delay key is a simulator's or sim.OLM (the real OLM's
// delay, which testenv applies to the operator pods).
func TestStepChainsNameRealSteps(t *testing.T) {
	reg, err := steps.NewRegistry(inventory.Default())
	if err != nil {
		t.Fatal(err)
	}
	known := append(sim.ControllerNames(), sim.OLM)
	for id, chain := range stepChains {
		if reg.Get(id) == nil {
			t.Errorf("stepChains names step %s, which is not in the registry", id)
		}
		for _, stage := range chain {
			for _, c := range stage {
				if !slices.Contains(known, c) {
					t.Errorf("step %s: unknown simulator %q", id, c)
				}
			}
		}
	}
	for k := range RealisticDelays {
		if !slices.Contains(known, k) {
			t.Errorf("RealisticDelays: unknown simulator %q", k)
		}
	}
	cp, path := criticalPath(reg, func(id string) time.Duration { return configuredDelay(id, Delays(100)) })
	if cp <= 0 || len(path) < 3 {
		t.Errorf("critical path of the default delays: %s %v", cp, path)
	}
}

func TestPercentileAndFit(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 3}, {95, 5}, {100, 5}, {0, 1}} {
		if got := percentile(ds, tt.p); got != tt.want {
			t.Errorf("percentile(%v) = %d, want %d", tt.p, got, tt.want)
		}
	}
	a, b, r2 := linearFit([]float64{1, 10, 100}, []float64{12, 30, 210})
	if b < 1.99 || b > 2.01 || a < 9.9 || a > 10.1 || r2 < 0.999 {
		t.Errorf("linearFit = %v + %v x (R² %v), want 10 + 2x", a, b, r2)
	}
}

func TestOverlaps(t *testing.T) {
	t0 := time.Now()
	ev := func(typ steps.EventType, id string, at int) steps.Event {
		return steps.Event{Type: typ, Step: id, Time: t0.Add(time.Duration(at) * time.Millisecond)}
	}
	serial := []steps.Event{ev(steps.EventStarted, "a", 0), ev(steps.EventDone, "a", 10), ev(steps.EventStarted, "b", 11), ev(steps.EventDone, "b", 20)}
	parallel := []steps.Event{ev(steps.EventStarted, "a", 0), ev(steps.EventStarted, "b", 1), ev(steps.EventDone, "a", 10), ev(steps.EventDone, "b", 20)}
	if o := overlaps(serial); len(o) != 0 {
		t.Errorf("serial run: overlaps %v", o)
	}
	if o := overlaps(parallel); len(o) != 1 {
		t.Errorf("parallel run: overlaps %v, want one pair", o)
	}
}

// TestDetectionLatencies: the sample runs from the simulator's write that
// produced the last watch event before the dependency's checkpoint write to
// the dependent step's first request.
func TestDetectionLatencies(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	reg := &steps.Registry{Steps: []*steps.Step{{ID: "a"}, {ID: "b", After: []string{"a"}}, {ID: "c", After: []string{"b"}}}}
	evs := []steps.Event{
		{Type: steps.EventStarted, Step: "a", Time: at(0)},
		{Type: steps.EventDone, Step: "a", Time: at(112)},
		{Type: steps.EventStarted, Step: "b", Time: at(113)},
		{Type: steps.EventDone, Step: "b", Time: at(300)},
		{Type: steps.EventStarted, Step: "c", Time: at(301)},
		{Type: steps.EventDone, Step: "c", Time: at(400)},
	}
	gw := faultproxy.ObjectRef{Kind: "Gateway", Namespace: "ingress", Name: "gw", ResourceVersion: "42"}
	objs := assets.Rendered{"a": {object("Gateway", "ingress", "gw")}, "b": {object("Route", "ingress", "rt")}}
	other := faultproxy.ObjectRef{Kind: "GatewayClass", Name: "gc", ResourceVersion: "43"}
	crd := faultproxy.ObjectRef{Kind: "CustomResourceDefinition", Name: "routes.route.openshift.io", ResourceVersion: "50"}
	const cpPath = "/api/v1/namespaces/maasctl/configmaps/maasctl-checkpoints"
	recs := []faultproxy.Request{
		{UserAgent: simUserAgent, Method: "PUT", Path: "/apis/g/v1/namespaces/ingress/gateways/gw/status", Start: at(95), End: at(100), Status: 200, Object: &gw},
		{UserAgent: "maasctl/v0", Method: "GET", Path: "/apis/g/v1/namespaces/ingress/gateways", Query: "watch=true", Watch: true, Start: at(1), Status: 200,
			Events: []faultproxy.WatchEvent{{Time: at(103), Type: "MODIFIED", Object: gw}}},
		// Another step's event just before a's checkpoint write is not a's cause.
		{UserAgent: "maasctl/v0", Method: "GET", Path: "/apis/g/v1/gatewayclasses", Query: "watch=true", Watch: true, Start: at(2), Status: 200,
			Events: []faultproxy.WatchEvent{{Time: at(104), Type: "MODIFIED", Object: other}}},
		{UserAgent: simUserAgent, Method: "PUT", Path: "/apis/g/v1/gatewayclasses/gc/status", Start: at(101), End: at(104), Status: 200, Object: &other},
		// b's wait ends on a CRD the API server established: no sample for c.
		{UserAgent: "maasctl/v0", Method: "GET", Path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", Query: "watch=true", Watch: true, Start: at(120), Status: 200,
			Events: []faultproxy.WatchEvent{{Time: at(290), Type: "MODIFIED", Object: crd}}},
		// Its answer is recorded after maasctl emitted a's done event.
		{UserAgent: "maasctl/v0", Method: "PATCH", Path: cpPath, Start: at(105), End: at(113), Status: 200},
		{UserAgent: "maasctl/v0", Method: "PATCH", Path: "/apis/route.openshift.io/v1/namespaces/ingress/routes/rt", Start: at(118), End: at(120), Status: 200},
		{UserAgent: "maasctl/v0", Method: "PATCH", Path: cpPath, Start: at(292), End: at(296), Status: 200},
		{UserAgent: "maasctl/v0", Method: "GET", Path: "/api/v1/namespaces/x", Start: at(305), End: at(306), Status: 200},
	}
	got := detectionLatencies(reg, evs, recs, objs)
	want := []latencySample{{Step: "b", After: "a", Trigger: "Gateway ingress/gw", Latency: 18 * time.Millisecond}}
	if !slices.Equal(got, want) {
		t.Errorf("detectionLatencies =\n %+v\nwant\n %+v", got, want)
	}
	// A list answer after the event (a's wait began when the object was
	// ready already) leaves the cause unknown.
	listed := append(slices.Clone(recs), faultproxy.Request{UserAgent: "maasctl/v0", Method: "GET", Path: "/apis/g/v1/namespaces/ingress/gateways",
		Query: "fieldSelector=metadata.name%3Dgw", Start: at(102), End: at(104), Status: 200})
	if got := detectionLatencies(reg, evs, listed, objs); len(got) != 0 {
		t.Errorf("with a list answer after the event: %+v, want no sample", got)
	}
	// Another wait's list in the same moment (of another object) is not
	// the cause.
	otherList := append(slices.Clone(recs), faultproxy.Request{UserAgent: "maasctl/v0", Method: "GET", Path: "/apis/g/v1/namespaces/ingress/gateways",
		Query: "fieldSelector=metadata.name%3Dother-gw&resourceVersion=0", Start: at(102), End: at(104), Status: 200})
	if got := detectionLatencies(reg, evs, otherList, objs); !slices.Equal(got, want) {
		t.Errorf("with another object's list after the event: %+v, want %+v", got, want)
	}
	// A GET of one object (maasctl reading what it applied) is no list.
	read := append(slices.Clone(recs), faultproxy.Request{UserAgent: "maasctl/v0", Method: "GET", Path: "/apis/g/v1/namespaces/ingress/gateways/gw", Start: at(102), End: at(104), Status: 200})
	if got := detectionLatencies(reg, evs, read, objs); !slices.Equal(got, want) {
		t.Errorf("with a GET after the event: %+v, want %+v", got, want)
	}
	// An event of a watch opened after the write is the state the watch
	// found, not a change it saw.
	late := slices.Clone(recs)
	late[1].Start = at(101) // the Gateway watch
	if got := detectionLatencies(reg, evs, late, objs); len(got) != 0 {
		t.Errorf("with the watch opened after the write: %+v, want no sample", got)
	}
	// Without the simulator's write, a's end has no known cause either.
	recs[0].Object = nil
	if got := detectionLatencies(reg, evs, recs, objs); len(got) != 0 {
		t.Errorf("without the simulator's write: %+v, want no sample", got)
	}
}

// TestModelsInventory: the scale inventories load, validate, and render
// one ExternalModel, MaaSAuthPolicy and MaaSSubscription per model.
func object(kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func TestModelsInventory(t *testing.T) {
	for _, n := range []int{1, 10, 100} {
		p := filepath.Join(t.TempDir(), "inv.yaml")
		if err := os.WriteFile(p, modelsInventory(n), 0o600); err != nil {
			t.Fatal(err)
		}
		inv, err := inventory.Load([]string{p}, nil)
		if err != nil {
			t.Fatalf("%d models: %v", n, err)
		}
		if err := inv.Validate(); err != nil {
			t.Fatalf("%d models: %v", n, err)
		}
		r, err := assets.Render(inv, assets.Facts{Host: "maas.apps.example.com"})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, objs := range r {
			for _, o := range objs {
				kinds[o.GetKind()]++
			}
		}
		for _, k := range []string{"ExternalModel", "MaaSAuthPolicy", "MaaSSubscription"} {
			if kinds[k] != n {
				t.Errorf("%d models render %d %s, want %d", n, kinds[k], k, n)
			}
		}
	}
}

// TestBenchSmoke runs the short mode against a local control plane: every
// figure of the mode must be produced, the serial install must not overlap
// steps, the no-op re-run must not write, and the Ansible files must cover
// every step.
func TestBenchSmoke(t *testing.T) {
	bin := maasctlBinary(t)
	dir := t.TempDir()
	var log bytes.Buffer
	res, err := Run(context.Background(), Options{Maasctl: bin, Dir: dir, Smoke: true, Logf: func(f string, a ...any) {
		log.WriteString(strings.TrimSpace(strings.ReplaceAll(f, "%", "")) + "\n")
	}})
	if errors.Is(err, testenv.ErrNotBuilt) && os.Getenv(testenv.EnvRequire) == "" {
		t.Skipf("local control plane not built: %v", err)
	}
	if res != nil && len(res.Errors) > 0 && strings.Contains(res.Errors[0], testenv.ErrNotBuilt.Error()) && os.Getenv(testenv.EnvRequire) == "" {
		t.Skipf("local control plane not built: %v", res.Errors)
	}
	if err != nil {
		t.Fatalf("smoke run: %v", err)
	}
	if res.Serial == nil || res.Serial.Wall <= 0 || res.Serial.CriticalPath <= 0 || res.Serial.PeakRSSBytes <= 0 {
		t.Errorf("serial install figures missing: %+v", res.Serial)
	}
	if res.Detection == nil || res.Detection.N == 0 {
		t.Errorf("no condition detection sample: %+v", res.Detection)
	}
	if res.NoOp == nil || res.NoOp.Reads == 0 || res.NoOp.ManagedObjects == 0 {
		t.Fatalf("no-op figures missing: %+v", res.NoOp)
	}
	if res.NoOp.Writes != 0 {
		t.Errorf("the no-op re-run wrote %d times", res.NoOp.Writes)
	}
	if res.NoOp.CPUSeconds <= 0 {
		t.Errorf("no-op re-run CPU %v s, want the process's measured time", res.NoOp.CPUSeconds)
	}
	if len(res.Models) != 1 || res.Models[0].Reads == 0 {
		t.Errorf("scale figure missing: %+v", res.Models)
	}
	var table bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"serial install ÷ critical path", "condition detection latency p95", "no-op reads per managed object", "scale: 2 external models"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if err := res.WriteJSON(filepath.Join(dir, "results.json")); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
}

func maasctlBinary(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("MAASCTL_BIN"); dir != "" {
		return filepath.Join(dir, "maasctl")
	}
	bin := filepath.Join(t.TempDir(), "maasctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/maasctl").CombinedOutput(); err != nil {
		t.Fatalf("build maasctl: %v\n%s", err, out)
	}
	return bin
}

// TestLinearityIntervals: the fit gives the cost per added model of each
// interval between consecutive counts, in ascending order whatever the
// order measured, and the last interval over the first.
func TestLinearityIntervals(t *testing.T) {
	l := linearity([]fitPoint{{models: 10, wall: 1900, requests: 120}, {models: 1, wall: 1000, requests: 30}, {models: 100, wall: 19900, requests: 1020}})
	if l == nil {
		t.Fatal("no fit for three points")
	}
	want := []Interval{{From: 1, To: 10, WallPerModel: 100, RequestsPerModel: 10}, {From: 10, To: 100, WallPerModel: 200, RequestsPerModel: 10}}
	if !slices.Equal(l.Intervals, want) {
		t.Errorf("intervals = %+v, want %+v", l.Intervals, want)
	}
	if l.MarginalRatio != 2 || l.RequestsPerModel < 9.99 || l.RequestsPerModel > 10.01 || l.RequestsR2 < 0.999 {
		t.Errorf("fit = %+v, want marginal ratio 2 and 10 requests per model (R² 1)", l)
	}
	if l := linearity([]fitPoint{{models: 5, wall: 1}}); l != nil {
		t.Errorf("one point: %+v, want no fit", l)
	}
}

// TestMigrateFigureShape: the migrate points and their fit are in the
// results JSON (fields migrate and migrateLinearity) and in the table.
func TestMigrateFigureShape(t *testing.T) {
	res := &Results{Migrate: []MigratePoint{
		{Models: 1, Wall: 1200, Reads: 40, Writes: 9, RequestsPerModel: 49, PeakRSSBytes: 60 << 20, CPUSeconds: 0.4, Governed: 1, Setup: 3000},
		{Models: 10, Wall: 2100, Reads: 130, Writes: 36, RequestsPerModel: 16.6, PeakRSSBytes: 62 << 20, CPUSeconds: 0.6, Governed: 10, Setup: 4000},
	}}
	res.MigrateLinearity = linearity(migrateFit(res.Migrate))
	if res.MigrateLinearity == nil || len(res.MigrateLinearity.Intervals) != 1 || res.MigrateLinearity.Intervals[0].WallPerModel != 100 {
		t.Fatalf("migrate fit = %+v, want one interval of 100 ms per model", res.MigrateLinearity)
	}
	var table bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"migrate tiers: 1 annotated models", "1.20 s, 40 reads, 9 writes (49.0 per model)", "10 governed by a MaaSSubscription",
		"migrate tiers: wall time per model (least squares)", "migrate tiers: per added model, by interval", "1→10: 100.0 ms, 13.0 requests",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Migrate []struct {
			Models           int     `json:"models"`
			WallMs           float64 `json:"wallMs"`
			Reads            int     `json:"reads"`
			Writes           int     `json:"writes"`
			RequestsPerModel float64 `json:"requestsPerModel"`
			PeakRssBytes     int64   `json:"peakRssBytes"`
			CPUSeconds       float64 `json:"cpuSeconds"`
			Governed         int     `json:"governedModels"`
		} `json:"migrate"`
		Linearity *struct {
			Intervals []struct {
				From, To int
			} `json:"intervals"`
		} `json:"migrateLinearity"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Migrate) != 2 || got.Migrate[1].Models != 10 || got.Migrate[1].WallMs != 2100 || got.Migrate[1].Governed != 10 ||
		got.Migrate[1].PeakRssBytes != 62<<20 || got.Linearity == nil || len(got.Linearity.Intervals) != 1 || got.Linearity.Intervals[0].To != 10 {
		t.Errorf("results JSON:\n%s", b)
	}
}

// TestTierModels: the generated models of the migrate figure are the
// fixture's shape: three objects per model, the tier annotation on every
// LLMInferenceService, KServe's router labels on its HTTPRoute.
func TestTierModels(t *testing.T) {
	objs := tierModels(3)
	if len(objs) != 9 {
		t.Fatalf("%d objects for 3 models, want 9", len(objs))
	}
	for i := range 3 {
		isvc, route := objs[3*i], objs[3*i+2]
		if isvc.GetKind() != "LLMInferenceService" || isvc.GetAnnotations()[migrate.TierAnnotation] == "" {
			t.Errorf("model %d: %s without the tier annotation", i, isvc.GetKind())
		}
		if route.GetKind() != "HTTPRoute" || route.GetLabels()["app.kubernetes.io/name"] != isvc.GetName() {
			t.Errorf("model %d: route %s labels %v", i, route.GetName(), route.GetLabels())
		}
	}
	for _, f := range []string{"00-platform.yaml", "10-kuadrant.yaml", "20-tiers.yaml", "40-new-defaults.yaml"} {
		objs, err := testenv.ReadObjects(filepath.Join("..", "testdata", "tiers", f))
		if err != nil || len(objs) == 0 {
			t.Errorf("%s: %d objects, %v", f, len(objs), err)
		}
	}
}

// TestPeakRSSIsTheChilds: the peak RSS of a run is the child's own, not
// the bench's memory that getrusage's ru_maxrss carries over from the
// clone before exec.
func TestPeakRSSIsTheChilds(t *testing.T) {
	ballast := make([]byte, 64<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	cmd := exec.Command("sleep", "0.2")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	done := make(chan struct{})
	peak := pollPeakRSS(cmd.Process.Pid, done)
	_ = cmd.Wait()
	close(done)
	got := <-peak
	if got <= 0 || got >= 32<<20 {
		t.Errorf("peak RSS of sleep = %d bytes, want more than 0 and well under the bench's 64 MiB", got)
	}
	t.Logf("sleep: %d KiB (bench ballast %d MiB)", got>>10, len(ballast)>>20)
}
