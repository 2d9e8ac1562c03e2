package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// plannedOperators are the OLM operators this install subscribes, the CNPG
// operator only when postgresql.cnpg.io is not served yet.
func plannedOperators(ctx context.Context, e *Env) ([]inventory.Operator, error) {
	ops := slices.Clone(e.Inv.Operators)
	served, err := crdServed(ctx, e, cnpgCRD)
	if err != nil {
		return nil, err
	}
	if !served {
		ops = append([]inventory.Operator{e.Inv.Database.Operator}, ops...)
	}
	return ops, nil
}

// operatorInstalled reports whether op's Subscription already installed a
// CSV (the catalog then matters only for updates).
func operatorInstalled(ctx context.Context, e *Env, op inventory.Operator) (*unstructured.Unstructured, error) {
	sub, err := getOptional(ctx, e.Clients, subscriptionGVK, op.Namespace, op.Package)
	if kube.IsNotServed(err) {
		return nil, nil
	}
	return sub, err
}

// checkCatalogSources: each CatalogSource the plan subscribes from is
// READY, and where the packages.operators.coreos.com API is served its
// PackageManifest offers the pinned channel.
func checkCatalogSources(ctx context.Context, e *Env) ([]Finding, error) {
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return nil, err
	}
	out, err := eachConcurrently(ops, func(op inventory.Operator) ([]Finding, error) {
		var out []Finding
		sub, err := operatorInstalled(ctx, e, op)
		if err != nil {
			return nil, err
		}
		installed := false
		if sub != nil {
			csv, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
			installed = csv != ""
		}
		sev := errorf
		if installed {
			sev = warnf // already installed: only updates need the catalog
		}
		cs, err := getShared(ctx, e, catalogSourceGVK, op.SourceNamespace, op.Source)
		if kube.IsNotServed(err) {
			return nil, errOLMNotServed
		}
		if err != nil {
			return nil, err
		}
		if cs == nil {
			out = append(out, sev("oc get catalogsource -n "+op.SourceNamespace+"; fix operators["+op.ID+"].source",
				"CatalogSource %s/%s (for %s) not found", op.SourceNamespace, op.Source, op.Package))
			return out, nil
		}
		if st, _, _ := unstructured.NestedString(cs.Object, "status", "connectionState", "lastObservedState"); st != "READY" {
			if st == "" {
				st = "no state yet"
			}
			out = append(out, sev(fmt.Sprintf("oc get catalogsource %s -n %s -o yaml; oc get pods -n %s -l olm.catalogSource=%s", op.Source, op.SourceNamespace, op.SourceNamespace, op.Source),
				"CatalogSource %s/%s (for %s) is %s, not READY: OLM cannot resolve %s from it", op.SourceNamespace, op.Source, op.Package, st, op.Package))
			return out, nil
		}
		pm, err := getOptional(ctx, e.Clients, packageManifestGVK, op.SourceNamespace, op.Package)
		if kube.IsNotServed(err) {
			return out, nil // not on every cluster (an aggregated API of OLM's package server)
		}
		if err != nil {
			return nil, err
		}
		if pm == nil {
			out = append(out, sev("oc get packagemanifests -n "+op.SourceNamespace+" | grep "+op.Package, "package %s is not in any catalog (PackageManifest %s/%s not found)", op.Package, op.SourceNamespace, op.Package))
			return out, nil
		}
		chans := packageChannels(pm)
		if !slices.Contains(chans, op.Channel) {
			out = append(out, sev("set operators["+op.ID+"].channel to one of: "+strings.Join(chans, ", "),
				"package %s offers no channel %s (channels: %s)", op.Package, op.Channel, strings.Join(chans, ", ")))
		}
		return out, nil
	})
	if errors.Is(err, errOLMNotServed) {
		return []Finding{errorf("install on OpenShift (OLM serves operators.coreos.com)", "OLM is not available: operators.coreos.com CatalogSource is not served")}, nil
	}
	return out, err
}

// errOLMNotServed ends checkCatalogSources and checkOperatorGroups early:
// OLM's kinds are not served.
var errOLMNotServed = errors.New("operators.coreos.com is not served")

// eachConcurrently runs fn for every item at the same time and returns
// their findings in the items' order, or the error of the first item (in
// that order) that failed. Preflight checks that read per operator use it:
// their reads are independent, and preflight is on every run's critical
// path.
func eachConcurrently[T any](items []T, fn func(T) ([]Finding, error)) ([]Finding, error) {
	fs := make([][]Finding, len(items))
	errs := make([]error, len(items))
	inParallel(len(items), len(items), func(i int) { fs[i], errs[i] = fn(items[i]) })
	var out []Finding
	for i := range items {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, fs[i]...)
	}
	return out, nil
}

// packageChannels returns status.channels[].name of a PackageManifest.
func packageChannels(pm *unstructured.Unstructured) []string {
	var out []string
	l, _, _ := unstructured.NestedSlice(pm.Object, "status", "channels")
	for _, c := range l {
		if m, ok := c.(map[string]any); ok {
			if n, _ := m["name"].(string); n != "" {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// channelHead returns status.channels[name].currentCSV of a PackageManifest.
func channelHead(pm *unstructured.Unstructured, channel string) string {
	l, _, _ := unstructured.NestedSlice(pm.Object, "status", "channels")
	for _, c := range l {
		if m, ok := c.(map[string]any); ok && m["name"] == channel {
			s, _ := m["currentCSV"].(string)
			return s
		}
	}
	return ""
}

// checkOperatorGroups: an existing operator namespace has at most one
// OperatorGroup, compatible with the operator (case B02 c: OLM fails the
// CSV with TooManyOperatorGroups otherwise).
func checkOperatorGroups(ctx context.Context, e *Env) ([]Finding, error) {
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return nil, err
	}
	var first []inventory.Operator // the first operator of each namespace
	seen := map[string]bool{}
	for _, op := range ops {
		if !seen[op.Namespace] {
			seen[op.Namespace] = true
			first = append(first, op)
		}
	}
	out, err := eachConcurrently(first, func(op inventory.Operator) ([]Finding, error) {
		if _, err := pickOperatorGroup(ctx, e, op); err != nil {
			if kube.IsNotServed(err) {
				return nil, errOLMNotServed
			}
			return []Finding{errorf("", "%v", err)}, nil
		}
		return nil, nil
	})
	if errors.Is(err, errOLMNotServed) {
		return nil, nil
	}
	return out, err
}

// CodeDependencyVersionDenied is the Finding code (and the code in the
// error of an OLM step) of an operator version the dependency policy
// refuses: installed, pinned, resolved or about to be approved.
const CodeDependencyVersionDenied = "DEPENDENCY_VERSION_DENIED"

// versionRule is the version policy of one OLM package.
type versionRule struct {
	// Deny lists exact versions that must never run.
	Deny []string
	// Min is the lowest version that may run ("" = any).
	Min string
	// Fixed is the first good version after a denied one: the fix names
	// it ("upgrade to >= Fixed").
	Fixed string
	// Why says what goes wrong on a denied version, with its source.
	Why string
}

// dependencyPolicy is the version policy per OLM package (case N04). It
// applies beside an operator's inventory minVersion, which can raise the
// minimum but never allow a denied version.
//   - rhcl-operator 1.4.0: its Wasm shim never calls Authorino, so inference
//     routes answer without authentication while the CRs report Enforced
//     (opendatahub-io/models-as-a-service#1248; fixed in 1.4.1). RHOAI
//     supports RHCL 1.3 and later (MaaS compatibility table).
//   - kuadrant-operator (the upstream path): the gateway-level AuthPolicy
//     MaaS writes needs spec.defaults.rules, Kuadrant 1.4.2 or later (MaaS
//     v0.2.0 release notes). Upstream Kuadrant has no 1.4.0 shim bug.
var dependencyPolicy = map[string]versionRule{
	"rhcl-operator": {
		Deny: []string{"1.4.0"}, Min: "1.3.0", Fixed: "1.4.1",
		Why: "its Wasm shim never calls Authorino, so inference routes answer without authentication while every AuthPolicy reports Enforced (opendatahub-io/models-as-a-service#1248)",
	},
	"kuadrant-operator": {
		Min: "1.4.2",
		Why: "the gateway-level AuthPolicy MaaS writes needs spec.defaults.rules (Kuadrant 1.4.2, MaaS v0.2.0 release notes)",
	},
}

// versionProblem says why version of package pkg must not run under
// dependencyPolicy and the operator's minVersion opMin; both results are
// empty when it may. fixTo is the version to upgrade to. A version that
// does not parse as semver is not judged (checkMinVersion reports it).
func versionProblem(pkg, version, opMin string) (problem, fixTo string) {
	have, err := semver.ParseTolerant(version)
	if err != nil {
		return "", ""
	}
	rule := dependencyPolicy[pkg]
	for _, d := range rule.Deny {
		if have.Equals(semver.MustParse(d)) {
			fixTo = rule.Fixed
			if m, err := semver.ParseTolerant(opMin); err == nil && m.GT(semver.MustParse(fixTo)) {
				fixTo = opMin
			}
			return fmt.Sprintf("%s %s is a denied version: %s", pkg, have, rule.Why), fixTo
		}
	}
	min := rule.Min
	if m, err := semver.ParseTolerant(opMin); err == nil {
		if cur, err := semver.ParseTolerant(min); err != nil || m.GT(cur) {
			min = opMin
		}
	}
	if m, err := semver.ParseTolerant(min); err == nil && have.LT(m) {
		why := "below the required minimum"
		if min == rule.Min && rule.Why != "" {
			why += ": " + rule.Why
		}
		return fmt.Sprintf("%s %s is %s %s", pkg, have, why, min), min
	}
	return "", ""
}

// csvVersionProblem is versionProblem for a CSV name (package.vX.Y.Z or
// package.X.Y.Z) of one of the planned operators ops; empty for a CSV of
// no planned or policed package.
func csvVersionProblem(csv string, ops []inventory.Operator) (problem, fixTo string) {
	for _, op := range ops {
		if strings.HasPrefix(csv, op.Package+".") {
			return versionProblem(op.Package, versionFromCSVName(csv), op.MinVersion)
		}
	}
	for pkg := range dependencyPolicy {
		if strings.HasPrefix(csv, pkg+".") {
			return versionProblem(pkg, versionFromCSVName(csv), "")
		}
	}
	return "", ""
}

// checkRHCLVersion applies dependencyPolicy and each operator's minVersion
// to every planned operator of a policed package (rhcl-operator, and
// kuadrant-operator on the upstream path): its inventory startingCSV, the
// CSVs of its package in any namespace (not OLM's copies), and the
// installedCSV and currentCSV of every Subscription to its package in any
// namespace (a Subscription elsewhere than the inventory's namespace
// counts: its operator serves the same CRDs cluster-wide). Each finding has
// Code CodeDependencyVersionDenied and names the object and the version to
// upgrade to.
func checkRHCLVersion(ctx context.Context, e *Env) ([]Finding, error) {
	var out []Finding
	var ops []inventory.Operator
	for _, op := range e.Inv.Operators {
		if _, policed := dependencyPolicy[op.Package]; policed || op.MinVersion != "" {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	for _, op := range ops {
		if op.StartingCSV == "" {
			continue
		}
		if p, fixTo := versionProblem(op.Package, versionFromCSVName(op.StartingCSV), op.MinVersion); p != "" {
			f := errorf(fmt.Sprintf("upgrade to >= %s: set operators[%s].startingCSV to %s.v%s or later, or clear it", fixTo, op.ID, op.Package, fixTo),
				"operators[%s].startingCSV pins %s: %s", op.ID, op.StartingCSV, p)
			f.Code = CodeDependencyVersionDenied
			out = append(out, f)
		}
	}
	// OLM copies the CSV of an all-namespaces operator into every
	// namespace (label olm.copiedFrom); the selector leaves the copies out.
	csvs, err := listOptional(ctx, e.Clients, csvGVK, "", "!olm.copiedFrom")
	if err != nil {
		return nil, err
	}
	subs, err := listOptional(ctx, e.Clients, subscriptionGVK, "", "")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, csv := range csvs {
		key := csv.GetNamespace() + "/" + csv.GetName()
		for _, op := range ops {
			if !strings.HasPrefix(csv.GetName(), op.Package+".") {
				continue
			}
			v, _, _ := unstructured.NestedString(csv.Object, "spec", "version")
			if v == "" {
				v = versionFromCSVName(csv.GetName())
			}
			if p, fixTo := versionProblem(op.Package, v, op.MinVersion); p != "" {
				seen[key] = true
				f := errorf(fmt.Sprintf("upgrade to >= %s: approve the InstallPlan of %s.v%s or later on the Subscription in %s (oc get installplan -n %s), then re-run", fixTo, op.Package, fixTo, csv.GetNamespace(), csv.GetNamespace()),
					"CSV %s is installed (phase %s): %s", key, phaseOf(&csv), p)
				f.Code = CodeDependencyVersionDenied
				out = append(out, f)
			}
		}
	}
	for _, s := range subs {
		pkg, _, _ := unstructured.NestedString(s.Object, "spec", "name")
		for _, op := range ops {
			if pkg != op.Package {
				continue
			}
			for _, field := range []string{"installedCSV", "currentCSV"} {
				name, _, _ := unstructured.NestedString(s.Object, "status", field)
				key := s.GetNamespace() + "/" + name
				if name == "" || seen[key] {
					continue
				}
				if p, fixTo := versionProblem(op.Package, versionFromCSVName(name), op.MinVersion); p != "" {
					seen[key] = true
					f := errorf(fmt.Sprintf("upgrade to >= %s: move Subscription %s/%s to %s.v%s or later (do not approve an InstallPlan of %s)", fixTo, s.GetNamespace(), s.GetName(), op.Package, fixTo, name),
						"Subscription %s/%s has %s %s: %s", s.GetNamespace(), s.GetName(), field, name, p)
					f.Code = CodeDependencyVersionDenied
					out = append(out, f)
				}
			}
		}
	}
	return out, nil
}

// phaseOf is a CSV's status.phase, "unknown" when it has none.
func phaseOf(csv *unstructured.Unstructured) string {
	if p, _, _ := unstructured.NestedString(csv.Object, "status", "phase"); p != "" {
		return p
	}
	return "unknown"
}

// versionFromCSVName returns the version part of a CSV name such as
// rhcl-operator.v1.4.0 or rhods-operator.3.5.0.
func versionFromCSVName(name string) string {
	_, v, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	return strings.TrimPrefix(v, "v")
}

// conflictingPackages are operators that manage the same CRDs as RHOAI.
var conflictingPackages = map[string]string{
	"opendatahub-operator": "Open Data Hub manages the same DataScienceCluster and DSCInitialization CRDs as RHOAI",
}

// checkConflictingOperators refuses an Open Data Hub Subscription and a
// Subscription to one of the planned packages in another namespace.
func checkConflictingOperators(ctx context.Context, e *Env) ([]Finding, error) {
	subs, err := listOptional(ctx, e.Clients, subscriptionGVK, "", "")
	if err != nil {
		return nil, err
	}
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, s := range subs {
		pkg, _, _ := unstructured.NestedString(s.Object, "spec", "name")
		if why, bad := conflictingPackages[pkg]; bad {
			out = append(out, errorf(fmt.Sprintf("uninstall it first: oc delete subscription %s -n %s, then its CSV", s.GetName(), s.GetNamespace()),
				"Subscription %s/%s installs %s: %s", s.GetNamespace(), s.GetName(), pkg, why))
			continue
		}
		for _, op := range ops {
			if pkg == op.Package && s.GetNamespace() != op.Namespace {
				out = append(out, errorf(fmt.Sprintf("remove it (oc delete subscription %s -n %s) or set operators[%s].namespace=%s", s.GetName(), s.GetNamespace(), op.ID, s.GetNamespace()),
					"Subscription %s/%s already installs %s in another namespace than %s; two copies of one operator fight over the same CRDs", s.GetNamespace(), s.GetName(), pkg, op.Namespace))
			}
		}
	}
	return out, nil
}

// checkOrphanCSVs finds, in each operator namespace, CSVs of a planned
// package that no Subscription references (left by an uninstall that
// deleted the Subscription only; OLM then fails the new Subscription with
// ResolutionFailed / ConstraintsNotSatisfiable, case B20), and planned
// Subscriptions whose resolution already failed.
func checkOrphanCSVs(ctx context.Context, e *Env) ([]Finding, error) {
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return nil, err
	}
	return eachConcurrently(ops, func(op inventory.Operator) ([]Finding, error) {
		// Not the copies of an AllNamespaces operator's CSV OLM makes in
		// every namespace: they reference no Subscription and are no
		// orphans.
		csvs, err := listOptional(ctx, e.Clients, csvGVK, op.Namespace, "!olm.copiedFrom")
		if err != nil {
			return nil, err
		}
		subs, err := listOptional(ctx, e.Clients, subscriptionGVK, op.Namespace, "")
		if err != nil {
			return nil, err
		}
		return orphanFindings(op, csvs, subs), nil
	})
}

// orphanFindings is checkOrphanCSVs for one operator over listed objects.
//
// A CSV is referenced when a Subscription's status.installedCSV or
// status.currentCSV names it. OLM's catalog operator writes that status
// after it has created the InstallPlan, and an Automatic InstallPlan may
// create the CSV first (seen with OLM v0.46 when a run was killed right
// after creating the Subscription): a CSV created no earlier than a
// Subscription of its package whose status names no CSV yet is that
// Subscription's, not an orphan. An orphan of case B20 predates the new
// Subscription, and a resolution that fails is reported by its
// ResolutionFailed condition.
//
// A failed resolution that names a CSV OLM is binding right now
// (bindingPending) is OLM's race, which it resolves again by itself: a
// warning, not an error, and the install's wait handles it.
func orphanFindings(op inventory.Operator, csvs, subs []unstructured.Unstructured) []Finding {
	var out []Finding
	binding := bindingPending(subs, csvs)
	referenced := map[string]bool{}
	var pending []unstructured.Unstructured // Subscriptions of op.Package OLM has not resolved yet
	for _, s := range subs {
		named := false
		for _, f := range []string{"installedCSV", "currentCSV"} {
			if n, _, _ := unstructured.NestedString(s.Object, "status", f); n != "" {
				referenced[n] = true
				named = true
			}
		}
		pkg, _, _ := unstructured.NestedString(s.Object, "spec", "name")
		if pkg != op.Package {
			continue
		}
		if !named {
			pending = append(pending, s)
		}
		if c, ok := waiters.GetCondition(&s, "ResolutionFailed"); ok && c.Status == "True" {
			if named := namedIn(binding, c.Message); len(named) > 0 {
				out = append(out, warnf("", "Subscription %s/%s: OLM could not resolve the namespace while it was binding %s; it resolves again once that is done (%s)",
					s.GetNamespace(), s.GetName(), describeBindings(named), c))
				continue
			}
			out = append(out, errorf(fmt.Sprintf("oc describe subscription %s -n %s; remove the CSV or Subscription it names, then re-run", s.GetName(), s.GetNamespace()),
				"Subscription %s/%s cannot be resolved: %s", s.GetNamespace(), s.GetName(), c))
		}
	}
	for _, csv := range csvs {
		if !strings.HasPrefix(csv.GetName(), op.Package+".") || csv.GetLabels()["olm.copiedFrom"] != "" || referenced[csv.GetName()] || madeFor(csv, pending) {
			continue
		}
		out = append(out, errorf(fmt.Sprintf("oc delete csv %s -n %s (its operator is no longer subscribed), then re-run", csv.GetName(), op.Namespace),
			"CSV %s/%s of %s exists but no Subscription references it; OLM refuses to install %s again (ResolutionFailed: constraints not satisfiable, CSV exists and is not referenced by a subscription)",
			op.Namespace, csv.GetName(), op.Package, op.Package))
	}
	return out
}

// madeFor reports whether csv was created no earlier than one of subs
// (creation timestamps, one-second resolution).
func madeFor(csv unstructured.Unstructured, subs []unstructured.Unstructured) bool {
	made := csv.GetCreationTimestamp()
	for _, s := range subs {
		if created := s.GetCreationTimestamp(); !made.Before(&created) {
			return true
		}
	}
	return false
}
