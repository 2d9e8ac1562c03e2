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
func olmInstall(ctx context.Context, e *Env, stepID string, op inventory.Operator) error {
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
	if err := applyObjects(ctx, e, stepID, []*unstructured.Unstructured{sub}); err != nil {
		return err
	}
	return waitOperator(ctx, e, stepID, op)
}

// pickOperatorGroup returns the name of a compatible OperatorGroup already in
// op's namespace, "" when there is none (the step creates one), or an error
// when the namespace has an incompatible one or several.
func pickOperatorGroup(ctx context.Context, e *Env, op inventory.Operator) (string, error) {
	ri, _, err := e.Clients.Resource(operatorGroupGVK, op.Namespace)
	if err != nil {
		return "", err
	}
	list, err := ri.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list OperatorGroups in %s: %w", op.Namespace, err)
	}
	var names []string
	for _, it := range list.Items {
		if it.GetName() == op.OperatorGroup && it.GetLabels()["app.kubernetes.io/managed-by"] == "maasctl" {
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
// succeed, and the CSV's owned CRDs to be Established.
func waitOperator(ctx context.Context, e *Env, stepID string, op inventory.Operator) error {
	subT := waiters.Target{
		GVK: subscriptionGVK, Namespace: op.Namespace, Name: op.Package,
		Cond: subscriptionInstalled,
		OnChange: func(r waiters.Result) {
			if !r.Done {
				e.progress(stepID, "waiting for Subscription %s/%s: %s", op.Namespace, op.Package, r.Status)
			}
		},
	}
	sub, err := waiters.For(ctx, e.Clients, subT)
	if err != nil {
		return err
	}
	csvName, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
	csvT := waiters.Target{
		GVK: csvGVK, Namespace: op.Namespace, Name: csvName, Cond: csvSucceeded,
		OnChange: func(r waiters.Result) {
			if !r.Done {
				e.progress(stepID, "waiting for CSV %s: %s", csvName, r.Status)
			}
		},
	}
	csv, err := waiters.For(ctx, e.Clients, csvT)
	if err != nil {
		return err
	}
	if err := checkMinVersion(csv, op); err != nil {
		return err
	}
	var crds []waiters.Target
	for _, name := range ownedCRDs(csv) {
		t := waiters.CRDEstablished(name)
		crds = append(crds, t)
	}
	if len(crds) > 0 {
		e.progress(stepID, "waiting for %d CRDs of %s to be Established", len(crds), csvName)
	}
	if err := waiters.All(ctx, e.Clients, crds...); err != nil {
		return err
	}
	e.Clients.Mapper.Reset()
	e.progress(stepID, "%s installed", csvName)
	return nil
}

// subscriptionInstalled is done when the Subscription reports state
// AtLatestKnown and an installedCSV (OLM Subscription status,
// operator-framework/api SubscriptionStatus).
func subscriptionInstalled(obj *unstructured.Unstructured) waiters.Result {
	state, _, _ := unstructured.NestedString(obj.Object, "status", "state")
	installed, _, _ := unstructured.NestedString(obj.Object, "status", "installedCSV")
	current, _, _ := unstructured.NestedString(obj.Object, "status", "currentCSV")
	if c, ok := waiters.GetCondition(obj, "ResolutionFailed"); ok && c.Status == "True" {
		return waiters.Result{Status: c.String()}
	}
	st := "state " + state
	if state == "" {
		st = "no state yet"
	}
	if current != "" {
		st += ", current CSV " + current
	}
	return waiters.Result{Done: state == "AtLatestKnown" && installed != "", Status: st}
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

// checkMinVersion rejects a CSV older than op.MinVersion (RHCL 1.4.0 has a
// known auth bypass, so the default inventory requires 1.4.1).
func checkMinVersion(csv *unstructured.Unstructured, op inventory.Operator) error {
	if op.MinVersion == "" {
		return nil
	}
	v, _, _ := unstructured.NestedString(csv.Object, "spec", "version")
	have, err := semver.ParseTolerant(v)
	if err != nil {
		return fmt.Errorf("CSV %s has no valid spec.version (%q)", csv.GetName(), v)
	}
	min, err := semver.ParseTolerant(op.MinVersion)
	if err != nil {
		return fmt.Errorf("operators[%s].minVersion %q: %w", op.ID, op.MinVersion, err)
	}
	if have.LT(min) {
		return fmt.Errorf("%s %s is installed but at least %s is required: approve an update to %s or later (Subscription %s/%s)",
			op.Package, have, min, min, op.Namespace, op.Package)
	}
	return nil
}

// checkOperator is the read-only Check of an OLM step.
func checkOperator(ctx context.Context, e *Env, stepID string, op inventory.Operator) (bool, string, error) {
	objs := e.objects(stepID)
	if _, err := e.Clients.Get(ctx, objs[0]); err != nil {
		if apierrors.IsNotFound(err) {
			return false, "Namespace " + op.Namespace + " missing", nil
		}
		return false, "", err
	}
	ok, msg, err := checkLive(ctx, e, []*unstructured.Unstructured{objs[2]})
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
	return true, "", nil
}

func operatorStep(op inventory.Operator, title string, after ...string) *Step {
	id := "operators/" + op.ID
	return &Step{
		ID: id, Title: title, After: after,
		Apply: func(ctx context.Context, e *Env) error { return olmInstall(ctx, e, id, op) },
		Check: func(ctx context.Context, e *Env) (bool, string, error) { return checkOperator(ctx, e, id, op) },
	}
}

var operatorTitles = map[string]string{
	"rhcl":  "Red Hat Connectivity Link operator (Kuadrant, Authorino, Limitador)",
	"lws":   "Leader Worker Set operator",
	"rhoai": "Red Hat OpenShift AI operator",
}

func operatorSteps(inv *inventory.Inventory) []*Step {
	var out []*Step
	for _, op := range inv.Operators {
		title := operatorTitles[op.ID]
		if title == "" {
			title = "operator " + op.Package
		}
		out = append(out, operatorStep(op, title))
	}
	if inv.Operator("lws") != nil {
		out = append(out, &Step{
			ID: "operators/lws-instance", Title: "LeaderWorkerSetOperator cluster Managed",
			After: []string{"operators/lws"},
			Apply: applyAndWait("operators/lws-instance"),
			Check: checkObjects("operators/lws-instance"),
		})
	}
	return out
}
