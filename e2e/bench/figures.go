package bench

import (
	"math"
	"net/url"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/steps"
)

// stepChains names, per step, the simulated controllers whose configured
// delays the step waits out, as stages that follow one another; the
// controllers of one stage run their delays side by side, so a stage
// counts its longest delay and a step the sum over its stages
// (configuredDelay).
//
// This follows the simulators' timing model (e2e/sim, manager.hold): a
// controller's delay is the time from its trigger to the status that ends
// maasctl's wait; the controller starts its own work at once and holds
// back only its status writes. So a controller whose trigger is another
// controller's creation (not its status) runs its delay alongside:
//   - OLM steps: one OLM delay from the Subscription to CSV Succeeded and
//     Subscription AtLatestKnown (InstallPlan, CRDs, CSV and Deployment
//     are made inside it); the operator's own controllers act only after.
//   - platform/kuadrant: the Kuadrant operator creates Authorino at its
//     trigger, so the Authorino delay runs alongside the Kuadrant delay.
//   - access/*: the MaaS controller creates the AuthPolicy or
//     TokenRateLimitPolicy at its trigger, and Kuadrant's enforcement
//     delay runs alongside the MaaS delay.
//   - models/model: the MaaSModelRef is created once its ExternalModel is
//     Ready (a failed model gets no ref, case B16), so the two MaaS delays
//     follow one another.
//
// Steps absent here have no simulated delay (maasctl does the work
// itself, e.g. Vault or labels). The configured path counts configured
// delays only, never the intrinsic time of the work done inside them (API
// writes, CRDs becoming Established, Deployments becoming Available
// through kube-controller-manager, kube-scheduler and kwok): where that
// work outlasts a delay, the excess shows in the ratio.
var stepChains = map[string][][]string{
	"database/operator":      {{sim.OLM}},
	"database/cluster":       {{sim.CNPG}},
	"operators/rhcl":         {{sim.OLM}},
	"operators/lws":          {{sim.OLM}},
	"operators/rhoai":        {{sim.OLM}},
	"operators/lws-instance": {{sim.LWS}},
	"platform/gatewayclass":  {{sim.Gateway}},
	"platform/certificate":   {{sim.CertManager}},
	"platform/gateway":       {{sim.Gateway}},
	"platform/route":         {{sim.Router}},
	"platform/authorino-tls": {{sim.ServiceCA}},
	"rhoai/dsci":             {{sim.DSCI}},
	"rhoai/dsc":              {{sim.DSC}},
	"models/provider":        {{sim.MaaS}},
	"models/model":           {{sim.MaaS}, {sim.MaaS}},
	"access/auth-policy":     {{sim.MaaS}},
	"access/subscription":    {{sim.MaaS}},
}

// configuredDelay is the simulated delay of step id under delays: the sum
// over its stages (stepChains) of each stage's longest delay.
func configuredDelay(id string, delays map[string]time.Duration) time.Duration {
	var d time.Duration
	for _, stage := range stepChains[id] {
		var longest time.Duration
		for _, c := range stage {
			longest = max(longest, delays[c])
		}
		d += longest
	}
	return d
}

// criticalPath is the longest path through the registry's DAG when step
// id takes weight(id): each step starts when its last dependency ends. It
// returns the length and the steps on the path, first to last.
func criticalPath(reg *steps.Registry, weight func(id string) time.Duration) (time.Duration, []string) {
	order, err := reg.TopoOrder()
	if err != nil {
		return 0, nil
	}
	finish := map[string]time.Duration{}
	prev := map[string]string{}
	var end string
	for _, s := range order {
		var start time.Duration
		for _, d := range s.After {
			if _, ok := prev[s.ID]; !ok || finish[d] > start {
				start, prev[s.ID] = finish[d], d
			}
		}
		finish[s.ID] = start + weight(s.ID)
		if end == "" || finish[s.ID] > finish[end] {
			end = s.ID
		}
	}
	var path []string
	for id := end; id != ""; id = prev[id] {
		path = append([]string{id}, path...)
	}
	return finish[end], path
}

// stepTimes returns when each step started and ended (done, unchanged or
// failed) in a run's events.
func stepTimes(evs []steps.Event) (start, end map[string]time.Time) {
	start, end = map[string]time.Time{}, map[string]time.Time{}
	for _, ev := range evs {
		switch ev.Type {
		case steps.EventStarted:
			start[ev.Step] = ev.Time
		case steps.EventDone, steps.EventFailed:
			end[ev.Step] = ev.Time
		case steps.EventUnchanged:
			start[ev.Step] = ev.Time.Add(-ev.Duration)
			end[ev.Step] = ev.Time
		}
	}
	return start, end
}

// overlaps returns pairs of steps whose [start, end] intervals overlap.
func overlaps(evs []steps.Event) [][2]string {
	start, end := stepTimes(evs)
	ids := make([]string, 0, len(start))
	for id := range start {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return start[ids[i]].Before(start[ids[j]]) })
	var out [][2]string
	for i := 1; i < len(ids); i++ {
		if start[ids[i]].Before(end[ids[i-1]]) {
			out = append(out, [2]string{ids[i-1], ids[i]})
		}
	}
	return out
}

// percentile is the nearest-rank percentile p (0-100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// linearFit is the least-squares line y = a + b·x and its R².
func linearFit(xs, ys []float64) (a, b, r2 float64) {
	n := float64(len(xs))
	if n < 2 {
		return 0, 0, 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	a = (sy - b*sx) / n
	mean := sy / n
	var ssTot, ssRes float64
	for i := range xs {
		ssTot += (ys[i] - mean) * (ys[i] - mean)
		e := ys[i] - (a + b*xs[i])
		ssRes += e * e
	}
	if ssTot == 0 {
		return a, b, 1
	}
	return a, b, 1 - ssRes/ssTot
}

// requestCounts splits the recorded requests of the clients ua accepts.
type requestCounts struct {
	Reads  int `json:"reads"`
	Writes int `json:"writes"`
	// StateWrites are writes to maasctl's own state (Lease, checkpoints in
	// namespace maasctl), included in Writes.
	StateWrites int `json:"stateWrites"`
}

func countRequests(recs []faultproxy.Request, ua func(string) bool) requestCounts {
	var c requestCounts
	for _, r := range recs {
		if !ua(r.UserAgent) {
			continue
		}
		if !r.IsWrite() {
			c.Reads++
			continue
		}
		c.Writes++
		if isState(r.Path) {
			c.StateWrites++
		}
	}
	return c
}

// latencySample is one condition detection: a simulator wrote the status
// that ended step After's wait; Step (which waited for After) sent its first
// request Latency later.
type latencySample struct {
	Step    string        `json:"step"`
	After   string        `json:"after"`
	Trigger string        `json:"trigger"`
	Latency time.Duration `json:"latencyNs"`
}

// detectionLatencies measures, for each step, the time from the status
// write that ended its last dependency's wait to its own first request.
// The write is found backwards: the dependency's checkpoint write (the
// first thing maasctl does once a step's wait is over) is preceded by the
// watch event that ended the wait (the last event about the dependency's
// objects, anything in their namespaces such as a CSV, or a CRD, so that
// another step's event in between is not taken); the write is the
// simulator's that
// produced that event's object version, as the recording proxy saw it
// complete. Dependencies whose wait ended on a change no simulator wrote (a
// CRD becoming Established, a Deployment turning Available) give no
// sample. The dependent's first request is maasctl's first request after
// the step started, other than its own state (Lease, checkpoints).
func detectionLatencies(reg *steps.Registry, evs []steps.Event, recs []faultproxy.Request, objs assets.Rendered) []latencySample {
	start, end := stepTimes(evs)
	type wkey struct{ key, rv string }
	writes := map[wkey]time.Time{}
	type delivered struct {
		t, watchStart time.Time
		obj           faultproxy.ObjectRef
	}
	var events []delivered
	var maasctlReqs, checkpoints []faultproxy.Request
	for _, r := range recs {
		if r.UserAgent == simUserAgent && r.IsWrite() && r.Object != nil && r.Status/100 == 2 {
			k := wkey{r.Object.Key(), r.Object.ResourceVersion}
			if _, ok := writes[k]; !ok {
				writes[k] = r.End
			}
		}
		if !isMaasctl(r.UserAgent) {
			continue
		}
		if isState(r.Path) {
			// A step's checkpoint is written to the checkpoints
			// ConfigMap or, carried, with the step's record shard
			// (steps.Record.CarryCheckpoint).
			if r.IsWrite() && (strings.HasSuffix(r.Path, "/configmaps/"+steps.CheckpointsConfigMap) || strings.Contains(r.Path, "/configmaps/"+steps.RecordConfigMap+".")) {
				checkpoints = append(checkpoints, r)
			}
		} else {
			maasctlReqs = append(maasctlReqs, r)
		}
		for _, ev := range r.Events {
			if ev.Type != "BOOKMARK" {
				events = append(events, delivered{ev.Time, r.Start, ev.Object})
			}
		}
	}
	sort.Slice(events, func(i, j int) bool { return events[i].t.Before(events[j].t) })
	sort.Slice(maasctlReqs, func(i, j int) bool { return maasctlReqs[i].Start.Before(maasctlReqs[j].Start) })
	sort.Slice(checkpoints, func(i, j int) bool { return checkpoints[i].Start.Before(checkpoints[j].Start) })

	var out []latencySample
	for _, s := range reg.Steps {
		if _, ok := start[s.ID]; !ok {
			continue
		}
		var last string
		for _, d := range s.After {
			if t, ok := end[d]; ok && (last == "" || t.After(end[last])) {
				last = d
			}
		}
		if last == "" {
			continue
		}
		// The dependency's checkpoint write: the last that started before
		// the dependency's done event (its answer may be recorded a moment
		// after maasctl emitted the event).
		var cp *faultproxy.Request
		for i := len(checkpoints) - 1; i >= 0; i-- {
			if !checkpoints[i].Start.After(end[last]) {
				cp = &checkpoints[i]
				break
			}
		}
		if cp == nil || cp.Start.Before(start[last]) {
			continue
		}
		// The dependent can start before that checkpoint write (the Runner
		// starts it once the wait is over and writes the checkpoint
		// meanwhile): the trigger came before whichever was first.
		bound := cp.Start
		if st := start[s.ID]; st.Before(bound) {
			bound = st
		}
		var trig *delivered
		for i := len(events) - 1; i >= 0; i-- {
			if !events[i].t.After(bound) && related(objs[last], events[i].obj) {
				trig = &events[i]
				break
			}
		}
		if trig == nil || trig.t.Before(start[last]) {
			continue
		}
		// A wait can also end on a list answer (the object was ready when
		// the wait began; a reflector lists first unless the server streams
		// the list as events): then no event was the cause.
		listed := false
		for _, r := range maasctlReqs {
			if !r.Watch && r.Method == "GET" && listsObject(r, trig.obj) && r.End.After(trig.t) && !r.End.After(bound) {
				listed = true
				break
			}
		}
		if listed {
			continue
		}
		written, ok := writes[wkey{trig.obj.Key(), trig.obj.ResourceVersion}]
		if !ok || written.Before(trig.watchStart) {
			// No simulator wrote it, or the watch only reported the state
			// it found (its initial list): the wait did not end on a write.
			continue
		}
		if written.After(trig.t) {
			written = trig.t // the event can overtake the write's answer
		}
		var first time.Time
		for _, r := range maasctlReqs {
			if !r.Start.Before(start[s.ID]) {
				first = r.Start
				break
			}
		}
		if first.IsZero() {
			continue
		}
		out = append(out, latencySample{Step: s.ID, After: last, Trigger: trig.obj.Key(), Latency: first.Sub(written)})
	}
	return out
}

// listsObject reports whether r is a wait's LIST of o: its field selector
// names o, in o's namespace.
func listsObject(r faultproxy.Request, o faultproxy.ObjectRef) bool {
	q, err := url.ParseQuery(r.Query)
	if err != nil || q.Get("fieldSelector") != "metadata.name="+o.Name {
		return false
	}
	return o.Namespace == "" || strings.Contains(r.Path, "/namespaces/"+o.Namespace+"/")
}

// related reports whether o may be what a step with objects objs waited
// for: one of them, something in their namespaces, or a CRD.
func related(objs []*unstructured.Unstructured, o faultproxy.ObjectRef) bool {
	if o.Kind == "CustomResourceDefinition" {
		return true
	}
	for _, r := range objs {
		switch {
		case r.GetKind() == o.Kind && r.GetName() == o.Name && r.GetNamespace() == o.Namespace:
			return true
		case o.Namespace != "" && (r.GetNamespace() == o.Namespace || r.GetKind() == "Namespace" && r.GetName() == o.Namespace):
			return true
		}
	}
	return false
}

// isState reports whether path is about maasctl's own state (its
// namespace, the Lease, the checkpoints).
func isState(path string) bool {
	return strings.Contains(path, "/namespaces/"+steps.StateNamespace+"/") || strings.HasSuffix(path, "/namespaces/"+steps.StateNamespace)
}
