package steps

import (
	"context"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/waiters"
)

func target(obj *unstructured.Unstructured, e *Env, s *Step) waiters.Target {
	return waiters.Target{
		GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Cond: s.readiness(obj),
		OnChange: func(r waiters.Result) {
			if !r.Done {
				e.progress(s.ID, "waiting for %s: %s", kube.Describe(obj), r.Status)
			}
		},
	}
}

// targets are the wait targets of objs by the step's readiness.
func targets(e *Env, s *Step, objs []*unstructured.Unstructured) []waiters.Target {
	var ts []waiters.Target
	for _, o := range objs {
		ts = append(ts, target(o, e, s))
	}
	return ts
}

// applyObjects server-side applies objs in order, except that a run of
// consecutive objects of one kind is applied applyWorkers at a time: they
// cannot depend on one another the way a CRD and its resources or a
// Namespace and its contents do (those are different kinds, applied one
// run after the other). The error is the first failure in objs' order; no
// later run starts after a failure.
func applyObjects(ctx context.Context, e *Env, stepID string, objs []*unstructured.Unstructured) error {
	for len(objs) > 0 {
		n := 1
		for n < len(objs) && objs[n].GroupVersionKind() == objs[0].GroupVersionKind() {
			n++
		}
		run := objs[:n]
		objs = objs[n:]
		errs := make([]error, len(run))
		inParallel(len(run), applyWorkers, func(i int) {
			if _, err := e.Clients.Apply(ctx, run[i]); err != nil {
				errs[i] = err
				return
			}
			e.progress(stepID, "applied %s", kube.Describe(run[i]))
		})
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// applyWorkers bounds the concurrent applies of objects of one kind.
const applyWorkers = 16

// waitReady waits for every object by the step's readiness.
func waitReady(ctx context.Context, e *Env, s *Step, objs []*unstructured.Unstructured) error {
	return waiters.All(ctx, e.Clients, targets(e, s, objs)...)
}

// applyAndWait is the default Apply: apply the step's rendered objects,
// then wait until each is ready.
func applyAndWait(ctx context.Context, e *Env, s *Step) error {
	objs := e.objects(s.ID)
	if err := applyObjects(ctx, e, s.ID, objs); err != nil {
		return err
	}
	return waitReady(ctx, e, s, objs)
}

// applyEnsuringNamespaces applies a step's objects, Namespaces only when
// missing, and waits for the others by the step's readiness.
func applyEnsuringNamespaces(ctx context.Context, e *Env, s *Step) error {
	rest, err := applyCreatingNamespaces(ctx, e, s)
	if err != nil {
		return err
	}
	return waitReady(ctx, e, s, rest)
}

// applyCreatingNamespaces creates a step's Namespaces when missing
// (ensureNamespace) and applies its other objects, which it returns for
// the caller to wait on.
func applyCreatingNamespaces(ctx context.Context, e *Env, s *Step) ([]*unstructured.Unstructured, error) {
	var rest []*unstructured.Unstructured
	for _, o := range e.objects(s.ID) {
		if o.GetKind() == "Namespace" {
			if err := ensureNamespace(ctx, e, s.ID, o); err != nil {
				return nil, err
			}
			continue
		}
		rest = append(rest, o)
	}
	return rest, applyObjects(ctx, e, s.ID, rest)
}

// checkObjects is the default Check: every rendered object exists, holds
// every field maasctl sets, and is ready by the step's readiness.
// Namespaces only need to exist: steps create missing ones and leave
// existing ones (which may belong to the platform or an operator) alone.
func checkObjects(ctx context.Context, e *Env, s *Step) (bool, string, error) {
	return checkLive(ctx, e, s, e.objects(s.ID))
}

// checkApplied is checkObjects for steps that apply every object, Namespaces
// included, so every field is compared.
func checkApplied(ctx context.Context, e *Env, s *Step) (bool, string, error) {
	return checkLiveFields(ctx, e, s, e.objects(s.ID), true)
}

func checkLive(ctx context.Context, e *Env, s *Step, objs []*unstructured.Unstructured) (bool, string, error) {
	return checkLiveFields(ctx, e, s, objs, false)
}

func checkLiveFields(ctx context.Context, e *Env, s *Step, objs []*unstructured.Unstructured, namespaceFields bool) (bool, string, error) {
	v, err := firstLiveProblem(ctx, e, s, objs, namespaceFields)
	return v.problem == "", v.problem, err
}

// checkLivePending is checkLive that also says whether the problem it
// returns is one that waiting can end: the object exists and holds what
// the step applied, and its owner has not reported it ready yet without
// reporting a failure (its readiness neither done nor failed).
func checkLivePending(ctx context.Context, e *Env, s *Step, objs []*unstructured.Unstructured) (ok bool, msg string, pending bool, err error) {
	v, err := firstLiveProblem(ctx, e, s, objs, false)
	return v.problem == "", v.problem, v.pending, err
}

// firstLiveProblem judges objs against the live objects and returns the
// verdict of the first problem in objs' order (a zero verdict when none).
func firstLiveProblem(ctx context.Context, e *Env, s *Step, objs []*unstructured.Unstructured, namespaceFields bool) (liveVerdict, error) {
	// One read per kind and namespace where there are many (eachLive);
	// each object is judged as it arrives and dropped, and the verdict is
	// the first problem in objs' order.
	verdicts := make([]liveVerdict, len(objs))
	eachLive(ctx, e, objs, func(i int, live *unstructured.Unstructured, err error) {
		o := objs[i]
		switch {
		case apierrors.IsNotFound(err) || kube.IsNotServed(err):
			verdicts[i].problem = kube.Describe(o) + " missing"
		case err != nil:
			verdicts[i].err = err
		case o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1" && !namespaceFields:
		default:
			if path, ok := Contains(live.Object, o.Object); !ok {
				verdicts[i].problem = differsAt(kube.Describe(o), path)
			} else if r := s.readiness(o)(live); !r.Done {
				verdicts[i].problem = fmt.Sprintf("%s not ready: %s", kube.Describe(o), r.Status)
				verdicts[i].pending = r.Failed == nil
			}
		}
	})
	for _, v := range verdicts {
		if v.err != nil {
			return liveVerdict{}, v.err
		}
		if v.problem != "" {
			return v, nil
		}
	}
	return liveVerdict{}, nil
}

// differsAt is a Check's message for a live object (described by desc)
// whose field at path is not what the step applies. It says "differs", not
// "drifted": the object may never have been applied by maasctl (one the
// platform or an earlier hand install made); status calls a step
// "drifted" only when its done checkpoint says maasctl applied it.
func differsAt(desc, path string) string {
	return fmt.Sprintf("%s differs at %s from what maasctl applies", desc, path)
}

// Contains reports whether every field of want is present with an equal
// value in live (numbers compare by value), and otherwise the first path
// that differs, spelled as diff spells a field (joinPath:
// "spec.owner.users", "metadata.labels[\"app.kubernetes.io/name\"]",
// "spec.modelRefs[0].tokenRateLimits[0].limit"), so that status, plan,
// diff and doctor name a drifted field alike. Lists compare element by
// element and must have equal length.
func Contains(live, want any) (string, bool) {
	return contains(live, want, "")
}

func contains(live, want any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return path, false
		}
		for k, wv := range w {
			if p, ok := contains(l[k], wv, joinPath(path, k)); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := contains(l[i], w[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	}
	if wf, ok := number(want); ok {
		lf, ok := number(live)
		return path, ok && lf == wf
	}
	return path, reflect.DeepEqual(live, want)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// stepTimeout is the timeout of s for inventory e.Inv.
func stepTimeout(s *Step, e *Env) time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return time.Duration(e.Inv.WaitTimeoutSeconds) * time.Second
}

// ensureNamespace creates ns when it is missing and leaves an existing one
// alone: namespaces such as openshift-operators belong to the platform.
func ensureNamespace(ctx context.Context, e *Env, stepID string, ns *unstructured.Unstructured) error {
	_, err := e.Clients.Get(ctx, ns)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get %s: %w", kube.Describe(ns), err)
	}
	return applyObjects(ctx, e, stepID, []*unstructured.Unstructured{ns})
}

// checkConditions evaluates each target once against the live object, read
// once per kind and namespace where there are many (eachLive).
func checkConditions(ctx context.Context, e *Env, ts []waiters.Target) (bool, string, error) {
	mappingErrs := make([]error, len(ts))
	var stubs []*unstructured.Unstructured
	var at []int
	for i, t := range ts {
		if _, err := e.Clients.Mapping(t.GVK); err != nil {
			mappingErrs[i] = err
			continue
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(t.GVK)
		u.SetNamespace(t.Namespace)
		u.SetName(t.Name)
		stubs = append(stubs, u)
		at = append(at, i)
	}
	// Each target is judged as its object arrives (eachLive); the verdict
	// is the first problem in ts' order.
	verdicts := make([]liveVerdict, len(ts))
	eachLive(ctx, e, stubs, func(j int, live *unstructured.Unstructured, err error) {
		i := at[j]
		t := ts[i]
		switch {
		case apierrors.IsNotFound(err):
			verdicts[i].problem = t.String() + " missing"
		case err != nil:
			verdicts[i].err = err
		default:
			if r := t.Cond(live); !r.Done {
				verdicts[i].problem = t.String() + " not ready: " + r.Status
			}
		}
	})
	for i, t := range ts {
		if err := mappingErrs[i]; err != nil {
			return false, t.String() + ": " + err.Error(), nil
		}
		if v := verdicts[i]; v.err != nil {
			return false, "", v.err
		} else if v.problem != "" {
			return false, v.problem, nil
		}
	}
	return true, "", nil
}

// liveVerdict is what a check found for one object: a problem (missing,
// drifted, not ready) or a read error; both empty when all is well.
type liveVerdict struct {
	problem string
	// pending: the object is not ready yet and its owner reported no
	// failure (waiting may end it).
	pending bool
	err     error
}

// listAtLeast is the number of objects of one kind in one namespace from
// which eachLive lists the kind instead of getting each object.
const listAtLeast = 4

// eachLive reads the live copy of each of objs (by kind, namespace and
// name) and calls fn(i, live, err) once per index of objs: a kind with at
// least listAtLeast objects in one namespace is read by one paged LIST of
// that kind there (kube.EachListItem: a quorum read, like a GET, without
// managedFields), fewer by GETs, observeWorkers reads at a time. An object
// the LIST does not hold gets a NotFound error, as a GET would. Secrets are
// always read one by one: a LIST would carry every other Secret of the
// namespace. fn runs concurrently for different indexes (each index once)
// and must not keep live unless it needs it: a list's objects are garbage
// as soon as fn has seen them, so a step checking 1,000 models holds one
// page of them, not all.
func eachLive(ctx context.Context, e *Env, objs []*unstructured.Unstructured, fn func(i int, live *unstructured.Unstructured, err error)) {
	type gkey struct {
		gvk schema.GroupVersionKind
		ns  string
	}
	groups := map[gkey][]int{}
	var order []gkey
	for i, o := range objs {
		k := gkey{o.GroupVersionKind(), o.GetNamespace()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	var gets []int
	var lists []gkey
	for _, k := range order {
		if len(groups[k]) >= listAtLeast && !(k.gvk.Group == "" && k.gvk.Kind == "Secret") {
			lists = append(lists, k)
		} else {
			gets = append(gets, groups[k]...)
		}
	}
	// The same object listed twice (one Secret named by many models) is
	// read once.
	type okey struct {
		gvk      schema.GroupVersionKind
		ns, name string
	}
	same := map[okey][]int{}
	var distinct []int
	for _, i := range gets {
		k := okey{objs[i].GroupVersionKind(), objs[i].GetNamespace(), objs[i].GetName()}
		if len(same[k]) == 0 {
			distinct = append(distinct, i)
		}
		same[k] = append(same[k], i)
	}
	gets = distinct
	inParallel(len(gets)+len(lists), observeWorkers, func(j int) {
		if j < len(gets) {
			i := gets[j]
			live, err := e.Clients.Get(ctx, objs[i])
			for _, d := range same[okey{objs[i].GroupVersionKind(), objs[i].GetNamespace(), objs[i].GetName()}] {
				fn(d, live, err)
			}
			return
		}
		k := lists[j-len(gets)]
		byName := map[string][]int{}
		for _, i := range groups[k] {
			byName[objs[i].GetName()] = append(byName[objs[i].GetName()], i)
		}
		ri, m, err := e.Clients.Resource(k.gvk, k.ns)
		if err == nil {
			err = kube.EachListItem(ctx, ri, metav1.ListOptions{}, func(live *unstructured.Unstructured) error {
				for _, i := range byName[live.GetName()] {
					fn(i, live, nil)
				}
				delete(byName, live.GetName())
				return nil
			})
		}
		// What the list did not hold, or all of the group when it failed
		// (before or after some objects were seen: those were passed on,
		// and their indexes are no longer in byName).
		for name, idx := range byName {
			for _, i := range idx {
				if err != nil {
					fn(i, nil, err)
				} else {
					fn(i, nil, apierrors.NewNotFound(m.Resource.GroupResource(), name))
				}
			}
		}
	})
}
