package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/e2e/sim"
)

// Breakdown is where a scale point's time went (Options.Profile): API
// requests by client, verb and resource as the recording proxy saw them,
// and each simulated controller's reconcile count and time. maasctl's own
// CPU profile is beside it (cpu.pprof in the scale point's folder).
type Breakdown struct {
	Requests   []RequestGroup      `json:"requests"`
	Reconciles []sim.ReconcileStat `json:"reconciles"`
	// CPUSeconds is maasctl's user plus system CPU time.
	CPUSeconds float64 `json:"maasctlCpuSeconds"`
}

// RequestGroup is the requests of one client ("maasctl" or "sim"), verb
// (get, list, watch, create, patch, update, delete) and resource.
type RequestGroup struct {
	Client   string `json:"client"`
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
	N        int    `json:"n"`
	// Total, P50 and Max are the answers' latencies (for watches: how
	// long the streams stayed open).
	Total ms `json:"totalMs"`
	P50   ms `json:"p50Ms"`
	Max   ms `json:"maxMs"`
}

// requestGroups groups recs by client, verb and resource; a request
// still open (a watch the simulators hold) counts until now.
func requestGroups(recs []faultproxy.Request) []RequestGroup {
	type k struct{ client, verb, res string }
	lat := map[k][]time.Duration{}
	now := time.Now()
	for _, r := range recs {
		client := "other"
		switch {
		case isMaasctl(r.UserAgent):
			client = "maasctl"
		case r.UserAgent == simUserAgent:
			client = "sim"
		}
		verb, res := verbResource(r)
		key := k{client, verb, res}
		end := r.End
		if end.IsZero() {
			end = now // a watch still open when the requests were read
		}
		lat[key] = append(lat[key], end.Sub(r.Start))
	}
	out := make([]RequestGroup, 0, len(lat))
	for key, ds := range lat {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		out = append(out, RequestGroup{Client: key.client, Verb: key.verb, Resource: key.res, N: len(ds),
			Total: toMS(sum), P50: toMS(percentile(ds, 50)), Max: toMS(percentile(ds, 100))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Total > out[j].Total })
	return out
}

// verbResource is r's Kubernetes verb and resource (group/resource, "core"
// for the legacy group), from its method and path.
func verbResource(r faultproxy.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(r.Path, "/"), "/")
	var rest []string
	group := "core"
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, rest = parts[1], parts[3:]
	default:
		return strings.ToLower(r.Method), r.Path
	}
	if len(rest) >= 2 && rest[0] == "namespaces" && len(rest) != 2 {
		rest = rest[2:]
	}
	named := len(rest) >= 2
	resource = group + "/" + strings.Join(rest[:min(len(rest), 1)], "")
	if len(rest) >= 3 {
		resource += "/" + rest[2] // a subresource (status)
	}
	switch r.Method {
	case "GET":
		switch {
		case r.Watch:
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case "POST":
		verb = "create"
	case "PATCH":
		verb = "patch"
	case "PUT":
		verb = "update"
	case "DELETE":
		verb = "delete"
	default:
		verb = strings.ToLower(r.Method)
	}
	return verb, resource
}

// writeBreakdown prints b as tables.
func writeBreakdown(w io.Writer, models int, b *Breakdown) {
	fmt.Fprintf(w, "breakdown at %d models: maasctl CPU %.2f s\n", models, b.CPUSeconds)
	fmt.Fprintf(w, "%-8s %-7s %-55s %6s %10s %8s %8s\n", "client", "verb", "resource", "n", "total ms", "p50 ms", "max ms")
	for _, g := range b.Requests {
		fmt.Fprintf(w, "%-8s %-7s %-55s %6d %10.0f %8.1f %8.1f\n", g.Client, g.Verb, g.Resource, g.N, g.Total, g.P50, g.Max)
	}
	fmt.Fprintf(w, "%-32s %10s %10s\n", "controller", "reconciles", "total ms")
	for _, r := range b.Reconciles {
		fmt.Fprintf(w, "%-32s %10d %10.0f\n", r.Controller, r.Reconciles, toMS(r.Total))
	}
}
