package bench

import (
	"testing"
	"time"

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
