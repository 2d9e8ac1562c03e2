package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

var (
	everything = labels.Everything()
	// Writes use strict field validation: a field the CRD schema does not
	// know is an error instead of being pruned silently.
	metaCreate = metav1.CreateOptions{FieldManager: "maasctl-sim", FieldValidation: "Strict"}
	metaUpdate = metav1.UpdateOptions{FieldManager: "maasctl-sim", FieldValidation: "Strict"}
	metaGet    = metav1.GetOptions{}
)

// Kinds the simulators read or write.
var (
	gvrNamespace    = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	gvrSecret       = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	gvrConfigMap    = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	gvrService      = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	gvrPod          = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvrPVC          = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	gvrDeployment   = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	gvrStorageClass = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}
	gvrCRD          = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

	gvrCatalogSource = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "catalogsources"}
	gvrOperatorGroup = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1", Resource: "operatorgroups"}
	gvrSubscription  = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "subscriptions"}
	gvrInstallPlan   = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "installplans"}
	gvrCSV           = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "clusterserviceversions"}

	gvrCNPGCluster = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}

	gvrCertificate        = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	gvrCertificateRequest = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificaterequests"}
	gvrClusterIssuer      = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "clusterissuers"}
	gvrIssuer             = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}

	gvrGatewayClass = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
	gvrGateway      = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	gvrHTTPRoute    = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}

	gvrRoute         = schema.GroupVersionResource{Group: "route.openshift.io", Version: "v1", Resource: "routes"}
	gvrIngressConfig = schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "ingresses"}

	gvrKuadrant    = schema.GroupVersionResource{Group: "kuadrant.io", Version: "v1beta1", Resource: "kuadrants"}
	gvrAuthPolicy  = schema.GroupVersionResource{Group: "kuadrant.io", Version: "v1", Resource: "authpolicies"}
	gvrTokenPolicy = schema.GroupVersionResource{Group: "kuadrant.io", Version: "v1alpha1", Resource: "tokenratelimitpolicies"}
	gvrAuthorino   = schema.GroupVersionResource{Group: "operator.authorino.kuadrant.io", Version: "v1beta1", Resource: "authorinos"}

	gvrLWSOperator = schema.GroupVersionResource{Group: "operator.openshift.io", Version: "v1", Resource: "leaderworkersetoperators"}

	gvrDSCI            = schema.GroupVersionResource{Group: "dscinitialization.opendatahub.io", Version: "v2", Resource: "dscinitializations"}
	gvrDSC             = schema.GroupVersionResource{Group: "datasciencecluster.opendatahub.io", Version: "v2", Resource: "datascienceclusters"}
	gvrDashboardConfig = schema.GroupVersionResource{Group: "opendatahub.io", Version: "v1alpha", Resource: "odhdashboardconfigs"}
	gvrAIGateway       = schema.GroupVersionResource{Group: "components.platform.opendatahub.io", Version: "v1alpha1", Resource: "aigateways"}

	gvrExternalProvider  = schema.GroupVersionResource{Group: "inference.opendatahub.io", Version: "v1alpha1", Resource: "externalproviders"}
	gvrExternalModel     = schema.GroupVersionResource{Group: "inference.opendatahub.io", Version: "v1alpha1", Resource: "externalmodels"}
	gvrMaaSModelRef      = schema.GroupVersionResource{Group: "maas.opendatahub.io", Version: "v1alpha1", Resource: "maasmodelrefs"}
	gvrMaaSAuthPolicy    = schema.GroupVersionResource{Group: "maas.opendatahub.io", Version: "v1alpha1", Resource: "maasauthpolicies"}
	gvrMaaSSubscription  = schema.GroupVersionResource{Group: "maas.opendatahub.io", Version: "v1alpha1", Resource: "maassubscriptions"}
	gvrLegacyExternalMdl = schema.GroupVersionResource{Group: "maas.opendatahub.io", Version: "v1alpha1", Resource: "externalmodels"}
)

// condition is one status condition. Optional fields are omitted when empty,
// so one type serves the metav1.Condition shape and the looser OLM, OpenShift
// and cert-manager shapes.
type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	// LastUpdatedTime is Authorino's extra timestamp.
	LastUpdatedTime string `json:"lastUpdatedTime,omitempty"`
	// Severity is the opendatahub-operator extra field.
	Severity string `json:"severity,omitempty"`
}

func cond(typ string, status bool, reason, message string) condition {
	s := "False"
	if status {
		s = "True"
	}
	return condition{Type: typ, Status: s, Reason: reason, Message: message}
}

func (c condition) gen(g int64) condition { c.ObservedGeneration = g; return c }

// ownConditions is conditions(old, want...) for a status that other
// controllers write conditions into as well: the conditions of old whose
// type is not in want stay, in their place, and the types of want take
// their old place or, when new, go last. This is how Istio's Gateway API
// status writer treats the Gateway and listener conditions
// (pilot/pkg/config/kube/gateway conditions.go, setConditions: existing
// conditions of other types are kept), so the kuadrant.io/*PolicyAffected
// conditions the Kuadrant operator adds (kuadrant-operator
// internal/controller/gateway_policy_discoverability_reconciler.go) are
// not removed again on the next reconcile.
func ownConditions(old any, want ...condition) []any {
	mine := conditions(old, want...)
	byType := map[string]any{}
	for i, c := range want {
		byType[c.Type] = mine[i]
	}
	var out []any
	l, _ := old.([]any)
	for _, c := range l {
		cm, _ := c.(map[string]any)
		t, _ := cm["type"].(string)
		if nc, ok := byType[t]; ok {
			out = append(out, nc)
			delete(byType, t)
			continue
		}
		out = append(out, c)
	}
	for i, c := range want {
		if _, ok := byType[c.Type]; ok {
			out = append(out, mine[i])
		}
	}
	return out
}

// conditions builds a conditions list from want, keeping each condition's
// lastTransitionTime from old when its status did not change.
func conditions(old any, want ...condition) []any {
	prev := map[string]map[string]any{}
	if l, ok := old.([]any); ok {
		for _, c := range l {
			if cm, ok := c.(map[string]any); ok {
				if t, _ := cm["type"].(string); t != "" {
					prev[t] = cm
				}
			}
		}
	}
	now := nowString()
	out := make([]any, 0, len(want))
	for _, c := range want {
		c.LastTransitionTime = now
		if c.LastUpdatedTime != "" {
			c.LastUpdatedTime = now
		}
		if p := prev[c.Type]; p != nil && p["status"] == c.Status {
			if t, _ := p["lastTransitionTime"].(string); t != "" {
				c.LastTransitionTime = t
			}
			if c.LastUpdatedTime != "" {
				if t, _ := p["lastUpdatedTime"].(string); t != "" && p["reason"] == c.Reason && p["message"] == c.Message {
					c.LastUpdatedTime = t
				}
			}
		}
		out = append(out, c.toMap())
	}
	return out
}

// toMap is toMap(c) (the JSON round trip) built directly: the same keys,
// empty optional fields left out, observedGeneration an int64. A string
// that is not valid UTF-8 (which encoding/json would rewrite) takes the
// round trip.
func (c condition) toMap() map[string]any {
	for _, s := range []string{c.Type, c.Status, c.Reason, c.Message, c.LastTransitionTime, c.LastUpdatedTime, c.Severity} {
		if !utf8.ValidString(s) {
			return toMap(c)
		}
	}
	m := make(map[string]any, 8)
	m["type"], m["status"], m["message"] = c.Type, c.Status, c.Message
	if c.Reason != "" {
		m["reason"] = c.Reason
	}
	if c.ObservedGeneration != 0 {
		m["observedGeneration"] = c.ObservedGeneration
	}
	if c.LastTransitionTime != "" {
		m["lastTransitionTime"] = c.LastTransitionTime
	}
	if c.LastUpdatedTime != "" {
		m["lastUpdatedTime"] = c.LastUpdatedTime
	}
	if c.Severity != "" {
		m["severity"] = c.Severity
	}
	return m
}

// statusConditions returns obj's status.conditions.
func statusConditions(obj *unstructured.Unstructured) any {
	c, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "conditions")
	return c
}

// findCondition returns the condition of type typ in obj's status, or nil.
func findCondition(obj *unstructured.Unstructured, typ string) map[string]any {
	if obj == nil {
		return nil
	}
	l, _ := statusConditions(obj).([]any)
	for _, c := range l {
		if cm, ok := c.(map[string]any); ok && cm["type"] == typ {
			return cm
		}
	}
	return nil
}

// conditionTrue reports whether obj has condition typ with status True.
func conditionTrue(obj *unstructured.Unstructured, typ string) bool {
	c := findCondition(obj, typ)
	return c != nil && c["status"] == "True"
}

// conditionTrueCurrent is conditionTrue that also requires the condition's
// observedGeneration (when set) to equal metadata.generation.
func conditionTrueCurrent(obj *unstructured.Unstructured, typ string) bool {
	c := findCondition(obj, typ)
	if c == nil || c["status"] != "True" {
		return false
	}
	if g, ok := c["observedGeneration"].(int64); ok && g != obj.GetGeneration() {
		return false
	}
	return true
}

func nowString() string { return time.Now().UTC().Format(time.RFC3339) }

func timeString(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// toMap converts v to the JSON object form unstructured objects use.
func toMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	var m map[string]any
	if err := utiljson.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("unmarshal %T: %v", v, err))
	}
	return m
}

// normalize round-trips v through JSON so that numbers and slices have the
// types the informer cache holds (int64, []any, map[string]any).
func normalize(v map[string]any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := utiljson.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// fromUnstructured converts u into a typed object.
func fromUnstructured[T any](u *unstructured.Unstructured) (*T, error) {
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		return nil, fmt.Errorf("convert %s %s: %w", u.GetKind(), keyOf(u), err)
	}
	return &out, nil
}

// toUnstructured converts a typed object (with TypeMeta set) into an
// unstructured one.
func toUnstructured(obj any) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		panic(fmt.Sprintf("convert %T: %v", obj, err))
	}
	return &unstructured.Unstructured{Object: m}
}

func sortByAge(l []*unstructured.Unstructured) {
	if len(l) < 2 {
		return
	}
	// Each creationTimestamp is parsed once, not at every comparison.
	type aged struct {
		t metav1.Time
		u *unstructured.Unstructured
	}
	a := make([]aged, len(l))
	for i, u := range l {
		a[i] = aged{u.GetCreationTimestamp(), u}
	}
	// Objects of one kind differ in namespace or name, so the order is
	// total and a stable sort would give the same.
	slices.SortFunc(a, func(x, y aged) int {
		if !x.t.Equal(&y.t) {
			if x.t.Before(&y.t) {
				return -1
			}
			return 1
		}
		if c := strings.Compare(x.u.GetNamespace(), y.u.GetNamespace()); c != 0 {
			return c
		}
		return strings.Compare(x.u.GetName(), y.u.GetName())
	})
	for i := range a {
		l[i] = a[i].u
	}
}

// str reads a string field.
func str(u *unstructured.Unstructured, fields ...string) string {
	if u == nil {
		return ""
	}
	s, _, _ := unstructured.NestedString(u.Object, fields...)
	return s
}

// sliceOf reads a list field.
func sliceOf(u *unstructured.Unstructured, fields ...string) []any {
	if u == nil {
		return nil
	}
	s, _, _ := unstructured.NestedSlice(u.Object, fields...)
	return s
}

// sliceView reads a list field as sliceOf does, without copying it: the
// slice and what it holds are the informer cache's, for reading only.
// Used where a reconcile runs for every object of a kind on every event.
func sliceView(u *unstructured.Unstructured, fields ...string) []any {
	if u == nil {
		return nil
	}
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, fields...)
	s, _ := v.([]any)
	return s
}

// mapOf reads an object field.
func mapOf(u *unstructured.Unstructured, fields ...string) map[string]any {
	if u == nil {
		return nil
	}
	s, _, _ := unstructured.NestedMap(u.Object, fields...)
	return s
}

func mstr(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// deploymentAvailable reports whether the Deployment d exists, has rolled
// out its current generation and has condition Available True: what
// `kubectl rollout status` and OLM's install check look at.
func deploymentAvailable(d *unstructured.Unstructured) bool {
	if d == nil || d.GetDeletionTimestamp() != nil {
		return false
	}
	dep, err := fromUnstructured[appsv1.Deployment](d)
	if err != nil {
		return false
	}
	if dep.Status.ObservedGeneration < dep.Generation {
		return false
	}
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	if dep.Status.UpdatedReplicas < want || dep.Status.AvailableReplicas < want {
		return false
	}
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == "True"
		}
	}
	return false
}

// fromMap converts a JSON-object map into a typed value.
func fromMap(m map[string]any, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, out)
}

// equalJSON compares two values by their JSON form.
func equalJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// subsetEqual reports whether want is contained in have: maps compare key by
// key (have may hold more keys, such as defaults the API server added),
// lists element by element with equal length, scalars by value.
func subsetEqual(want, have any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !subsetEqual(v, h[k]) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !subsetEqual(w[i], h[i]) {
				return false
			}
		}
		return true
	default:
		return equality.Semantic.DeepEqual(want, have)
	}
}
