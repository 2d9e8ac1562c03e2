package steps

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps/engine"
	"github.com/maasctl/maasctl/vault"
)

// StepState is a step's state as status reports it.
type StepState string

// Step states.
const (
	// StateDone: the checkpoint matches the current inputs and the live
	// Check passes.
	StateDone StepState = "done"
	// StatePending: never run, or its inputs changed since it ran.
	StatePending StepState = "pending"
	// StateDrifted: it ran, but the live state no longer matches.
	StateDrifted StepState = "drifted"
	// StateFailed: its last run failed.
	StateFailed StepState = "failed"
	// StateUnknown: the live Check could not be evaluated (for example
	// Vault is not reachable for the steps that need the password).
	StateUnknown StepState = "unknown"
)

// StepStatus is one step's state, from its checkpoint checked against the
// live state, and what an install run would do with it.
type StepStatus struct {
	ID    string    `json:"id"`
	Title string    `json:"title"`
	State StepState `json:"state"`
	// Detail says what is not as wanted (from the step's Check), or why the
	// state could not be known. Never a secret.
	Detail string `json:"detail,omitempty"`
	// Selected is false when --only/--skip/--from leave the step out.
	Selected bool `json:"selected"`
	// WouldRun is true when an install run would apply the step; Reason
	// says why (not done, inputs changed, drifted, last run failed).
	WouldRun bool   `json:"wouldRun"`
	Reason   string `json:"reason,omitempty"`
	// LastRun is the step's checkpoint, if any.
	LastRun *Checkpoint `json:"lastRun,omitempty"`
}

// evaluate computes every step's StepStatus in dependency order, running
// the read-only Checks a few at a time.
func (r *Runner) evaluate(ctx context.Context) ([]StepStatus, error) {
	order, err := r.Registry.TopoOrder()
	if err != nil {
		return nil, err
	}
	out := make([]StepStatus, len(order))
	inParallel(len(order), 4, func(i int) { out[i] = r.stepStatus(ctx, order[i]) })
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// stepStatus mirrors Runner.runStep's decision without applying anything.
func (r *Runner) stepStatus(ctx context.Context, s *Step) StepStatus {
	st := StepStatus{ID: s.ID, Title: s.Title, Selected: len(r.Steps) == 0 || r.Steps[s.ID]}
	cp, hasCP := r.Checkpoints.Get(s.ID)
	if hasCP {
		c := cp
		st.LastRun = &c
	}
	hashSame := hasCP && cp.InputHash == r.InputHash(s)
	live, msg, err := s.check(ctx, r.Env)
	if m := r.droppedMessage(s); m != "" && err == nil {
		if live {
			live, msg = false, m
		} else {
			msg += "; " + m
		}
	}
	checkErr := ""
	switch {
	case errors.Is(err, ErrPasswordNotInVault):
		// Not an error: install generates it, so the step is simply not
		// done.
		live, msg = false, err.Error()
	case err != nil:
		checkErr = "check failed: " + err.Error()
	}
	switch {
	case hasCP && cp.Result == "failed":
		st.State, st.Reason = StateFailed, "last run failed"
		st.Detail = msg
		if checkErr != "" {
			st.Detail = checkErr
		}
		if cp.Error != "" {
			// What the failed run said, then what the Check sees now.
			now := st.Detail
			st.Detail = "the last run's error: " + cp.Error
			if now != "" {
				st.Detail += "; now: " + now
			}
		}
	case checkErr != "":
		st.State, st.Detail, st.Reason = StateUnknown, checkErr, "live state cannot be checked"
	case hasCP && cp.Result == engine.ResultApplying:
		st.State, st.Reason = StatePending, "a run re-applying it stopped before it finished; the next install applies it again"
		st.Detail = msg
	case !hasCP || cp.Result != "done":
		st.State, st.Reason = StatePending, "not done"
		st.Detail = msg
		if live {
			st.Detail = "live state already as wanted, but no step run recorded"
		}
	case !live:
		st.State, st.Detail, st.Reason = StateDrifted, msg, "drifted: "+msg
		if !hashSame {
			st.Reason = "inputs changed; drifted: " + msg
		}
	case !hashSame:
		st.State, st.Reason = StatePending, "inputs changed"
		st.Detail = "inventory or maasctl version changed since the last run"
	default:
		st.State = StateDone
	}
	st.WouldRun = st.Selected && st.State != StateDone
	if !st.WouldRun {
		st.Reason = ""
		if !st.Selected && st.State != StateDone {
			st.Reason = "not selected"
		}
	}
	return st
}

// ErrPasswordNotInVault means the database password does not exist in
// Vault yet; install generates it.
var ErrPasswordNotInVault = errors.New("the database password is not in Vault yet (install generates it)")

// ReadOnlySecrets is a Secrets for status, plan and diff: it reads the
// database password from Vault and never creates it. A nil Client means
// Vault is not configured; Err then says why.
type ReadOnlySecrets struct {
	Client *vault.Client
	Inv    *inventory.Inventory
	// Err is returned by DBPassword when Client is nil.
	Err error

	mu sync.Mutex
	pw string
}

// DBPassword implements Secrets without writing.
func (s *ReadOnlySecrets) DBPassword(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pw != "" {
		return s.pw, nil
	}
	if s.Client == nil {
		if s.Err != nil {
			return "", fmt.Errorf("vault not available: %w", s.Err)
		}
		return "", errors.New("vault not available")
	}
	data, found, err := s.Client.ReadSecret(ctx, s.Inv.Database.VaultPath)
	if err != nil {
		return "", err
	}
	if !found || data["password"] == "" {
		return "", ErrPasswordNotInVault
	}
	s.pw = data["password"]
	return s.pw, nil
}

// OperatorStatus is one OLM operator as installed on the cluster.
type OperatorStatus struct {
	Step      string `json:"step"`
	Package   string `json:"package"`
	Namespace string `json:"namespace"`
	Channel   string `json:"channel"`
	// InstalledCSV is the Subscription's status.installedCSV, empty when
	// the Subscription does not exist (Detail says so).
	InstalledCSV string `json:"installedCSV,omitempty"`
	// Version is the CSV's spec.version; Phase its status.phase.
	Version string `json:"version,omitempty"`
	Phase   string `json:"phase,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// RunTimes summarises the recorded step runs: the earliest start, the
// latest end and the sum of step durations.
type RunTimes struct {
	FirstStart time.Time     `json:"firstStart"`
	LastEnd    time.Time     `json:"lastEnd"`
	StepTime   time.Duration `json:"stepTimeNs"`
	Steps      int           `json:"steps"`
}

// StatusReport is what 'maasctl status' shows.
type StatusReport struct {
	// Against names the inventory the cluster is compared against.
	Against   string           `json:"inventory,omitempty"`
	Steps     []StepStatus     `json:"steps"`
	Operators []OperatorStatus `json:"operators"`
	// Endpoint is the OpenAI-compatible base URL clients use.
	Endpoint string `json:"endpoint"`
	// EndpointProblem, when set, says why clients cannot reach Endpoint
	// (the passthrough Route that publishes it is missing) and the fix.
	EndpointProblem string `json:"endpointProblem,omitempty"`
	// InstallCommand is the command that re-applies the inventory the
	// report compares against ("maasctl install -f site.yaml"); empty
	// when the report was not made through a session.
	InstallCommand string    `json:"installCommand,omitempty"`
	LastRun        *RunTimes `json:"lastRun,omitempty"`
	// Uninstalled, when set, says a finished 'maasctl uninstall' removed
	// MaaS and kept what it lists (UninstalledConfigMap): the steps that
	// are pending were removed on purpose.
	Uninstalled *Uninstalled `json:"uninstalled,omitempty"`
	// Running, when set, is the maasctl run that holds the run Lease now:
	// its steps' states may change while it goes on.
	Running *RunningRun `json:"running,omitempty"`
}

// RunningRun is the run that holds the run Lease (engine.Holder).
type RunningRun struct {
	// Holder is the run's identity: user@host, pid and start time.
	Holder string `json:"holder"`
	// RenewTime is the Lease's last renewal; Expires is when it lapses
	// unless renewed again.
	RenewTime time.Time `json:"renewTime"`
	Expires   time.Time `json:"expires"`
}

// Status reports every step's state (done, pending, drifted, failed) from
// the checkpoints checked against live state, the installed CSV of each
// operator, the endpoint URL and the recorded run timings. It changes
// nothing and takes no lock.
func Status(ctx context.Context, o PlanOptions) (*StatusReport, error) {
	r, err := newReadOnlyRunner(ctx, o)
	if err != nil {
		return nil, err
	}
	sts, err := r.evaluate(ctx)
	if err != nil {
		return nil, err
	}
	rep := &StatusReport{Steps: sts, Against: o.Against, Endpoint: "https://" + r.Env.Facts.Host + "/v1", Uninstalled: r.Record.Uninstalled()}
	// A report without it is still right about what it read: the Lease
	// only says whether the states may change under it.
	if h, err := engine.Holder(ctx, r.Env.Clients.Kube, time.Now()); err == nil && h != nil {
		rep.Running = &RunningRun{Holder: h.Holder, RenewTime: h.RenewTime, Expires: h.Expires}
	}
	if g := o.Inventory.Gateway; g.CreateRoute {
		rep.EndpointProblem, err = routeProblem(ctx, r.Env, g.Namespace, g.RouteName)
		if err != nil {
			return nil, err
		}
	}
	for _, s := range sts {
		if s.LastRun == nil {
			continue
		}
		end := s.LastRun.StartedAt.Add(time.Duration(s.LastRun.DurationMS) * time.Millisecond)
		if rep.LastRun == nil {
			rep.LastRun = &RunTimes{FirstStart: s.LastRun.StartedAt, LastEnd: end}
		}
		if s.LastRun.StartedAt.Before(rep.LastRun.FirstStart) {
			rep.LastRun.FirstStart = s.LastRun.StartedAt
		}
		if end.After(rep.LastRun.LastEnd) {
			rep.LastRun.LastEnd = end
		}
		rep.LastRun.StepTime += time.Duration(s.LastRun.DurationMS) * time.Millisecond
		rep.LastRun.Steps++
	}
	ops := []struct {
		step string
		op   inventory.Operator
	}{{"database/operator", o.Inventory.Database.Operator}}
	for _, op := range o.Inventory.Operators {
		ops = append(ops, struct {
			step string
			op   inventory.Operator
		}{"operators/" + op.ID, op})
	}
	for _, x := range ops {
		os, err := operatorStatus(ctx, r.Env, x.step, x.op)
		if err != nil {
			return nil, err
		}
		rep.Operators = append(rep.Operators, os)
	}
	return rep, nil
}

func operatorStatus(ctx context.Context, e *Env, step string, op inventory.Operator) (OperatorStatus, error) {
	st := OperatorStatus{Step: step, Package: op.Package, Namespace: op.Namespace, Channel: op.Channel}
	ri, _, err := e.Clients.Resource(subscriptionGVK, op.Namespace)
	if err != nil {
		st.Detail = err.Error()
		return st, nil
	}
	sub, err := ri.Get(ctx, op.Package, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		st.Detail = "no Subscription"
		if step == "database/operator" {
			if ok, _ := crdServed(ctx, e, cnpgCRD); ok {
				st.Detail = "no Subscription; " + cnpgCRD + " is served (installed another way)"
			}
		}
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("get Subscription %s/%s: %w", op.Namespace, op.Package, err)
	}
	st.Channel, _, _ = unstructured.NestedString(sub.Object, "spec", "channel")
	st.InstalledCSV, _, _ = unstructured.NestedString(sub.Object, "status", "installedCSV")
	if st.InstalledCSV == "" {
		st.Detail = "Subscription " + subscriptionInstalled(sub).Status
		return st, nil
	}
	cri, _, err := e.Clients.Resource(csvGVK, op.Namespace)
	if err != nil {
		return st, err
	}
	csv, err := cri.Get(ctx, st.InstalledCSV, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		st.Detail = "CSV " + st.InstalledCSV + " missing"
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("get CSV %s/%s: %w", op.Namespace, st.InstalledCSV, err)
	}
	st.Version, _, _ = unstructured.NestedString(csv.Object, "spec", "version")
	st.Phase, _, _ = unstructured.NestedString(csv.Object, "status", "phase")
	return st, nil
}

// routeProblem says why the endpoint is unreachable when the passthrough
// Route ns/name that publishes it does not exist ("" when it does).
func routeProblem(ctx context.Context, e *Env, ns, name string) (string, error) {
	ri, _, err := e.Clients.Resource(verify.RouteGVK, ns)
	if err != nil {
		return fmt.Sprintf("Route %s/%s cannot be read (%v); run maasctl install", ns, name, err), nil
	}
	_, err = ri.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the passthrough Route %s/%s does not exist, so clients cannot reach it; run maasctl install (maasctl doctor: MAAS-D022)", ns, name), nil
	case err != nil:
		return "", fmt.Errorf("read Route %s/%s: %w", ns, name, err)
	}
	return "", nil
}
