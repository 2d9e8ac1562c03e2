package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/names"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// MaaSCRDs are the CRDs the RHOAI 3.5 operator registers once MaaS is
// enabled; release.Release.MaaSCRDs gives them for any release.
var MaaSCRDs = release.New(release.RHOAI35, "").MaaSCRDs()

func namespaceObject(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": map[string]any{names.ManagedByLabel: names.ManagedByValue}},
	}}
}

func rhoaiSteps(inv *inventory.Inventory) []*Step {
	dscAfter := []string{"rhoai/dsci", "database/cluster", "dbsecret/maas-db-config", "platform/gateway"}
	if inv.Kuadrant.AuthorinoTLS {
		dscAfter = append(dscAfter, "platform/authorino-tls")
	} else {
		dscAfter = append(dscAfter, "platform/kuadrant")
	}
	if inv.Operator("lws") != nil {
		dscAfter = append(dscAfter, "operators/lws-instance")
	}
	return []*Step{
		{
			ID: "rhoai/dsci", Title: "DSCInitialization (the operator's default-dsci is adopted, never duplicated)",
			After: []string{"operators/rhoai", "platform/monitoring"},
			Apply: applyDSCI, Check: checkDSCI,
			// The RHOAI operator creates the namespaces the DSCInitialization
			// names; when they were not there before, the install brought them.
			Objects: func(e *Env, s *Step) []*unstructured.Unstructured {
				return append(slices.Clone(e.objects(s.ID)), namespaceStub(e.Inv.RHOAI.ApplicationsNamespace), namespaceStub(e.Inv.RHOAI.MonitoringNamespace))
			},
		},
		{
			ID: "rhoai/dsc", Title: "DataScienceCluster " + inv.RHOAI.DSCName + " with Models-as-a-Service (the field of the installed RHOAI release)",
			After:  dscAfter,
			Serves: []string{"opendatahub.io", "maas.opendatahub.io", "inference.opendatahub.io"},
			Apply:  applyDSC, Check: checkDSC, Desired: desiredDSC,
			Access: withAccess(func(e *Env) []Access {
				return append(readAccess("apps", "deployments", e.Facts.Release.MaaSAPINamespace(e.Inv)), readAccess("apiextensions.k8s.io", "customresourcedefinitions", "")...)
			}),
			Removal: Removal{CRDs: func() []string { return MaaSCRDs }},
		},
		{ID: "rhoai/dashboard", Title: "dashboard MaaS, external models and Gen AI studio views", After: []string{"rhoai/dsc"}},
	}
}

// namespaceStub names a Namespace without labels.
func namespaceStub(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Namespace")
	u.SetName(name)
	return u
}

// adoptWait bounds how long the DSCI step waits for the operator's own
// default-dsci before creating one (the operator creates it at start).
const adoptWait = 30 * time.Second

// singleton returns the name of the only live object of a singleton kind
// (DSCInitialization, DataScienceCluster), "" when none exists, and an error
// naming them when there are several (case B05,
// opendatahub-operator#755).
func singleton(ctx context.Context, e *Env, gvk schema.GroupVersionKind) (string, error) {
	items, err := listOptional(ctx, e.Clients, gvk, "", "")
	if err != nil {
		return "", err
	}
	switch len(items) {
	case 0:
		return "", nil
	case 1:
		return items[0].GetName(), nil
	}
	var names []string
	for _, it := range items {
		names = append(names, it.GetName())
	}
	return "", &Problem{
		Message: fmt.Sprintf("%d %s objects exist (%s) but the RHOAI operator allows exactly one", len(items), gvk.Kind, strings.Join(names, ", ")),
		Fix:     fmt.Sprintf("delete all but one ('oc delete %s NAME') and re-run; maasctl adopts the one left", strings.ToLower(gvk.Kind))}
}

// adopted returns a copy of the rendered singleton obj named like the live
// one when one exists (server-side apply then patches it; it is never
// replaced), and whether it was renamed.
func adopted(ctx context.Context, e *Env, obj *unstructured.Unstructured) (*unstructured.Unstructured, bool, error) {
	name, err := singleton(ctx, e, obj.GroupVersionKind())
	if err != nil {
		return nil, false, err
	}
	out := obj.DeepCopy()
	if name == "" || name == obj.GetName() {
		return out, false, nil
	}
	out.SetName(name)
	return out, true, nil
}

// waitAnyDSCI waits up to adoptWait for a DSCInitialization to exist.
func waitAnyDSCI(ctx context.Context, e *Env) error {
	ri, _, err := e.Clients.Resource(dsciGVK, "")
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, adoptWait)
	defer cancel()
	lw := waiters.SelectorListWatch(ri.List, ri.Watch, "")
	_, err = watchtools.UntilWithSync(wctx, lw, &unstructured.Unstructured{}, func(s cache.Store) (bool, error) {
		return len(s.List()) > 0, nil
	}, func(ev watch.Event) (bool, error) { return ev.Type == watch.Added, nil })
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		// watchtools reports an ended context as wait.ErrWaitTimeout
		// ("timed out waiting for the condition"); an interrupted run
		// must say it was interrupted (CI of stop 45).
		return waiters.Ended(ctx, []waiters.Blocked{{Object: "a DSCInitialization from the RHOAI operator", Status: "none yet"}})
	case wctx.Err() != nil:
		return nil // none appeared within adoptWait: maasctl creates its own
	}
	return err
}

// applyDSCI adopts the DSCInitialization the RHOAI operator created at
// start (default-dsci) under whatever name it has, and creates one only
// when none appears; a second DSCI is refused (case B05).
func applyDSCI(ctx context.Context, e *Env, s *Step) error {
	id := s.ID
	if err := waitAnyDSCI(ctx, e); err != nil {
		return err
	}
	obj, renamed, err := adopted(ctx, e, e.objects(id)[0])
	if err != nil {
		return err
	}
	if renamed {
		e.progress(id, "adopting DSCInitialization %s (one already exists; not creating %s)", obj.GetName(), e.Inv.RHOAI.DSCIName)
	}
	if err := applyObjects(ctx, e, id, []*unstructured.Unstructured{obj}); err != nil {
		return err
	}
	return waitReady(ctx, e, s, []*unstructured.Unstructured{obj})
}

func checkDSCI(ctx context.Context, e *Env, s *Step) (bool, string, error) {
	obj, _, err := adopted(ctx, e, e.objects(s.ID)[0])
	if err != nil {
		if kube.IsNotServed(err) {
			return false, "DSCInitialization not served", nil
		}
		return false, err.Error(), nil
	}
	return checkLive(ctx, e, s, []*unstructured.Unstructured{obj})
}

// dscReady is dscReadyFor the 3.5 layout.
func dscReady(obj *unstructured.Unstructured) waiters.Result {
	return dscReadyFor(release.New(release.RHOAI35, ""))(obj)
}

// dscReadyFor is done when the DSC reports phase Ready and condition Ready
// and MaaS itself is ready: an aggregate Ready can hide a MaaS component
// that never deployed (case B05, opendatahub-operator#750), so the layout's
// MaaS condition must not be False, and on 3.5 AIGatewayReady must be True.
// While MaaS is not ready its condition (with the operator's message) is
// the status shown. A MaaS condition False with reason Error while ogx and
// llamastackoperator are both Managed is the 3.5 component conflict
// (rh-aiservices-bu/rhoai-maas-guide PR #160): it fails at once.
func dscReadyFor(l release.Release) waiters.Condition {
	return func(obj *unstructured.Unstructured) waiters.Result {
		mc, hasMaaS := waiters.GetCondition(obj, l.MaaSCondition())
		if hasMaaS && mc.Status == "False" && mc.Reason == "Error" && componentsConflict(obj) {
			return waiters.Result{Status: mc.String(), Failed: &Problem{
				Message: fmt.Sprintf("%s=False (Error): %q; ogx and llamastackoperator are both Managed, which RHOAI %s refuses, so MaaS never deploys although the DSC may report Ready",
					l.MaaSCondition(), mc.Message, l.Version),
				Fix: "set llamastackoperator to Removed (move it to rhoai.removedComponents) and re-run"}}
		}
		r := waiters.And(waiters.Phase([]string{"Ready"}), waiters.ConditionTrue("Ready"))(obj)
		maasNotReady := hasMaaS && mc.Status != "True"
		if maasNotReady {
			st := mc.String()
			if !r.Done {
				st = r.Status + "; " + st
			}
			return waiters.Result{Status: st}
		}
		if !r.Done {
			return r
		}
		if !hasMaaS {
			// The release's own name only: on 3.5 the 3.4 name
			// ModelsAsServiceReady never counts (case B04), and an
			// aggregate Ready without it says nothing about MaaS.
			st := "no " + l.MaaSCondition() + " condition yet"
			if old := release.New(release.RHOAI34, "").MaaSCondition(); !l.KServeMaaS() {
				if _, ok := waiters.GetCondition(obj, old); ok {
					st += " (" + old + " is the RHOAI 3.3/3.4 name and does not count on " + l.Version + ")"
				}
			}
			return waiters.Result{Status: st}
		}
		if !l.KServeMaaS() {
			return waiters.ConditionTrue("AIGatewayReady")(obj)
		}
		return r
	}
}

// componentsConflict reports ogx and llamastackoperator both Managed.
func componentsConflict(obj *unstructured.Unstructured) bool {
	m := func(c string) bool {
		s, _, _ := unstructured.NestedString(obj.Object, "spec", "components", c, "managementState")
		return s == "Managed"
	}
	return m("ogx") && m("llamastackoperator")
}

func maasAPITarget(e *Env, s *Step, l release.Release) waiters.Target {
	ns := l.MaaSAPINamespace(e.Inv)
	return waiters.Target{GVK: deploymentGVK, Namespace: ns, Name: "maas-api",
		Cond: waiters.ConditionTrue("Available"),
		OnChange: func(r waiters.Result) {
			if !r.Done {
				e.progress(s.ID, "waiting for Deployment %s/maas-api: %s", ns, r.Status)
			}
		}}
}

// liveLayout checks that the layout the cluster serves now is the one this
// run rendered for (read at start, possibly from the channel before the
// operator was installed).
func liveLayout(ctx context.Context, e *Env) (release.Release, error) {
	want := e.Facts.Release.WithDefaults()
	have, err := detectRelease(ctx, e.Clients, e.Inv)
	if err != nil {
		return want, err
	}
	if have.KServeMaaS() != want.KServeMaaS() {
		return want, &Problem{
			Message: fmt.Sprintf("the cluster serves %s (MaaS switch %s), but this run rendered the RHOAI %s layout (%s)", have, have.MaaSField(), want.Version, want.MaaSField()),
			Fix:     "re-run maasctl install, which reads the layout again, or set operators[rhoai].channel=stable-" + have.Version}
	}
	return want, nil
}

// applyDSC writes the DataScienceCluster of the installed RHOAI release.
// An existing DSC (whatever its name) is adopted with server-side apply,
// never replaced; two are refused. Before anything is written the DSC is
// sent as a server-side dry run with strict field validation: a field the
// served schema rejects, or one the server would prune, stops the step
// naming it. Then it waits for the release's MaaS condition, Deployment
// maas-api and the MaaS CRDs; a CRD that never registers is named with the
// DSC field that should have made it appear (cases B03, B05).
func applyDSC(ctx context.Context, e *Env, s *Step) error {
	id := s.ID
	l, err := liveLayout(ctx, e)
	if err != nil {
		return err
	}
	if un := l.Unserved(e.Inv); len(un) > 0 {
		e.progress(id, "leaving out component(s) %s: the DataScienceCluster schema of RHOAI %s has none", strings.Join(un, ", "), l.Version)
	}
	obj, renamed, err := adopted(ctx, e, e.objects(id)[0])
	if err != nil {
		return err
	}
	if renamed {
		e.progress(id, "adopting DataScienceCluster %s (one already exists; not creating %s)", obj.GetName(), e.Inv.RHOAI.DSCName)
	}
	kept, err := keepLegacyMaaS(ctx, e, obj, l)
	if err != nil {
		return err
	}
	if kept != "" {
		e.progress(id, "leaving %s as it is (%s): RHOAI %s reads MaaS from %s", legacyMaaSField, kept, l.Version, l.MaaSField())
	}
	if err := dryRunDSC(ctx, e, obj, l); err != nil {
		return err
	}
	if err := applyObjects(ctx, e, id, []*unstructured.Unstructured{obj}); err != nil {
		return err
	}
	e.progress(id, "MaaS enabled through %s (RHOAI %s)", l.MaaSField(), l.Version)
	t := target(obj, e, s)
	t.Cond = dscReadyFor(l)
	targets := []waiters.Target{t, maasAPITarget(e, s, l)}
	for _, crd := range l.MaaSCRDs() {
		targets = append(targets, waiters.CRDEstablished(crd))
	}
	if err := waiters.All(ctx, e.Clients, targets...); err != nil {
		var te *waiters.TimeoutError
		if errors.As(err, &te) {
			var missing []string
			for _, b := range te.Blocked {
				if name, ok := strings.CutPrefix(b.Object, "CustomResourceDefinition "); ok {
					missing = append(missing, name)
				}
			}
			if len(missing) > 0 {
				return &Problem{
					Message: fmt.Sprintf("%v; CRD(s) %s not registered", err, strings.Join(missing, ", ")),
					Fix: fmt.Sprintf("check that %s is Managed in DataScienceCluster %s and the DSC reconciled (oc get datasciencecluster %s -o yaml; the RHOAI operator registers them when MaaS deploys)",
						l.MaaSField(), obj.GetName(), obj.GetName()),
					Err: err}
			}
		}
		return err
	}
	// The MaaS CRDs' REST mappings came with their waits (waiters,
	// kube.Clients.LearnCRD): no discovery reset; a kind of another CRD
	// the DSC registered is looked up in a new discovery read when it is
	// first missed.
	e.Clients.ForgetMisses()
	return nil
}

// legacyMaaSField is the RHOAI 3.3/3.4 MaaS switch, deprecated (and kept
// for compatibility) in 3.5.
var legacyMaaSField = release.New(release.RHOAI34, "").MaaSField()

// keepLegacyMaaS copies the live DataScienceCluster's
// spec.components.kserve.modelsAsService into obj, unchanged, when the
// layout switches MaaS elsewhere (3.5) and the live object has it; it
// returns the kept managementState, "" when nothing was copied.
//
// Why: server-side apply removes every field the applier owned before and
// leaves out now (sigs.k8s.io/structured-merge-diff: a field owned only by
// the applying manager and absent from its applied configuration is
// deleted). maasctl owns kserve.modelsAsService.managementState when it
// wrote the DSC on 3.4, so a 3.5 apply without it would drop it, and the
// 3.5 CRD then defaults it to Removed: the switch flips although the 3.5
// operator still respects a Managed value, and the CRD's CEL rule
// forbids setting it back (case B04, rh-aiservices-bu/rhoai-maas-guide
// troubleshooting). Sending the live value keeps it exactly as it is,
// whoever owns it; maasctl never changes it on 3.5.
func keepLegacyMaaS(ctx context.Context, e *Env, obj *unstructured.Unstructured, l release.Release) (string, error) {
	if l.KServeMaaS() {
		return "", nil
	}
	live, err := e.Clients.Get(ctx, obj)
	if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read DataScienceCluster %s: %w", obj.GetName(), err)
	}
	old, found, _ := unstructured.NestedMap(live.Object, "spec", "components", "kserve", "modelsAsService")
	if !found {
		return "", nil
	}
	if err := unstructured.SetNestedMap(obj.Object, old, "spec", "components", "kserve", "modelsAsService"); err != nil {
		return "", fmt.Errorf("DataScienceCluster %s: %s: %w", obj.GetName(), legacyMaaSField, err)
	}
	state, _, _ := unstructured.NestedString(old, "managementState")
	if state == "" {
		state = "no managementState"
	}
	return "managementState " + state, nil
}

// desiredDSC is the DSC step's Desired: the rendered DataScienceCluster
// under the live name, with a live kserve.modelsAsService kept
// (keepLegacyMaaS), as applyDSC applies it.
func desiredDSC(ctx context.Context, e *Env, s *Step) ([]DesiredObject, error) {
	obj, _, err := adopted(ctx, e, e.objects(s.ID)[0])
	if err != nil {
		if kube.IsNotServed(err) {
			return desiredOf(e.objects(s.ID), false), nil
		}
		return nil, err
	}
	if _, err := keepLegacyMaaS(ctx, e, obj, e.Facts.Release.WithDefaults()); err != nil {
		return nil, err
	}
	return desiredOf([]*unstructured.Unstructured{obj}, false), nil
}

// dryRunDSC sends obj as a server-side apply dry run with strict field
// validation and compares what the server would store with what maasctl
// sends, so a rejected or pruned field is reported before any write.
func dryRunDSC(ctx context.Context, e *Env, obj *unstructured.Unstructured, l release.Release) error {
	out, err := e.Clients.DryRunApply(ctx, obj)
	if err != nil {
		return fmt.Errorf("the cluster rejects the DataScienceCluster maasctl wrote for %s, nothing was written: %w", l, err)
	}
	spec := map[string]any{"spec": obj.Object["spec"]}
	if p, ok := Contains(out.Object, spec); !ok {
		return &Problem{
			Message: fmt.Sprintf("the cluster would drop DataScienceCluster %s field %s (its schema does not have it; maasctl wrote for %s), nothing was written",
				obj.GetName(), p, l),
			Fix: "check 'oc explain datasciencecluster.spec.components' and the RHOAI version"}
	}
	return nil
}

func checkDSC(ctx context.Context, e *Env, s *Step) (bool, string, error) {
	return dscCheck(ctx, e, e.objects(s.ID)[0])
}

// dscCheck checks the DataScienceCluster rendered as want (adopted under
// the live name), the MaaS CRDs and maas-api.
func dscCheck(ctx context.Context, e *Env, want *unstructured.Unstructured) (bool, string, error) {
	l := e.Facts.Release.WithDefaults()
	obj, _, err := adopted(ctx, e, want)
	if err != nil {
		if kube.IsNotServed(err) {
			return false, "DataScienceCluster not served", nil
		}
		return false, err.Error(), nil
	}
	live, err := e.Clients.Get(ctx, obj)
	if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
		return false, "DataScienceCluster missing", nil
	}
	if err != nil {
		return false, "", err
	}
	if p, ok := Contains(live.Object, map[string]any{"spec": obj.Object["spec"]}); !ok {
		return false, differsAt("DataScienceCluster "+obj.GetName(), p), nil
	}
	if r := dscReadyFor(l)(live); !r.Done {
		return false, "DataScienceCluster " + r.Status, nil
	}
	for _, crd := range l.MaaSCRDs() {
		if ok, err := crdServed(ctx, e, crd); err != nil || !ok {
			return false, "CRD " + crd + " not served (not Established)", err
		}
	}
	ns := l.MaaSAPINamespace(e.Inv)
	d, err := e.Clients.Kube.AppsV1().Deployments(ns).Get(ctx, "maas-api", metav1.GetOptions{})
	if err != nil {
		return false, "Deployment " + ns + "/maas-api missing", nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == "Available" && c.Status == "True" {
			return true, "", nil
		}
	}
	return false, "Deployment " + ns + "/maas-api not Available", nil
}
