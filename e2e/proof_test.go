package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

var killPointsFlag = flag.Int("maasctl.killpoints", 0,
	"kill points of TestKillAnywhere (default $E2E_KILLPOINTS, else 6; the full proof uses 30)")

// killPoints is the number of SIGKILLs TestKillAnywhere delivers.
func killPoints() int {
	if *killPointsFlag > 0 {
		return *killPointsFlag
	}
	if n, err := strconv.Atoi(os.Getenv("E2E_KILLPOINTS")); err == nil && n > 0 {
		return n
	}
	return 6
}

// proofDelays are simulated operator delays long enough that every step
// spends time inside a wait, short enough for make test.
var proofDelays = map[string]time.Duration{
	"olm": 400 * time.Millisecond, "cnpg": 400 * time.Millisecond, "dsc": 600 * time.Millisecond,
	"dsci": 200 * time.Millisecond, "cert-manager": 200 * time.Millisecond, "gateway": 200 * time.Millisecond,
	"lws": 200 * time.Millisecond, "maas": 100 * time.Millisecond,
	"router": 100 * time.Millisecond, "service-ca": 100 * time.Millisecond,
}

const killLease = "2s"

// TestKillAnywhere SIGKILLs maasctl at killPoints() points spread over the
// install (right after an event, i.e. between requests, or a moment later,
// inside a wait), re-runs it each time at once (the run takes over the
// unexpired Lease of the killed process, which is gone),
// and checks that the end state equals that of an uninterrupted run object
// by object (labels, the fields maasctl owns, generation less two per
// restore of a spec another writer reverted, restores; see objState),
// that Vault holds one password version,
// and that no object was changed by maasctl more often than in the
// uninterrupted run (no step applied twice in a way that changed an
// object: the writes are counted by resourceVersion in a recording proxy
// that both maasctl and the simulators go through).
func TestKillAnywhere(t *testing.T) {
	n := killPoints()
	opts := clusterOptions{simDelay: proofDelays, proxy: &faultproxy.Options{Record: true}, simViaProxy: true}
	var ref struct {
		state   map[string]objState
		events  []steps.Event
		changes map[string]int
	}
	t.Run("uninterrupted", func(t *testing.T) {
		c := newCluster(t, opts)
		r := c.maasctl(t, "install", "-o", "json", "--lease-duration", killLease)
		if r.exit != 0 {
			t.Fatalf("uninterrupted install exit %d\n%s\n%s", r.exit, r.stdout, r.stderr)
		}
		ref.state = managedState(t, c)
		discountRestores(c.proxy.Requests(), ref.state)
		ref.events = r.events
		ref.changes = changingWrites(c.proxy.Requests(), ref.state, possible)
		owned := 0
		for _, st := range ref.state {
			if st.Owned != nil {
				owned++
			}
		}
		if len(ref.changes) == 0 || owned == 0 {
			t.Fatalf("no maasctl write changed a managed object (%d) or none has fields maasctl owns (%d): the checks would prove nothing", len(ref.changes), owned)
		}
		t.Logf("uninterrupted install: %s, %d managed objects (%d with fields maasctl owns), %d changed by maasctl", r.wall, len(ref.state), owned, len(ref.changes))
	})
	if t.Failed() {
		return
	}

	c := newCluster(t, opts)
	// E2E_KILL_SEED sets the seed of the kill plan (logged below); the
	// plan also depends on the reference run's events, so the same seed
	// picks the same draws, not always the same kill points.
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("E2E_KILL_SEED"), 10, 64); err == nil {
		seed = s
	}
	plan := planKills(ref.events, n, seed)
	t.Logf("kill plan (%d points, seed %d): %s", n, plan.seed, plan)
	coverage := map[string]int{}
	var kills []killResult
	for k := 0; k < len(plan.points); k++ {
		res, killed := c.runUntilKill(t, plan, k)
		if !killed {
			t.Errorf("the install finished (exit %d) before kill point %d of %d; the plan did not cover the install", res.exit, k+1, n)
			break
		}
		kills = append(kills, res)
		coverage[res.step]++
	}
	t.Logf("%d kills: %v\nkills in %d of %d steps: %v", len(kills), kills, len(coverage), plan.steps, coverage)
	if len(kills) == n && len(coverage) < min(plan.steps, (n+1)/2) {
		t.Errorf("the %d kills landed in only %d steps; they must spread over the install", n, len(coverage))
	}

	final := c.maasctl(t, "install", "-o", "json", "--lease-duration", killLease)
	if final.exit != 0 {
		t.Fatalf("install after %d kills: exit %d\nstdout:\n%s\nstderr:\n%s", len(kills), final.exit, final.stdout, final.stderr)
	}
	got := managedState(t, c)
	discountRestores(c.proxy.Requests(), got)
	if diff := cmp.Diff(ref.state, got); diff != "" {
		t.Errorf("end state after kills differs from the uninterrupted run (-uninterrupted +killed):\n%s", diff)
	}
	if v := c.vault.Versions(vaultMount, vaultPath); v != 1 {
		t.Errorf("Vault %s/%s has %d versions after %d kills, want 1", vaultMount, vaultPath, v, len(kills))
	}
	changes := changingWrites(c.proxy.Requests(), got, certain)
	for key, want := range ref.changes {
		if changes[key] > want {
			t.Errorf("%s was changed by %d maasctl writes across the killed runs, %d in the uninterrupted run: a step was applied twice in a way that changed it; its writes:\n%s", key, changes[key], want, describeWrites(c.proxy.Requests(), key))
		}
	}
	for key := range changes {
		if _, ok := ref.changes[key]; !ok {
			t.Errorf("%s was changed by maasctl across the killed runs but not in the uninterrupted run", key)
		}
	}
}

// objState is what must match between two installs: the labels, the
// fields maasctl owns (its server-side apply entry in managedFields, so
// that fields an operator adds on its own schedule do not count; e.g. the
// RHOAI operator creates default-dsci with spec.trustedCABundle when it
// starts before maasctl applies it) and generation. For a Secret only the
// keys count: the values hold passwords that differ between clusters.
type objState struct {
	Labels     map[string]string
	Owned      any
	DataKeys   []string
	Generation int64
}

// managedList lists every object the default install writes (the rendered
// objects and the two Secrets that carry the database password).
func managedList(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	inv := inventory.Default()
	r, err := assets.Render(inv, assets.Facts{Host: appsHost})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, list := range r {
		for _, o := range list {
			if o.GetKind() == "Subscription" && o.GetName() == "cloudnative-pg" {
				continue // not installed when CNPG is already served
			}
			objs = append(objs, o)
		}
	}
	for _, s := range [][2]string{{inv.Database.Namespace, inv.Database.SecretName}, {inv.DBConfig.Namespace, inv.DBConfig.Name}} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("Secret")
		u.SetNamespace(s[0])
		u.SetName(s[1])
		objs = append(objs, u)
	}
	return objs
}

// managedState reads every managed object and keeps what must match.
func managedState(t *testing.T, c *cluster) map[string]objState {
	t.Helper()
	out := map[string]objState{}
	for _, o := range managedList(t) {
		live, err := c.clients.Get(context.Background(), o)
		if err != nil {
			t.Errorf("managed object %s: %v", kube.Describe(o), err)
			continue
		}
		s := objState{Labels: clusterIndependentLabels(live.GetLabels()), Generation: live.GetGeneration()}
		if live.GetKind() == "Secret" {
			data, _, _ := unstructured.NestedMap(live.Object, "data")
			for k := range data {
				s.DataKeys = append(s.DataKeys, k)
			}
			sort.Strings(s.DataKeys)
		} else {
			owned, err := ownedBy(live, kube.FieldManager)
			if err != nil {
				t.Errorf("%s: %v", kube.Describe(live), err)
			}
			s.Owned = owned
		}
		out[kube.Describe(live)] = s
	}
	return out
}

// ownedBy returns the part of obj that manager's server-side apply entry
// in managedFields owns (metadata.managedFields itself aside). The
// fieldsV1 format: "f:name" a map field, "k:{...}" a list item by key,
// "v:..." a set item by value, "i:N" a list item by index, "." the node
// itself (https://kubernetes.io/docs/reference/using-api/server-side-apply/#field-management).
func ownedBy(obj *unstructured.Unstructured, manager string) (any, error) {
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager != manager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			return nil, fmt.Errorf("managedFields of %s: %w", manager, err)
		}
		return project(obj.Object, fields), nil
	}
	return nil, nil
}

func project(v any, fields map[string]any) any {
	if len(fields) == 0 {
		return v
	}
	switch val := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, sub := range fields {
			name, ok := strings.CutPrefix(k, "f:")
			if !ok {
				continue
			}
			if child, ok := val[name]; ok {
				sf, _ := sub.(map[string]any)
				out[name] = project(child, sf)
			}
		}
		return out
	case []any:
		var out []any
		for i, item := range val {
			for k, sub := range fields {
				if listItemMatches(k, i, item) {
					sf, _ := sub.(map[string]any)
					out = append(out, project(item, sf))
				}
			}
		}
		return out
	}
	return v
}

func listItemMatches(key string, i int, item any) bool {
	switch {
	case strings.HasPrefix(key, "i:"):
		return key == "i:"+strconv.Itoa(i)
	case strings.HasPrefix(key, "v:"):
		var want any
		return json.Unmarshal([]byte(key[2:]), &want) == nil && cmp.Equal(normalizeJSON(item), want)
	case strings.HasPrefix(key, "k:"):
		var keys map[string]any
		m, ok := item.(map[string]any)
		if !ok || json.Unmarshal([]byte(key[2:]), &keys) != nil {
			return false
		}
		for kk, kv := range keys {
			if !cmp.Equal(normalizeJSON(m[kk]), kv) {
				return false
			}
		}
		return true
	}
	return false
}

// normalizeJSON turns a value decoded by the Kubernetes JSON decoder
// (int64 numbers) into what encoding/json decodes (float64 numbers).
func normalizeJSON(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// changingWrites counts, per managed object, the maasctl writes that
// changed it: the resourceVersions that maasctl's writes produced. Every
// writer of the managed objects (maasctl, OLM, the simulators) must go
// through the recording proxy. Several writes answer with the same
// resourceVersion when all but one were no-ops; the one that produced it
// started before the write committed, and every no-op read the object
// after that commit, so it started before each of the others ended. A
// resourceVersion counts for maasctl when every write that meets that
// bound is maasctl's. When a maasctl no-op and another writer's change
// overlap in time (a re-apply while OLM writes the status: the no-op's
// answer can pass the proxy first), the other writer may have produced it,
// and it does not count. Nor does a new resourceVersion whose content
// (faultproxy ObjectRef.Content) equals that of the write that ended last
// before it started: the API server stored the same object again (it does
// so for a custom resource whose status is still its schema's default, as
// a GatewayClass before its controller accepts it).
//
// Nor does a restore (restores): a maasctl write that set the spec again
// after another writer's forced server-side apply had changed it.
//
// That is the count by attribution certain, a lower bound. With possible,
// a resourceVersion counts when any write that meets the bound is
// maasctl's: an upper bound. The uninterrupted run's count is taken with
// possible and the killed runs' with certain, so an overlap that hides
// which writer produced a version (a maasctl change overlapping a status
// no-op of OLM's, whose answer passed the proxy first: seen in a CI
// check) never makes the killed runs look as if they changed an object
// more often; a killed run's change that no other write overlaps still
// counts.
func changingWrites(recs []faultproxy.Request, managed map[string]objState, how attribution) map[string]int {
	out := map[string]int{}
	for k, byRV := range writesByVersion(recs, managed) {
		restored := restores(byRV)
		for rv, ws := range byRV {
			if _, restore := restored[rv]; producedBy(ws, how) && !storedAgainUnchanged(byRV, rv) && !restore {
				out[k]++
			}
		}
	}
	return out
}

// restores returns the resourceVersions of one object's writes (byRV, by
// resourceVersion) that were maasctl restoring its spec after another
// writer took fields from it, each with the generations the episode
// added: versions that maasctl produced with a new generation when the
// last version before them with a new generation was another writer's
// forced server-side apply (force=true, which takes over fields maasctl
// owns) and maasctl had set the spec (created the object, or a new
// generation) before that. The generations added are the restore's less
// maasctl's version before the forced apply (each forced apply and the
// restore). The real kuadrant-operator v1.5.2 does this to the Authorino CR:
// its AuthorinoReconciler applies spec.listener.tls with force, copied
// from its topology's view of the CR, so a reconcile that still sees the
// CR from before maasctl's TLS apply sets TLS back off, and maasctl's
// platform/authorino-tls step applies it again (seen in a CI run of
// TestKillAnywhere: generations 2, 3, 4 instead of 2). Any other writer's
// spec change before a second maasctl change does not make it a restore.
func restores(byRV map[string][]faultproxy.Request) map[string]int64 {
	type version struct {
		rv      string
		n       uint64
		gen     int64
		maasctl bool
		forced  bool
	}
	var vs []version
	for rv, ws := range byRV {
		n, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return nil // not etcd's revision numbers: no order to judge by
		}
		v := version{rv: rv, n: n, gen: ws[0].Object.Generation, maasctl: producedBy(ws, certain)}
		for _, w := range ws {
			q, _ := url.ParseQuery(w.Query)
			v.forced = v.forced || !isMaasctl(w) && w.Method == http.MethodPatch && q.Get("force") == "true"
		}
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].n < vs[j].n })
	out := map[string]int64{}
	var maasctlGen int64 // the generation maasctl's last spec change left; 0: none yet
	forcedSince := false
	for i, v := range vs {
		if i == 0 {
			if v.maasctl {
				maasctlGen = v.gen // it created the object
			}
			continue
		}
		if v.gen <= vs[i-1].gen {
			continue // no spec change
		}
		switch {
		case v.maasctl && maasctlGen > 0 && forcedSince:
			out[v.rv] = v.gen - maasctlGen
			maasctlGen, forcedSince = v.gen, false
		case v.maasctl:
			maasctlGen = v.gen
		case maasctlGen > 0 && v.forced:
			forcedSince = true
		}
	}
	return out
}

// discountRestores takes from each object's generation in state (by key)
// the generations that restores (another writer's forced apply and
// maasctl's restore) added, so that end states compare whether or not
// such a revert happened on the way.
func discountRestores(recs []faultproxy.Request, state map[string]objState) {
	for k, byRV := range writesByVersion(recs, state) {
		for _, added := range restores(byRV) {
			st := state[k]
			st.Generation -= added
			state[k] = st
		}
	}
}

// storedAgainUnchanged reports whether the writes of byRV[rv] (one
// object's writes by resourceVersion) left the content that the latest
// write ending before the first of them started had left; or, for a
// maasctl write, the generation and maasctl's managedFields entries that
// maasctl's latest write before it had left: an apply that changed nothing
// leaves them, while a writer the proxy does not see may have changed the
// rest meanwhile (kube-controller-manager sets a Deployment's revision
// annotation and status when its template changes).
func storedAgainUnchanged(byRV map[string][]faultproxy.Request, rv string) bool {
	first := byRV[rv][0]
	for _, w := range byRV[rv] {
		if w.Start.Before(first.Start) {
			first = w
		}
	}
	if first.Object.Content == "" {
		return false
	}
	var prev, prevMaasctl *faultproxy.Request
	for r, ws := range byRV {
		if r == rv {
			continue
		}
		for i := range ws {
			if !ws[i].End.Before(first.Start) {
				continue
			}
			if prev == nil || ws[i].End.After(prev.End) {
				prev = &ws[i]
			}
			if isMaasctl(ws[i]) && (prevMaasctl == nil || ws[i].End.After(prevMaasctl.End)) {
				prevMaasctl = &ws[i]
			}
		}
	}
	if prev != nil && prev.Object.Content == first.Object.Content {
		return true
	}
	if !isMaasctl(first) || prevMaasctl == nil || prevMaasctl.Object.Generation != first.Object.Generation {
		return false
	}
	a, b := prevMaasctl.Object.Managers[kube.FieldManager], first.Object.Managers[kube.FieldManager]
	return a != "" && a == b
}

// writesByVersion groups the successful writes to managed objects by
// object key and the resourceVersion they answered with.
func writesByVersion(recs []faultproxy.Request, managed map[string]objState) map[string]map[string][]faultproxy.Request {
	out := map[string]map[string][]faultproxy.Request{}
	for _, r := range recs {
		if !r.IsWrite() || r.Object == nil || r.Status/100 != 2 || r.Fault != "" {
			continue
		}
		k := r.Object.Key()
		if _, ok := managed[k]; !ok {
			continue
		}
		if out[k] == nil {
			out[k] = map[string][]faultproxy.Request{}
		}
		out[k][r.Object.ResourceVersion] = append(out[k][r.Object.ResourceVersion], r)
	}
	return out
}

// attribution is how changingWrites attributes a resourceVersion that
// several writes answered with.
type attribution int

const (
	// certain: every write that could have produced it is maasctl's.
	certain attribution = iota
	// possible: at least one write that could have produced it is
	// maasctl's.
	possible
)

// producedBy reports whether maasctl produced the version that the writes
// ws (one object's writes that answered with one resourceVersion) answered
// with: with how certain, every write of ws that could have produced it is
// maasctl's; with possible, at least one is. A write X could when it
// started no later than each other write of ws ended.
func producedBy(ws []faultproxy.Request, how attribution) bool {
	found := false
	for i, x := range ws {
		could := true
		for j, n := range ws {
			if i != j && x.Start.After(n.End) {
				could = false
				break
			}
		}
		if !could {
			continue
		}
		if !isMaasctl(x) {
			if how == certain {
				return false
			}
			continue
		}
		found = true
	}
	return found
}

func isMaasctl(r faultproxy.Request) bool { return strings.HasPrefix(r.UserAgent, "maasctl/") }

// describeWrites lists the writes to key (for a failure message): start
// and end relative to the first, writer, method and resourceVersion.
func describeWrites(recs []faultproxy.Request, key string) string {
	var ws []faultproxy.Request
	for _, r := range recs {
		if r.IsWrite() && r.Object != nil && r.Object.Key() == key {
			ws = append(ws, r)
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Start.Before(ws[j].Start) })
	var b strings.Builder
	for _, r := range ws {
		fmt.Fprintf(&b, "  +%v..+%v %s %s %s status %d rv %s\n", r.Start.Sub(ws[0].Start).Round(time.Millisecond), r.End.Sub(ws[0].Start).Round(time.Millisecond), r.UserAgent, r.Method, r.Path, r.Status, r.Object.ResourceVersion)
	}
	return b.String()
}

// killPlan is where TestKillAnywhere kills: each point is an index into
// the uninterrupted run's progress events; a run is killed at its first
// event at or after that index in the uninterrupted order.
type killPlan struct {
	seed uint64
	// steps is the number of steps with events in the reference.
	steps  int
	index  map[string]int // event key -> first index in the reference
	keys   []string       // reference event keys in order
	points []killPoint
}

type killPoint struct {
	target int
	// step is the step of the target event.
	step string
	// delay 0 kills right after the event (between two requests); a
	// positive delay kills that long after it (inside a wait, typically).
	delay time.Duration
}

type killResult struct {
	step  string
	event string
	delay time.Duration
	exit  int
}

func (k killResult) String() string {
	return fmt.Sprintf("%s@%q+%s", k.step, k.event, k.delay)
}

func (p killPlan) String() string {
	var parts []string
	for _, pt := range p.points {
		parts = append(parts, fmt.Sprintf("%s+%s", p.keys[pt.target], pt.delay))
	}
	return strings.Join(parts, ", ")
}

// eventKey identifies an event across runs: step, type and, for progress,
// the message up to its first colon ("applied Namespace x", "waiting for
// Gateway ns/name").
func eventKey(ev steps.Event) string {
	switch ev.Type {
	case steps.EventStarted:
		return ev.Step + " started"
	case steps.EventProgress:
		msg, _, _ := strings.Cut(ev.Message, ":")
		return ev.Step + " " + msg
	}
	return ""
}

// planKills places n kill points on the uninterrupted run's events.
// Targets are started or "applied" events, which every run that does the
// step emits again. With fewer points than steps they are spread evenly
// over those events, every other one a moment after its event (inside a
// wait). With at least one point per step, each step gets one at its
// first event; the rest go, one each in turn, to the longest steps, at
// their first "applied" event (between two requests) or a moment after
// their first event (inside a wait); and the points are ordered by when
// their step finished in the uninterrupted run, so that a step that
// finishes early is targeted before a resumed run could finish it.
func planKills(ref []steps.Event, n int, seed uint64) killPlan {
	p := killPlan{seed: seed, index: map[string]int{}}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var targets []int
	first, applied := map[string]int{}, map[string]int{}
	started, done := map[string]time.Time{}, map[string]time.Time{}
	for _, ev := range ref {
		switch ev.Type {
		case steps.EventStarted:
			started[ev.Step] = ev.Time
		case steps.EventDone:
			done[ev.Step] = ev.Time
		}
		k := eventKey(ev)
		if k == "" {
			continue
		}
		if _, ok := p.index[k]; !ok {
			p.index[k] = len(p.keys)
		}
		if ev.Type == steps.EventStarted || strings.HasPrefix(ev.Message, "applied ") {
			targets = append(targets, len(p.keys))
			if _, ok := first[ev.Step]; !ok {
				first[ev.Step] = len(p.keys)
			}
			if _, ok := applied[ev.Step]; !ok && ev.Type == steps.EventProgress {
				applied[ev.Step] = len(p.keys)
			}
		}
		p.keys = append(p.keys, k)
	}
	p.steps = len(first)
	inside := func(d time.Duration) time.Duration {
		hi := min(d*6/10, 250*time.Millisecond)
		if hi <= 20*time.Millisecond {
			return 0
		}
		return 20*time.Millisecond + time.Duration(rng.Int64N(int64(hi-20*time.Millisecond)))
	}
	if n < p.steps {
		for i := range n {
			idx := targets[(2*i+1)*len(targets)/(2*n)]
			pt := killPoint{target: idx, step: strings.Fields(p.keys[idx])[0]}
			if i%2 == 1 {
				pt.delay = inside(500 * time.Millisecond)
			}
			p.points = append(p.points, pt)
		}
		return p
	}
	ids := make([]string, 0, len(first))
	for id := range first {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	long := slices.Clone(ids)
	sort.SliceStable(long, func(i, j int) bool {
		return done[long[i]].Sub(started[long[i]]) > done[long[j]].Sub(started[long[j]])
	})
	for _, id := range ids {
		p.points = append(p.points, killPoint{target: first[id], step: id})
	}
	for i := range n - len(ids) {
		id := long[i%len(long)]
		if a, ok := applied[id]; ok && i%2 == 0 {
			// Right after an apply: between two requests.
			p.points = append(p.points, killPoint{target: a, step: id})
			continue
		}
		p.points = append(p.points, killPoint{target: first[id], step: id, delay: inside(done[id].Sub(started[id]))})
	}
	sort.SliceStable(p.points, func(i, j int) bool {
		a, b := p.points[i], p.points[j]
		if !done[a.step].Equal(done[b.step]) {
			return done[a.step].Before(done[b.step])
		}
		return a.delay < b.delay
	})
	return p
}

// runUntilKill starts an install and SIGKILLs it at plan point k: at the
// target step's first event at or past the target, or, once the target
// step is done, at the first event past the target in the uninterrupted
// order. It reports whether the run was killed; if it finished first,
// res.exit is its exit code.
func (c *cluster) runUntilKill(t *testing.T, plan killPlan, k int) (killResult, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout(c.external))
	defer cancel()
	cmd := c.command(ctx, "install", "-o", "json", "--lease-duration", killLease)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pt := plan.points[k]
	res := killResult{delay: pt.delay}
	var timer *time.Timer
	kill := func() { _ = cmd.Process.Signal(syscall.SIGKILL) }
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fired, stepOver := false, false
	for sc.Scan() {
		var ev steps.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Step == pt.step && (ev.Type == steps.EventUnchanged || ev.Type == steps.EventDone) {
			stepOver = true // the target step is done: take the next event instead
		}
		if fired {
			continue
		}
		idx, ok := plan.index[eventKey(ev)]
		if !ok || idx < pt.target || ev.Step != pt.step && !stepOver {
			continue
		}
		fired = true
		res.step, res.event = ev.Step, eventKey(ev)
		if pt.delay == 0 {
			kill()
		} else {
			timer = time.AfterFunc(pt.delay, kill)
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return res, true
	}
	res.exit = cmd.ProcessState.ExitCode()
	if res.exit != 0 {
		t.Fatalf("run for kill point %d exited %d before it was killed (%v)\nstderr:\n%s", k+1, res.exit, err, stderr.String())
	}
	return res, false
}

// faultRate is the share of maasctl's API requests TestInstallUnderAPIFaults
// fails: $E2E_FAULT_RATE, else 5 %.
func faultRate() float64 {
	if r, err := strconv.ParseFloat(os.Getenv("E2E_FAULT_RATE"), 64); err == nil && r > 0 && r <= 1 {
		return r
	}
	return 0.05
}

// TestInstallUnderAPIFaults runs the install through a proxy that fails a
// share of maasctl's requests with 500, 429 (Retry-After), 409 Conflict or a
// dropped connection, and cuts watch streams. The install must succeed;
// every injected request fault must be answered by a retry that is logged
// in the debug log with its attempt number and bound; no request exhausts
// its retries; a fault-free re-run then finds every step unchanged and
// writes nothing.
func TestInstallUnderAPIFaults(t *testing.T) {
	parallel(t)
	rate := faultRate()
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("E2E_FAULT_SEED"), 10, 64); err == nil {
		seed = s
	}
	c := newCluster(t, clusterOptions{
		simDelay: map[string]time.Duration{"olm": 300 * time.Millisecond, "dsc": 300 * time.Millisecond},
		proxy:    &faultproxy.Options{Rate: rate, Seed: seed},
	})
	logFile := filepath.Join(c.dir, "maasctl.log")
	r := c.maasctl(t, "install", "-o", "json", "--log-file", logFile)
	counts := c.proxy.Counts()
	t.Logf("rate %.3f seed %d: %d requests through the proxy, faults injected: %v, transient answers of the apiserver itself: %v",
		rate, seed, counts.Requests, counts.Injected, counts.Transient)
	if r.exit != 0 {
		t.Fatalf("install under %.0f %% API faults: exit %d\nstdout:\n%s\nstderr:\n%s", rate*100, r.exit, r.stdout, r.stderr)
	}
	requestFaults := counts.Total() - counts.Injected[faultproxy.FaultWatchCut]
	if requestFaults == 0 {
		t.Fatalf("no request fault was injected in %d requests; the test proved nothing", counts.Requests)
	}

	var retries, exhausted, maxAttempt int
	bound := 0
	for _, line := range strings.Split(readFile(t, logFile), "\n") {
		var l struct {
			Msg         string `json:"msg"`
			Attempt     int    `json:"attempt"`
			MaxAttempts int    `json:"maxAttempts"`
			Reason      string `json:"reason"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch l.Msg {
		case "retrying API request":
			retries++
			maxAttempt = max(maxAttempt, l.Attempt)
			bound = l.MaxAttempts
			if l.Reason == "" {
				t.Errorf("retry log line without a reason: %s", line)
			}
		case "API request failed; retries exhausted":
			exhausted++
		}
	}
	t.Logf("debug log: %d retries (highest attempt %d of %d), %d requests gave up", retries, maxAttempt, bound, exhausted)
	// A loaded apiserver answers 429, 5xx or a Conflict by itself now and
	// then (CI runs many control planes at once on two cores): a retry of
	// one of those is owed too.
	if retries == 0 || int64(retries) > requestFaults+counts.TransientTotal() {
		t.Errorf("%d retries logged for %d injected request faults and %d transient answers of the apiserver: want at least one, and none without a fault",
			retries, requestFaults, counts.TransientTotal())
	}
	if bound == 0 || maxAttempt >= bound {
		t.Errorf("highest retried attempt %d must stay below the bound %d", maxAttempt, bound)
	}
	if exhausted != 0 {
		t.Errorf("%d requests exhausted their retries at a %.0f %% fault rate", exhausted, rate*100)
	}

	c.proxy.SetRate(0)
	again := c.maasctl(t, "install", "-o", "json")
	if again.exit != 0 {
		t.Fatalf("fault-free re-run exit %d\n%s", again.exit, again.stderr)
	}
	if s := summary(t, again.events); len(s.Done) != 0 || s.Writes != 0 {
		t.Errorf("after the faulty install converged, a re-run applied %v and wrote %d times; want nothing", s.Done, s.Writes)
	}
	if v := c.vault.Versions(vaultMount, vaultPath); v != 1 {
		t.Errorf("Vault has %d password versions, want 1", v)
	}
}

// TestConcurrentRunsOneWins starts two installs at the same moment: exactly
// one takes the Lease, the other exits at once (code 3) naming the winner
// by user, host, pid and start time. While the winner runs longer than
// twice the lease duration a third run is still refused (the Lease is
// renewed, not left to expire); once the winner is done the Lease is
// released and a fourth run starts at once and changes nothing.
//
// The runs install the database phase only (leaseSteps): the Lease is the
// run's, whatever steps it selects, and the CNPG operator's install
// through the real OLM outlasts twice the lease duration.
func TestConcurrentRunsOneWins(t *testing.T) {
	parallel(t)
	const leaseSteps = "database"
	c := newCluster(t, clusterOptions{simDelay: map[string]time.Duration{
		"olm": 1500 * time.Millisecond, "cnpg": 1500 * time.Millisecond,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout(c.external))
	defer cancel()
	type started struct {
		cmd    *exec.Cmd
		events chan steps.Event
		stderr *strings.Builder
		t0     time.Time
	}
	start := func() *started {
		cmd := c.command(ctx, "install", "-o", "json", "--only", leaseSteps, "--lease-duration", killLease)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		s := &started{cmd: cmd, events: make(chan steps.Event, 512), stderr: &strings.Builder{}}
		cmd.Stderr = s.stderr
		s.t0 = time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		go func() {
			defer close(s.events)
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var ev steps.Event
				if json.Unmarshal(sc.Bytes(), &ev) == nil {
					s.events <- ev
				}
			}
		}()
		return s
	}
	a, b := start(), start()
	// The loser ends first: its events channel closes.
	var winner, loser *started
	select {
	case _, ok := <-a.events:
		winner, loser = b, a
		if ok {
			winner, loser = a, b
		}
	case _, ok := <-b.events:
		winner, loser = a, b
		if ok {
			winner, loser = b, a
		}
	case <-ctx.Done():
		t.Fatal("neither run produced output")
	}
	for range loser.events {
	}
	err := loser.cmd.Wait()
	if code := loser.cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("of two simultaneous runs, the loser exited %d (%v), want 3\nstderr:\n%s", code, err, loser.stderr)
	}
	if d := time.Since(loser.t0); d > 10*time.Second {
		t.Errorf("the losing run took %s to refuse; it must fail fast", d)
	}
	u, _ := user.Current()
	host, _ := os.Hostname()
	msg := loser.stderr.String()
	holder := fmt.Sprintf("%s@%s pid %d started ", u.Username, host, winner.cmd.Process.Pid)
	if !strings.Contains(msg, holder) {
		t.Errorf("the refusal must name the winner as %q (user, host, pid, start time); stderr:\n%s", holder+"<time>", msg)
	} else if at, _, _ := strings.Cut(msg[strings.Index(msg, holder)+len(holder):], " "); !isRFC3339(at) {
		t.Errorf("the holder's start time %q is not an RFC 3339 time", at)
	}

	// Let the winner run past twice the lease duration: a killed run's
	// Lease would have expired by then; a live run's is renewed.
	lease, _ := time.ParseDuration(killLease)
	past := time.NewTimer(time.Until(winner.t0.Add(2*lease + time.Second)))
	defer past.Stop()
	finished := false
wait:
	for !finished {
		select {
		case ev, ok := <-winner.events:
			finished = !ok || ev.Type == steps.EventRunDone
		case <-past.C:
			break wait
		}
	}
	switch {
	case finished && c.external:
		// A shared external cluster may hold a finished install, which a
		// run converges in seconds.
		t.Logf("the install finished in %s, before twice the lease duration; Lease renewal not checked", time.Since(winner.t0))
	case finished:
		t.Fatalf("the install finished in %s, before twice the lease duration; make the simulated delays longer", time.Since(winner.t0))
	default:
		third := c.maasctl(t, "install", "-o", "json", "--only", leaseSteps, "--lease-duration", killLease)
		if third.exit != 3 {
			t.Errorf("a run %s into the winner's install exited %d, want 3: the Lease must be renewed while a run is alive\n%s", time.Since(winner.t0), third.exit, third.stderr)
		}
	}
	for range winner.events {
	}
	if err := winner.cmd.Wait(); err != nil {
		t.Fatalf("the winning install failed: %v\nstderr:\n%s", err, winner.stderr)
	}
	fourth := c.maasctl(t, "install", "-o", "json", "--only", leaseSteps)
	if fourth.exit != 0 {
		t.Fatalf("a run right after the winner finished exited %d: the Lease must be released\n%s", fourth.exit, fourth.stderr)
	}
	if s := summary(t, fourth.events); len(s.Done) != 0 || s.Writes != 0 {
		t.Errorf("the run after the winner applied %v and wrote %d times; want nothing", s.Done, s.Writes)
	}
}

func isRFC3339(s string) bool {
	s = strings.TrimRight(s, ");,")
	_, err := time.Parse(time.RFC3339, s)
	return err == nil
}

// TestOwnedFieldsProjection checks the managedFields projection that
// TestKillAnywhere compares with (no cluster needed).
func TestOwnedFieldsProjection(t *testing.T) {
	parallel(t)
	obj := map[string]any{
		"metadata": map[string]any{"name": "x", "labels": map[string]any{"a": "1", "b": "2"}},
		"spec": map[string]any{
			"mine":   "yes",
			"theirs": "no",
			"ports":  []any{map[string]any{"port": int64(80), "name": "http"}, map[string]any{"port": int64(443), "name": "https"}},
			"tags":   []any{"a", "b"},
			"atomic": []any{int64(1), int64(2)},
		},
	}
	tests := []struct {
		name   string
		fields string
		want   any
	}{
		{name: "map fields", fields: `{"f:spec":{".":{},"f:mine":{}}}`, want: map[string]any{"spec": map[string]any{"mine": "yes"}}},
		{name: "labels", fields: `{"f:metadata":{"f:labels":{"f:a":{}}}}`, want: map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "1"}}}},
		{
			name: "keyed list item", fields: `{"f:spec":{"f:ports":{"k:{\"port\":443}":{".":{},"f:name":{}}}}}`,
			want: map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"name": "https"}}}},
		},
		{name: "set item", fields: `{"f:spec":{"f:tags":{"v:\"b\"":{}}}}`, want: map[string]any{"spec": map[string]any{"tags": []any{"b"}}}},
		{name: "atomic list", fields: `{"f:spec":{"f:atomic":{}}}`, want: map[string]any{"spec": map[string]any{"atomic": []any{int64(1), int64(2)}}}},
		{name: "missing field", fields: `{"f:spec":{"f:gone":{}}}`, want: map[string]any{"spec": map[string]any{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: obj}
			u.SetManagedFields([]metav1.ManagedFieldsEntry{
				{Manager: "other", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:theirs":{}}}`)}},
				{Manager: "maasctl", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(tt.fields)}},
			})
			got, err := ownedBy(u, "maasctl")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestChangingWrites checks how TestKillAnywhere counts maasctl's writes
// that changed an object (no cluster needed).
func TestChangingWrites(t *testing.T) {
	parallel(t)
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ref := func(rv string) *faultproxy.ObjectRef {
		return &faultproxy.ObjectRef{Kind: "Gateway", Namespace: "ns", Name: "gw", ResourceVersion: rv}
	}
	// w is a write that took 1 ms and ended at end.
	w := func(ua string, end int, rv string) faultproxy.Request {
		return faultproxy.Request{UserAgent: ua, Method: "PATCH", Path: "/apis/g/v1/namespaces/ns/gateways/gw", Start: at(end - 1), End: at(end), Status: 200, Object: ref(rv)}
	}
	// span is a write from start to end.
	span := func(ua string, start, end int, rv string) faultproxy.Request {
		r := w(ua, end, rv)
		r.Start = at(start)
		return r
	}
	// wc is w with the digest of the content it left.
	wc := func(ua string, end int, rv, content string) faultproxy.Request {
		r := w(ua, end, rv)
		r.Object.Content = content
		return r
	}
	// wg is w with the generation of the object it left; wf is wg as a
	// forced server-side apply.
	wg := func(ua string, end int, rv string, gen int64) faultproxy.Request {
		r := w(ua, end, rv)
		r.Object.Generation = gen
		return r
	}
	wf := func(ua string, end int, rv string, gen int64) faultproxy.Request {
		r := wg(ua, end, rv, gen)
		r.Query = "fieldManager=kuadrant-operator&force=true"
		return r
	}
	// wm is wc with the generation and maasctl's managedFields digest
	// of the object it left.
	wm := func(ua string, end int, rv, content string, gen int64, mgr string) faultproxy.Request {
		r := wc(ua, end, rv, content)
		r.Object.Generation = gen
		r.Object.Managers = map[string]string{kube.FieldManager: mgr}
		return r
	}
	const m, s = "maasctl/v0", simUserAgent
	managed := map[string]objState{"Gateway ns/gw": {}}
	tests := []struct {
		name string
		recs []faultproxy.Request
		want int
		// upper is the count with attribution possible when it differs
		// from want (certain's).
		upper int
	}{
		{name: "create, then a no-op apply", recs: []faultproxy.Request{w(m, 1, "10"), w(m, 5, "10")}, want: 1},
		{name: "a no-op apply after a status write", recs: []faultproxy.Request{w(m, 1, "10"), w(s, 2, "11"), w(m, 5, "11")}, want: 1},
		{name: "an apply that changed the object again", recs: []faultproxy.Request{w(m, 1, "10"), w(s, 2, "11"), w(m, 5, "12")}, want: 2},
		{name: "a no-op apply overlapping the status write that produced its version", recs: []faultproxy.Request{w(m, 1, "10"), span(s, 10, 40, "11"), span(m, 20, 30, "11")}, want: 1, upper: 2},
		{name: "a change, then a status write that was a no-op", recs: []faultproxy.Request{w(m, 1, "10"), span(m, 10, 20, "11"), span(s, 30, 40, "11")}, want: 2},
		{name: "a change overlapping a status no-op", recs: []faultproxy.Request{w(m, 1, "10"), span(m, 10, 30, "11"), span(s, 20, 40, "11")}, want: 1, upper: 2},
		{name: "a status no-op that started after the change ended", recs: []faultproxy.Request{w(m, 1, "10"), span(m, 10, 20, "11"), span(s, 25, 40, "11")}, want: 2},
		{name: "another writer's change alone", recs: []faultproxy.Request{w(m, 1, "10"), span(s, 10, 20, "11")}, want: 1},
		{name: "an apply the server stored again unchanged", recs: []faultproxy.Request{wc(m, 1, "10", "a"), wc(m, 5, "12", "a"), wc(m, 9, "12", "a")}, want: 1},
		{name: "an apply that changed the content", recs: []faultproxy.Request{wc(m, 1, "10", "a"), wc(m, 5, "12", "b")}, want: 2},
		// kube-controller-manager, which the proxy does not see, set the
		// Deployment's revision annotation between the two applies.
		{name: "a no-op apply after an unseen writer's change", recs: []faultproxy.Request{wm(m, 1, "10", "a", 2, "x"), wm(m, 5, "12", "b", 2, "x")}, want: 1},
		{name: "an apply that changed the spec, the same entries", recs: []faultproxy.Request{wm(m, 1, "10", "a", 2, "x"), wm(m, 5, "12", "b", 3, "x")}, want: 2},
		{name: "an apply that changed maasctl's entries", recs: []faultproxy.Request{wm(m, 1, "10", "a", 2, "x"), wm(m, 5, "12", "b", 2, "y")}, want: 2},
		{name: "another writer's change with maasctl's entries as they were", recs: []faultproxy.Request{wm(m, 1, "10", "a", 2, "x"), wm(s, 5, "12", "b", 2, "x")}, want: 1},
		{name: "an apply that undid another writer's change", recs: []faultproxy.Request{wc(m, 1, "10", "a"), wc(s, 3, "11", "b"), wc(m, 5, "12", "a")}, want: 2},
		{name: "an apply that restored the spec another writer's forced apply took", recs: []faultproxy.Request{wg(s, 1, "10", 1), wg(m, 3, "12", 2), wf(s, 5, "13", 3), wg(m, 7, "14", 4)}, want: 1},
		{name: "an apply after another writer's unforced spec change", recs: []faultproxy.Request{wg(s, 1, "10", 1), wg(m, 3, "12", 2), wg(s, 5, "13", 3), wg(m, 7, "14", 4)}, want: 2},
		{name: "an apply that set the spec a second time", recs: []faultproxy.Request{wg(s, 1, "10", 1), wg(m, 3, "12", 2), wf(s, 5, "13", 2), wg(m, 7, "14", 3)}, want: 2},
		{name: "an apply after a forced apply before maasctl set anything", recs: []faultproxy.Request{wg(s, 1, "10", 1), wf(s, 3, "12", 2), wg(m, 7, "14", 3)}, want: 1},
		{name: "a second restore needs a second forced apply", recs: []faultproxy.Request{wg(m, 1, "10", 1), wf(s, 3, "12", 2), wg(m, 5, "14", 3), wg(m, 7, "15", 4)}, want: 2},
		{name: "dry runs, faults and reads do not count", recs: []faultproxy.Request{
			w(m, 1, "10"),
			{UserAgent: m, Method: "PATCH", Query: "dryRun=All", End: at(2), Status: 200, Object: ref("13")},
			{UserAgent: m, Method: "PATCH", End: at(3), Status: 500, Fault: faultproxy.Fault500},
			{UserAgent: m, Method: "GET", End: at(4), Status: 200, Object: ref("14")},
		}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := changingWrites(tt.recs, managed, certain)["Gateway ns/gw"]; got != tt.want {
				t.Errorf("changingWrites(certain) = %d, want %d", got, tt.want)
			}
			upper := tt.want
			if tt.upper != 0 {
				upper = tt.upper
			}
			if got := changingWrites(tt.recs, managed, possible)["Gateway ns/gw"]; got != upper {
				t.Errorf("changingWrites(possible) = %d, want %d", got, upper)
			}
		})
	}
	for _, d := range []struct {
		name      string
		recs      []faultproxy.Request
		gen, want int64
	}{
		// want 2: maasctl's apply left generation 2, as a run without the revert does.
		{"one forced apply and the restore", []faultproxy.Request{wg(s, 1, "10", 1), wg(m, 3, "12", 2), wf(s, 5, "13", 3), wg(m, 7, "14", 4)}, 4, 2},
		{"two forced applies and the restore", []faultproxy.Request{wg(s, 1, "10", 1), wg(m, 3, "12", 2), wf(s, 5, "13", 3), wf(s, 6, "14", 4), wg(m, 8, "15", 5)}, 5, 2},
		{"an unforced change is not discounted", []faultproxy.Request{wg(s, 1, "10", 1), wg(m, 3, "12", 2), wg(s, 5, "13", 3), wg(m, 7, "14", 4)}, 4, 4},
	} {
		t.Run("discount: "+d.name, func(t *testing.T) {
			state := map[string]objState{"Gateway ns/gw": {Generation: d.gen}}
			discountRestores(d.recs, state)
			if g := state["Gateway ns/gw"].Generation; g != d.want {
				t.Errorf("generation %d after the discount, want %d", g, d.want)
			}
		})
	}
}

// clusterIndependentLabels is labels with the OperatorGroup UID in the key
// of OLM's label olm.operatorgroup.uid/<uid> (the real olm-operator puts it
// on every target namespace of an OperatorGroup) replaced by "<uid>": UIDs
// differ between the two clusters compared, the label's presence does not.
func clusterIndependentLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l))
	for k, v := range l {
		if strings.HasPrefix(k, "olm.operatorgroup.uid/") {
			k = "olm.operatorgroup.uid/<uid>"
		}
		out[k] = v
	}
	return out
}
