package migrate

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// guideState builds a State from testdata/guide.yaml, after edit (when
// non-nil) changed the objects; the MaaS kinds are served and the MaaS
// namespace exists.
func guideState(t *testing.T, edit func(objs map[string]*unstructured.Unstructured)) *State {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "guide.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := decodeAll(data, "guide.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, o := range list {
		objs[o.GetName()] = o
	}
	if edit != nil {
		edit(objs)
	}
	st := &State{
		Gateway:    types.NamespacedName{Namespace: DefaultGatewayNamespace, Name: DefaultGatewayName},
		MaaSServed: true, MaaSNamespace: DefaultMaaSNamespace, MaaSNamespaceExists: true,
		Existing: map[string]*unstructured.Unstructured{},
	}
	var sorted []*unstructured.Unstructured
	for _, o := range objs {
		sorted = append(sorted, o)
	}
	sortObjects(sorted)
	for _, o := range sorted {
		switch o.GetKind() {
		case "ConfigMap":
			st.TierConfigMaps = append(st.TierConfigMaps, o)
		case "AuthPolicy", "TokenRateLimitPolicy":
			if targetsGateway(o, DefaultGatewayName) {
				st.Policies = append(st.Policies, GatewayPolicy{Object: o, Class: classify(o)})
			}
		case "LLMInferenceService":
			if _, ok := o.GetAnnotations()[TierAnnotation]; ok {
				st.Models = append(st.Models, o)
			} else {
				st.OtherModels = append(st.OtherModels, o)
			}
		default:
			st.Existing[key(o)] = o
		}
	}
	return st
}

// TestBuildPlanGuide renders the audit, the plan and plan.yaml of the
// guide's cluster and compares them with testdata/guide.golden (go test
// -update rewrites it).
func TestBuildPlanGuide(t *testing.T) {
	st := guideState(t, nil)
	p := BuildPlan(st, PlanOptions{BackupID: "maasctl-backup-20260901T070000Z"})
	if err := p.Err(); err != nil {
		t.Fatalf("the guide's configuration must be expressible: %v", err)
	}
	var buf bytes.Buffer
	buf.WriteString("== Audit\n")
	WriteAudit(&buf, st, p)
	buf.WriteString("\n== Plan\n")
	WritePlan(&buf, p)
	y, err := PlanYAML(p)
	if err != nil {
		t.Fatal(err)
	}
	buf.WriteString("\n== plan.yaml\n")
	buf.Write(y)
	golden := filepath.Join("testdata", "guide.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("audit and plan differ from %s (-want +got):\n%s", golden, diff)
	}

	// The acceptance numbers, independent of the golden file.
	limits := map[string]string{}
	for _, tp := range p.Tiers {
		var l []string
		for _, x := range tp.Limits {
			l = append(l, x.String())
		}
		limits[tp.Tier.Name] = strings.Join(l, ",")
	}
	if diff := cmp.Diff(map[string]string{"free": "100/1m", "premium": "50000/1m"}, limits); diff != "" {
		t.Errorf("limits per tier (-want +got):\n%s", diff)
	}
	var deletes []string
	for _, r := range p.Delete {
		deletes = append(deletes, r.String()+"@"+r.ResourceVersion)
	}
	if diff := cmp.Diff([]string{
		"AuthPolicy openshift-ingress/gateway-auth-policy@102",
		"TokenRateLimitPolicy openshift-ingress/gateway-tier-rate-limits@103",
		"ConfigMap maas-api/tier-to-group-mapping@101",
	}, deletes); diff != "" {
		t.Errorf("deletions (-want +got):\n%s", diff)
	}
	if len(p.ModelRefs) != 2 || len(p.Unannotate) != 2 {
		t.Errorf("%d model refs and %d unannotations, want 2 and 2", len(p.ModelRefs), len(p.Unannotate))
	}
}

func set(t *testing.T, u *unstructured.Unstructured, v any, path ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(u.Object, v, path...); err != nil {
		t.Fatal(err)
	}
}

func tiersYAML(s string) func(map[string]*unstructured.Unstructured) {
	return func(o map[string]*unstructured.Unstructured) {
		o["tier-to-group-mapping"].Object["data"] = map[string]any{"tiers": s}
	}
}

// TestBuildPlanCases covers what the mapping expresses and, as blockers
// naming the object, what it cannot.
func TestBuildPlanCases(t *testing.T) {
	limitPath := func(limit string, rest ...string) []string {
		return append([]string{"spec", "limits", limit}, rest...)
	}
	tests := []struct {
		name string
		edit func(t *testing.T, o map[string]*unstructured.Unstructured)
		// blockers are "object: reason substring"; empty means no blocker.
		blockers []string
		// check inspects a plan without blockers.
		check func(t *testing.T, p *Plan)
	}{
		{
			name: "non-tier predicate in a limit",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				set(t, o["gateway-tier-rate-limits"], []any{map[string]any{"predicate": `auth.identity.tier == "premium" && request.path == "/v1"`}}, limitPath("premium-user-tokens", "when")...)
			},
			blockers: []string{"TokenRateLimitPolicy openshift-ingress/gateway-tier-rate-limits: limit premium-user-tokens: predicate"},
		},
		{
			name: "tier without groups",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				tiersYAML("- name: free\n  level: 0\n  groups: [system:authenticated]\n- name: premium\n  level: 1\n")(o)
			},
			blockers: []string{"ConfigMap maas-api/tier-to-group-mapping: tier premium has no groups"},
		},
		{
			name: "shared counter",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				unstructured.RemoveNestedField(o["gateway-tier-rate-limits"].Object, limitPath("free-user-tokens", "counters")...)
			},
			blockers: []string{"TokenRateLimitPolicy openshift-ingress/gateway-tier-rate-limits: limit free-user-tokens counts by []"},
		},
		{
			name: "sub-second window",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				set(t, o["gateway-tier-rate-limits"], []any{map[string]any{"limit": int64(5), "window": "500ms"}}, limitPath("free-user-tokens", "rates")...)
			},
			blockers: []string{"TokenRateLimitPolicy openshift-ingress/gateway-tier-rate-limits: limit free-user-tokens: window \"500ms\""},
		},
		{
			name: "tier without a limit",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				unstructured.RemoveNestedField(o["gateway-tier-rate-limits"].Object, limitPath("free-user-tokens")...)
			},
			blockers: []string{"tier free: no TokenRateLimitPolicy limit selects it"},
		},
		{
			name: "unknown tier in an annotation",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				o["premium-model"].SetAnnotations(map[string]string{TierAnnotation: `["gold"]`})
			},
			blockers: []string{`LLMInferenceService llm/premium-model: annotation alpha.maas.opendatahub.io/tiers lists tier "gold"`},
		},
		{
			name: "annotation not JSON",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				o["premium-model"].SetAnnotations(map[string]string{TierAnnotation: `premium`})
			},
			blockers: []string{"LLMInferenceService llm/premium-model: annotation alpha.maas.opendatahub.io/tiers=\"premium\" is not a JSON array"},
		},
		{
			name: "opa authorization",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				set(t, o["gateway-auth-policy"], map[string]any{"rego": "allow = true"}, "spec", "rules", "authorization", "extra", "opa")
			},
			blockers: []string{"AuthPolicy openshift-ingress/gateway-auth-policy: authorization rule extra: opa authorization has no subscription equivalent"},
		},
		{
			name: "copies of the ConfigMap disagree",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				c := o["tier-to-group-mapping"].DeepCopy()
				c.SetNamespace("redhat-ods-applications")
				c.SetName(TierConfigMapName)
				c.Object["data"] = map[string]any{"tiers": "- name: free\n  level: 0\n  groups: [everyone]\n"}
				o["copy"] = c
			},
			blockers: []string{"ConfigMap redhat-ods-applications/tier-to-group-mapping: defines other tiers than ConfigMap maas-api/tier-to-group-mapping"},
		},
		{
			name: "auth policy of the same name exists",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				o["existing"] = &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": maasAPIVersion, "kind": maasAuthPolicyKind,
					"metadata": map[string]any{"name": "tier-free-access", "namespace": DefaultMaaSNamespace},
				}}
			},
			blockers: []string{"MaaSAuthPolicy models-as-a-service/tier-free-access: already exists and was not created by maasctl migrate"},
		},
		{
			name: "model ref of the same name references something else",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				o["existing"] = &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": maasAPIVersion, "kind": maasModelRefKind,
					"metadata": map[string]any{"name": "my-model", "namespace": "llm"},
					"spec":     map[string]any{"modelRef": map[string]any{"kind": "ExternalModel", "name": "my-model"}},
				}}
			},
			blockers: []string{"MaaSModelRef llm/my-model: exists and references ExternalModel my-model"},
		},
		{
			name: "an existing model ref of the model is reused",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				o["existing"] = &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": maasAPIVersion, "kind": maasModelRefKind,
					"metadata": map[string]any{"name": "my-model", "namespace": "llm"},
					"spec":     map[string]any{"modelRef": map[string]any{"kind": llmisvcModelRefKind, "name": "my-model"}},
				}}
			},
			check: func(t *testing.T, p *Plan) {
				var reused []string
				for _, r := range p.Reused {
					reused = append(reused, r.String())
				}
				if diff := cmp.Diff([]string{"MaaSModelRef llm/my-model"}, reused); diff != "" {
					t.Errorf("reused (-want +got):\n%s", diff)
				}
				if len(p.ModelRefs) != 1 || p.ModelRefs[0].GetName() != "premium-model" {
					t.Errorf("model refs to create: %v", names(p.ModelRefs))
				}
			},
		},
		{
			name: "empty annotation means every tier",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				o["premium-model"].SetAnnotations(map[string]string{TierAnnotation: `[]`})
			},
			check: func(t *testing.T, p *Plan) {
				for _, tp := range p.Tiers {
					if len(tp.Models) != 2 {
						t.Errorf("tier %s models %v, want both", tp.Tier.Name, tp.Models)
					}
				}
			},
		},
		{
			name: "gateway denies the free tier",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				set(t, o["gateway-auth-policy"], []any{map[string]any{"selector": "auth.identity.tier", "operator": "eq", "value": "premium"}},
					"spec", "rules", "authorization", "tier-check", "patternMatching", "patterns")
			},
			check: func(t *testing.T, p *Plan) {
				if p.Tiers[0].Tier.Name != "free" || p.Tiers[0].GatewayAccess || p.Tiers[0].AuthPolicy != nil || p.Tiers[0].Subscription != nil {
					t.Errorf("free tier: access %v, auth policy %v", p.Tiers[0].GatewayAccess, p.Tiers[0].AuthPolicy != nil)
				}
				if p.Tiers[1].AuthPolicy == nil {
					t.Errorf("premium tier lost its auth policy")
				}
				if !strings.Contains(strings.Join(p.Notes, "\n"), "tier free: the old gateway AuthPolicy denied it") {
					t.Errorf("notes %v", p.Notes)
				}
			},
		},
		{
			name: "one limit for several tiers",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				unstructured.RemoveNestedField(o["gateway-tier-rate-limits"].Object, limitPath("premium-user-tokens")...)
				set(t, o["gateway-tier-rate-limits"], []any{map[string]any{"predicate": `auth.identity.tier in ["free", "premium"]`}}, limitPath("free-user-tokens", "when")...)
			},
			check: func(t *testing.T, p *Plan) {
				for _, tp := range p.Tiers {
					if len(tp.Limits) != 1 || tp.Limits[0] != (TokenLimit{Limit: 100, Window: "1m"}) {
						t.Errorf("tier %s limits %v", tp.Tier.Name, tp.Limits)
					}
				}
			},
		},
		{
			name: "MaaS kinds not served",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {},
			blockers: []string{
				"MaaSModelRef/MaaSAuthPolicy/MaaSSubscription: the maas.opendatahub.io kinds are not served",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := guideState(t, func(o map[string]*unstructured.Unstructured) { tt.edit(t, o) })
			if tt.name == "MaaS kinds not served" {
				st.MaaSServed = false
			}
			p := BuildPlan(st, PlanOptions{})
			var got []string
			for _, b := range p.Blockers {
				got = append(got, b.String())
			}
			if len(tt.blockers) == 0 {
				if len(got) > 0 {
					t.Fatalf("unexpected blockers:\n%s", strings.Join(got, "\n"))
				}
				if tt.check != nil {
					tt.check(t, p)
				}
				return
			}
			if len(got) != len(tt.blockers) {
				t.Fatalf("blockers:\n%s\nwant %d: %v", strings.Join(got, "\n"), len(tt.blockers), tt.blockers)
			}
			for i, want := range tt.blockers {
				if !strings.HasPrefix(got[i], want) && !strings.Contains(got[i], want) {
					t.Errorf("blocker %d = %q, want it to contain %q", i, got[i], want)
				}
			}
			if err := p.Err(); err == nil || !strings.Contains(err.Error(), "nothing was changed") {
				t.Errorf("Err() = %v", err)
			}
		})
	}
}

func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, key(o))
	}
	return out
}

func TestBuildPlanNothingToMigrate(t *testing.T) {
	st := &State{Existing: map[string]*unstructured.Unstructured{}}
	p := BuildPlan(st, PlanOptions{})
	if p.Err() != nil || len(p.Objects()) != 0 || len(p.Delete) != 0 {
		t.Errorf("a cluster without tier objects needs no plan: %+v", p)
	}
}

// TestBuildPlanSkipInvalid (case B18): every kind of unusable tier
// annotation blocks naming the model, the annotation and --skip-invalid;
// with SkipInvalid the model is left out (no MaaSModelRef, in no tier, its
// annotation not removed) and listed in the plan.
func TestBuildPlanSkipInvalid(t *testing.T) {
	for _, tc := range []struct{ name, value, reason string }{
		{"malformed JSON", `[premium`, "is not a JSON array of tier names"},
		{"JSON object, not an array", `{"tiers":["premium"]}`, "is not a JSON array of tier names"},
		{"JSON null", `null`, "is not a JSON array of tier names"},
		{"array of numbers", `[1]`, "is not a JSON array of tier names"},
		{"empty tier name", `["premium",""]`, "entry 1 is an empty tier name"},
		{"unknown tier beside a known one", `["premium","gold"]`, `lists tier "gold", which tier-to-group-mapping does not define`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edit := func(o map[string]*unstructured.Unstructured) {
				o["premium-model"].SetAnnotations(map[string]string{TierAnnotation: tc.value})
			}
			p := BuildPlan(guideState(t, edit), PlanOptions{})
			if len(p.Blockers) != 1 {
				t.Fatalf("blockers %v, want one for the model", p.Blockers)
			}
			b := p.Blockers[0].String()
			for _, want := range []string{"LLMInferenceService llm/premium-model: ", TierAnnotation, tc.reason, "re-run with --skip-invalid"} {
				if !strings.Contains(b, want) {
					t.Errorf("blocker %q lacks %q", b, want)
				}
			}

			p = BuildPlan(guideState(t, edit), PlanOptions{SkipInvalid: true})
			if err := p.Err(); err != nil {
				t.Fatalf("with SkipInvalid: %v", err)
			}
			if len(p.Skipped) != 1 || p.Skipped[0].Ref.String() != "LLMInferenceService llm/premium-model" || p.Skipped[0].Value != tc.value || !strings.Contains(p.Skipped[0].Reason, tc.reason) {
				t.Errorf("skipped %+v, want premium-model with its value and reason", p.Skipped)
			}
			if diff := cmp.Diff([]string{"MaaSModelRef llm/my-model"}, names(p.ModelRefs)); diff != "" {
				t.Errorf("model refs (-want +got):\n%s", diff)
			}
			for _, tp := range p.Tiers {
				for _, m := range tp.Models {
					if m.Name == "premium-model" {
						t.Errorf("tier %s still lists the skipped model", tp.Tier.Name)
					}
				}
			}
			var unannotate []string
			for _, u := range p.Unannotate {
				unannotate = append(unannotate, u.Ref.String())
			}
			if diff := cmp.Diff([]string{"LLMInferenceService llm/my-model"}, unannotate); diff != "" {
				t.Errorf("annotations removed (-want +got):\n%s", diff)
			}
			var buf bytes.Buffer
			WritePlan(&buf, p)
			if !strings.Contains(buf.String(), "skip LLMInferenceService llm/premium-model: ") || !strings.Contains(buf.String(), "annotation left as it is") {
				t.Errorf("the plan does not report the skipped model:\n%s", buf.String())
			}
		})
	}

	// After a migration that skipped a model only its annotation is left:
	// a re-run blocks (without the flag) or has nothing to do (with it),
	// even where the MaaS kinds are not needed any more.
	t.Run("no tier configuration left", func(t *testing.T) {
		m := guideState(t, nil).Models[1]
		m.SetAnnotations(map[string]string{TierAnnotation: `["premium"]`})
		st := &State{Models: []*unstructured.Unstructured{m}, Existing: map[string]*unstructured.Unstructured{}}
		p := BuildPlan(st, PlanOptions{})
		if len(p.Blockers) != 1 || !strings.Contains(p.Blockers[0].String(), "no tier configuration is left") ||
			!strings.Contains(p.Blockers[0].String(), "oc annotate llminferenceservice premium-model -n llm "+TierAnnotation+"-") {
			t.Errorf("blockers %v, want one naming the model and how to remove its annotation", p.Blockers)
		}
		p = BuildPlan(st, PlanOptions{SkipInvalid: true})
		if p.Err() != nil || !p.Empty() || len(p.Skipped) != 1 {
			t.Errorf("with SkipInvalid: err %v, empty %v, skipped %v; want an empty plan with the model skipped", p.Err(), p.Empty(), p.Skipped)
		}
	})
}

// TestBuildPlanDistinctPriorities: tier levels become the subscription
// priorities, so tiers sharing a level block (maas-controller's
// SpecPriorityDuplicate), and distinct levels keep their order.
func TestBuildPlanDistinctPriorities(t *testing.T) {
	p := BuildPlan(guideState(t, tiersYAML("- name: free\n  level: 5\n  groups: [system:authenticated]\n- name: premium\n  level: 5\n  groups: [premium-users]\n")), PlanOptions{})
	if len(p.Blockers) != 1 || !strings.Contains(p.Blockers[0].String(), "tiers free and premium share level 5") {
		t.Errorf("blockers %v, want one for the shared level", p.Blockers)
	}
	p = BuildPlan(guideState(t, tiersYAML("- name: premium\n  level: 10\n  groups: [premium-users]\n- name: free\n  level: 0\n  groups: [system:authenticated]\n")), PlanOptions{})
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	var prios []int64
	for _, tp := range p.Tiers {
		v, _, _ := unstructured.NestedInt64(tp.Subscription.Object, "spec", "priority")
		prios = append(prios, v)
	}
	if diff := cmp.Diff([]int64{0, 10}, prios); diff != "" {
		t.Errorf("priorities free, premium (-want +got):\n%s", diff)
	}
}
