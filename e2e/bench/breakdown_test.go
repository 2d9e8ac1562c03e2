package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/maasctl/maasctl/e2e/faultproxy"
)

// TestRequestGroupsOpenWatch: a watch still open when the proxy's
// requests are read has no End; its time counts until now, never the
// negative span from the zero time (the breakdown once printed
// -9223372036854 ms for the simulators' watches).
func TestRequestGroupsOpenWatch(t *testing.T) {
	start := time.Now().Add(-2 * time.Second)
	recs := []faultproxy.Request{
		{Start: start, UserAgent: simUserAgent, Method: "GET", Path: "/apis/gateway.networking.k8s.io/v1/httproutes", Watch: true},
		{Start: start, End: start.Add(10 * time.Millisecond), UserAgent: simUserAgent, Method: "GET", Path: "/apis/gateway.networking.k8s.io/v1/httproutes", Watch: true},
	}
	gs := requestGroups(recs)
	if len(gs) != 1 || gs[0].N != 2 || gs[0].Verb != "watch" {
		t.Fatalf("groups %+v, want one watch group of 2", gs)
	}
	g := gs[0]
	if g.P50 < 10 || g.Max < 2000 || g.Total < 2010 {
		t.Errorf("open watch counted as p50 %v max %v total %v ms; want p50 ≥ 10, max and total ≥ 2,000 (open until now)", g.P50, g.Max, g.Total)
	}
}

// TestApplyPhases: maasctl's PATCHes of one resource, the floor that
// drops the state ConfigMaps, the order by first apply and the wait from
// a phase's last apply to the next one's first (the last phase's to the
// end of the log).
func TestApplyPhases(t *testing.T) {
	log := strings.Join([]string{
		`not json`,
		`{"level":"debug","ts":100.0,"msg":"api request","method":"GET","path":"/api"}`,
		`{"ts":101.0,"msg":"api request","method":"PATCH","path":"/api/v1/namespaces/maasctl/configmaps/maasctl-checkpoints"}`,
		`{"ts":110.0,"msg":"api request","method":"PATCH","path":"/apis/maas.opendatahub.io/v1alpha1/namespaces/a/maasmodelrefs/m1"}`,
		`{"ts":102.0,"msg":"api request","method":"PATCH","path":"/apis/inference.opendatahub.io/v1alpha1/namespaces/a/externalmodels/m1"}`,
		`{"ts":103.5,"msg":"api request","method":"PATCH","path":"/apis/inference.opendatahub.io/v1alpha1/namespaces/b/externalmodels/m2"}`,
		`{"ts":111.0,"msg":"api request","method":"PATCH","path":"/apis/maas.opendatahub.io/v1alpha1/namespaces/a/maasmodelrefs/m2"}`,
		`{"ts":112.0,"msg":"api request","method":"GET","path":"/apis/maas.opendatahub.io/v1alpha1/namespaces/a/maasmodelrefs/m2"}`,
		`{"ts":115.0,"msg":"api request","method":"DELETE","path":"/api/v1/namespaces/maasctl/configmaps/maasctl-checkpoints"}`,
	}, "\n")
	got, err := applyPhases(strings.NewReader(log), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []ApplyPhase{
		{Resource: "inference.opendatahub.io/externalmodels", Applies: 2, First: 2, Last: 3.5, Until: 6.5},
		{Resource: "maas.opendatahub.io/maasmodelrefs", Applies: 2, First: 10, Last: 11, Until: 4},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("applyPhases (-want +got):\n%s", diff)
	}
	if got, _ := applyPhases(strings.NewReader(""), 1); len(got) != 0 {
		t.Errorf("empty log: %+v, want no phases", got)
	}
	if s := phasesText(want[:1]); s != "inference.opendatahub.io/externalmodels 2 applies 2.0–3.5 s, then 6.5 s" {
		t.Errorf("phasesText = %q", s)
	}
}
