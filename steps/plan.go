package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/suggest"
	"github.com/maasctl/maasctl/inventory"
)

// ErrUnknownStep is wrapped by UnknownStepError.
var ErrUnknownStep = errors.New("unknown step")

// UnknownStepError names step IDs given to --only, --skip or --from that the
// registry does not have, and lists the valid ones.
type UnknownStepError struct {
	Flag  string
	IDs   []string
	Valid []string
}

func (e *UnknownStepError) Error() string {
	// A typo gets a "did you mean": the nearest step ID or phase name.
	names := slices.Clone(e.Valid)
	for _, id := range e.Valid {
		if ph, _, ok := strings.Cut(id, "/"); ok && !slices.Contains(names, ph) {
			names = append(names, ph)
		}
	}
	var hints []string
	for _, id := range e.IDs {
		if near, ok := suggest.Closest(id, names); ok && len(e.IDs) == 1 {
			hints = append(hints, "did you mean "+near+"?")
		} else if ok {
			hints = append(hints, fmt.Sprintf("%s: did you mean %s?", id, near))
		}
	}
	hint := ""
	if len(hints) > 0 {
		hint = " (" + strings.Join(hints, "; ") + ")"
	}
	return fmt.Sprintf("%s: %s %s%s; valid steps (or a phase name such as platform): %s",
		e.Flag, ErrUnknownStep, strings.Join(e.IDs, ", "), hint, strings.Join(e.Valid, ", "))
}

// Unwrap returns ErrUnknownStep.
func (e *UnknownStepError) Unwrap() error { return ErrUnknownStep }

// Selection is the subset of a registry's steps a run executes: --only,
// --skip and --from, as kubeadm's phase runner derives --skip-phases from
// its phase list. Each value is a step ID (platform/gateway) or a phase name
// (platform) meaning every step of that phase.
type Selection struct {
	// Only keeps just these steps.
	Only []string
	// Skip leaves these steps out.
	Skip []string
	// From starts at this step: it and every step after it in dependency
	// order run, the ones before it must be done already.
	From string
}

// Empty reports whether the selection is the whole registry.
func (s Selection) Empty() bool { return len(s.Only) == 0 && len(s.Skip) == 0 && s.From == "" }

// Resolve returns the selected step IDs, or nil for all steps. Unknown IDs
// are an *UnknownStepError; a selection that leaves no step is an error.
func (s Selection) Resolve(reg *Registry) (map[string]bool, error) {
	if s.Empty() {
		return nil, nil
	}
	order, err := reg.TopoOrder()
	if err != nil {
		return nil, err
	}
	sel, err := s.narrow(newStepIndex(reg, order))
	if err != nil {
		return nil, err
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("--only/--skip/--from select no step")
	}
	// Steps that run on every run (Step.EveryRun: preflight's read-only
	// checks) guard every run: they stay in unless skipped by name or
	// phase.
	skipped := map[string]bool{}
	for _, v := range s.Skip {
		skipped[strings.TrimSpace(v)] = true
	}
	for _, st := range order {
		if st.EveryRun && !skipped[st.ID] && !skipped[st.Phase()] {
			sel[st.ID] = true
		}
	}
	return sel, nil
}

// DependencyError says that selected steps depend on steps that are neither
// selected nor done, so running them alone would fail or act on a cluster
// that is not ready for them.
type DependencyError struct {
	// Missing maps a selected step to its dependencies that are not done,
	// each with the reason.
	Missing map[string][]string
}

func (e *DependencyError) Error() string {
	var ids []string
	for id := range e.Missing {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	b.WriteString("the selected steps depend on steps that are not done:")
	var need []string
	seen := map[string]bool{}
	for _, id := range ids {
		for _, m := range e.Missing[id] {
			fmt.Fprintf(&b, "\n  %s needs %s", id, m)
			dep, _, _ := strings.Cut(m, " ")
			if !seen[dep] {
				seen[dep] = true
				need = append(need, dep)
			}
		}
	}
	fmt.Fprintf(&b, "\nrun them first (maasctl install --only %s) or select them too; nothing was changed", strings.Join(need, ","))
	return b.String()
}

// checkDependencies verifies that every dependency of a selected step that
// is not itself selected is done: its checkpoint says done and its live
// Check passes.
func (r *Runner) checkDependencies(ctx context.Context, selected []*Step) error {
	if len(r.Steps) == 0 {
		return nil
	}
	checked := map[string]string{} // dep -> "" when done, else the reason
	missing := map[string][]string{}
	for _, s := range selected {
		for _, d := range s.After {
			if r.Steps[d] {
				continue
			}
			why, ok := checked[d]
			if !ok {
				why = r.depNotDone(ctx, r.Registry.Get(d))
				checked[d] = why
			}
			if why != "" {
				missing[s.ID] = append(missing[s.ID], d+" ("+why+")")
			}
		}
	}
	if len(missing) > 0 {
		return &DependencyError{Missing: missing}
	}
	return nil
}

// depNotDone returns "" when d is done, else why not.
func (r *Runner) depNotDone(ctx context.Context, d *Step) string {
	cp, ok := r.Checkpoints.Get(d.ID)
	switch {
	case !ok:
		return "never run"
	case cp.Result != "done":
		return "last run " + cp.Result
	}
	live, msg, err := d.check(kube.ViewReads(ctx), r.Env)
	if (err != nil || !live) && r.Env.Clients.ViewOpen() {
		live, msg, err = d.check(ctx, r.Env) // as in recheck: a "no" is read now
	}
	switch {
	case err != nil:
		return "check failed: " + err.Error()
	case !live:
		return "drifted: " + msg
	}
	return ""
}

// PlanOptions are the inputs of Plan and Status.
type PlanOptions struct {
	Config    *rest.Config
	Inventory *inventory.Inventory
	// Secrets must not write; use ReadOnlySecrets.
	Secrets     Secrets
	ToolVersion string
	Selection   Selection
	// Registry is the steps to evaluate; nil means NewRegistry(Inventory).
	Registry *Registry
	// Against names Inventory for the report ("the inventory installed
	// from site.yaml at ..."); it is copied into the report.
	Against string
	// Log is the debug log (--log-file): one line per API request and
	// the steps' own debug lines. Nil: none.
	Log *zap.Logger
}

// PlanReport lists what an install run with the same inventory, tool version
// and selection would do.
type PlanReport struct {
	// Against names the inventory the cluster is compared against.
	Against string       `json:"inventory,omitempty"`
	Steps   []StepStatus `json:"steps"`
}

// Run returns the steps the run would apply.
func (p *PlanReport) Run() []StepStatus {
	var out []StepStatus
	for _, s := range p.Steps {
		if s.WouldRun {
			out = append(out, s)
		}
	}
	return out
}

// Plan reports which steps 'maasctl install' would execute and why (not
// done, inputs changed, drifted), reading the checkpoints and each step's
// live Check. It changes nothing and takes no lock.
func Plan(ctx context.Context, o PlanOptions) (*PlanReport, error) {
	r, err := newReadOnlyRunner(ctx, o)
	if err != nil {
		return nil, err
	}
	sel, err := o.Selection.Resolve(r.Registry)
	if err != nil {
		return nil, err
	}
	r.Steps = sel
	sts, err := r.evaluate(ctx)
	if err != nil {
		return nil, err
	}
	return &PlanReport{Steps: sts, Against: o.Against}, nil
}

// newReadOnlyRunner builds a Runner over the cluster's checkpoints that is
// only used to evaluate steps, never to run them.
func newReadOnlyRunner(ctx context.Context, o PlanOptions) (*Runner, error) {
	if err := o.Inventory.Validate(); err != nil {
		return nil, InvalidInventory(err)
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	clients, err := kube.NewWithOptions(o.Config, kube.Options{Log: o.Log})
	if err != nil {
		return nil, err
	}
	reg, err := registryFor(o.Registry, o.Inventory)
	if err != nil {
		return nil, err
	}
	env, err := NewEnvFor(ctx, clients, reg, o.Inventory, o.Secrets, o.Log)
	if err != nil {
		return nil, err
	}
	cps, rec, err := loadRunState(ctx, clients)
	if err != nil {
		return nil, err
	}
	// The record only answers Record.Dropped here; nothing is written.
	return &Runner{Registry: reg, Env: env, Checkpoints: cps, ToolVersion: o.ToolVersion, Record: rec}, nil
}

// stepIndex names the steps and phases a selection may give, in install
// order.
type stepIndex struct {
	reg    *Registry
	order  []*Step
	valid  []string
	phases map[string]bool
}

func newStepIndex(reg *Registry, order []*Step) *stepIndex {
	x := &stepIndex{reg: reg, order: order, phases: map[string]bool{}}
	for _, st := range order {
		x.valid = append(x.valid, st.ID)
		x.phases[st.Phase()] = true
	}
	return x
}

// expand turns step IDs and phase names into step IDs; an unknown one is
// an *UnknownStepError naming flag.
func (x *stepIndex) expand(flag string, vals []string) (map[string]bool, error) {
	out := map[string]bool{}
	var unknown []string
	for _, v := range vals {
		v = strings.TrimSpace(v)
		switch {
		case x.reg.Get(v) != nil:
			out[v] = true
		case x.phases[v]:
			for _, st := range x.order {
				if st.Phase() == v {
					out[st.ID] = true
				}
			}
		default:
			unknown = append(unknown, v)
		}
	}
	if len(unknown) > 0 {
		return nil, &UnknownStepError{Flag: flag, IDs: unknown, Valid: x.valid}
	}
	return out, nil
}

// narrow applies --from, then --only, then --skip to every step.
func (s Selection) narrow(x *stepIndex) (map[string]bool, error) {
	sel := map[string]bool{}
	for _, st := range x.order {
		sel[st.ID] = true
	}
	if s.From != "" {
		from, err := x.expand("--from", []string{s.From})
		if err != nil {
			return nil, err
		}
		started := false
		for _, st := range x.order {
			if from[st.ID] {
				started = true
			}
			if !started {
				delete(sel, st.ID)
			}
		}
	}
	if len(s.Only) > 0 {
		only, err := x.expand("--only", s.Only)
		if err != nil {
			return nil, err
		}
		for id := range sel {
			if !only[id] {
				delete(sel, id)
			}
		}
	}
	if len(s.Skip) > 0 {
		skip, err := x.expand("--skip", s.Skip)
		if err != nil {
			return nil, err
		}
		for id := range skip {
			delete(sel, id)
		}
	}
	return sel, nil
}
