package steps

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

func u(t *testing.T, js string) *unstructured.Unstructured { return obj(t, js) }

func TestOpenShiftVersionFindings(t *testing.T) {
	tests := []struct {
		name, status string
		sev          Severity // "" = no finding
	}{
		{"4.22", `{"desired":{"version":"4.22.3"}}`, ""},
		{"exactly 4.19.9", `{"desired":{"version":"4.19.9"}}`, ""},
		{"4.19.8", `{"desired":{"version":"4.19.8"}}`, SeverityError},
		{"from history", `{"history":[{"state":"Partial","version":"4.20.0"},{"state":"Completed","version":"4.18.2"}]}`, SeverityError},
		{"unreadable", `{}`, SeverityWarning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := openShiftVersionFindings(u(t, `{"apiVersion":"config.openshift.io/v1","kind":"ClusterVersion","metadata":{"name":"version"},"status":`+tt.status+`}`))
			switch {
			case tt.sev == "" && len(fs) != 0:
				t.Errorf("unexpected findings %v", fs)
			case tt.sev != "" && (len(fs) != 1 || fs[0].Severity != tt.sev):
				t.Errorf("findings %v, want one %s", fs, tt.sev)
			}
		})
	}
}

func selfSigned(t *testing.T, sans ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: sans[0]}, DNSNames: sans,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestCertFindings(t *testing.T) {
	const host = "maas.apps.example.com"
	tests := []struct {
		name        string
		pem         []byte
		passthrough bool
		want        string // substring of the one error, "" = none
	}{
		{"exact host", selfSigned(t, host), true, ""},
		{"wildcard behind passthrough", selfSigned(t, "*.apps.example.com"), true, "HTTP/2 connection coalescing"},
		{"host plus another name", selfSigned(t, host, "console.apps.example.com"), true, "also covers console.apps.example.com"},
		{"wildcard without the route", selfSigned(t, "*.apps.example.com"), false, ""},
		{"other host", selfSigned(t, "other.example.com"), false, "does not cover " + host},
		{"not PEM", []byte("garbage"), true, "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := certFindings(tt.pem, host, tt.passthrough, "ns/s")
			if tt.want == "" {
				if len(fs) != 0 {
					t.Errorf("unexpected findings %v", fs)
				}
				return
			}
			if len(fs) != 1 || !strings.Contains(fs[0].Message, tt.want) || fs[0].Severity != SeverityError {
				t.Errorf("findings %v, want one error containing %q", fs, tt.want)
			}
		})
	}
}

func TestOrphanFindings(t *testing.T) {
	op := *inventory.Default().Operator("rhoai")
	csv := func(name string, labels string) unstructured.Unstructured {
		return *u(t, `{"apiVersion":"operators.coreos.com/v1alpha1","kind":"ClusterServiceVersion","metadata":{"name":"`+name+`","namespace":"redhat-ods-operator","labels":{`+labels+`}}}`)
	}
	sub := func(installed, cond string) unstructured.Unstructured {
		return *u(t, `{"apiVersion":"operators.coreos.com/v1alpha1","kind":"Subscription","metadata":{"name":"rhods-operator","namespace":"redhat-ods-operator"},
			"spec":{"name":"rhods-operator"},"status":{"installedCSV":"`+installed+`","currentCSV":"`+installed+`","conditions":[`+cond+`]}}`)
	}
	// binding is a Subscription whose InstallPlan made CSV cur, which OLM
	// has not bound to it (installedCSV) yet.
	binding := func(cur, cond string) unstructured.Unstructured {
		return *u(t, `{"apiVersion":"operators.coreos.com/v1alpha1","kind":"Subscription","metadata":{"name":"rhods-operator","namespace":"redhat-ods-operator"},
			"spec":{"name":"rhods-operator"},"status":{"currentCSV":"`+cur+`","conditions":[`+cond+`]}}`)
	}
	// created sets creationTimestamp: a Subscription OLM has not written
	// status for yet, and the CSV its InstallPlan made a second later.
	at := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	created := func(o unstructured.Unstructured, d time.Duration) unstructured.Unstructured {
		o.SetCreationTimestamp(metav1.NewTime(at.Add(d)))
		return o
	}
	tests := []struct {
		name string
		csvs []unstructured.Unstructured
		subs []unstructured.Unstructured
		want []string
	}{
		{"referenced", []unstructured.Unstructured{csv("rhods-operator.3.5.0", "")}, []unstructured.Unstructured{sub("rhods-operator.3.5.0", "")}, nil},
		{"orphan", []unstructured.Unstructured{csv("rhods-operator.3.5.0", "")}, nil, []string{"oc delete csv rhods-operator.3.5.0 -n redhat-ods-operator"}},
		{"copied csv of another namespace", []unstructured.Unstructured{csv("rhods-operator.3.5.0", `"olm.copiedFrom":"x"`)}, nil, nil},
		{"another package", []unstructured.Unstructured{csv("servicemeshoperator3.v3.1.0", "")}, nil, nil},
		{"made by a pending subscription", []unstructured.Unstructured{created(csv("rhods-operator.3.5.0", ""), time.Second)}, []unstructured.Unstructured{created(sub("", ""), 0)}, nil},
		{"older than the pending subscription", []unstructured.Unstructured{created(csv("rhods-operator.3.5.0", ""), -time.Hour)}, []unstructured.Unstructured{created(sub("", ""), 0)}, []string{"oc delete csv rhods-operator.3.5.0"}},
		{"subscription resolved to another csv", []unstructured.Unstructured{created(csv("rhods-operator.3.4.0", ""), time.Second)}, []unstructured.Unstructured{created(sub("rhods-operator.3.5.0", ""), 0)}, []string{"oc delete csv rhods-operator.3.4.0"}},
		{"resolution failed", nil, []unstructured.Unstructured{sub("", `{"type":"ResolutionFailed","status":"True","reason":"ConstraintsNotSatisfiable","message":"no operators found"}`)}, []string{"cannot be resolved", "ConstraintsNotSatisfiable"}},
		{"resolution failed while OLM binds a csv", []unstructured.Unstructured{csv("rhods-operator.3.5.0", "")},
			[]unstructured.Unstructured{binding("rhods-operator.3.5.0", `{"type":"ResolutionFailed","status":"True","reason":"ConstraintsNotSatisfiable","message":"clusterserviceversion rhods-operator.3.5.0 exists and is not referenced by a subscription"}`)},
			[]string{"while it was binding CSV rhods-operator.3.5.0 to Subscription rhods-operator"}},
		{"resolution failed on its own during a binding", []unstructured.Unstructured{csv("rhods-operator.3.5.0", "")},
			[]unstructured.Unstructured{binding("rhods-operator.3.5.0", `{"type":"ResolutionFailed","status":"True","reason":"ConstraintsNotSatisfiable","message":"no operators found in channel stable-9"}`)},
			[]string{"cannot be resolved", "stable-9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := orphanFindings(op, tt.csvs, tt.subs)
			if len(tt.want) == 0 {
				if len(fs) != 0 {
					t.Errorf("unexpected findings %v", fs)
				}
				return
			}
			if len(fs) != 1 {
				t.Fatalf("findings %v, want one", fs)
			}
			for _, w := range tt.want {
				if !strings.Contains(fs[0].String(), w) {
					t.Errorf("finding %q lacks %q", fs[0], w)
				}
			}
			// OLM's binding race is a warning; everything else stops the run.
			want := SeverityError
			if strings.Contains(tt.name, "binds") {
				want = SeverityWarning
			}
			if fs[0].Severity != want {
				t.Errorf("finding severity %s, want %s", fs[0].Severity, want)
			}
		})
	}
}

func TestComponentFindings(t *testing.T) {
	tests := []struct {
		name    string
		layout  release.Release
		managed []string
		want    string
	}{
		{"default on 3.5", release.New(release.RHOAI35, "t"), inventory.Default().RHOAI.ManagedComponents, ""},
		{"ogx and llamastackoperator on 3.5", release.New(release.RHOAI35, "t"), []string{"dashboard", "kserve", "aigateway", "ogx", "llamastackoperator"}, "ogx and llamastackoperator are both Managed"},
		{"no dashboard", release.New(release.RHOAI35, "t"), []string{"kserve", "aigateway"}, "dashboard"},
		{"3.4 without kserve", release.New(release.RHOAI34, "t"), []string{"dashboard", "aigateway"}, "kserve.modelsAsService"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := inventory.Default()
			inv.RHOAI.ManagedComponents = tt.managed
			fs := componentFindings(tt.layout, inv)
			if tt.want == "" {
				if len(fs) != 0 {
					t.Errorf("unexpected findings %v", fs)
				}
				return
			}
			if len(fs) != 1 || !strings.Contains(fs[0].Message, tt.want) {
				t.Errorf("findings %v, want one containing %q", fs, tt.want)
			}
		})
	}
}

func TestPolicyAndReport(t *testing.T) {
	if err := ValidateIgnore([]string{"vault", "all"}); err != nil {
		t.Errorf("known names rejected: %v", err)
	}
	if err := ValidateIgnore([]string{"vualt"}); err == nil || !strings.Contains(err.Error(), "vault") {
		t.Errorf("an unknown check must be rejected listing the known ones, got %v", err)
	}
	rep := &PreflightReport{Findings: []Finding{
		{Check: "vault", Severity: SeverityError, Message: "denied"},
		{Check: "rhoai-layout", Severity: SeverityWarning, Message: "left out"},
		{Check: "dsc", Severity: SeverityError, Message: "conflict", Ignored: true},
	}}
	if errs := rep.Errors(); len(errs) != 1 || errs[0].Check != "vault" {
		t.Errorf("Errors() = %v", errs)
	}
	if ws := rep.Warnings(); len(ws) != 2 {
		t.Errorf("Warnings() = %v, want the warning and the ignored error", ws)
	}
	err := rep.Err()
	if !IsPreflightFailed(err) || !strings.Contains(err.Error(), "vault: denied") || strings.Contains(err.Error(), "conflict") {
		t.Errorf("Err() = %v", err)
	}
	if (&PreflightReport{Findings: rep.Findings[1:]}).Err() != nil {
		t.Error("warnings and ignored errors must not fail preflight")
	}
	p := Policy{IgnorePreflight: []string{"dsc"}}
	if !p.ignores("dsc") || p.ignores("vault") || !(Policy{IgnorePreflight: []string{IgnoreAll}}).ignores("vault") {
		t.Error("Policy.ignores")
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAIL  vault", "WARN  rhoai-layout", "IGNORED  dsc", "PASS  permissions", "1 error(s), 2 warning(s)"} {
		if !strings.Contains(strings.Join(strings.Fields(b.String()), "  "), strings.Join(strings.Fields(want), "  ")) {
			t.Errorf("text report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestN04VersionPolicy is case N04's policy: rhcl-operator 1.4.0 is denied
// whatever the inventory's minVersion says, 1.4.1 passes, anything below
// the minimum is refused, and the fix names the version to upgrade to.
func TestN04VersionPolicy(t *testing.T) {
	for _, tt := range []struct {
		pkg, v, min string
		bad         bool
		fixTo       string
	}{
		{"rhcl-operator", "1.4.0", "1.4.1", true, "1.4.1"},
		{"rhcl-operator", "1.4.0", "", true, "1.4.1"},
		// A lowered minVersion never allows the denied version.
		{"rhcl-operator", "1.4.0", "1.3.0", true, "1.4.1"},
		{"rhcl-operator", "1.4.0", "1.5.0", true, "1.5.0"},
		{"rhcl-operator", "1.4.1", "1.4.1", false, ""},
		{"rhcl-operator", "1.5.0", "1.4.1", false, ""},
		{"rhcl-operator", "1.3.2", "1.4.1", true, "1.4.1"},
		{"rhcl-operator", "1.3.2", "", false, ""},
		{"rhcl-operator", "1.2.9", "", true, "1.3.0"},
		{"kuadrant-operator", "1.4.0", "", true, "1.4.2"},
		{"kuadrant-operator", "1.4.2", "", false, ""},
		{"rhods-operator", "3.5.0", "", false, ""},
		{"rhcl-operator", "", "1.4.1", false, ""},
	} {
		p, fixTo := versionProblem(tt.pkg, tt.v, tt.min)
		if (p != "") != tt.bad || fixTo != tt.fixTo {
			t.Errorf("versionProblem(%s, %q, min %q) = %q, %q; want bad=%v, fix to %q", tt.pkg, tt.v, tt.min, p, fixTo, tt.bad, tt.fixTo)
		}
	}
	if v := versionFromCSVName("rhcl-operator.v1.4.0"); v != "1.4.0" {
		t.Errorf("versionFromCSVName = %q", v)
	}
	ops := inventory.Default().Operators
	if p, _ := csvVersionProblem("rhcl-operator.v1.4.0", ops); !strings.Contains(p, "denied") {
		t.Errorf("csvVersionProblem(rhcl-operator.v1.4.0) = %q", p)
	}
	if p, _ := csvVersionProblem("cloudnative-pg.v1.30.0", ops); p != "" {
		t.Errorf("csvVersionProblem(cloudnative-pg.v1.30.0) = %q, want none", p)
	}
}

func TestInstallPlanProblem(t *testing.T) {
	rhcl := *inventory.Default().Operator("rhcl")
	lowMin := rhcl
	lowMin.MinVersion = "1.3.0"
	tests := []struct {
		name string
		csvs []string
		want string
		op   inventory.Operator
		ok   bool
	}{
		{"expected", []string{"rhods-operator.3.5.0"}, "rhods-operator.3.5.0", *inventory.Default().Operator("rhoai"), true},
		{"another csv", []string{"rhods-operator.3.6.0"}, "rhods-operator.3.5.0", *inventory.Default().Operator("rhoai"), false},
		{"two csvs", []string{"rhods-operator.3.5.0", "x.1"}, "rhods-operator.3.5.0", *inventory.Default().Operator("rhoai"), false},
		{"below minVersion", []string{"rhcl-operator.v1.4.0"}, "rhcl-operator.v1.4.0", rhcl, false},
		{"denied though minVersion allows it", []string{"rhcl-operator.v1.4.0"}, "rhcl-operator.v1.4.0", lowMin, false},
		{"fixed release", []string{"rhcl-operator.v1.4.1"}, "rhcl-operator.v1.4.1", lowMin, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := installPlanProblem(tt.csvs, tt.want, "test", tt.op); (got == "") != tt.ok {
				t.Errorf("installPlanProblem = %q, want ok=%v", got, tt.ok)
			}
		})
	}
}

func TestSubscriptionProgress(t *testing.T) {
	sub := func(conds string) *unstructured.Unstructured {
		return obj(t, `{"apiVersion":"v1","kind":"S","metadata":{"name":"rhods-operator","namespace":"ns"},"status":{"state":"UpgradePending","installPlanRef":{"name":"install-abcde"},"conditions":[`+conds+`]}}`)
	}
	handled := map[string]bool{}
	approval := `{"type":"InstallPlanPending","status":"True","reason":"RequiresApproval"}`
	if r := subscriptionProgress(handled, "")(sub(approval)); !r.Done || r.Failed != nil {
		t.Errorf("RequiresApproval must hand over to the caller: %+v", r)
	}
	handled["install-abcde"] = true
	if r := subscriptionProgress(handled, "")(sub(approval)); r.Done {
		t.Errorf("an approved plan must be waited on, not handed over again")
	}
	if r := subscriptionProgress(handled, "")(sub(`{"type":"InstallPlanMissing","status":"True","reason":"ReferencedInstallPlanNotFound","message":"gone"}`)); r.Failed == nil || !strings.Contains(r.Failed.Error(), "install-abcde") {
		t.Errorf("a missing InstallPlan must fail naming it: %+v", r)
	}
	if r := subscriptionProgress(handled, "")(sub(`{"type":"InstallPlanPending","status":"True","reason":"Installing"}`)); r.Done || r.Failed != nil {
		t.Errorf("Installing is progress: %+v", r)
	}
}

func TestDSCReadyForLayouts(t *testing.T) {
	dsc := func(spec, phase, conds string) *unstructured.Unstructured {
		return obj(t, `{"apiVersion":"v1","kind":"D","spec":{"components":{`+spec+`}},"status":{"phase":"`+phase+`","conditions":[`+conds+`]}}`)
	}
	ready := `{"type":"Ready","status":"True","reason":"Ready"}`
	conflict := `"ogx":{"managementState":"Managed"},"llamastackoperator":{"managementState":"Managed"}`
	l34, l35 := release.New(release.RHOAI34, "t"), release.New(release.RHOAI35, "t")
	tests := []struct {
		name   string
		l      release.Release
		obj    *unstructured.Unstructured
		done   bool
		failed string
	}{
		{"3.4 ready without aigateway", l34, dsc("", "Ready", ready+`,{"type":"ModelsAsServiceReady","status":"True","reason":"Ready"}`), true, ""},
		{"3.4 maas not ready", l34, dsc("", "Ready", ready+`,{"type":"ModelsAsServiceReady","status":"False","reason":"PrerequisitesMissing","message":"database Secret 'maas-db-config' not found"}`), false, ""},
		{"3.5 hidden conflict", l35, dsc(conflict, "Ready", ready+`,{"type":"AIGatewayReady","status":"True"},{"type":"ModelsAsAServiceReady","status":"False","reason":"Error","message":"LlamaStackOperator is set to Managed"}`), false, "set llamastackoperator to Removed"},
		{"3.5 error without the conflict waits", l35, dsc("", "Ready", ready+`,{"type":"ModelsAsAServiceReady","status":"False","reason":"Error","message":"x"}`), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := dscReadyFor(tt.l)(tt.obj)
			if r.Done != tt.done {
				t.Errorf("done = %v, want %v (%s)", r.Done, tt.done, r.Status)
			}
			if (r.Failed != nil) != (tt.failed != "") || (r.Failed != nil && !strings.Contains(r.Failed.Error(), tt.failed)) {
				t.Errorf("failed = %v, want %q", r.Failed, tt.failed)
			}
			if !r.Done && r.Failed == nil && strings.Contains(tt.name, "not ready") && !strings.Contains(r.Status, "maas-db-config") {
				t.Errorf("status %q does not quote the MaaS condition", r.Status)
			}
		})
	}
}

func TestPlannedAccess(t *testing.T) {
	inv := inventory.Default()
	objs, err := assets.Render(inv, assets.Facts{Host: "maas.apps.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	guess := func(gvk schema.GroupVersionKind) string { return strings.ToLower(gvk.Kind) + "s" }
	e := &Env{Inv: inv, Objects: objs}
	has := func(list []access, want string) bool {
		for _, a := range list {
			if a.String() == want {
				return true
			}
		}
		return false
	}
	list := plannedAccess(e, guess)
	for _, want := range []string{
		"get namespaces kuadrant-system",
		"create subscriptions.operators.coreos.com in namespace redhat-ods-operator",
		"patch datascienceclusters.datasciencecluster.opendatahub.io (cluster-wide)",
		"create secrets in namespace redhat-ai-gateway-infra",
		"deletecollection pods in namespace openshift-operators",
	} {
		if !has(list, want) {
			t.Errorf("planned access lacks %q", want)
		}
	}
	for _, not := range []string{
		"create authorinos.operator.authorino.kuadrant.io in namespace kuadrant-system",
		"patch installplans.operators.coreos.com in namespace redhat-ods-operator",
	} {
		if has(list, not) {
			t.Errorf("planned access has %q, which the plan does not need", not)
		}
	}
	e.Policy.ApproveInstallPlans = true
	if !has(plannedAccess(e, guess), "patch installplans.operators.coreos.com in namespace redhat-ods-operator") {
		t.Error("--approve-installplans needs patch on installplans")
	}
}

func TestGatewayReadyNamesListeners(t *testing.T) {
	gw := obj(t, `{"apiVersion":"v1","kind":"G","status":{"conditions":[{"type":"Accepted","status":"True"},{"type":"Programmed","status":"False","reason":"Invalid"}],
		"listeners":[{"name":"https","conditions":[{"type":"ResolvedRefs","status":"False","reason":"InvalidCertificateRef","message":"secret openshift-ingress/maas-gateway-tls not found"}]}]}}`)
	r := waiters.GatewayReady(gw)
	if r.Done || !strings.Contains(r.Status, "listener https ResolvedRefs=False (InvalidCertificateRef)") {
		t.Errorf("gatewayReady = %+v", r)
	}
}

// TestN02IngressOwnsSubscription: the ingress operator's own OSSM
// Subscription (annotated, or exactly the one older ingress operators
// create) is not a conflict; a hand-installed one of the same package is.
func TestN02IngressOwnsSubscription(t *testing.T) {
	sub := func(ns, name, pkg, approval string, ann map[string]string) *unstructured.Unstructured {
		s := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"name": pkg, "installPlanApproval": approval}}}
		s.SetNamespace(ns)
		s.SetName(name)
		s.SetAnnotations(ann)
		return s
	}
	for _, tt := range []struct {
		name string
		s    *unstructured.Unstructured
		own  bool
	}{
		{"annotated", sub("openshift-operators", "servicemeshoperator3", "servicemeshoperator3", "Automatic", map[string]string{ingressOwnedAnnotation: ""}), true},
		{"older ingress operator's", sub("openshift-operators", "servicemeshoperator3", "servicemeshoperator3", "Manual", nil), true},
		{"hand-installed OSSM 3", sub("openshift-operators", "servicemeshoperator3", "servicemeshoperator3", "Automatic", nil), false},
		{"OSSM 3 elsewhere", sub("istio-system", "servicemeshoperator3", "servicemeshoperator3", "Manual", nil), false},
		{"OSSM 2", sub("openshift-operators", "servicemeshoperator", "servicemeshoperator", "Manual", nil), false},
	} {
		if got := ingressOwnsSubscription(tt.s); got != tt.own {
			t.Errorf("%s: ingressOwnsSubscription = %v, want %v", tt.name, got, tt.own)
		}
	}
}
