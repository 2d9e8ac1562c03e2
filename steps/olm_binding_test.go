package steps

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestBindingPending: a Subscription whose currentCSV names an existing
// CSV (not a copy) that its installedCSV does not name yet is pending;
// a bound one, one whose CSV does not exist yet, one that names no CSV
// (an orphan's new Subscription, case B20) and a copied CSV are not.
func TestBindingPending(t *testing.T) {
	sub := func(name, cur, inst string) unstructured.Unstructured {
		return *u(t, `{"apiVersion":"operators.coreos.com/v1alpha1","kind":"Subscription","metadata":{"name":"`+name+`","namespace":"openshift-operators"},
			"status":{"currentCSV":"`+cur+`","installedCSV":"`+inst+`"}}`)
	}
	csv := func(name, labels string) unstructured.Unstructured {
		return *u(t, `{"apiVersion":"operators.coreos.com/v1alpha1","kind":"ClusterServiceVersion","metadata":{"name":"`+name+`","namespace":"openshift-operators","labels":{`+labels+`}}}`)
	}
	csvs := []unstructured.Unstructured{csv("cloudnative-pg.v1.30.0", ""), csv("rhcl-operator.v1.4.1", ""), csv("copied.v1", `"olm.copiedFrom":"other"`)}
	tests := []struct {
		name string
		subs []unstructured.Unstructured
		want []pendingBinding
	}{
		{"csv made, not bound yet", []unstructured.Unstructured{sub("cloudnative-pg", "cloudnative-pg.v1.30.0", ""), sub("rhcl-operator", "", "")},
			[]pendingBinding{{Sub: "cloudnative-pg", CSV: "cloudnative-pg.v1.30.0"}}},
		{"bound", []unstructured.Unstructured{sub("cloudnative-pg", "cloudnative-pg.v1.30.0", "cloudnative-pg.v1.30.0")}, nil},
		{"upgrade: new csv made, old one still installed", []unstructured.Unstructured{sub("rhcl-operator", "rhcl-operator.v1.4.1", "rhcl-operator.v1.4.0")},
			[]pendingBinding{{Sub: "rhcl-operator", CSV: "rhcl-operator.v1.4.1"}}},
		{"csv not made yet", []unstructured.Unstructured{sub("lws", "leader-worker-set.v1.0.0", "")}, nil},
		{"no csv named (orphan's new subscription)", []unstructured.Unstructured{sub("cloudnative-pg", "", "")}, nil},
		{"copied csv", []unstructured.Unstructured{sub("x", "copied.v1", "")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, bindingPending(tt.subs, csvs)); d != "" {
				t.Errorf("bindingPending (-want +got):\n%s", d)
			}
		})
	}
}

func TestPendingOnEstablishedCRDs(t *testing.T) {
	csv := func(phase, reason string, reqs ...map[string]any) *unstructured.Unstructured {
		var rs []any
		for _, r := range reqs {
			rs = append(rs, r)
		}
		return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"phase": phase, "reason": reason, "requirementStatus": rs}}}
	}
	req := func(kind, name, status string) map[string]any {
		return map[string]any{"group": "apiextensions.k8s.io", "kind": kind, "name": name, "status": status}
	}
	established := []string{"a.example.com", "b.example.com"}
	cases := []struct {
		name string
		csv  *unstructured.Unstructured
		want []string
	}{
		{"no CSV seen yet", nil, nil},
		{"owned CRD not available when OLM looked", csv("Pending", "RequirementsNotMet",
			req("CustomResourceDefinition", "a.example.com", "PresentNotAvailable"), req("CustomResourceDefinition", "b.example.com", "Present")), []string{"a.example.com"}},
		{"owned CRD not present when OLM looked", csv("Pending", "RequirementsNotMet",
			req("CustomResourceDefinition", "b.example.com", "NotPresent")), []string{"b.example.com"}},
		{"a CRD the caller has not seen Established", csv("Pending", "RequirementsNotMet",
			req("CustomResourceDefinition", "a.example.com", "PresentNotAvailable"), req("CustomResourceDefinition", "dep.example.com", "NotPresent")), nil},
		{"another requirement unmet", csv("Pending", "RequirementsNotMet",
			req("CustomResourceDefinition", "a.example.com", "PresentNotAvailable"), req("ServiceAccount", "op", "NotPresent")), nil},
		{"requirements met, installing", csv("InstallReady", "AllRequirementsMet",
			req("CustomResourceDefinition", "a.example.com", "Present")), nil},
		{"pending for another reason", csv("Pending", "RequirementsUnknown"), nil},
	}
	for _, c := range cases {
		if got := pendingOnEstablishedCRDs(c.csv, established); !slices.Equal(got, c.want) {
			t.Errorf("%s: pendingOnEstablishedCRDs = %v, want %v", c.name, got, c.want)
		}
	}
}
