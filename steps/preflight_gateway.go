package steps

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/waiters"
)

// Finding codes of the OpenShift 4.19+ gateway checks (cases N01, N02).
const (
	// CodeGatewayAPICRDs: a Gateway API CRD maasctl needs is missing, not
	// Established, does not serve v1, or is not the platform's standard
	// channel at MinGatewayAPIBundle or later.
	CodeGatewayAPICRDs = "GATEWAY_API_CRDS_NOT_PLATFORM_MANAGED"
	// CodeOSSMConflict: an OSSM (or Sail) Subscription the ingress operator
	// did not create, on an OpenShift release where it blocks the
	// platform's own Service Mesh install.
	CodeOSSMConflict = "OSSM_SUBSCRIPTION_CONFLICT"
)

// GatewayAPICRDs are the Gateway API CRDs the install's objects use
// (GatewayClass, Gateway, HTTPRoute, all at v1). On OpenShift 4.19+ the
// ingress operator owns their lifecycle and a ValidatingAdmissionPolicy
// lets only its service account create, update or delete CRDs of the
// group (openshift/cluster-ingress-operator#1192; openshift-docs#93327):
// maasctl only reads them, never writes them (kube.ErrPlatformOwnedCRD).
var GatewayAPICRDs = func() []string {
	out := make([]string, len(gatewayAPIKinds))
	for i, k := range gatewayAPIKinds {
		out[i] = k.crd
	}
	return out
}()

// gatewayAPIKinds are the CRDs of GatewayAPICRDs, in that order, with
// the kind each serves (its v1 REST mapping tells whether the API server
// serves it).
var gatewayAPIKinds = []struct{ crd, kind string }{
	{"gatewayclasses.gateway.networking.k8s.io", "GatewayClass"},
	{"gateways.gateway.networking.k8s.io", "Gateway"},
	{"httproutes.gateway.networking.k8s.io", "HTTPRoute"},
}

// MinGatewayAPIBundle is the oldest Gateway API bundle the install
// accepts: standard v1.2.1, what OpenShift 4.19 (the minor of
// MinOpenShift) ships (openshift-docs#93327, #110130).
const MinGatewayAPIBundle = "v1.2.1"

// Annotations of the upstream Gateway API CRD bundle (gateway-api
// config/crd: every CRD carries them).
const (
	gatewayBundleVersionAnnotation = "gateway.networking.k8s.io/bundle-version"
	gatewayChannelAnnotation       = "gateway.networking.k8s.io/channel"
)

var (
	clusterOperatorGVK = schema.GroupVersionKind{Group: "config.openshift.io", Version: "v1", Kind: "ClusterOperator"}
	gatewayClassGVK    = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "GatewayClass"}
)

// openShiftRelease reads the OpenShift version as checkOpenShiftVersion
// does (ClusterVersion "version": desired, else the newest Completed
// history entry). onOpenShift is false when ClusterVersion is not served;
// known is false when no version can be read.
func openShiftRelease(ctx context.Context, e *Env) (v semver.Version, known, onOpenShift bool, err error) {
	cv, err := getShared(ctx, e, clusterVersionGVK, "", "version")
	if kube.IsNotServed(err) {
		return semver.Version{}, false, false, nil
	}
	if err != nil {
		return semver.Version{}, false, true, err
	}
	if cv == nil {
		return semver.Version{}, false, true, nil
	}
	raw, _, _ := unstructured.NestedString(cv.Object, "status", "desired", "version")
	if raw == "" {
		hist, _, _ := unstructured.NestedSlice(cv.Object, "status", "history")
		for _, h := range hist {
			hm, _ := h.(map[string]any)
			if hm["state"] == "Completed" {
				raw, _ = hm["version"].(string)
				break
			}
		}
	}
	v, perr := semver.ParseTolerant(raw)
	return v, perr == nil, true, nil
}

// checkGatewayAPICRDs reads the Gateway API CRDs (case N01): each of
// GatewayAPICRDs must exist, be Established and serve v1; on OpenShift it
// must also carry the standard channel and a bundle version of at least
// MinGatewayAPIBundle. maasctl never installs or fixes them: the fix is the
// platform's (ingress operator), and the finding names the CRD, the OCP
// version and what to do. Off OpenShift the annotations only warn.
func checkGatewayAPICRDs(ctx context.Context, e *Env) ([]Finding, error) {
	ocp, known, onOpenShift, err := openShiftRelease(ctx, e)
	if err != nil {
		return nil, err
	}
	where := "this cluster"
	switch {
	case known:
		where = "OpenShift " + ocp.String()
	case onOpenShift:
		where = "OpenShift (version unknown)"
	}
	fix := "maasctl never installs Gateway API CRDs: on OpenShift 4.19+ the ingress operator owns them (oc get clusteroperator ingress; oc describe clusteroperator ingress); a cluster upgraded from before 4.19 must replace or remove non-conforming Gateway API CRDs first (OpenShift docs, \"Gateway API CRD life cycle\")"
	if !onOpenShift {
		fix = "install the Gateway API standard CRDs " + MinGatewayAPIBundle + " or later (kubectl apply --server-side -f the gateway-api standard-install.yaml); maasctl itself does not install them"
	}
	min := semver.MustParse(strings.TrimPrefix(MinGatewayAPIBundle, "v"))
	var out []Finding
	bad := func(format string, args ...any) {
		f := errorf(fix, "platform-owned Gateway API CRDs missing or too old on %s: "+format, append([]any{where}, args...)...)
		f.Code = CodeGatewayAPICRDs
		out = append(out, f)
	}
	// The three reads side by side (a converged re-run's preflight spent
	// about 30 ms on them one after the other), judged in order.
	crds := make([]gatewayCRD, len(gatewayAPIKinds))
	inParallel(len(gatewayAPIKinds), len(gatewayAPIKinds), func(i int) {
		crds[i] = readGatewayCRD(ctx, e, gatewayAPIKinds[i].crd, gatewayAPIKinds[i].kind)
	})
	for i, k := range gatewayAPIKinds {
		name, crd := k.crd, crds[i]
		if crd.err != nil {
			return nil, crd.err
		}
		if crd.whole == nil && crd.meta == nil {
			bad("CRD %s does not exist", name)
			continue
		}
		if crd.whole != nil && !waiters.ConditionTrue("Established")(crd.whole).Done {
			bad("CRD %s is not Established", name)
			continue
		}
		if crd.whole != nil && !servesVersion(crd.whole, "v1") {
			bad("CRD %s does not serve v1 (maasctl writes %s v1)", name, k.kind)
			continue
		}
		ann := crd.annotations()
		bundle, channel := ann[gatewayBundleVersionAnnotation], ann[gatewayChannelAnnotation]
		var problems []string
		if have, err := semver.ParseTolerant(bundle); err != nil {
			problems = append(problems, fmt.Sprintf("no readable %s annotation (%q), so it is not the platform's bundle", gatewayBundleVersionAnnotation, bundle))
		} else if have.LT(min) {
			problems = append(problems, fmt.Sprintf("bundle version %s is older than %s", bundle, MinGatewayAPIBundle))
		}
		if channel != "standard" {
			problems = append(problems, fmt.Sprintf("channel %q, not standard (the channel OpenShift ships; experimental-channel CRDs are not the platform's)", channel))
		}
		if len(problems) == 0 {
			continue
		}
		if !onOpenShift {
			out = append(out, warnf(fix, "Gateway API CRD %s: %s", name, strings.Join(problems, "; ")))
			continue
		}
		bad("CRD %s: %s", name, strings.Join(problems, "; "))
	}
	return out, nil
}

// gatewayCRD is what checkGatewayAPICRDs read of one Gateway API CRD: its
// metadata when discovery shows it Established and serving v1, else the
// whole CRD (nil when it does not exist), to say which of the two it is not.
type gatewayCRD struct {
	meta  *metav1.PartialObjectMetadata
	whole *unstructured.Unstructured
	err   error
}

func (c gatewayCRD) annotations() map[string]string {
	if c.whole != nil {
		return c.whole.GetAnnotations()
	}
	return c.meta.GetAnnotations()
}

// readGatewayCRD reads CRD name for checkGatewayAPICRDs. The CRDs are
// large (the platform's HTTPRoute CRD, with its schemas and CEL rules,
// is hundreds of kilobytes) and the check needs of them only their
// annotations, whether they are Established and whether they serve v1.
// The API server lists a CRD's versions in discovery only once it is
// Established (kube.Clients.Served), so when discovery maps the CRD's
// kind at v1 to its plural, its metadata (kube.Clients.GetMetadata) is
// all that is read. Otherwise the whole CRD is read, so that the finding
// can say whether it is missing, not Established or not serving v1.
func readGatewayCRD(ctx context.Context, e *Env, name, kind string) gatewayCRD {
	plural, group, _ := strings.Cut(name, ".")
	m, err := e.Clients.Mapping(schema.GroupVersionKind{Group: group, Version: "v1", Kind: kind})
	switch {
	case err == nil && m.Resource.Resource == plural:
		md, err := e.Clients.GetMetadata(ctx, waiters.CRDGVK, "", name)
		if err != nil {
			return gatewayCRD{err: fmt.Errorf("get CustomResourceDefinition %s: %w", name, err)}
		}
		if md != nil {
			return gatewayCRD{meta: md}
		}
		// Gone since discovery was read: the whole read says so.
	case err != nil && !kube.IsNotServed(err):
		return gatewayCRD{err: err}
	}
	whole, err := getShared(ctx, e, waiters.CRDGVK, "", name)
	return gatewayCRD{whole: whole, err: err}
}

// servesVersion reports whether a CRD serves version v.
func servesVersion(crd *unstructured.Unstructured, v string) bool {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, x := range versions {
		m, _ := x.(map[string]any)
		if m["name"] == v && m["served"] == true {
			return true
		}
	}
	return false
}

// ossmPackages are the OLM packages of Service Mesh: OSSM 2
// (servicemeshoperator), OSSM 3 (servicemeshoperator3) and upstream Sail
// (sailoperator).
var ossmPackages = []string{"servicemeshoperator", "servicemeshoperator3", "sailoperator"}

// OSSMConflictFixedIn is the first OpenShift release whose ingress operator
// installs Istio for Gateway API itself (Sail library, no OLM), so that a
// Service Mesh Subscription no longer conflicts with it (4.21.22 and 4.22;
// openshift/enhancements gateway-api-without-olm). From 4.19 up to it, the
// ingress operator installs OSSM 3 through OLM and a foreign OSSM
// Subscription leaves GatewayClass openshift-default at Accepted=Unknown
// (openshift-docs#100950, #100951; models-as-a-service#1158).
const OSSMConflictFixedIn = "4.21.22"

// ingressOwnedAnnotation marks the Subscription the ingress operator
// created (cluster-ingress-operator IngressOperatorOwnedAnnotation).
const ingressOwnedAnnotation = "ingress.operator.openshift.io/owned"

// ingressOwnsSubscription reports whether s is the ingress operator's own
// OSSM Subscription: annotated as such, or, from ingress operators older
// than the annotation, exactly the one it creates
// (openshift-operators/servicemeshoperator3, package servicemeshoperator3,
// Manual approval; cluster-ingress-operator desiredSubscription).
func ingressOwnsSubscription(s *unstructured.Unstructured) bool {
	if _, ok := s.GetAnnotations()[ingressOwnedAnnotation]; ok {
		return true
	}
	pkg, _, _ := unstructured.NestedString(s.Object, "spec", "name")
	approval, _, _ := unstructured.NestedString(s.Object, "spec", "installPlanApproval")
	return s.GetNamespace() == "openshift-operators" && s.GetName() == "servicemeshoperator3" && pkg == "servicemeshoperator3" && approval == "Manual"
}

// checkOSSMSubscriptions lists every Subscription to an ossmPackages
// package that the ingress operator does not own (case N02). On OpenShift
// 4.19 up to OSSMConflictFixedIn each one stops preflight; from that
// release on, or when the version cannot be read, it only warns. The
// finding names the Subscription and its CSV, quotes the ingress
// ClusterOperator's Degraded condition and GatewayClass's Accepted
// condition when they say so, and gives the fix.
func checkOSSMSubscriptions(ctx context.Context, e *Env) ([]Finding, error) {
	subs, err := listOptional(ctx, e.Clients, subscriptionGVK, "", "")
	if err != nil {
		return nil, err
	}
	var foreign []unstructured.Unstructured
	for _, s := range subs {
		pkg, _, _ := unstructured.NestedString(s.Object, "spec", "name")
		if slices.Contains(ossmPackages, pkg) && !ingressOwnsSubscription(&s) {
			foreign = append(foreign, s)
		}
	}
	if len(foreign) == 0 {
		return nil, nil
	}
	ocp, known, _, err := openShiftRelease(ctx, e)
	if err != nil {
		return nil, err
	}
	fixed := semver.MustParse(OSSMConflictFixedIn)
	affected := known && ocp.LT(fixed)
	var evidence []string
	if co, err := getShared(ctx, e, clusterOperatorGVK, "", "ingress"); err == nil && co != nil {
		if c, ok := waiters.GetCondition(co, "Degraded"); ok && c.Status == "True" {
			evidence = append(evidence, "ClusterOperator ingress is "+c.String())
		}
	} else if err != nil && !kube.IsNotServed(err) {
		return nil, err
	}
	if gc, err := getShared(ctx, e, gatewayClassGVK, "", e.Inv.Gateway.ClassName); err == nil && gc != nil {
		if c, ok := waiters.GetCondition(gc, "Accepted"); ok && c.Status != "True" {
			evidence = append(evidence, "GatewayClass "+e.Inv.Gateway.ClassName+" is "+c.String())
		}
	} else if err != nil && !kube.IsNotServed(err) {
		return nil, err
	}
	var out []Finding
	for _, s := range foreign {
		pkg, _, _ := unstructured.NestedString(s.Object, "spec", "name")
		csv, _, _ := unstructured.NestedString(s.Object, "status", "installedCSV")
		if csv == "" {
			csv, _, _ = unstructured.NestedString(s.Object, "status", "currentCSV")
		}
		fix := fmt.Sprintf("remove it and let the ingress operator reinstall Service Mesh for Gateway API: oc delete subscription %s -n %s", s.GetName(), s.GetNamespace())
		csvPart := "no CSV yet"
		if csv != "" {
			fix += fmt.Sprintf("; oc delete csv %s -n %s", csv, s.GetNamespace())
			csvPart = "CSV " + csv
		}
		if pkg == "servicemeshoperator" {
			fix += " (migrate Service Mesh 2 workloads first: OSSM 2 and 3 cannot coexist)"
		}
		subject := fmt.Sprintf("Subscription %s/%s (package %s, %s) was not created by the OpenShift ingress operator", s.GetNamespace(), s.GetName(), pkg, csvPart)
		if !affected {
			why := "the OpenShift version is unknown"
			if known {
				why = fmt.Sprintf("on OpenShift %s (>= %s) the ingress operator installs Istio itself and no longer conflicts with it", ocp, OSSMConflictFixedIn)
			}
			out = append(out, warnf("none needed for Gateway API; remove it if nothing else uses it: "+fix, "%s; %s", subject, why))
			continue
		}
		msg := fmt.Sprintf("%s; on OpenShift %s (before %s) the ingress operator installs OSSM 3 itself for Gateway API, and this Subscription blocks it: GatewayClass %s stays Accepted=Unknown (\"Waiting for controller\"), the Gateway is never Programmed and every later step times out",
			subject, ocp, OSSMConflictFixedIn, e.Inv.Gateway.ClassName)
		if len(evidence) > 0 {
			msg += " (now: " + strings.Join(evidence, "; ") + ")"
		}
		f := errorf(fix, "%s", msg)
		f.Code = CodeOSSMConflict
		out = append(out, f)
	}
	return out, nil
}
