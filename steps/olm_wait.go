package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// waitOperator waits for the Subscription to install its CSV, the CSV to
// succeed, and the CSV's owned CRDs to be Established, and returns that CSV
// as its wait last saw it (without metadata.managedFields). "Not found yet" is
// progress, not an error (case B02 a). A Manual InstallPlan is approved only
// under Policy.ApproveInstallPlans and only when it installs the expected
// CSV; otherwise the step stops naming the plan and the command that
// approves it (case B02 b).
//
// A ResolutionFailed condition with reason ConstraintsNotSatisfiable (a
// channel without the package, a missing dependency, a conflict) fails the
// wait at once with OLM's message: OLM treats it as terminal and does not
// retry until something changes (operator-lifecycle-manager v0.46.0
// pkg/controller/operators/catalog/operator.go syncResolvingNamespace).
// stale is the message of a condition written for the Subscription's
// previous spec (staleResolution), which does not count; nor does one OLM
// wrote while it was binding a CSV it had just installed in the namespace
// (bindingPending, waitSubscription). Reason
// ErrorPreventedResolution (a catalog that cannot be read right now) is
// retried by OLM and only shown.
func waitOperator(ctx context.Context, e *Env, stepID string, op inventory.Operator, stale string) (*unstructured.Unstructured, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// As soon as the Subscription names the CSV it resolved
	// (status.currentCSV, written with the InstallPlan, long before the CSV
	// succeeds), that CSV and its CRDs are waited for beside the
	// Subscription: after OLM's last status write the step then ends on
	// one watch event instead of three waits set up one after another.
	var (
		mu   sync.Mutex
		spec *csvWait
	)
	speculate := func(obj *unstructured.Unstructured) {
		name, _, _ := unstructured.NestedString(obj.Object, "status", "currentCSV")
		mu.Lock()
		defer mu.Unlock()
		if name == "" || spec != nil {
			return
		}
		wctx, wcancel := context.WithCancel(ctx)
		w := startCSVWait(wctx, e, stepID, op, name)
		w.cancel = wcancel
		spec = w
		go func() {
			// A CSV that fails (phase Failed, below minVersion) ends the
			// step at once, even while the Subscription still waits;
			// unless the wait was dropped for another CSV.
			<-w.done
			if w.err != nil && wctx.Err() == nil {
				cancel(w.err)
			}
		}()
	}
	sub, err := waitSubscription(ctx, e, stepID, op, stale, speculate)
	if err != nil {
		return nil, err
	}
	csvName, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
	mu.Lock()
	w := spec
	mu.Unlock()
	if w == nil || w.name != csvName {
		// Nothing resolved early, or OLM installed another CSV than the
		// one it first named (an upgrade in flight): wait for this one.
		if w != nil {
			w.cancel()
		}
		w = startCSVWait(ctx, e, stepID, op, csvName)
	}
	<-w.done
	if w.err != nil {
		return nil, w.err
	}
	// No discovery reset: the waits for the CSV's owned CRDs gave the
	// Clients their REST mappings (waiters, kube.Clients.LearnCRD); a
	// kind served by another CRD (a dependency's) is looked up in a new
	// discovery read when it is first missed.
	e.Clients.ForgetMisses()
	e.progress(stepID, "%s installed", csvName)
	return w.csv, nil
}

// csvWait is a wait, started by startCSVWait, for a CSV to succeed (at
// least op's minVersion) and for the CRDs it owns to be Established.
type csvWait struct {
	name   string
	done   chan struct{}
	err    error
	csv    *unstructured.Unstructured // as the wait last saw it, once Succeeded (err nil)
	cancel context.CancelFunc         // of a speculative wait
}

// startCSVWait waits in the background for CSV name to succeed and for its
// owned CRDs to be Established; the CRD waits start as soon as the CSV is
// seen (its spec lists them), beside the wait for its phase.
//
// Once those CRDs are Established, a CSV that OLM still holds Pending
// because one of them was not is asked to be checked again
// (recheckRequirements).
func startCSVWait(ctx context.Context, e *Env, stepID string, op inventory.Operator, name string) *csvWait {
	w := &csvWait{name: name, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		var (
			once   sync.Once
			crdErr = make(chan error, 1)
			last   atomic.Pointer[unstructured.Unstructured]
		)
		crds := func(csv *unstructured.Unstructured) {
			names := ownedCRDs(csv)
			var ts []waiters.Target
			for _, n := range names {
				ts = append(ts, waiters.CRDEstablished(n))
			}
			if len(ts) > 0 {
				e.progress(stepID, "waiting for %d CRDs of %s to be Established", len(ts), name)
			}
			go func() {
				err := waiters.All(ctx, e.Clients, ts...)
				if err == nil && len(names) > 0 {
					go recheckRequirements(rctx, e, stepID, &last, names)
				}
				crdErr <- err
			}()
		}
		csvT := waiters.Target{
			GVK: csvGVK, Namespace: op.Namespace, Name: name,
			Cond: func(obj *unstructured.Unstructured) waiters.Result {
				last.Store(obj)
				once.Do(func() { crds(obj) })
				return csvSucceeded(obj)
			},
			OnChange: func(r waiters.Result) {
				if !r.Done {
					e.progress(stepID, "waiting for CSV %s: %s", name, r.Status)
				}
			},
		}
		csv, err := waiters.For(ctx, e.Clients, csvT)
		if err != nil {
			w.err = err
			return
		}
		if err := checkMinVersion(csv, op); err != nil {
			w.err = err
			return
		}
		once.Do(func() { crds(csv) })
		if w.err = <-crdErr; w.err == nil {
			w.csv = csv
		}
	}()
	return w
}

// subscriptionProgress is done when the Subscription installed its CSV, or
// when it waits for the approval of an InstallPlan not handled yet (the
// caller then decides). It fails when the referenced InstallPlan is gone
// (OLM does not replace it, operator-lifecycle-manager PR #1894) or failed.
// It judges by condition type and reason, never by message text.
//
// It fails at once on ResolutionFailed=True with reason
// ConstraintsNotSatisfiable unless its message is stale (see waitOperator).
func subscriptionProgress(handled map[string]bool, stale string) waiters.Condition {
	return func(obj *unstructured.Unstructured) waiters.Result {
		if c, ok := waiters.GetCondition(obj, "ResolutionFailed"); ok && c.Status == "True" && c.Reason == "ConstraintsNotSatisfiable" && (stale == "" || c.Message != stale) {
			ch, _, _ := unstructured.NestedString(obj.Object, "spec", "channel")
			pkg, _, _ := unstructured.NestedString(obj.Object, "spec", "name")
			return waiters.Result{Status: c.String(), Failed: &Problem{
				Message: fmt.Sprintf("OLM cannot resolve Subscription %s/%s (package %s, channel %s): ResolutionFailed (%s): %s", obj.GetNamespace(), obj.GetName(), pkg, ch, c.Reason, c.Message),
				Fix:     fmt.Sprintf("fix operators[].channel or the catalog (oc get subscription %s -n %s -o yaml), then re-run", obj.GetName(), obj.GetNamespace())}}
		}
		r := subscriptionInstalled(obj)
		if r.Done {
			return r
		}
		plan, _, _ := unstructured.NestedString(obj.Object, "status", "installPlanRef", "name")
		if c, ok := waiters.GetCondition(obj, "InstallPlanMissing"); ok && c.Status == "True" {
			return waiters.Result{Status: c.String(), Failed: &Problem{
				Message: fmt.Sprintf("the InstallPlan %s the Subscription references is gone (%s) and OLM will not create another", plan, c),
				Fix:     fmt.Sprintf("delete the Subscription (oc delete subscription %s -n %s) and re-run", obj.GetName(), obj.GetNamespace())}}
		}
		if c, ok := waiters.GetCondition(obj, "InstallPlanFailed"); ok && c.Status == "True" {
			return waiters.Result{Status: c.String(), Failed: &Problem{
				Message: fmt.Sprintf("InstallPlan %s failed (%s)", plan, c),
				Fix:     fmt.Sprintf("inspect it with 'oc get installplan %s -n %s -o yaml'", plan, obj.GetNamespace())}}
		}
		if c, ok := waiters.GetCondition(obj, "InstallPlanPending"); ok && c.Status == "True" && c.Reason == "RequiresApproval" && plan != "" && !handled[plan] {
			return waiters.Result{Done: true, Status: fmt.Sprintf("InstallPlan %s requires approval", plan)}
		}
		return r
	}
}

// approveInstallPlan handles the InstallPlan sub waits for: it approves it
// when the policy allows and its CSVs are exactly the expected CSV,
// otherwise it returns an error naming the plan, its CSVs and the fix.
func approveInstallPlan(ctx context.Context, e *Env, stepID string, op inventory.Operator, sub *unstructured.Unstructured, handled map[string]bool) error {
	name, _, _ := unstructured.NestedString(sub.Object, "status", "installPlanRef", "name")
	handled[name] = true
	ri, _, err := e.Clients.Resource(installPlanGVK, op.Namespace)
	if err != nil {
		return err
	}
	ip, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &Problem{Message: fmt.Sprintf("Subscription %s/%s waits for InstallPlan %s, which does not exist", op.Namespace, op.Package, name),
			Fix: "delete the Subscription and re-run"}
	}
	if err != nil {
		return fmt.Errorf("get InstallPlan %s/%s: %w", op.Namespace, name, err)
	}
	if approved, _, _ := unstructured.NestedBool(ip.Object, "spec", "approved"); approved {
		return nil
	}
	csvs, _, _ := unstructured.NestedStringSlice(ip.Object, "spec", "clusterServiceVersionNames")
	want, source := expectedCSV(ctx, e, op, sub)
	approveCmd := fmt.Sprintf(`oc patch installplan %s -n %s --type merge -p '{"spec":{"approved":true}}'`, name, op.Namespace)
	// The version policy first, on every CSV of the plan (a namespace's
	// plan may carry other Subscriptions' CSVs too): a denied version is
	// never approved, whoever expects it (case N04).
	problem := deniedInPlan(ctx, e, op, csvs)
	var own []string
	if problem == "" {
		own, problem = siblingCSVs(ctx, e, op, name, csvs)
	}
	if problem == "" {
		problem = installPlanProblem(own, want, source, op)
	}
	if problem != "" {
		return &Problem{
			Message: fmt.Sprintf("InstallPlan %s/%s (CSV %s) requires approval, and maasctl will not approve it: %s", op.Namespace, name, strings.Join(csvs, ", "), problem),
			Fix:     fmt.Sprintf("inspect it with 'oc get installplan %s -n %s -o yaml' and approve it by hand only if it is right (%s)", name, op.Namespace, approveCmd)}
	}
	if !e.Policy.ApproveInstallPlans {
		return &Problem{
			Message: fmt.Sprintf("InstallPlan %s/%s (CSV %s) requires approval (installPlanApproval Manual on this or another Subscription of namespace %s)", op.Namespace, name, strings.Join(csvs, ", "), op.Namespace),
			Fix:     fmt.Sprintf("run %s, or re-run with --approve-installplans", approveCmd)}
	}
	patch := []byte(`{"spec":{"approved":true}}`)
	if _, err := ri.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kube.FieldManager}); err != nil {
		return fmt.Errorf("approve InstallPlan %s/%s: %w", op.Namespace, name, err)
	}
	e.progress(stepID, "approved InstallPlan %s (CSV %s, the expected CSV from %s)", name, strings.Join(csvs, ", "), source)
	return nil
}

// deniedInPlan says why an InstallPlan installing csvs must not be
// approved under dependencyPolicy and the planned operators' minVersion
// (CodeDependencyVersionDenied), or "" when none of its CSVs is denied.
func deniedInPlan(ctx context.Context, e *Env, op inventory.Operator, csvs []string) string {
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		ops = slices.Clone(e.Inv.Operators)
	}
	ops = append([]inventory.Operator{op}, ops...)
	for _, c := range csvs {
		if p, fixTo := csvVersionProblem(c, ops); p != "" {
			return fmt.Sprintf("%s: it would install %s, and %s; upgrade to >= %s", CodeDependencyVersionDenied, c, p, fixTo)
		}
	}
	return ""
}

// siblingCSVs splits a namespace-wide InstallPlan: OLM resolves all
// Subscriptions of a namespace together, so one plan installs the CSVs of
// several of them (seen on the real catalog operator v0.46.0: CNPG and RHCL
// in openshift-operators, both Manual, share one plan). It returns the CSVs
// of plan that are op's own, and a problem when another CSV is not the
// expected CSV of another planned operator of the namespace whose
// Subscription references the same plan.
func siblingCSVs(ctx context.Context, e *Env, op inventory.Operator, plan string, csvs []string) ([]string, string) {
	if len(csvs) < 2 {
		return csvs, ""
	}
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return csvs, ""
	}
	sibling := map[string]bool{}
	for _, o := range ops {
		if o.Namespace != op.Namespace || o.Package == op.Package {
			continue
		}
		sub, err := operatorInstalled(ctx, e, o)
		if err != nil || sub == nil {
			continue
		}
		if ref, _, _ := unstructured.NestedString(sub.Object, "status", "installPlanRef", "name"); ref != plan {
			continue
		}
		want, source := expectedCSV(ctx, e, o, sub)
		for _, c := range csvs {
			if c == want {
				if p := installPlanProblem([]string{c}, want, source, o); p != "" {
					return csvs, p
				}
				sibling[c] = true
			}
		}
	}
	var own []string
	for _, c := range csvs {
		if !sibling[c] {
			own = append(own, c)
		}
	}
	return own, ""
}

// installPlanProblem says why an InstallPlan for csvs must not be
// approved: it installs anything but the expected CSV, or a version below
// the operator's minimum. Empty means it may be approved.
func installPlanProblem(csvs []string, want, source string, op inventory.Operator) string {
	if len(csvs) != 1 || csvs[0] != want {
		return fmt.Sprintf("the expected CSV is %s (%s)", want, source)
	}
	if p, fixTo := versionProblem(op.Package, versionFromCSVName(csvs[0]), op.MinVersion); p != "" {
		return fmt.Sprintf("%s: %s is not allowed: %s; upgrade to >= %s", CodeDependencyVersionDenied, csvs[0], p, fixTo)
	}
	return ""
}

// expectedCSV is the CSV an InstallPlan of op may install: the inventory's
// startingCSV, else the head of the pinned channel in the PackageManifest
// where that API is served, else the currentCSV OLM resolved from the
// channel. The second result names the source.
func expectedCSV(ctx context.Context, e *Env, op inventory.Operator, sub *unstructured.Unstructured) (string, string) {
	if op.StartingCSV != "" {
		return op.StartingCSV, "operators[" + op.ID + "].startingCSV"
	}
	if pm, err := getOptional(ctx, e.Clients, packageManifestGVK, op.SourceNamespace, op.Package); err == nil && pm != nil {
		if head := channelHead(pm, op.Channel); head != "" {
			return head, "the head of channel " + op.Channel
		}
	}
	cur, _, _ := unstructured.NestedString(sub.Object, "status", "currentCSV")
	return cur, "channel " + op.Channel + " as resolved by OLM"
}

// waitSubscription waits until the Subscription of op has installed its
// CSV, approving an InstallPlan on the way when the policy allows it;
// speculate sees every state of the Subscription. A CSV wait that failed
// (the cause of ctx) ends it.
//
// A ResolutionFailed verdict given while OLM was binding a CSV it had just
// installed in the namespace (bindingPending), naming that CSV, is OLM's
// race, not a verdict on the Subscription: the wait then waits for that
// binding and gives OLM resolutionRetryWait to resolve the namespace
// again; the verdict stands only when OLM gives it again after the
// binding, or still shows it when that time is up. Known gap: a wait that
// first sees the verdict after the binding was written (OLM rewrites the
// condition only on its next resolution, seconds later) stops on it.
func waitSubscription(ctx context.Context, e *Env, stepID string, op inventory.Operator, stale string, speculate func(*unstructured.Unstructured)) (*unstructured.Unstructured, error) {
	handled := map[string]bool{} // InstallPlans already approved or inspected
	var (
		retried  = map[string]bool{} // verdicts given while OLM bound a CSV
		verdict  error               // the one the wait ignores until deadline
		deadline time.Time
	)
	for {
		progress := subscriptionProgress(handled, stale)
		subT := waiters.Target{
			GVK: subscriptionGVK, Namespace: op.Namespace, Name: op.Package,
			Cond: func(obj *unstructured.Unstructured) waiters.Result {
				speculate(obj)
				return progress(obj)
			},
			OnChange: func(r waiters.Result) {
				if !r.Done {
					e.progress(stepID, "waiting for Subscription %s/%s: %s", op.Namespace, op.Package, r.Status)
				}
			},
		}
		wctx, wcancel := ctx, context.CancelFunc(func() {})
		if verdict != nil {
			wctx, wcancel = context.WithDeadline(ctx, deadline)
		}
		s, err := waiters.For(wctx, e.Clients, subT)
		wcancel()
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil && cause != context.Canceled && cause != context.DeadlineExceeded {
				return nil, cause // the CSV's failure ended the wait
			}
			if verdict != nil && ctx.Err() == nil && waiters.IsTimeout(err) {
				if s == nil || resolutionFailedWith(s, stale) {
					return nil, verdict // OLM resolved nothing new after the binding
				}
				// OLM resolved again and is installing: no deadline.
				verdict = nil
				continue
			}
			var fe *waiters.FailedError
			if errors.As(err, &fe) && s != nil {
				msg, pending, perr := resolutionDuringBinding(ctx, e, op.Namespace, s, stale)
				if perr != nil {
					return nil, perr
				}
				if len(pending) > 0 && !retried[msg] {
					retried[msg] = true
					e.progress(stepID, "OLM could not resolve namespace %s while it was binding %s; waiting for the binding and OLM's next resolution", op.Namespace, describeBindings(pending))
					if werr := waitBound(ctx, e, op.Namespace, pending); werr != nil {
						return nil, werr
					}
					stale, verdict, deadline = msg, err, time.Now().Add(resolutionRetryWait)
					continue
				}
			}
			return nil, err
		}
		verdict = nil
		if subscriptionInstalled(s).Done {
			return s, nil
		}
		if err := approveInstallPlan(ctx, e, stepID, op, s, handled); err != nil {
			return nil, err
		}
	}
}

// resolutionRetryWait is how long, after OLM bound the CSVs it was binding
// when it failed to resolve a namespace, a Subscription's wait gives OLM
// to resolve that namespace again before the failure stands.
var resolutionRetryWait = time.Minute

// pendingBinding is a CSV that an InstallPlan of Subscription Sub created
// and that OLM has not bound to Sub yet.
type pendingBinding struct{ Sub, CSV string }

// bindingPending returns the Subscriptions of subs whose status.currentCSV
// names a CSV of csvs (not a copy) that their status.installedCSV does not
// name yet. OLM's catalog operator writes currentCSV with the InstallPlan
// and installedCSV only after that plan created the CSV; a resolution of
// the namespace in between finds a CSV no Subscription's installedCSV
// names, which must then appear in every solution, and fails with
// ConstraintsNotSatisfiable ("clusterserviceversion ... exists and is not
// referenced by a subscription"). Once installedCSV is written OLM resolves
// the namespace again (operator-lifecycle-manager v0.46.0
// pkg/controller/registry/resolver/variable_types.go
// NewBundleVariableFromOperator, resolver.go). Seen with the real OLM on a
// loaded machine when two Subscriptions of one namespace were created a
// second apart: both failed, and OLM installed both 40 s later. An orphan
// CSV (case B20) is named by no Subscription's currentCSV, so it is never
// pending.
func bindingPending(subs, csvs []unstructured.Unstructured) []pendingBinding {
	exists := map[string]bool{}
	for _, c := range csvs {
		if c.GetLabels()["olm.copiedFrom"] == "" {
			exists[c.GetName()] = true
		}
	}
	var out []pendingBinding
	for _, s := range subs {
		cur, _, _ := unstructured.NestedString(s.Object, "status", "currentCSV")
		inst, _, _ := unstructured.NestedString(s.Object, "status", "installedCSV")
		if cur != "" && cur != inst && exists[cur] {
			out = append(out, pendingBinding{Sub: s.GetName(), CSV: cur})
		}
	}
	return out
}

func describeBindings(p []pendingBinding) string {
	parts := make([]string, len(p))
	for i, b := range p {
		parts[i] = fmt.Sprintf("CSV %s to Subscription %s", b.CSV, b.Sub)
	}
	return strings.Join(parts, ", ")
}

// resolutionDuringBinding returns, when sub's wait failed on its
// ResolutionFailed condition (ConstraintsNotSatisfiable, a message other
// than stale), the condition's message and the bindings pending in
// namespace ns whose CSV that message names (bindingPending; two reads);
// nothing otherwise. The CSV's name in OLM's message ties the failure to
// the binding: a failure of its own (a channel without the package) while
// another operator's CSV is being bound stops the run as before.
func resolutionDuringBinding(ctx context.Context, e *Env, ns string, sub *unstructured.Unstructured, stale string) (string, []pendingBinding, error) {
	c, ok := waiters.GetCondition(sub, "ResolutionFailed")
	if !ok || c.Status != "True" || c.Reason != "ConstraintsNotSatisfiable" || c.Message == stale {
		return "", nil, nil
	}
	var lists [2][]unstructured.Unstructured
	for i, gvk := range []schema.GroupVersionKind{subscriptionGVK, csvGVK} {
		ri, _, err := e.Clients.Resource(gvk, ns)
		if err != nil {
			return "", nil, err
		}
		l, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", nil, fmt.Errorf("list %ss in %s: %w", gvk.Kind, ns, err)
		}
		lists[i] = l.Items
	}
	return c.Message, namedIn(bindingPending(lists[0], lists[1]), c.Message), nil
}

// namedIn returns the bindings of p whose CSV msg names.
func namedIn(p []pendingBinding, msg string) []pendingBinding {
	var out []pendingBinding
	for _, b := range p {
		if strings.Contains(msg, b.CSV) {
			out = append(out, b)
		}
	}
	return out
}

// resolutionFailedWith reports whether sub's ResolutionFailed condition is
// True with message msg.
func resolutionFailedWith(sub *unstructured.Unstructured, msg string) bool {
	c, ok := waiters.GetCondition(sub, "ResolutionFailed")
	return ok && c.Status == "True" && c.Message == msg
}

// waitBound waits until OLM has bound each pending CSV to its Subscription
// (status.installedCSV), or the Subscription names another CSV now.
func waitBound(ctx context.Context, e *Env, ns string, pending []pendingBinding) error {
	ts := make([]waiters.Target, len(pending))
	for i, b := range pending {
		ts[i] = waiters.Target{GVK: subscriptionGVK, Namespace: ns, Name: b.Sub, Cond: func(u *unstructured.Unstructured) waiters.Result {
			cur, _, _ := unstructured.NestedString(u.Object, "status", "currentCSV")
			inst, _, _ := unstructured.NestedString(u.Object, "status", "installedCSV")
			return waiters.Result{Done: inst == b.CSV || cur != b.CSV, Status: fmt.Sprintf("OLM binding CSV %s (installedCSV %q)", b.CSV, inst)}
		}}
	}
	return waiters.All(ctx, e.Clients, ts...)
}

// requirementsRecheckAnnotation is the annotation recheckRequirements
// writes on a CSV to make OLM check its requirements again; the value is
// the time of the request (RFC 3339), so each request is a change.
const requirementsRecheckAnnotation = "maasctl.io/requirements-recheck-requested-at"

// recheckGrace is how long a CSV may stay Pending on CRDs that are all
// Established before recheckRequirements asks OLM to look again (OLM
// itself takes milliseconds when it looks); recheckInterval is the time
// between further requests, at most maxRechecks in all.
const (
	recheckGrace    = 5 * time.Second
	recheckInterval = 30 * time.Second
	maxRechecks     = 5
)

// recheckRequirements asks OLM to check the requirements of a CSV again
// when OLM judged them while one of its owned CRDs (established, which the
// caller has seen Established) was not yet Established, and the CSV still
// says so recheckGrace after maasctl saw them all Established. OLM v0.46.0
// checks a CSV's CRDs with a live read (pkg/controller/operators/olm/
// requirements.go: PresentNotAvailable while Established is not True) and
// leaves the CSV Pending with reason RequirementsNotMet; it retries a
// failed sync only 8 times, within about 1.3 s (pkg/lib/queueinformer/
// queueinformer_operator.go processNextWorkItem: requeues < 8), then needs
// an event to look again. Usually one comes at once; on the local control
// plane, three e2e tests at a time (2026-12-06), a CRD took 21 s from its
// creation to Established and the Leader Worker Set CSV then stayed
// Pending for 3 min 52 s, 4 min 22 s and 4 min 3 s in three of seven runs
// of TestB04LegacyKServeSwitchKept; in the last, an annotation written by
// hand ended it within 3 s. An annotation (requirementsRecheckAnnotation)
// is a change OLM's CSV informer queues at once. last holds the CSV as the
// wait last saw it; nothing is written while it is not stuck so, and at
// most maxRechecks times.
func recheckRequirements(ctx context.Context, e *Env, stepID string, last *atomic.Pointer[unstructured.Unstructured], established []string) {
	t := time.NewTimer(recheckGrace)
	defer t.Stop()
	for n := 0; n < maxRechecks; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(recheckInterval)
		csv := last.Load()
		crds := pendingOnEstablishedCRDs(csv, established)
		if len(crds) == 0 {
			continue
		}
		n++
		e.progress(stepID, "CSV %s is Pending (RequirementsNotMet): OLM saw CRD %s before it was Established and has stopped retrying (it looks again on the CSV's next change or its resync); asking OLM to check again (annotation %s)",
			csv.GetName(), strings.Join(crds, ", "), requirementsRecheckAnnotation)
		if err := annotate(ctx, e, csv, map[string]string{requirementsRecheckAnnotation: time.Now().UTC().Format(time.RFC3339Nano)}); err != nil {
			if ctx.Err() == nil {
				e.progress(stepID, "could not ask OLM to check CSV %s again (%v); it looks again on the CSV's next change or its resync", csv.GetName(), err)
			}
			return
		}
	}
}

// pendingOnEstablishedCRDs returns the CRDs that CSV csv's requirement
// status reports as not available, when the CSV is Pending with reason
// RequirementsNotMet and every requirement it reports unmet is a CRD among
// established; otherwise (another requirement unmet, another phase, no
// CSV) nil.
func pendingOnEstablishedCRDs(csv *unstructured.Unstructured, established []string) []string {
	if csv == nil {
		return nil
	}
	phase, _, _ := unstructured.NestedString(csv.Object, "status", "phase")
	reason, _, _ := unstructured.NestedString(csv.Object, "status", "reason")
	if phase != "Pending" || reason != "RequirementsNotMet" {
		return nil
	}
	reqs, _, _ := unstructured.NestedSlice(csv.Object, "status", "requirementStatus")
	var out []string
	for _, r := range reqs {
		m, _ := r.(map[string]any)
		if st, _ := m["status"].(string); st == "Present" {
			continue
		}
		kind, _ := m["kind"].(string)
		name, _ := m["name"].(string)
		if kind != "CustomResourceDefinition" || !slices.Contains(established, name) {
			return nil
		}
		out = append(out, name)
	}
	return out
}
