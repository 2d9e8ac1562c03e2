package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// WriteTable prints every figure as a table: figure, value, target, and
// whether the target is met.
func (r *Results) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "FIGURE\tVALUE\tTARGET\tMET\n")
	row := func(name, value, target string, met *bool) {
		m := ""
		if met != nil {
			m = "no"
			if *met {
				m = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, value, target, m)
	}
	yes := func(b bool) *bool { return &b }
	sec := func(v ms) string { return fmt.Sprintf("%.2f s", float64(v)/1000) }
	row("Kuadrant, Authorino, Limitador operators and Authorino server", "real (no simulated delay of theirs is counted)", "", nil)
	if f := r.Install; f != nil {
		row("install wall time (parallel DAG)", sec(f.Wall), "", nil)
		row("critical path of simulated operator delays", sec(f.CriticalPath)+" ("+strings.Join(f.CriticalPathIDs, " > ")+")", "", nil)
		row("install ÷ critical path", fmt.Sprintf("%.3f", f.Ratio), "≤ 1.02", yes(f.Ratio <= 1.02))
		row("critical path of observed step times", sec(f.ObservedPath), "", nil)
		row("install ÷ observed critical path (runner overhead)", fmt.Sprintf("%.3f", f.ObservedRatio), "", nil)
		row("install requests (reads/writes, of which state)", fmt.Sprintf("%d/%d (%d)", f.Requests.Reads, f.Requests.Writes, f.Requests.StateWrites), "", nil)
		row("peak RSS of maasctl during install", fmt.Sprintf("%.1f MiB", float64(f.PeakRSSBytes)/(1<<20)), "", nil)
	}
	if f := r.Slow; f != nil {
		row(fmt.Sprintf("install wall time, delays scaled 1/%g", r.SlowScale), sec(f.Wall), "", nil)
		row(fmt.Sprintf("install ÷ critical path, delays scaled 1/%g", r.SlowScale), fmt.Sprintf("%.3f (critical path %s)", f.Ratio, sec(f.CriticalPath)), "≤ 1.02", yes(f.Ratio <= 1.02))
	}
	if f := r.Serial; f != nil {
		row("install wall time, steps forced serial", sec(f.Wall), "", nil)
		row("serial install ÷ critical path", fmt.Sprintf("%.3f", f.Ratio), "", nil)
		if f.OverParallel > 0 {
			row("serial ÷ parallel (what the DAG buys)", fmt.Sprintf("%.3f", f.OverParallel), "", nil)
		}
	}
	if d := r.Detection; d != nil {
		row("condition detection latency p50", fmt.Sprintf("%.1f ms", float64(d.P50)), "", nil)
		row("condition detection latency p95", fmt.Sprintf("%.1f ms (n=%d, max %.1f ms)", float64(d.P95), d.N, float64(d.Max)), "≤ 50 ms", yes(d.P95 <= 50 && d.N > 0))
	}
	if n := r.NoOp; n != nil {
		row("no-op re-run wall time", sec(n.Wall), "< 0.3 s", yes(n.Wall < 300))
		row("no-op re-run CPU (user+system)", fmt.Sprintf("%.3f s", n.CPUSeconds), "", nil)
		row("no-op re-run writes (managed objects)", fmt.Sprint(n.Writes), "0", yes(n.Writes == 0))
		row("no-op re-run reads", fmt.Sprintf("%d for %d managed objects", n.Reads, n.ManagedObjects), "", nil)
		row("no-op reads per managed object", fmt.Sprintf("%.2f", n.ReadsPerObject), "≤ 1.2", yes(n.ReadsPerObject <= 1.2))
		row("no-op requests seen by the proxy (reads/writes, of which state)", fmt.Sprintf("%d/%d (%d)", n.Proxy.Reads, n.Proxy.Writes, n.Proxy.StateWrites), "", nil)
		if f := r.Install; f != nil && n.ManagedObjects > 0 {
			// Every request of the first install the proxy saw (run
			// state, Lease and discovery included) per object of the
			// default inventory that exists afterwards.
			per := float64(f.Requests.Reads+f.Requests.Writes) / float64(n.ManagedObjects)
			row("first install requests per managed object", fmt.Sprintf("%.2f (%d for %d)", per, f.Requests.Reads+f.Requests.Writes, n.ManagedObjects), "≤ 3", yes(per <= 3))
		}
	}
	if a := r.Ansible; a != nil {
		if a.Skipped != "" {
			row("Ansible comparison", "skipped: "+a.Skipped, "", nil)
		} else {
			row("Ansible first apply wall time", sec(a.FirstApply), "", nil)
			row("maasctl ÷ Ansible, first apply", fmt.Sprintf("%.3f", a.RatioFirst), "", nil)
			row("Ansible first apply requests (reads/writes)", fmt.Sprintf("%d/%d", a.FirstRequests.Reads, a.FirstRequests.Writes), "", nil)
			row("Ansible no-op re-run wall time", sec(a.NoOp), "", nil)
			row("maasctl ÷ Ansible, no-op re-run", fmt.Sprintf("%.3f", a.RatioNoOp), "", nil)
			row("Ansible no-op requests (reads/writes)", fmt.Sprintf("%d/%d", a.NoOpRequests.Reads, a.NoOpRequests.Writes), "", nil)
		}
	}
	for _, p := range r.Models {
		row(fmt.Sprintf("scale: %d external models", p.Models),
			fmt.Sprintf("%s, %d reads, %d writes, peak RSS %.1f MiB, CPU %.1f s", sec(p.Wall), p.Reads, p.Writes, float64(p.PeakRSSBytes)/(1<<20), p.CPUSeconds), "", nil)
		if len(p.Phases) > 0 {
			row(fmt.Sprintf("scale: %d models, maasctl's applies by kind", p.Models), phasesText(p.Phases), "", nil)
		}
	}
	linearityRows(row, "scale", r.Linearity)
	for _, p := range r.Migrate {
		row(fmt.Sprintf("migrate tiers: %d annotated models", p.Models),
			fmt.Sprintf("%s, %d reads, %d writes (%.1f per model), peak RSS %.1f MiB, CPU %.1f s; %d governed by a MaaSSubscription (setup %s, not counted)",
				sec(p.Wall), p.Reads, p.Writes, p.RequestsPerModel, float64(p.PeakRSSBytes)/(1<<20), p.CPUSeconds, p.Governed, sec(p.Setup)), "", nil)
	}
	linearityRows(row, "migrate tiers", r.MigrateLinearity)
	row("machine", fmt.Sprintf("%d CPUs, %s, load before %s, after %s", r.Machine.CPUs, r.Machine.GoVersion, r.Machine.LoadBefore, r.Machine.LoadAfter), "", nil)
	for _, e := range r.Errors {
		row("error", e, "", nil)
	}
	return tw.Flush()
}

// linearityRows are the rows of a fit: per model by least squares, the
// last interval over the first, and each interval.
func linearityRows(row func(name, value, target string, met *bool), what string, l *Linearity) {
	if l == nil {
		return
	}
	yes := func(b bool) *bool { return &b }
	row(what+": wall time per model (least squares)", fmt.Sprintf("%.1f ms, R² %.3f", float64(l.WallPerModel), l.WallR2), "linear", yes(l.WallR2 >= 0.95))
	row(what+": requests per model (least squares)", fmt.Sprintf("%.1f, R² %.3f", l.RequestsPerModel, l.RequestsR2), "linear", yes(l.RequestsR2 >= 0.95))
	if l.MarginalRatio > 0 {
		row(what+": time per model, last interval ÷ first", fmt.Sprintf("%.2f", l.MarginalRatio), "≈ 1", nil)
	}
	var parts []string
	for _, iv := range l.Intervals {
		parts = append(parts, fmt.Sprintf("%d→%d: %.1f ms, %.1f requests", iv.From, iv.To, float64(iv.WallPerModel), iv.RequestsPerModel))
	}
	if len(parts) > 0 {
		row(what+": per added model, by interval", strings.Join(parts, "; "), "", nil)
	}
}

// WriteJSON writes the results to path, indented.
func (r *Results) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
