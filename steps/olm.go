package steps

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/blang/semver/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// OLM kinds (operator-framework/api v0.45.0 crds/).
var (
	operatorGroupGVK = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1", Kind: "OperatorGroup"}
	subscriptionGVK  = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "Subscription"}
	installPlanGVK   = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "InstallPlan"}
	csvGVK           = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "ClusterServiceVersion"}
)

// olmInstall installs one operator through OLM: Namespace, an OperatorGroup
// (a compatible existing one is reused; OLM allows exactly one per
// namespace, case B02), the Subscription, then waits Subscription →
// InstallPlan → CSV Succeeded → every owned CRD Established.
func olmInstall(ctx context.Context, e *Env, s *Step, op inventory.Operator) error {
	stepID := s.ID
	objs := e.objects(stepID)
	ns, og, sub := objs[0], objs[1], objs[2]
	if err := ensureNamespace(ctx, e, stepID, ns); err != nil {
		return err
	}
	reuse, err := pickOperatorGroup(ctx, e, op)
	if err != nil {
		return err
	}
	if reuse == "" {
		if err := applyObjects(ctx, e, stepID, []*unstructured.Unstructured{og}); err != nil {
			return err
		}
	} else {
		e.progress(stepID, "reusing OperatorGroup %s/%s", op.Namespace, reuse)
	}
	prior, err := getOptional(ctx, e.Clients, subscriptionGVK, op.Namespace, op.Package)
	if err != nil {
		return err
	}
	if err := applyObjects(ctx, e, stepID, []*unstructured.Unstructured{sub}); err != nil {
		return err
	}
	stale, err := staleResolution(ctx, e, stepID, op, prior)
	if err != nil {
		return err
	}
	// The env goes in before OLM installs the CSV where it can, so the
	// operator's first pod already runs with it.
	want := envOf(e.Inv, op)
	if len(want) > 0 {
		if err := upsertSubscriptionEnv(ctx, e, stepID, sub, want); err != nil {
			return err
		}
	}
	if err := waitOperator(ctx, e, stepID, op, stale); err != nil {
		return err
	}
	if len(want) > 0 {
		return waitOperatorEnv(ctx, e, stepID, op, want)
	}
	return nil
}

// staleResolution returns the ResolutionFailed message OLM wrote for the
// Subscription's previous spec, "" when there is none or the apply did not
// change the spec. prior is the Subscription as read before the apply (nil
// when it did not exist). Once maasctl changed the spec (a new channel:
// metadata.generation moved), that condition describes the old spec until
// OLM resolves the new one, so the wait must not fail on it; any other
// ResolutionFailed is OLM's verdict on what maasctl applied. When the
// channel changed, the step says that the installed CSV is not accepted
// until OLM resolves the new channel.
func staleResolution(ctx context.Context, e *Env, stepID string, op inventory.Operator, prior *unstructured.Unstructured) (string, error) {
	if prior == nil {
		return "", nil
	}
	now, err := getOptional(ctx, e.Clients, subscriptionGVK, op.Namespace, op.Package)
	if err != nil || now == nil || now.GetGeneration() == prior.GetGeneration() {
		return "", err
	}
	was, _, _ := unstructured.NestedString(prior.Object, "spec", "channel")
	installed, _, _ := unstructured.NestedString(prior.Object, "status", "installedCSV")
	if was != op.Channel && installed != "" {
		e.progress(stepID, "changed Subscription %s/%s channel %s → %s: waiting for OLM to install a CSV of %s (the installed %s does not count)",
			op.Namespace, op.Package, was, op.Channel, op.Channel, installed)
	}
	if c, ok := waiters.GetCondition(prior, "ResolutionFailed"); ok && c.Status == "True" {
		return c.Message, nil
	}
	return "", nil
}

// pickOperatorGroup returns the name of a compatible OperatorGroup already in
// op's namespace, "" when there is none (the step creates one), or an error
// when the namespace has an incompatible one or several.
func pickOperatorGroup(ctx context.Context, e *Env, op inventory.Operator) (string, error) {
	ri, _, err := e.Clients.Resource(operatorGroupGVK, op.Namespace)
	if err != nil {
		return "", err
	}
	// From the watch cache (cachedList): an OperatorGroup made in the
	// milliseconds it trails etcd would make OLM fail the CSV with
	// TooManyOperatorGroups, which waitOperator reports at once.
	list, err := ri.List(ctx, cachedList(""))
	if err != nil {
		return "", fmt.Errorf("list OperatorGroups in %s: %w", op.Namespace, err)
	}
	var names []string
	for _, it := range list.Items {
		if it.GetName() == op.OperatorGroup && it.GetLabels()[assets.ManagedByLabel] == assets.ManagedByValue {
			// Our own from an earlier run: re-apply it.
			return "", nil
		}
		names = append(names, it.GetName())
	}
	switch len(list.Items) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("namespace %s has %d OperatorGroups (%s); OLM installs nothing there until only one is left: delete the extra ones with 'oc delete operatorgroup NAME -n %s'",
			op.Namespace, len(names), strings.Join(names, ", "), op.Namespace)
	}
	it := list.Items[0]
	targets, _, _ := unstructured.NestedStringSlice(it.Object, "spec", "targetNamespaces")
	_, hasSel, _ := unstructured.NestedMap(it.Object, "spec", "selector")
	allNS := len(targets) == 0 && !hasSel
	own := len(targets) == 1 && targets[0] == op.Namespace
	if (op.AllNamespaces && allNS) || (!op.AllNamespaces && (own || allNS)) {
		return it.GetName(), nil
	}
	want := "all namespaces"
	if !op.AllNamespaces {
		want = "namespace " + op.Namespace
	}
	return "", fmt.Errorf("OperatorGroup %s/%s targets %v, but %s needs one that targets %s: fix or delete it, then re-run",
		op.Namespace, it.GetName(), targets, op.Package, want)
}

// waitOperator waits for the Subscription to install its CSV, the CSV to
// succeed, and the CSV's owned CRDs to be Established. "Not found yet" is
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
// previous spec (staleResolution), which does not count. Reason
// ErrorPreventedResolution (a catalog that cannot be read right now) is
// retried by OLM and only shown.
func waitOperator(ctx context.Context, e *Env, stepID string, op inventory.Operator, stale string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	handled := map[string]bool{} // InstallPlans already approved or inspected
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
	var sub *unstructured.Unstructured
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
		s, err := waiters.For(ctx, e.Clients, subT)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil && cause != context.Canceled && cause != context.DeadlineExceeded {
				return cause // the CSV's failure ended the wait
			}
			return err
		}
		if subscriptionInstalled(s).Done {
			sub = s
			break
		}
		if err := approveInstallPlan(ctx, e, stepID, op, s, handled); err != nil {
			return err
		}
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
		return w.err
	}
	e.Clients.ResetMapper()
	e.progress(stepID, "%s installed", csvName)
	return nil
}

// csvWait is a wait, started by startCSVWait, for a CSV to succeed (at
// least op's minVersion) and for the CRDs it owns to be Established.
type csvWait struct {
	name   string
	done   chan struct{}
	err    error
	cancel context.CancelFunc // of a speculative wait
}

// startCSVWait waits in the background for CSV name to succeed and for its
// owned CRDs to be Established; the CRD waits start as soon as the CSV is
// seen (its spec lists them), beside the wait for its phase.
func startCSVWait(ctx context.Context, e *Env, stepID string, op inventory.Operator, name string) *csvWait {
	w := &csvWait{name: name, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var (
			once   sync.Once
			crdErr = make(chan error, 1)
		)
		crds := func(csv *unstructured.Unstructured) {
			var ts []waiters.Target
			for _, n := range ownedCRDs(csv) {
				ts = append(ts, waiters.CRDEstablished(n))
			}
			if len(ts) > 0 {
				e.progress(stepID, "waiting for %d CRDs of %s to be Established", len(ts), name)
			}
			go func() { crdErr <- waiters.All(ctx, e.Clients, ts...) }()
		}
		csvT := waiters.Target{
			GVK: csvGVK, Namespace: op.Namespace, Name: name,
			Cond: func(obj *unstructured.Unstructured) waiters.Result {
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
		w.err = <-crdErr
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
			return waiters.Result{Status: c.String(), Failed: fmt.Errorf("OLM cannot resolve Subscription %s/%s (package %s, channel %s): ResolutionFailed (%s): %s; fix operators[].channel or the catalog (oc get subscription %s -n %s -o yaml), then re-run",
				obj.GetNamespace(), obj.GetName(), pkg, ch, c.Reason, c.Message, obj.GetName(), obj.GetNamespace())}
		}
		r := subscriptionInstalled(obj)
		if r.Done {
			return r
		}
		plan, _, _ := unstructured.NestedString(obj.Object, "status", "installPlanRef", "name")
		if c, ok := waiters.GetCondition(obj, "InstallPlanMissing"); ok && c.Status == "True" {
			return waiters.Result{Status: c.String(), Failed: fmt.Errorf("the InstallPlan %s the Subscription references is gone (%s) and OLM will not create another: delete the Subscription (oc delete subscription %s -n %s) and re-run",
				plan, c, obj.GetName(), obj.GetNamespace())}
		}
		if c, ok := waiters.GetCondition(obj, "InstallPlanFailed"); ok && c.Status == "True" {
			return waiters.Result{Status: c.String(), Failed: fmt.Errorf("InstallPlan %s failed (%s): inspect it with 'oc get installplan %s -n %s -o yaml'", plan, c, plan, obj.GetNamespace())}
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
		return fmt.Errorf("Subscription %s/%s waits for InstallPlan %s, which does not exist: delete the Subscription and re-run", op.Namespace, op.Package, name)
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
		return fmt.Errorf("InstallPlan %s/%s (CSV %s) requires approval, and maasctl will not approve it: %s; inspect it with 'oc get installplan %s -n %s -o yaml' and approve it by hand only if it is right (%s)",
			op.Namespace, name, strings.Join(csvs, ", "), problem, name, op.Namespace, approveCmd)
	}
	if !e.Policy.ApproveInstallPlans {
		return fmt.Errorf("InstallPlan %s/%s (CSV %s) requires approval (installPlanApproval Manual on this or another Subscription of namespace %s): run %s, or re-run with --approve-installplans",
			op.Namespace, name, strings.Join(csvs, ", "), op.Namespace, approveCmd)
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

// subscriptionInstalled is done when the Subscription reports state
// AtLatestKnown and an installedCSV (OLM Subscription status,
// operator-framework/api SubscriptionStatus) of its channel: when
// spec.channel names a version (stable-3.5, stable-v1.0) the installed
// CSV's version (from its name, rhods-operator.3.4.4) must have that
// major.minor. Right after a channel change OLM still reports the old CSV
// AtLatestKnown until it resolves the new channel, and keeps doing so when
// the new channel has no upgrade path from it; neither is done. A channel
// without a version (stable, stable-v1) cannot be told apart this way:
// OLM has no observedGeneration on Subscriptions and the PackageManifest API
// is not served everywhere.
func subscriptionInstalled(obj *unstructured.Unstructured) waiters.Result {
	state, _, _ := unstructured.NestedString(obj.Object, "status", "state")
	installed, _, _ := unstructured.NestedString(obj.Object, "status", "installedCSV")
	current, _, _ := unstructured.NestedString(obj.Object, "status", "currentCSV")
	channel, _, _ := unstructured.NestedString(obj.Object, "spec", "channel")
	if c, ok := waiters.GetCondition(obj, "ResolutionFailed"); ok && c.Status == "True" {
		return waiters.Result{Status: c.String()}
	}
	if installed != "" && !csvOfChannel(installed, channel) {
		return waiters.Result{Status: fmt.Sprintf("state %s, installed CSV %s is not of channel %s (OLM has not installed the channel's CSV yet)", state, installed, channel)}
	}
	st := "state " + state
	if state == "" {
		st = "no state yet"
	}
	if current != "" {
		st += ", current CSV " + current
	}
	if c, ok := waiters.GetCondition(obj, "InstallPlanPending"); ok && c.Status == "True" {
		st += ", " + c.String()
	}
	return waiters.Result{Done: state == "AtLatestKnown" && installed != "", Status: st}
}

// csvOfChannel reports whether CSV name may belong to channel: true when
// the channel names no major.minor or the name carries no version, else
// whether the name's version has the channel's major.minor
// (rhods-operator.3.4.4 is not of stable-3.5).
func csvOfChannel(name, channel string) bool {
	want := versionFromChannel(channel)
	have := versionFromChannel(versionFromCSVName(name))
	return want == "" || have == "" || want == have
}

// csvSucceeded is done at phase Succeeded and fails at phase Failed
// (ClusterServiceVersionStatus.Phase, operator-framework/api).
func csvSucceeded(obj *unstructured.Unstructured) waiters.Result {
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	reason, _, _ := unstructured.NestedString(obj.Object, "status", "reason")
	msg, _, _ := unstructured.NestedString(obj.Object, "status", "message")
	st := fmt.Sprintf("phase %s (%s)", phase, reason)
	if msg != "" {
		st += ": " + msg
	}
	switch phase {
	case "Succeeded":
		return waiters.Result{Done: true, Status: st}
	case "Failed":
		return waiters.Result{Status: st, Failed: fmt.Errorf("CSV failed: %s; inspect with 'oc describe csv %s -n %s'", st, obj.GetName(), obj.GetNamespace())}
	}
	return waiters.Result{Status: st}
}

func ownedCRDs(csv *unstructured.Unstructured) []string {
	owned, _, _ := unstructured.NestedSlice(csv.Object, "spec", "customresourcedefinitions", "owned")
	var out []string
	seen := map[string]bool{}
	for _, o := range owned {
		m, _ := o.(map[string]any)
		if n, _ := m["name"].(string); n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// checkMinVersion rejects a CSV that the version policy refuses: a denied
// version of dependencyPolicy (RHCL 1.4.0 has a known auth bypass) or one
// below the policy's or op.MinVersion's minimum. The error starts with
// CodeDependencyVersionDenied.
func checkMinVersion(csv *unstructured.Unstructured, op inventory.Operator) error {
	_, policed := dependencyPolicy[op.Package]
	if op.MinVersion == "" && !policed {
		return nil
	}
	v, _, _ := unstructured.NestedString(csv.Object, "spec", "version")
	have, err := semver.ParseTolerant(v)
	if err != nil {
		return fmt.Errorf("CSV %s has no valid spec.version (%q)", csv.GetName(), v)
	}
	if op.MinVersion != "" {
		if _, err := semver.ParseTolerant(op.MinVersion); err != nil {
			return fmt.Errorf("operators[%s].minVersion %q: %w", op.ID, op.MinVersion, err)
		}
	}
	if p, fixTo := versionProblem(op.Package, have.String(), op.MinVersion); p != "" {
		return fmt.Errorf("%s: CSV %s/%s is installed and %s: upgrade to >= %s (approve an update to %s or later on Subscription %s/%s)",
			CodeDependencyVersionDenied, op.Namespace, csv.GetName(), p, fixTo, fixTo, op.Namespace, op.Package)
	}
	return nil
}

// checkOperator is the read-only Check of an OLM step.
func checkOperator(ctx context.Context, e *Env, s *Step, op inventory.Operator) (bool, string, error) {
	objs := e.objects(s.ID)
	if _, err := e.Clients.Get(ctx, objs[0]); err != nil {
		if apierrors.IsNotFound(err) {
			return false, "Namespace " + op.Namespace + " missing", nil
		}
		return false, "", err
	}
	ok, msg, err := checkLive(ctx, e, s, []*unstructured.Unstructured{objs[2]})
	if !ok || err != nil {
		return ok, msg, err
	}
	sub, err := e.Clients.Get(ctx, objs[2])
	if err != nil {
		return false, "", err
	}
	if r := subscriptionInstalled(sub); !r.Done {
		return false, "Subscription " + r.Status, nil
	}
	csvName, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
	ri, _, err := e.Clients.Resource(csvGVK, op.Namespace)
	if err != nil {
		return false, "", err
	}
	csv, err := ri.Get(ctx, csvName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "CSV " + csvName + " missing", nil
	}
	if err != nil {
		return false, "", err
	}
	if r := csvSucceeded(csv); !r.Done {
		return false, "CSV " + r.Status, nil
	}
	if err := checkMinVersion(csv, op); err != nil {
		return false, err.Error(), nil
	}
	for _, name := range ownedCRDs(csv) {
		crd, err := e.Clients.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).Get(ctx, name, metav1.GetOptions{})
		if err != nil || !waiters.ConditionTrue("Established")(crd).Done {
			return false, "CRD " + name + " not Established", nil
		}
	}
	if want := envOf(e.Inv, op); len(want) > 0 {
		if msg, err := checkOperatorEnv(ctx, e, op, sub, csv, want); msg != "" || err != nil {
			return false, msg, err
		}
	}
	return true, "", nil
}

func operatorStep(op inventory.Operator, title string, serves ...string) *Step {
	return &Step{
		ID: "operators/" + op.ID, Title: title, Serves: serves,
		Apply:   func(ctx context.Context, e *Env, s *Step) error { return olmInstall(ctx, e, s, op) },
		Check:   func(ctx context.Context, e *Env, s *Step) (bool, string, error) { return checkOperator(ctx, e, s, op) },
		Desired: func(ctx context.Context, e *Env, s *Step) ([]DesiredObject, error) { return olmDesired(ctx, e, s, op) },
		Render: func(inv *inventory.Inventory, _ assets.Facts, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
			docs, notes := olmRender(op, objs)
			if want := envOf(inv, op); len(want) > 0 && len(docs) > 0 {
				sub := docs[len(docs)-1].DeepCopy()
				env, _ := mergeEnv(nil, want)
				if err := unstructured.SetNestedSlice(sub.Object, env, "spec", "config", "env"); err != nil {
					return nil, nil, err
				}
				docs = append(docs[:len(docs)-1:len(docs)-1], sub)
				notes = append(notes, "spec.config.env: maasctl install upserts these entries by name and keeps the others; applied as a whole here, it replaces the list.")
			}
			return docs, notes, nil
		},
		Access: olmAccess(op),
	}
}

// olmDesired is the Desired of an OLM step: its Namespace (created only
// when missing), its OperatorGroup unless a compatible one is reused, and
// its Subscription.
func olmDesired(ctx context.Context, e *Env, s *Step, op inventory.Operator) ([]DesiredObject, error) {
	objs := e.objects(s.ID)
	out := desiredOf(objs[:1], true)
	reuse, err := pickOperatorGroup(ctx, e, op)
	switch {
	case err != nil && kube.IsNotServed(err):
		out = append(out, DesiredObject{Obj: objs[1], Note: "cannot be known: OperatorGroup is not served (is OLM installed?)"})
	case err != nil:
		out = append(out, DesiredObject{Obj: objs[1], Note: "the step would fail: " + err.Error()})
	case reuse == "":
		out = append(out, DesiredObject{Obj: objs[1]})
	}
	return append(out, DesiredObject{Obj: objs[2]}), nil
}

// olmRender renders an OLM step's Namespace, OperatorGroup and
// Subscription; in openshift-operators for all namespaces only the
// Subscription (OpenShift ships the rest).
func olmRender(op inventory.Operator, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string) {
	if len(objs) != 3 {
		return objs, nil
	}
	if op.Namespace == "openshift-operators" && op.AllNamespaces {
		return objs[2:], []string{"Namespace openshift-operators and its all-namespaces OperatorGroup come with OpenShift: not rendered."}
	}
	return objs, []string{"OLM allows one OperatorGroup per namespace: leave it out if " + op.Namespace + " already has a compatible one."}
}

// olmAccess is what an OLM step needs beside its objects: reading the OLM
// kinds and the CRDs of the CSV, and patching InstallPlans when
// --approve-installplans allows approving them.
func olmAccess(op inventory.Operator) func(*Env, *Step, func(schema.GroupVersionKind) string) []Access {
	return withAccess(func(e *Env) []Access {
		out := readAccess("apiextensions.k8s.io", "customresourcedefinitions", "")
		for _, r := range []string{"subscriptions", "installplans", "clusterserviceversions", "operatorgroups"} {
			out = append(out, readAccess("operators.coreos.com", r, op.Namespace)...)
		}
		if e.Policy.ApproveInstallPlans {
			out = append(out, Access{"patch", "operators.coreos.com", "installplans", op.Namespace, ""})
		}
		if len(envOf(e.Inv, op)) > 0 {
			// spec.config.env: read, upsert by name, JSON patch; then the
			// operator's Deployments and pods (restarted once if stale).
			out = append(out, Access{"patch", "operators.coreos.com", "subscriptions", op.Namespace, op.Package})
			out = append(out, readAccess("apps", "deployments", op.Namespace)...)
			out = append(out, readAccess("", "pods", op.Namespace)...)
			out = append(out, Access{"delete", "", "pods", op.Namespace, ""})
		}
		return out
	})
}

var operatorTitles = map[string]string{
	"rhcl":  "Red Hat Connectivity Link operator (Kuadrant, Authorino, Limitador)",
	"lws":   "Leader Worker Set operator",
	"rhoai": "Red Hat OpenShift AI operator",
}

// operatorServes names the API groups each operator's CRDs serve, for
// diff's "cannot be known before <step> runs".
var operatorServes = map[string][]string{
	"rhcl":  {"kuadrant.io", "operator.authorino.kuadrant.io", "limitador.kuadrant.io"},
	"lws":   {"operator.openshift.io"},
	"rhoai": {"dscinitialization.opendatahub.io", "datasciencecluster.opendatahub.io"},
}

func operatorSteps(inv *inventory.Inventory) []*Step {
	var out []*Step
	for _, op := range inv.Operators {
		title := operatorTitles[op.ID]
		if title == "" {
			title = "operator " + op.Package
		}
		out = append(out, operatorStep(op, title, operatorServes[op.ID]...))
	}
	if inv.Operator("lws") != nil {
		out = append(out, &Step{
			ID: "operators/lws-instance", Title: "LeaderWorkerSetOperator cluster Managed",
			After: []string{"operators/lws"},
		})
	}
	return out
}
