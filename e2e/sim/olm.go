package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The simulated OLM (operator-framework/operator-lifecycle-manager, v0.2x as
// shipped with OpenShift 4.2x). Upstream sources of the behaviours below:
//   - catalog operator: pkg/controller/operators/catalog/operator.go
//     (syncResolvingNamespace, syncInstallPlans, ensureSubscriptionCSVState)
//   - OLM operator: pkg/controller/operators/olm/operator.go
//     (transitionCSVState, updateInstallStatus) and operatorgroup.go
//   - API field meanings: operator-framework/api pkg/operators/v1alpha1 and
//     the CRDs in ../shared/crds/olm.
type olm struct {
	m        *manager
	catalogs map[string]map[string]map[string]bundle
	sub, ip  *reconciler
	csv      *reconciler
}

func registerOLM(m *manager) {
	o := &olm{m: m, catalogs: catalogs(m.opts.RHOAIVersion)}
	m.add(&reconciler{name: "olm/catalogsource", delayKey: OLM, primary: gvrCatalogSource, reconcile: o.reconcileCatalogSource})
	m.add(&reconciler{
		name: "olm/operatorgroup", delayKey: OLM, primary: gvrOperatorGroup,
		watches:   []watch{{gvr: gvrNamespace, mapFn: m.allOf(gvrOperatorGroup, false)}},
		reconcile: o.reconcileOperatorGroup,
	})
	o.sub = &reconciler{
		name: "olm/subscription", delayKey: OLM, primary: gvrSubscription,
		watches: []watch{
			{gvr: gvrCatalogSource, mapFn: m.allOf(gvrSubscription, false)},
			{gvr: gvrOperatorGroup, mapFn: m.allOf(gvrSubscription, true)},
			{gvr: gvrInstallPlan, mapFn: ownerKeys("Subscription")},
			{gvr: gvrCSV, mapFn: m.allOf(gvrSubscription, true)},
		},
		reconcile: o.reconcileSubscription,
	}
	m.add(o.sub)
	// The catalog and OLM operators work on several namespaces at once;
	// one worker would queue each InstallPlan's CRD registrations behind
	// the others'.
	o.ip = &reconciler{
		name: "olm/installplan", delayKey: OLM, primary: gvrInstallPlan, workers: 4,
		watches: []watch{
			{gvr: gvrOperatorGroup, mapFn: m.allOf(gvrInstallPlan, true)},
			{gvr: gvrCSV},
			{gvr: gvrCRD},
		},
		reconcile: o.reconcileInstallPlan,
	}
	m.add(o.ip)
	o.csv = &reconciler{
		name: "olm/csv", delayKey: OLM, primary: gvrCSV, workers: 4,
		watches: []watch{
			{gvr: gvrOperatorGroup, mapFn: m.allOf(gvrCSV, true)},
			{gvr: gvrDeployment, mapFn: csvOfDeployment},
			{gvr: gvrCRD, mapFn: m.allOf(gvrCSV, false)},
		},
		reconcile: o.reconcileCSV,
	}
	m.add(o.csv)
}

func csvOfDeployment(u *unstructured.Unstructured) []key {
	l := u.GetLabels()
	if l["olm.owner.kind"] != "ClusterServiceVersion" || l["olm.owner"] == "" {
		return nil
	}
	return []key{{Namespace: l["olm.owner.namespace"], Name: l["olm.owner"]}}
}

// reconcileCatalogSource reports the registry connection the way the catalog
// operator does once the catalog's registry pod serves gRPC
// (status.connectionState.lastObservedState READY).
func (o *olm) reconcileCatalogSource(ctx context.Context, k key) error {
	cs := o.m.get(gvrCatalogSource, k.Namespace, k.Name)
	if cs == nil {
		return nil
	}
	state := "READY"
	if slices.Contains(o.m.opts.Faults.UnhealthyCatalogs, k.Name) {
		state = "TRANSIENT_FAILURE"
	}
	if str(cs, "status", "connectionState", "lastObservedState") == state {
		return nil
	}
	status := map[string]any{
		"connectionState": map[string]any{
			"address":           fmt.Sprintf("%s.%s.svc:50051", k.Name, k.Namespace),
			"lastObservedState": state,
		},
		"registryService": map[string]any{
			"protocol":         "grpc",
			"serviceName":      k.Name,
			"serviceNamespace": k.Namespace,
			"port":             "50051",
		},
	}
	return o.m.updateStatusStamped(ctx, gvrCatalogSource, cs, status,
		[]string{"connectionState", "lastConnect"}, []string{"registryService", "createdAt"})
}

// reconcileOperatorGroup writes status.namespaces as OLM's operatorgroup
// sync does: the target namespaces, or [""] (all namespaces) when neither
// targetNamespaces nor a selector is set.
func (o *olm) reconcileOperatorGroup(ctx context.Context, k key) error {
	og := o.m.get(gvrOperatorGroup, k.Namespace, k.Name)
	if og == nil {
		return nil
	}
	var namespaces []string
	targets, _, _ := unstructured.NestedStringSlice(og.Object, "spec", "targetNamespaces")
	sel, hasSel, _ := unstructured.NestedMap(og.Object, "spec", "selector")
	switch {
	case len(targets) > 0:
		namespaces = append(namespaces, targets...)
	case hasSel:
		ls, err := metav1.LabelSelectorAsSelector(toLabelSelector(sel))
		if err != nil {
			return nil
		}
		for _, ns := range o.m.list(gvrNamespace, "") {
			if ls.Matches(labels.Set(ns.GetLabels())) {
				namespaces = append(namespaces, ns.GetName())
			}
		}
	default:
		namespaces = []string{""}
	}
	sort.Strings(namespaces)
	status := map[string]any{"namespaces": namespaces}
	return o.m.updateStatusStamped(ctx, gvrOperatorGroup, og, status, []string{"lastUpdated"})
}

func toLabelSelector(m map[string]any) *metav1.LabelSelector {
	var s metav1.LabelSelector
	_ = fromMap(m, &s)
	return &s
}

// resolve finds the bundle of pkg in channel of catalog.
func (o *olm) resolve(catalog, pkg, channel string) (bundle, string) {
	pkgs, ok := o.catalogs[catalog]
	if !ok {
		return bundle{}, fmt.Sprintf("no operators found from catalog %s", catalog)
	}
	chans, ok := pkgs[pkg]
	if !ok {
		return bundle{}, fmt.Sprintf("no operators found in package %s", pkg)
	}
	if channel == "" {
		for _, b := range chans { // packages here have one channel; that is the default
			return b, ""
		}
	}
	b, ok := chans[channel]
	if !ok {
		return bundle{}, fmt.Sprintf("no operators found in channel %s of package %s", channel, pkg)
	}
	return b, ""
}

// bundleByCSV finds the bundle with CSV name csv in any catalog.
func (o *olm) bundleByCSV(csv string) (bundle, string, bool) {
	for cat, pkgs := range o.catalogs {
		for _, chans := range pkgs {
			for _, b := range chans {
				if b.CSV == csv {
					return b, cat, true
				}
			}
		}
	}
	return bundle{}, "", false
}

// operatorGroups lists the OperatorGroups of ns. managing keeps only those
// OLM already synced (status.namespaces set), the ones the catalog
// operator's attenuated service account query counts.
func (o *olm) operatorGroups(ns string, managing bool) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, og := range o.m.list(gvrOperatorGroup, ns) {
		if managing && len(sliceOf(og, "status", "namespaces")) == 0 {
			continue
		}
		out = append(out, og)
	}
	return out
}

func (o *olm) reconcileSubscription(ctx context.Context, k key) error {
	m := o.m
	sub := m.get(gvrSubscription, k.Namespace, k.Name)
	if sub == nil {
		return nil
	}
	pkg, channel := str(sub, "spec", "name"), str(sub, "spec", "channel")
	source, sourceNS := str(sub, "spec", "source"), str(sub, "spec", "sourceNamespace")
	old := mapOf(sub, "status")
	status := map[string]any{}
	for _, f := range []string{"currentCSV", "installedCSV", "installPlanRef", "installplan", "installPlanGeneration", "state"} {
		if v, ok := old[f]; ok {
			status[f] = v
		}
	}
	oldConds := old["conditions"]

	// Catalog health, as the catalog operator reports it for every
	// Subscription of the namespace (status.catalogHealth and condition
	// CatalogSourcesUnhealthy).
	cs := m.get(gvrCatalogSource, sourceNS, source)
	var health []any
	seen := map[string]bool{}
	for _, c := range append(m.list(gvrCatalogSource, sourceNS), m.list(gvrCatalogSource, k.Namespace)...) {
		if seen[string(c.GetUID())] {
			continue
		}
		seen[string(c.GetUID())] = true
		health = append(health, map[string]any{
			"catalogSourceRef": map[string]any{
				"apiVersion": "operators.coreos.com/v1alpha1", "kind": "CatalogSource",
				"name": c.GetName(), "namespace": c.GetNamespace(), "uid": string(c.GetUID()),
			},
			"healthy":     str(c, "status", "connectionState", "lastObservedState") == "READY",
			"lastUpdated": timeString(c.GetCreationTimestamp().Time),
		})
	}
	if len(health) > 0 {
		status["catalogHealth"] = health
	}
	healthy := cs != nil && str(cs, "status", "connectionState", "lastObservedState") == "READY"
	if !healthy {
		msg := fmt.Sprintf("targeted catalogsource %s/%s missing", sourceNS, source)
		if cs != nil {
			msg = fmt.Sprintf("targeted catalogsource %s/%s unhealthy", sourceNS, source)
		}
		status["conditions"] = conditions(oldConds, cond("CatalogSourcesUnhealthy", true, "UnhealthyCatalogSourceFound", msg))
		return m.updateStatusStamped(ctx, gvrSubscription, sub, status, []string{"lastUpdated"})
	}
	catalogOK := cond("CatalogSourcesUnhealthy", false, "AllCatalogSourcesHealthy", "all available catalogsources are healthy")

	// syncResolvingNamespace returns an error before touching any
	// Subscription when the namespace has more than one OperatorGroup
	// (resolver.IsFailForwardEnabled: "found %d operatorGroups, expected 1").
	if ogs := o.operatorGroups(k.Namespace, false); len(ogs) > 1 {
		m.log.Info("olm: namespace has several operatorgroups, not resolving",
			zap.String("namespace", k.Namespace), zap.Int("count", len(ogs)))
		return nil
	}

	b, why := o.resolve(source, pkg, channel)
	if why != "" {
		msg := fmt.Sprintf("constraints not satisfiable: %s in the catalog referenced by subscription %s, subscription %s exists", why, k.Name, k.Name)
		status["conditions"] = conditions(oldConds, catalogOK, cond("ResolutionFailed", true, "ConstraintsNotSatisfiable", msg))
		return m.updateStatusStamped(ctx, gvrSubscription, sub, status, []string{"lastUpdated"})
	}
	// The OLM delay covers resolution, bundle unpacking and the install up
	// to CSV Succeeded. The plan, CRDs, CSV and Deployment are made at once
	// (their real time on the local control plane counts inside the
	// delay). Upstream the catalog operator writes currentCSV, the
	// installPlanRef and state UpgradePending as soon as it has resolved
	// and created the plan (syncResolvingNamespace, then
	// updateSubscriptionStatuses), and AtLatestKnown with installedCSV
	// once the plan is Complete and the CSV exists
	// (ensureSubscriptionCSVState), minutes later. So the first kind is
	// written at once; the states that end a client's wait (AtLatestKnown,
	// and the failure states UpgradeFailed, RequiresApproval,
	// InstallPlanMissing) are held until the delay has passed (held), as
	// is the CSV's final phase (installHold).
	left := m.delayLeft(o.sub, sub, "resolve")
	held := m.hold(ctx, o.sub, sub, "resolve")

	ipName := str(sub, "status", "installPlanRef", "name")
	var ip *unstructured.Unstructured
	if ipName == "" {
		// While the status is held the plan may exist without a
		// reference to it yet.
		ip = m.get(gvrInstallPlan, k.Namespace, installPlanName(sub))
	}
	if ipName == "" {
		if ip == nil {
			created, err := o.createInstallPlan(ctx, sub, b, source, sourceNS)
			if err != nil {
				return err
			}
			ip = created
		}
		status["currentCSV"] = b.CSV
		status["installPlanGeneration"] = int64(1)
		status["installPlanRef"] = map[string]any{
			"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan",
			"name": ip.GetName(), "namespace": ip.GetNamespace(),
			"resourceVersion": ip.GetResourceVersion(), "uid": string(ip.GetUID()),
		}
		status["installplan"] = map[string]any{
			"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan",
			"name": ip.GetName(), "uuid": string(ip.GetUID()),
		}
	} else {
		ip = m.get(gvrInstallPlan, k.Namespace, ipName)
		if ip == nil {
			// A referenced InstallPlan that was deleted is reported, not
			// replaced (operator-lifecycle-manager PR #1894; case B02).
			status["state"] = "UpgradePending"
			status["conditions"] = conditions(oldConds, catalogOK,
				cond("InstallPlanMissing", true, "ReferencedInstallPlanNotFound",
					fmt.Sprintf("Referenced InstallPlan %s/%s is missing", k.Namespace, ipName)))
			return m.updateStatusStamped(held, gvrSubscription, sub, status, []string{"lastUpdated"})
		}
	}

	conds := []condition{catalogOK}
	switch phase := str(ip, "status", "phase"); phase {
	case "Complete":
		switch {
		case left > 0:
			// Within the delay the plan stands for one still installing.
			status["state"] = "UpgradePending"
			conds = append(conds, cond("InstallPlanPending", true, "Installing", ""))
		case m.get(gvrCSV, k.Namespace, str(sub, "status", "currentCSV")) != nil || m.get(gvrCSV, k.Namespace, b.CSV) != nil:
			status["state"] = "AtLatestKnown"
			status["installedCSV"] = status["currentCSV"]
		default:
			status["state"] = "UpgradePending"
		}
	case "Failed":
		ctx = held
		status["state"] = "UpgradeFailed"
		conds = append(conds, cond("InstallPlanFailed", true, "InstallCheckFailed", str(ip, "status", "message")))
	case "RequiresApproval":
		ctx = held
		status["state"] = "UpgradePending"
		conds = append(conds, cond("InstallPlanPending", true, "RequiresApproval", ""))
	default:
		status["state"] = "UpgradePending"
		conds = append(conds, cond("InstallPlanPending", true, "Installing", ""))
	}
	status["conditions"] = conditions(oldConds, conds...)
	return m.updateStatusStamped(ctx, gvrSubscription, sub, status, []string{"lastUpdated"})
}

// createInstallPlan creates the namespace's InstallPlan for b. Its name is
// "install-" plus five characters, the shape of OLM's generateName, derived
// from the Subscription UID so a retry finds the same plan. Approval is
// Manual when any Subscription of the namespace asks for Manual: OLM
// resolves a namespace as a whole and one Manual Subscription makes the
// shared plan Manual (case B02 b).
func (o *olm) createInstallPlan(ctx context.Context, sub *unstructured.Unstructured, b bundle, source, sourceNS string) (*unstructured.Unstructured, error) {
	approval := "Automatic"
	if o.m.opts.Faults.ManualApproval {
		approval = "Manual"
	}
	for _, s := range o.m.list(gvrSubscription, sub.GetNamespace()) {
		if str(s, "spec", "installPlanApproval") == "Manual" {
			approval = "Manual"
		}
	}
	name := installPlanName(sub)
	suffix := strings.TrimPrefix(name, "install-")
	ip := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operators.coreos.com/v1alpha1",
		"kind":       "InstallPlan",
		"metadata": map[string]any{
			"name":      name,
			"namespace": sub.GetNamespace(),
			"labels": map[string]any{
				"operators.coreos.com/" + b.Package + "." + sub.GetNamespace(): "",
			},
			"ownerReferences": []any{ownerRef(sub, false)},
		},
		"spec": map[string]any{
			"approval":                   approval,
			"approved":                   approval == "Automatic",
			"clusterServiceVersionNames": []any{b.CSV},
			"generation":                 int64(1),
			"source":                     source,
			"sourceNamespace":            sourceNS,
		},
	}}
	created, err := o.m.create(ctx, gvrInstallPlan, ip)
	if err != nil {
		return nil, err
	}
	if err := o.createExtraInstallPlans(ctx, sub, b, source, sourceNS, suffix); err != nil {
		return nil, err
	}
	return created, nil
}

// installPlanName is the name of sub's InstallPlan: "install-" plus five
// letters (the shape of OLM's generateName) derived from the Subscription
// UID, so a retry finds the same plan.
func installPlanName(sub *unstructured.Unstructured) string {
	sum := sha256.Sum256([]byte(sub.GetUID()))
	return "install-" + strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return 'a' + (r - '0')
		}
		return r
	}, hex.EncodeToString(sum[:])[:5])
}

// createExtraInstallPlans creates the Faults.ExtraInstallPlans of b's
// package next to sub's plan: Manual, unapproved, referenced by no
// Subscription, for a CSV the channel does not resolve to.
func (o *olm) createExtraInstallPlans(ctx context.Context, sub *unstructured.Unstructured, b bundle, source, sourceNS, suffix string) error {
	for i, csv := range o.m.opts.Faults.ExtraInstallPlans {
		if pkg, _, _ := strings.Cut(csv, "."); pkg != b.Package {
			continue
		}
		ip := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "operators.coreos.com/v1alpha1",
			"kind":       "InstallPlan",
			"metadata": map[string]any{
				"name":      fmt.Sprintf("install-%s%d", suffix[:4], i),
				"namespace": sub.GetNamespace(),
				"labels":    map[string]any{"operators.coreos.com/" + b.Package + "." + sub.GetNamespace(): ""},
			},
			"spec": map[string]any{
				"approval":                   "Manual",
				"approved":                   false,
				"clusterServiceVersionNames": []any{csv},
				"generation":                 int64(2),
				"source":                     source,
				"sourceNamespace":            sourceNS,
			},
		}}
		if _, err := o.m.create(ctx, gvrInstallPlan, ip); err != nil {
			return err
		}
	}
	return nil
}

func (o *olm) reconcileInstallPlan(ctx context.Context, k key) error {
	// As in reconcileCSV, the step after the plan's move to Installing
	// runs at once on the written object, not after a watch round trip.
	ip := o.m.fresh(gvrInstallPlan, o.m.get(gvrInstallPlan, k.Namespace, k.Name))
	for range 2 {
		if ip == nil {
			return nil
		}
		next, err := o.syncInstallPlan(ctx, k, ip)
		if err != nil {
			return err
		}
		ip = next
	}
	return nil
}

// syncInstallPlan makes one transition of ip: it returns the plan after
// the move to Installing, nil after any other outcome.
func (o *olm) syncInstallPlan(ctx context.Context, k key, ip *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	m := o.m
	csvNames, _, _ := unstructured.NestedStringSlice(ip.Object, "spec", "clusterServiceVersionNames")
	approval := str(ip, "spec", "approval")
	approved, _, _ := unstructured.NestedBool(ip.Object, "spec", "approved")
	source := str(ip, "spec", "source")
	old := mapOf(ip, "status")
	status := map[string]any{"catalogSources": []any{source}}
	if source == "" {
		status["catalogSources"] = []any{}
	}
	for _, f := range []string{"startTime", "plan"} {
		if v, ok := old[f]; ok {
			status[f] = v
		}
	}
	switch phase := mstr(old, "phase"); phase {
	case "Complete", "Failed":
		return nil, nil
	case "", "Planning", "RequiresApproval":
		// The catalog operator holds a Manual plan in RequiresApproval
		// until spec.approved is true.
		if approval == "Manual" && !approved {
			status["phase"] = "RequiresApproval"
			return nil, m.updateStatus(ctx, gvrInstallPlan, ip, status)
		}
		status["phase"] = "Installing"
		status["startTime"] = nowString()
		return m.writeStatus(ctx, gvrInstallPlan, ip, status)
	}

	// Installing: the attenuated service account query needs exactly one
	// OperatorGroup managing the namespace; otherwise the plan stays
	// Installing with condition Installed False, reason InstallCheckFailed.
	if ogs := o.operatorGroups(k.Namespace, true); len(ogs) != 1 {
		msg := "no operator group found that is managing this namespace"
		if len(ogs) > 1 {
			msg = fmt.Sprintf("more than one operator group(s) are managing this namespace count=%d", len(ogs))
		}
		status["phase"] = "Installing"
		status["conditions"] = conditions(old["conditions"], cond("Installed", false, "InstallCheckFailed", msg))
		return nil, m.updateStatus(ctx, gvrInstallPlan, ip, status)
	}
	og := o.operatorGroups(k.Namespace, true)[0]

	var steps []any
	for _, name := range csvNames {
		b, catalog, ok := o.bundleByCSV(name)
		if !ok {
			status["phase"] = "Failed"
			status["message"] = fmt.Sprintf("bundle for %s not found in any catalog", name)
			status["conditions"] = conditions(old["conditions"], cond("Installed", false, "InstallComponentFailed", mstr(status, "message")))
			return nil, m.updateStatus(ctx, gvrInstallPlan, ip, status)
		}
		files, err := o.bundleCRDs(b)
		if err != nil {
			return nil, err
		}
		// The InstallPlan creates the bundle's CRDs and the CSV; the OLM
		// operator then installs the CSV's Deployments.
		if _, err := m.ensureCRDs(ctx, files); err != nil {
			return nil, err
		}
		for _, f := range files {
			m.olmCRDs.Store(f.Name, true)
		}
		for _, f := range files {
			steps = append(steps, planStep(name, catalog, str(ip, "spec", "sourceNamespace"),
				"apiextensions.k8s.io", "v1", "CustomResourceDefinition", f.Name))
		}
		if m.get(gvrCSV, k.Namespace, name) == nil {
			if _, err := m.create(ctx, gvrCSV, o.csvObject(b, k.Namespace, og, files)); err != nil {
				return nil, err
			}
		}
		steps = append(steps, planStep(name, catalog, str(ip, "spec", "sourceNamespace"),
			"operators.coreos.com", "v1alpha1", "ClusterServiceVersion", name))
	}
	status["phase"] = "Complete"
	status["plan"] = steps
	status["conditions"] = conditions(old["conditions"], cond("Installed", true, "", ""))
	return nil, m.updateStatus(ctx, gvrInstallPlan, ip, status)
}

func planStep(csv, source, sourceNS, group, version, kind, name string) map[string]any {
	return map[string]any{
		"resolving": csv,
		"status":    "Created",
		"resource": map[string]any{
			"group": group, "version": version, "kind": kind, "name": name,
			"sourceName": source, "sourceNamespace": sourceNS,
		},
	}
}

func (o *olm) bundleCRDs(b bundle) ([]*crdFile, error) {
	var files []*crdFile
	for _, g := range b.CRDs {
		f, err := o.m.crds.glob(g)
		if err != nil {
			return nil, err
		}
		files = append(files, f...)
	}
	return files, nil
}

// csvObject is the ClusterServiceVersion of b as a bundle ships it, with the
// annotations OLM adds for the namespace's OperatorGroup.
func (o *olm) csvObject(b bundle, ns string, og *unstructured.Unstructured, files []*crdFile) *unstructured.Unstructured {
	var owned []any
	for _, f := range files {
		owned = append(owned, map[string]any{"name": f.Name, "version": f.Version, "kind": f.Kind, "displayName": f.Kind})
	}
	var modes []any
	for _, t := range []string{"OwnNamespace", "SingleNamespace", "MultiNamespace", "AllNamespaces"} {
		modes = append(modes, map[string]any{"type": t, "supported": b.InstallModes[t]})
	}
	targets, _, _ := unstructured.NestedStringSlice(og.Object, "status", "namespaces")
	spec := toMap(b.deploymentSpec())
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operators.coreos.com/v1alpha1",
		"kind":       "ClusterServiceVersion",
		"metadata": map[string]any{
			"name":      b.CSV,
			"namespace": ns,
			"labels":    map[string]any{"operators.coreos.com/" + b.Package + "." + ns: ""},
			"annotations": map[string]any{
				"olm.operatorGroup":     og.GetName(),
				"olm.operatorNamespace": ns,
				"olm.targetNamespaces":  strings.Join(targets, ","),
			},
		},
		"spec": map[string]any{
			"displayName":  b.DisplayName,
			"version":      b.Version,
			"provider":     map[string]any{"name": b.Provider},
			"maturity":     "stable",
			"installModes": modes,
			"customresourcedefinitions": map[string]any{
				"owned": owned,
			},
			"install": map[string]any{
				"strategy": "deployment",
				"spec": map[string]any{
					"deployments": []any{map[string]any{"name": b.Deployment, "spec": spec}},
				},
			},
		},
	}}
}

// installModeSupports mirrors InstallModeSet.Supports: "" (all namespaces)
// needs AllNamespaces; the own namespace alone needs OwnNamespace; one other
// namespace SingleNamespace; several MultiNamespace.
func installModeSupports(csv *unstructured.Unstructured, targets []string) error {
	modes := map[string]bool{}
	for _, im := range sliceOf(csv, "spec", "installModes") {
		mm, _ := im.(map[string]any)
		s, _ := mm["supported"].(bool)
		modes[mstr(mm, "type")] = s
	}
	switch {
	case len(targets) == 1 && targets[0] == "":
		if !modes["AllNamespaces"] {
			return fmt.Errorf("AllNamespaces InstallModeType not supported, cannot configure to watch all namespaces")
		}
	case len(targets) == 1 && targets[0] == csv.GetNamespace():
		if !modes["OwnNamespace"] {
			return fmt.Errorf("OwnNamespace InstallModeType not supported, cannot configure to watch own namespace")
		}
	case len(targets) == 1:
		if !modes["SingleNamespace"] {
			return fmt.Errorf("SingleNamespace InstallModeType not supported, cannot configure to watch one namespace")
		}
	case len(targets) > 1:
		if !modes["MultiNamespace"] {
			return fmt.Errorf("MultiNamespace InstallModeType not supported, cannot configure to watch %d namespaces", len(targets))
		}
	}
	return nil
}

func (o *olm) reconcileCSV(ctx context.Context, k key) error {
	// Each pass is one sync of upstream's transitionCSVState, which writes
	// one phase and is requeued by its own update. Here the next pass runs
	// at once on the object the write returned instead of waiting for the
	// watch to deliver it: every phase is still written and observable,
	// but a loaded local API server does not add a watch round trip (and
	// a write conflict on the stale cache) to each of the five phases.
	csv := o.m.fresh(gvrCSV, o.m.get(gvrCSV, k.Namespace, k.Name))
	for range 8 {
		if csv == nil {
			return nil
		}
		next, err := o.syncCSV(ctx, k, csv)
		if err != nil {
			return err
		}
		csv = next
	}
	return nil
}

// syncCSV makes one transition of csv and returns the CSV after it, nil when
// it wrote nothing.
func (o *olm) syncCSV(ctx context.Context, k key, csv *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	m := o.m
	old := mapOf(csv, "status")
	phase, reason := mstr(old, "phase"), mstr(old, "reason")
	set := func(p, r, msg string) (*unstructured.Unstructured, error) { return o.setCSVPhase(ctx, csv, p, r, msg) }

	// transitionCSVState: OperatorGroup association first.
	ogs := o.operatorGroups(k.Namespace, false)
	switch len(ogs) {
	case 0:
		return set("Failed", "NoOperatorGroup", "csv in namespace with no operatorgroups")
	case 1:
	default:
		return set("Failed", "TooManyOperatorGroups", "csv created in namespace with multiple operatorgroups, can't pick one automatically")
	}
	targets, found, _ := unstructured.NestedStringSlice(ogs[0].Object, "status", "namespaces")
	if !found {
		return nil, nil // wait for OLM's OperatorGroup sync; its status update requeues this CSV
	}
	if err := installModeSupports(csv, targets); err != nil {
		return set("Failed", "UnsupportedOperatorGroup", err.Error())
	}
	if phase == "Failed" && slices.Contains([]string{"NoOperatorGroup", "TooManyOperatorGroups", "UnsupportedOperatorGroup", "NoTargetNamespaces"}, reason) {
		return set("Pending", "RequirementsUnknown", "InstallModes now support target namespaces. Transitioning to Pending.")
	}

	deployments := sliceOf(csv, "spec", "install", "spec", "deployments")
	failed := slices.Contains(m.opts.Faults.FailCSV, k.Name)
	switch phase {
	case "":
		return set("Pending", "RequirementsUnknown", "requirements not yet checked")
	case "Pending":
		met, reqs := o.requirements(csv)
		if !met {
			o.csv.log.Debug("requirements not met", zap.Stringer("key", k), zap.Any("reqs", reqs))
			return o.setCSVPhaseReqs(ctx, csv, "Pending", "RequirementsNotMet", "one or more requirements couldn't be found", reqs)
		}
		return o.setCSVPhaseReqs(ctx, csv, "InstallReady", "RequirementsMet", "all requirements found, attempting install", reqs)
	case "InstallReady":
		// The operator's pod starts at the end of the minutes OLM takes
		// (image pull and start come last), so its Deployment is created
		// rolloutLead before the OLM delay ends; at once, kwok would have
		// the pod running long before that at longer delays, and, say, the
		// RHCL operator would start before Istio exists (case B01) where a
		// cluster has it the other way round.
		if left, lead := o.installHold(csv), rolloutLead(m.opts.Delay[OLM]); left > lead {
			o.csv.queue.AddAfter(k, left-lead)
			return nil, nil
		}
		if err := o.installDeployments(ctx, csv, deployments); err != nil {
			return set("Failed", "ComponentFailed", fmt.Sprintf("install strategy failed: %v", err))
		}
		return set("Installing", "InstallSucceeded", "waiting for install components to report healthy")
	case "Installing":
		if name, ok := o.deploymentsAvailable(k.Namespace, deployments); !ok && !failed {
			return set("Installing", "InstallWaiting", fmt.Sprintf("installing: waiting for deployment %s to become ready: deployment %q not available: Deployment does not have minimum availability.", name, name))
		}
		// The final phase, Succeeded or Failed, waits for the OLM delay
		// of the Subscription that installs this CSV.
		if left := o.installHold(csv); left > 0 {
			o.csv.log.Debug("holding status", zap.Stringer("key", k), zap.Duration("left", left))
			o.csv.queue.AddAfter(k, left)
			return nil, nil
		}
		if failed {
			return set("Failed", "InstallCheckFailed", fmt.Sprintf("install failed: deployment %s not ready before timeout: deployment %q exceeded its progress deadline", deploymentName(deployments), deploymentName(deployments)))
		}
		if name, ok := o.deploymentsAvailable(k.Namespace, deployments); !ok {
			return set("Installing", "InstallWaiting", fmt.Sprintf("installing: waiting for deployment %s to become ready: deployment %q not available: Deployment does not have minimum availability.", name, name))
		}
		return set("Succeeded", "InstallSucceeded", "install strategy completed with no errors")
	case "Succeeded":
		if name, ok := o.deploymentsAvailable(k.Namespace, deployments); !ok {
			return set("Failed", "ComponentUnhealthy", fmt.Sprintf("installing: waiting for deployment %s to become ready: deployment %q not available: Deployment does not have minimum availability.", name, name))
		}
		if met, reqs := o.requirements(csv); !met {
			return o.setCSVPhaseReqs(ctx, csv, "Failed", "RequirementsNotMet", "requirements no longer met", reqs)
		}
	case "Failed":
		if failed {
			return nil, nil
		}
		if _, ok := o.deploymentsAvailable(k.Namespace, deployments); ok {
			return set("Succeeded", "InstallSucceeded", "install strategy completed with no errors")
		}
		return set("Pending", "NeedsReinstall", "installing: deployment changed, needs reinstall")
	}
	return nil, nil
}

// installHold returns how long csv's final phase must still wait: the
// OLM delay of a Subscription of its namespace that resolves to it, counted
// from when reconcileSubscription first found that Subscription
// resolvable. Zero when no such delay runs (a CSV created by hand).
func (o *olm) installHold(csv *unstructured.Unstructured) time.Duration {
	var left time.Duration
	for _, sub := range o.m.list(gvrSubscription, csv.GetNamespace()) {
		b, why := o.resolve(str(sub, "spec", "source"), str(sub, "spec", "name"), str(sub, "spec", "channel"))
		if why != "" || b.CSV != csv.GetName() {
			continue
		}
		left = max(left, o.m.delayLeftIfStarted(o.sub, sub.GetUID(), "resolve"))
	}
	return left
}

func deploymentName(deployments []any) string {
	if len(deployments) == 0 {
		return ""
	}
	return mstr(deployments[0].(map[string]any), "name")
}

// requirements checks that every owned CRD exists and is Established, the
// requirement check of the Pending phase (requirementAndPermissionStatus).
func (o *olm) requirements(csv *unstructured.Unstructured) (bool, []any) {
	met := true
	var out []any
	for _, c := range sliceOf(csv, "spec", "customresourcedefinitions", "owned") {
		cm, _ := c.(map[string]any)
		name := mstr(cm, "name")
		crd := o.m.get(gvrCRD, "", name)
		st := map[string]any{
			"group": "apiextensions.k8s.io", "version": "v1", "kind": "CustomResourceDefinition", "name": name,
			"status": "Present", "message": "CRD is present and Established condition is true",
		}
		switch {
		case crd == nil:
			met = false
			st["status"], st["message"] = "NotPresent", "CRD is not present"
		case !conditionTrue(crd, "Established"):
			met = false
			st["status"], st["message"] = "NotPresent", "CRD is present but the Established condition is False (not available)"
		default:
			st["uuid"] = string(crd.GetUID())
		}
		out = append(out, st)
	}
	return met, out
}

// installDeployments creates the strategy's Deployments, labelled and owned
// the way OLM's StrategyDeploymentInstaller does.
func (o *olm) installDeployments(ctx context.Context, csv *unstructured.Unstructured, deployments []any) error {
	for _, d := range deployments {
		dm, _ := d.(map[string]any)
		name := mstr(dm, "name")
		if o.m.get(gvrDeployment, csv.GetNamespace(), name) != nil {
			continue
		}
		specMap, _ := dm["spec"].(map[string]any)
		var spec appsv1.DeploymentSpec
		if err := fromMap(specMap, &spec); err != nil {
			return fmt.Errorf("deployment %s spec: %w", name, err)
		}
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: csv.GetNamespace(),
				Labels: map[string]string{
					"olm.owner": csv.GetName(), "olm.owner.kind": "ClusterServiceVersion",
					"olm.owner.namespace": csv.GetNamespace(), "olm.managed": "true",
				},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "operators.coreos.com/v1alpha1", Kind: "ClusterServiceVersion",
					Name: csv.GetName(), UID: csv.GetUID(),
					Controller: new(false), BlockOwnerDeletion: new(false),
				}},
			},
			Spec: spec,
		}
		_, err := o.m.kube.AppsV1().Deployments(csv.GetNamespace()).Create(ctx, dep, metaCreate)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create deployment %s/%s: %w", csv.GetNamespace(), name, err)
		}
		o.m.log.Info("created", zap.String("resource", "deployments"), zap.String("namespace", csv.GetNamespace()), zap.String("name", name))
	}
	return nil
}

// deploymentsAvailable returns the first Deployment that is not Available.
func (o *olm) deploymentsAvailable(ns string, deployments []any) (string, bool) {
	for _, d := range deployments {
		name := mstr(d.(map[string]any), "name")
		if !deploymentAvailable(o.m.get(gvrDeployment, ns, name)) {
			return name, false
		}
	}
	return "", true
}

func (o *olm) setCSVPhase(ctx context.Context, csv *unstructured.Unstructured, phase, reason, msg string) (*unstructured.Unstructured, error) {
	return o.setCSVPhaseReqs(ctx, csv, phase, reason, msg, nil)
}

// setCSVPhaseReqs is ClusterServiceVersion.SetPhase: phase, reason and
// message with timestamps, and an entry appended to the condition history
// (OLM keeps the last 20). It returns the CSV after the write, nil when
// nothing changed.
func (o *olm) setCSVPhaseReqs(ctx context.Context, csv *unstructured.Unstructured, phase, reason, msg string, reqs []any) (*unstructured.Unstructured, error) {
	old := mapOf(csv, "status")
	if mstr(old, "phase") == phase && mstr(old, "reason") == reason && mstr(old, "message") == msg &&
		(reqs == nil || equalJSON(old["requirementStatus"], reqs)) {
		return nil, nil
	}
	now := nowString()
	status := map[string]any{}
	for k, v := range old {
		status[k] = v
	}
	status["phase"], status["reason"], status["message"] = phase, reason, msg
	status["lastUpdateTime"] = now
	if mstr(old, "phase") != phase || mstr(old, "lastTransitionTime") == "" {
		status["lastTransitionTime"] = now
	}
	if reqs != nil {
		status["requirementStatus"] = reqs
	}
	// Like SetPhase, append to the history only when phase, reason or
	// message differ from its last entry.
	hist, _ := old["conditions"].([]any)
	if n := len(hist); n == 0 || !sameCSVCondition(hist[n-1], phase, reason, msg) {
		hist = append(slices.Clone(hist), map[string]any{
			"phase": phase, "reason": reason, "message": msg,
			"lastUpdateTime": now, "lastTransitionTime": status["lastTransitionTime"],
		})
	}
	if len(hist) > 20 {
		hist = hist[len(hist)-20:]
	}
	status["conditions"] = hist
	out, err := o.m.writeStatus(ctx, gvrCSV, csv, status)
	if err != nil || out == nil {
		return nil, err
	}
	o.m.log.Info("csv phase", zap.String("csv", csv.GetNamespace()+"/"+csv.GetName()), zap.String("phase", phase), zap.String("reason", reason))
	return out, nil
}

func sameCSVCondition(c any, phase, reason, msg string) bool {
	cm, _ := c.(map[string]any)
	return mstr(cm, "phase") == phase && mstr(cm, "reason") == reason && mstr(cm, "message") == msg
}

// operatorRunning reports whether the operator serving CRD crdName runs, so
// that a simulated operator only acts while the real one would: when a CSV
// owns the CRD, the CSV must be Succeeded and every Deployment of its
// install strategy Available. On a real cluster the operator's pod turns
// Ready at the end of the minutes OLM takes (pulling the image and starting
// the pod come last; olm-operator reports Succeeded as soon as it sees the
// Deployments Available, InstallStrategyDeploymentInstaller.CheckInstalled),
// whereas kwok makes the simulated Deployment Available within a second of
// its creation, at any delay scale. Starting the operator then would put,
// say, the RHCL operator's start before Istio exists at every scale but the
// fastest (Kuadrant MissingDependency, case B01) although on the cluster
// it is the other way round. The API server's watch caches of the
// operator's kinds are warmed when their CRDs become Established
// (crdChanged), as the operator's informers would have done.
// A CRD that no CSV owns counts as served by a running operator when it
// was installed by the test fixture (as on a cluster where the operator
// came another way), and as not running when an InstallPlan installed it:
// its CSV is gone, and with it (garbage-collected through the owner
// reference) the operator's Deployment, so nothing re-creates, say, the
// default DSCInitialization after an uninstall.
func (m *manager) operatorRunning(crdName string) bool {
	if !m.isServed(gvrCSV) {
		return true
	}
	for _, csv := range m.list(gvrCSV, "") {
		for _, o := range sliceOf(csv, "spec", "customresourcedefinitions", "owned") {
			if mstr(o.(map[string]any), "name") != crdName {
				continue
			}
			if str(csv, "status", "phase") != "Succeeded" {
				return false
			}
			for _, d := range sliceOf(csv, "spec", "install", "spec", "deployments") {
				if !deploymentAvailable(m.get(gvrDeployment, csv.GetNamespace(), mstr(d.(map[string]any), "name"))) {
					return false
				}
			}
			return true
		}
	}
	_, viaOLM := m.olmCRDs.Load(crdName)
	return !viaOLM
}

// ownerCSVUID is the UID of the CSV that owns CRD crdName, "" when none
// does.
func (m *manager) ownerCSVUID(crdName string) string {
	if !m.isServed(gvrCSV) {
		return ""
	}
	for _, csv := range m.list(gvrCSV, "") {
		for _, o := range sliceOf(csv, "spec", "customresourcedefinitions", "owned") {
			if mstr(o.(map[string]any), "name") == crdName {
				return string(csv.GetUID())
			}
		}
	}
	return ""
}

// operatorWatches are the watches a reconciler gated by operatorRunning
// needs: CSVs and OLM-owned Deployments, both requeueing every object of
// primary.
func (m *manager) operatorWatches(primary schema.GroupVersionResource) []watch {
	all := m.allOf(primary, false)
	return []watch{
		{gvr: gvrCSV, mapFn: all},
		{gvr: gvrDeployment, mapFn: func(u *unstructured.Unstructured) []key {
			if u.GetLabels()["olm.owner"] == "" {
				return nil
			}
			return all(u)
		}},
	}
}
