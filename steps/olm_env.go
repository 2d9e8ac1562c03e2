package steps

// The operators phase, continued: the environment an OLM step keeps in its
// Subscription's spec.config.env (case B19, N05). OLM copies that list into
// every container of every Deployment of the installed CSV, a name in the
// Subscription replacing the same name in the bundle
// (operator-lifecycle-manager v0.46 pkg/controller/operators/olm/overrides
// inject.InjectEnvIntoDeployment); the operator reads it only at start, so
// it counts once a Ready pod runs with it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// operatorEnvs gives, per operator ID, the spec.config.env its step keeps;
// operators without an entry keep none (their Subscription's env is left
// as it is).
var operatorEnvs = map[string]func(*inventory.Inventory) []inventory.EnvVar{
	"rhcl": (*inventory.Inventory).KuadrantOperatorEnv,
}

// envOf is the env the step of op keeps, nil when none.
func envOf(inv *inventory.Inventory, op inventory.Operator) []inventory.EnvVar {
	if f := operatorEnvs[op.ID]; f != nil {
		return f(inv)
	}
	return nil
}

// mergeEnv upserts want into env (a spec.config.env list) by name: an entry
// of a wanted name is replaced in place (a valueFrom there is dropped),
// entries of other names are kept as they are, missing wanted ones are
// appended in want's order. It returns the new list and the sorted names
// whose entry changed (nil when the list stays as it is). A JSON merge
// patch of the list would drop the entries maasctl does not own (case B19).
func mergeEnv(env []any, want []inventory.EnvVar) ([]any, []string) {
	wanted := map[string]string{}
	for _, w := range want {
		wanted[w.Name] = w.Value
	}
	var changed []string
	out := make([]any, 0, len(env)+len(want))
	done := map[string]bool{}
	for _, item := range env {
		m, _ := item.(map[string]any)
		name, _ := m["name"].(string)
		v, ok := wanted[name]
		switch {
		case !ok:
			out = append(out, item)
			continue
		case done[name]:
			// A second entry of a wanted name (OLM would apply the last):
			// dropped.
			changed = append(changed, name)
			continue
		}
		done[name] = true
		if cur, isStr := m["value"].(string); !isStr || cur != v || len(m) != 2 {
			changed = append(changed, name)
		}
		out = append(out, map[string]any{"name": name, "value": v})
	}
	for _, w := range want {
		if !done[w.Name] {
			done[w.Name] = true
			changed = append(changed, w.Name)
			out = append(out, map[string]any{"name": w.Name, "value": w.Value})
		}
	}
	if len(changed) == 0 {
		return env, nil
	}
	sort.Strings(changed)
	return out, slices.Compact(changed)
}

// upsertSubscriptionEnv makes the live Subscription's spec.config.env hold
// want (mergeEnv): a read, then a JSON patch (RFC 6902) that first tests
// the list it read is still there and then replaces it, so a concurrent
// edit of the list fails the patch (re-read and merged again, at most
// envPatchAttempts times) while OLM's status writes do not; no write when
// nothing changes. An Update with the resourceVersion would conflict with
// every status write of OLM's. Values are not secret; the progress names
// the variables.
func upsertSubscriptionEnv(ctx context.Context, e *Env, stepID string, sub *unstructured.Unstructured, want []inventory.EnvVar) error {
	ri, _, err := e.Clients.Resource(subscriptionGVK, sub.GetNamespace())
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		live, err := ri.Get(ctx, sub.GetName(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read %s for its spec.config.env: %w", kube.Describe(sub), err)
		}
		env, _, _ := unstructured.NestedSlice(live.Object, "spec", "config", "env")
		merged, changed := mergeEnv(env, want)
		if changed == nil {
			return nil
		}
		patch, err := json.Marshal(envPatch(live, merged))
		if err != nil {
			return err
		}
		_, err = ri.Patch(ctx, sub.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: kube.FieldManager})
		if err == nil {
			e.progress(stepID, "set %s in spec.config.env of %s (%d other entries kept)", strings.Join(changed, ", "), kube.Describe(sub), len(merged)-len(want))
			return nil
		}
		if apierrors.IsInvalid(err) && strings.Contains(err.Error(), "test failed") && attempt < envPatchAttempts {
			continue // the list changed since the read
		}
		return fmt.Errorf("set spec.config.env of %s: %w", kube.Describe(sub), err)
	}
}

// envPatchAttempts bounds the read-merge-patch rounds of
// upsertSubscriptionEnv when the list keeps changing under it.
const envPatchAttempts = 5

// envPatch is the JSON patch that sets live's spec.config.env to env,
// guarded by a test of the deepest of spec.config.env, spec.config and
// spec that live has (its value as read).
func envPatch(live *unstructured.Unstructured, env []any) []map[string]any {
	test := func(path string, v any) map[string]any { return map[string]any{"op": "test", "path": path, "value": v} }
	if old, ok, _ := unstructured.NestedSlice(live.Object, "spec", "config", "env"); ok {
		return []map[string]any{test("/spec/config/env", old), {"op": "replace", "path": "/spec/config/env", "value": env}}
	}
	if cfg, ok, _ := unstructured.NestedMap(live.Object, "spec", "config"); ok {
		return []map[string]any{test("/spec/config", cfg), {"op": "add", "path": "/spec/config/env", "value": env}}
	}
	spec, _, _ := unstructured.NestedMap(live.Object, "spec")
	return []map[string]any{test("/spec", spec), {"op": "add", "path": "/spec/config", "value": map[string]any{"env": env}}}
}

// csvDeployments names the Deployments of an installed CSV
// (spec.install.spec.deployments[].name).
func csvDeployments(csv *unstructured.Unstructured) []string {
	deps, _, _ := unstructured.NestedSlice(csv.Object, "spec", "install", "spec", "deployments")
	var out []string
	for _, d := range deps {
		m, _ := d.(map[string]any)
		if n, _ := m["name"].(string); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// deploymentEnvRolledOut is Done when every container of the Deployment's
// template holds want and the Deployment controller has rolled that
// template out (waiters.DeploymentRolledOut: observedGeneration caught up,
// every replica updated and available, no old replica left).
func deploymentEnvRolledOut(want []inventory.EnvVar) waiters.Condition {
	return func(d *unstructured.Unstructured) waiters.Result {
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			m, _ := c.(map[string]any)
			env, _, _ := unstructured.NestedSlice(m, "env")
			if miss := inventory.MissingEnv(inventory.EnvByName(env), want); len(miss) > 0 {
				return waiters.Result{Status: fmt.Sprintf("container %v of the template lacks %s (OLM has not copied the Subscription's env yet)", m["name"], strings.Join(miss, ", "))}
			}
		}
		return waiters.DeploymentRolledOut(d)
	}
}

// podHasEnv reports whether every container of p holds want.
func podHasEnv(p *corev1.Pod, want []inventory.EnvVar) bool {
	for _, c := range p.Spec.Containers {
		have := map[string]string{}
		for _, ev := range c.Env {
			have[ev.Name] = ev.Value
		}
		if len(inventory.MissingEnv(have, want)) > 0 {
			return false
		}
	}
	return len(p.Spec.Containers) > 0
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deploymentSelector is the label selector of a Deployment's pods.
func deploymentSelector(d *unstructured.Unstructured) (labels.Selector, error) {
	ml, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
	if len(ml) == 0 {
		return nil, fmt.Errorf("Deployment %s/%s has no spec.selector.matchLabels", d.GetNamespace(), d.GetName())
	}
	return labels.SelectorFromSet(ml), nil
}

// waitOperatorEnv waits until every Deployment of csv (the CSV the
// Subscription installed, as waitOperator returns it) has rolled out a
// template holding want and runs a Ready pod holding it. OLM updates the
// Deployments, yet a pod that predates the env may keep running (case B19:
// the pod was never replaced): then the pods without the env are deleted
// once, and the wait goes on for a Ready pod with it. A paused Deployment
// never rolls the env out: its wait fails at once naming spec.paused
// (waiters.DeploymentRolledOut).
//
// The Deployments are waited for together, on one list-watch of the
// namespace's Deployments (waiters.AllObjects), and their pods are read
// in one LIST of the namespace's pods, each Deployment's selected from it
// by its spec.selector.matchLabels: RHCL's three operators cost one watch
// and one LIST, not three each (issue 16).
func waitOperatorEnv(ctx context.Context, e *Env, stepID string, op inventory.Operator, csv *unstructured.Unstructured, want []inventory.EnvVar) error {
	names := csvDeployments(csv)
	if len(names) == 0 {
		return nil
	}
	ts := make([]waiters.Target, len(names))
	for i, name := range names {
		ts[i] = waiters.Target{GVK: deploymentGVK, Namespace: op.Namespace, Name: name, Cond: deploymentEnvRolledOut(want),
			OnChange: func(r waiters.Result) {
				if !r.Done {
					e.progress(stepID, "waiting for Deployment %s/%s to run the Subscription's env: %s", op.Namespace, name, r.Status)
				}
			}}
	}
	ds, err := waiters.AllObjects(ctx, e.Clients, ts...)
	if err != nil {
		what := "Deployment " + op.Namespace + "/" + names[0]
		if len(names) > 1 {
			what = fmt.Sprintf("Deployments %s in %s", strings.Join(names, ", "), op.Namespace)
		}
		return &Problem{
			Message: fmt.Sprintf("the operator's %s never rolled out the env of Subscription %s/%s (%s): %v", what, op.Namespace, op.Package, envNames(want), err),
			Fix:     fmt.Sprintf("check 'oc get deployment %s -n %s -o yaml'", strings.Join(names, " "), op.Namespace),
			Err:     err}
	}
	pods := e.Clients.Kube.CoreV1().Pods(op.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the pods of namespace %s: %w", op.Namespace, err)
	}
	for _, d := range ds {
		if err := ensurePodWithEnv(ctx, e, stepID, d, list.Items, want); err != nil {
			return err
		}
	}
	return nil
}

// ensurePodWithEnv waits for a Ready pod of Deployment d whose containers
// hold want. all holds the pods of d's namespace as listed once the
// Deployments rolled out; d's are those its selector matches. When no live
// pod of d has the env at all (the running pods predate it and nothing
// replaces them), those pods are deleted once.
func ensurePodWithEnv(ctx context.Context, e *Env, stepID string, d *unstructured.Unstructured, all []corev1.Pod, want []inventory.EnvVar) error {
	match, err := deploymentSelector(d)
	if err != nil {
		return err
	}
	sel := match.String()
	var own []*corev1.Pod
	for i := range all {
		if match.Matches(labels.Set(all[i].Labels)) {
			own = append(own, &all[i])
		}
	}
	// A pod with the env that is not Ready yet is a rollout under way:
	// waited for. Only when no live pod has the env are the others
	// restarted.
	withEnv := false
	for _, p := range own {
		if podReady(p) && podHasEnv(p, want) {
			return nil
		}
		withEnv = withEnv || (p.DeletionTimestamp == nil && podHasEnv(p, want))
	}
	pods := e.Clients.Kube.CoreV1().Pods(d.GetNamespace())
	for _, p := range own {
		if withEnv || p.DeletionTimestamp != nil {
			continue
		}
		e.progress(stepID, "restarting pod %s/%s: it predates the env of the Subscription (%s)", p.Namespace, p.Name, envNames(want))
		uid := p.UID
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("restart pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	e.progress(stepID, "waiting for a Ready pod of Deployment %s/%s with the Subscription's env", d.GetNamespace(), d.GetName())
	lw := waiters.SelectorListWatch(pods.List, pods.Watch, sel)
	_, err = watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		p, ok := ev.Object.(*corev1.Pod)
		return ok && ev.Type != watch.Deleted && podReady(p) && podHasEnv(p, want), nil
	})
	if err != nil && errors.Is(ctx.Err(), context.Canceled) { // at the step's deadline the message below says what to check
		return waiters.Ended(ctx, []waiters.Blocked{{Object: fmt.Sprintf("a Ready pod of Deployment %s/%s with %s", d.GetNamespace(), d.GetName(), envNames(want)), Status: "none yet"}})
	}
	if err != nil {
		return fmt.Errorf("no Ready pod of Deployment %s/%s runs with %s: %w; check 'oc get pods -n %s -l %s'", d.GetNamespace(), d.GetName(), envNames(want), err, d.GetNamespace(), sel)
	}
	return nil
}

// checkOperatorEnv is the Check part of the env: "" when the Subscription
// holds want and each CSV Deployment has rolled it out to a Ready pod, else
// what is missing.
func checkOperatorEnv(ctx context.Context, e *Env, op inventory.Operator, sub, csv *unstructured.Unstructured, want []inventory.EnvVar) (string, error) {
	env, _, _ := unstructured.NestedSlice(sub.Object, "spec", "config", "env")
	if miss := inventory.MissingEnv(inventory.EnvByName(env), want); len(miss) > 0 {
		return fmt.Sprintf("Subscription %s/%s spec.config.env lacks %s", op.Namespace, op.Package, strings.Join(miss, ", ")), nil
	}
	dri, _, err := e.Clients.Resource(deploymentGVK, op.Namespace)
	if err != nil {
		return "", err
	}
	for _, name := range csvDeployments(csv) {
		d, err := dri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "Deployment " + op.Namespace + "/" + name + " missing", nil
		}
		if err != nil {
			return "", err
		}
		if r := deploymentEnvRolledOut(want)(d); !r.Done {
			return "Deployment " + op.Namespace + "/" + name + ": " + r.Status, nil
		}
		sel, err := deploymentSelector(d)
		if err != nil {
			return err.Error(), nil
		}
		list, err := e.Clients.Kube.CoreV1().Pods(op.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return "", err
		}
		ok := false
		for i := range list.Items {
			ok = ok || (podReady(&list.Items[i]) && podHasEnv(&list.Items[i], want))
		}
		if !ok {
			return "no Ready pod of Deployment " + op.Namespace + "/" + name + " runs with " + envNames(want), nil
		}
	}
	return "", nil
}

// envNames lists the names of want, comma-separated.
func envNames(want []inventory.EnvVar) string {
	n := make([]string, len(want))
	for i, w := range want {
		n[i] = w.Name
	}
	return strings.Join(n, ", ")
}
