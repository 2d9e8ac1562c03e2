package steps

import (
	"context"
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
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
	csv, err := waitOperator(ctx, e, stepID, op, stale)
	if err != nil {
		return err
	}
	if len(want) > 0 {
		return waitOperatorEnv(ctx, e, stepID, op, csv, want)
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
		return "", &Problem{
			Message: fmt.Sprintf("namespace %s has %d OperatorGroups (%s); OLM installs nothing there until only one is left", op.Namespace, len(names), strings.Join(names, ", ")),
			Fix:     fmt.Sprintf("delete the extra ones with 'oc delete operatorgroup NAME -n %s'", op.Namespace)}
	}
	it := list.Items[0]
	targets, _, _ := unstructured.NestedStringSlice(it.Object, "spec", "targetNamespaces")
	_, hasSel, _ := unstructured.NestedMap(it.Object, "spec", "selector")
	allNS := len(targets) == 0 && !hasSel
	own := len(targets) == 1 && targets[0] == op.Namespace
	if (op.AllNamespaces && allNS) || (!op.AllNamespaces && (own || allNS)) {
		// The run record notes the reused one from this read.
		e.Clients.Saw(&it)
		return it.GetName(), nil
	}
	want := "all namespaces"
	if !op.AllNamespaces {
		want = "namespace " + op.Namespace
	}
	return "", fmt.Errorf("OperatorGroup %s/%s targets %v, but %s needs one that targets %s: fix or delete it, then re-run",
		op.Namespace, it.GetName(), targets, op.Package, want)
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
	want := release.VersionOf(channel)
	have := release.VersionOf(versionFromCSVName(name))
	return want == "" || have == "" || want == have
}

// csvSucceeded is done at phase Succeeded and fails at phase Failed
// (ClusterServiceVersionStatus.Phase, operator-framework/api).
func csvSucceeded(obj *unstructured.Unstructured) waiters.Result {
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	reason, _, _ := unstructured.NestedString(obj.Object, "status", "reason")
	msg, _, _ := unstructured.NestedString(obj.Object, "status", "message")
	st := "phase " + phase
	switch {
	case phase == "":
		st = "no phase yet (OLM has not judged the CSV)"
	case reason != "":
		st += " (" + reason + ")"
	}
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
		if ok, err := crdServed(ctx, e, name); err != nil || !ok {
			return false, "CRD " + name + " not served (not Established)", err
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
		// The lowest acceptable CSV version is no object's field, but a
		// new one changes what the step accepts: a re-run checks again.
		HashExtra: func(*Env) string { return "minVersion:" + op.MinVersion },
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
// kinds and the CRDs of the CSV, patching the CSV's annotations to make OLM
// check its requirements again (recheckRequirements), and patching
// InstallPlans when --approve-installplans allows approving them.
func olmAccess(op inventory.Operator) func(*Env, *Step, func(schema.GroupVersionKind) string) []Access {
	return withAccess(func(e *Env) []Access {
		out := readAccess("apiextensions.k8s.io", "customresourcedefinitions", "")
		for _, r := range []string{"subscriptions", "installplans", "clusterserviceversions", "operatorgroups"} {
			out = append(out, readAccess("operators.coreos.com", r, op.Namespace)...)
		}
		out = append(out, Access{"patch", "operators.coreos.com", "clusterserviceversions", op.Namespace, ""})
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
