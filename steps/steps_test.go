package steps

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
)

func TestRegistryOrderFollowsDependencies(t *testing.T) {
	reg, err := NewRegistry(inventory.Default())
	if err != nil {
		t.Fatal(err)
	}
	order, err := reg.TopoOrder()
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, s := range order {
		pos[s.ID] = i
	}
	for _, s := range reg.Steps {
		for _, d := range s.After {
			if pos[d] >= pos[s.ID] {
				t.Errorf("%s runs before its dependency %s", s.ID, d)
			}
		}
	}
	// The documented phase order holds along the real dependencies.
	for _, pair := range [][2]string{
		{"database/secret", "dbsecret/maas-db-config"},
		{"database/cluster", "rhoai/dsc"},
		{"dbsecret/maas-db-config", "rhoai/dsc"},
		{"operators/rhcl", "platform/kuadrant"},
		{"platform/gatewayclass", "platform/kuadrant"},
		{"rhoai/dsc", "models/provider"},
		{"models/model", "access/auth-policy"},
		{"access/subscription", "verify/status"},
	} {
		if pos[pair[0]] >= pos[pair[1]] {
			t.Errorf("%s must come before %s", pair[0], pair[1])
		}
	}
	rev, err := reg.ReverseOrder()
	if err != nil {
		t.Fatal(err)
	}
	if rev[0].ID != "verify/status" || rev[len(rev)-1].ID != order[0].ID {
		t.Errorf("reverse order starts %s ends %s", rev[0].ID, rev[len(rev)-1].ID)
	}
}

func TestRegistryRejectsCycle(t *testing.T) {
	r := &Registry{Steps: []*Step{{ID: "a/x", After: []string{"b/y"}}, {ID: "b/y", After: []string{"a/x"}}, {ID: "c/z"}}}
	_, err := r.TopoOrder()
	if err == nil || !strings.Contains(err.Error(), "a/x, b/y") {
		t.Fatalf("want a cycle error naming a/x and b/y, got %v", err)
	}
}

func TestContains(t *testing.T) {
	tests := []struct {
		name     string
		live     string
		want     string
		ok       bool
		diffPath string
	}{
		{"equal", `{"a":1}`, `{"a":1}`, true, ""},
		{"live has more", `{"a":1,"b":{"c":2}}`, `{"a":1}`, true, ""},
		{"int vs float", `{"a":1.0}`, `{"a":1}`, true, ""},
		{"value differs", `{"a":{"b":"x"}}`, `{"a":{"b":"y"}}`, false, ".a.b"},
		{"missing key", `{"a":{}}`, `{"a":{"b":"y"}}`, false, ".a.b"},
		{"list element superset", `{"l":[{"x":1,"y":2}]}`, `{"l":[{"x":1}]}`, true, ""},
		{"list length differs", `{"l":[1,2]}`, `{"l":[1]}`, false, ".l"},
		// A user added by hand to a MaaSSubscription whose inventory
		// names none: maasctl applies users: [] (a new user's trial).
		{"entry added to an empty list", `{"owner":{"users":["mallory"]}}`, `{"owner":{"users":[]}}`, false, ".owner.users"},
		{"empty list missing", `{"owner":{}}`, `{"owner":{"users":[]}}`, false, ".owner.users"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live, want := &unstructured.Unstructured{}, &unstructured.Unstructured{}
			if err := live.UnmarshalJSON([]byte(`{"kind":"X","apiVersion":"v1","spec":` + tt.live + `}`)); err != nil {
				t.Fatal(err)
			}
			if err := want.UnmarshalJSON([]byte(`{"kind":"X","apiVersion":"v1","spec":` + tt.want + `}`)); err != nil {
				t.Fatal(err)
			}
			p, ok := Contains(live.Object, want.Object)
			if ok != tt.ok || (!ok && p != "spec"+tt.diffPath) {
				t.Errorf("Contains = %q, %v; want %v at spec%s", p, ok, tt.ok, tt.diffPath)
			}
		})
	}
}

func TestDBConnectionURLEncodesPassword(t *testing.T) {
	inv := inventory.Default()
	pw := "p@ss:w/rd?#%"
	got := DBConnectionURL(inv, pw)
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := u.User.Password(); p != pw {
		t.Errorf("password round-trip: got %q", p)
	}
	want := "@maas-postgres-rw.rhoai-maas-db.svc:5432/maas?sslmode=require"
	if !strings.HasPrefix(got, "postgresql://maas:") || !strings.HasSuffix(got, want) {
		t.Errorf("URL %q", got)
	}
}

func obj(t *testing.T, js string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(js)); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestOLMConditions(t *testing.T) {
	tests := []struct {
		name       string
		cond       func(*unstructured.Unstructured) bool
		js         string
		done, fail bool
	}{
		{"subscription installed", func(u *unstructured.Unstructured) bool { return subscriptionInstalled(u).Done },
			`{"apiVersion":"v1","kind":"S","status":{"state":"AtLatestKnown","installedCSV":"x.v1"}}`, true, false},
		{"subscription upgrade pending", func(u *unstructured.Unstructured) bool { return subscriptionInstalled(u).Done },
			`{"apiVersion":"v1","kind":"S","status":{"state":"UpgradePending","currentCSV":"x.v1"}}`, false, false},
		{"csv succeeded", func(u *unstructured.Unstructured) bool { return csvSucceeded(u).Done },
			`{"apiVersion":"v1","kind":"C","status":{"phase":"Succeeded","reason":"InstallSucceeded"}}`, true, false},
		{"csv installing", func(u *unstructured.Unstructured) bool { return csvSucceeded(u).Done },
			`{"apiVersion":"v1","kind":"C","status":{"phase":"Installing"}}`, false, false},
		{"csv failed", func(u *unstructured.Unstructured) bool { return csvSucceeded(u).Failed != nil },
			`{"apiVersion":"v1","kind":"C","status":{"phase":"Failed","reason":"InstallCheckFailed"}}`, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cond(obj(t, tt.js)); got != tt.done {
				t.Errorf("got %v, want %v", got, tt.done)
			}
		})
	}
}

func TestCheckMinVersion(t *testing.T) {
	op := *inventory.Default().Operator("rhcl")
	for _, tt := range []struct {
		version string
		ok      bool
		min     string
	}{{"1.4.0", false, ""}, {"1.4.1", true, ""}, {"1.5.0", true, ""}, {"1.3.9", false, ""},
		// A lowered minVersion never lets the denied 1.4.0 run (case N04).
		{"1.4.0", false, "1.3.0"}, {"1.3.9", true, "1.3.0"}} {
		o := op
		if tt.min != "" {
			o.MinVersion = tt.min
		}
		csv := obj(t, `{"apiVersion":"v1","kind":"C","metadata":{"name":"rhcl-operator.v`+tt.version+`"},"spec":{"version":"`+tt.version+`"}}`)
		err := checkMinVersion(csv, o)
		if (err == nil) != tt.ok {
			t.Errorf("version %s (minVersion %q): err=%v, want ok=%v", tt.version, o.MinVersion, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), CodeDependencyVersionDenied) {
			t.Errorf("version %s: %v lacks %s", tt.version, err, CodeDependencyVersionDenied)
		}
	}
}

func TestDSCReadyNeedsMaaS(t *testing.T) {
	ready := `{"type":"Ready","status":"True","reason":"Ready"}`
	tests := []struct {
		name  string
		conds string
		phase string
		done  bool
	}{
		{"all ready", ready + `,{"type":"AIGatewayReady","status":"True","reason":"Ready"},{"type":"ModelsAsAServiceReady","status":"True","reason":"Ready"}`, "Ready", true},
		// On 3.5 a missing ModelsAsAServiceReady keeps the wait going, and
		// the 3.4 name never stands in for it (case B04).
		{"no MaaS condition (B04)", ready + `,{"type":"AIGatewayReady","status":"True","reason":"Ready"}`, "Ready", false},
		{"only the 3.4 MaaS condition name (B04)", ready + `,{"type":"AIGatewayReady","status":"True","reason":"Ready"},{"type":"ModelsAsServiceReady","status":"True","reason":"Ready"}`, "Ready", false},
		{"aggregate ready hides MaaS (B05)", ready + `,{"type":"AIGatewayReady","status":"False","reason":"NotReady"}`, "Ready", false},
		{"no aigateway condition", ready, "Ready", false},
		{"not ready phase", ready + `,{"type":"AIGatewayReady","status":"True","reason":"Ready"}`, "Not Ready", false},
		{"maas removed", ready + `,{"type":"AIGatewayReady","status":"True","reason":"Ready"},{"type":"ModelsAsAServiceReady","status":"False","reason":"Removed"}`, "Ready", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := obj(t, `{"apiVersion":"v1","kind":"D","status":{"phase":"`+tt.phase+`","conditions":[`+tt.conds+`]}}`)
			if got := dscReady(u).Done; got != tt.done {
				t.Errorf("dscReady = %v, want %v (%s)", got, tt.done, dscReady(u).Status)
			}
		})
	}
}

// TestStateWriteErr: a state write that failed because the run was
// interrupted says so alone; any other failure keeps its cause.
func TestStateWriteErr(t *testing.T) {
	joined := errors.Join(
		fmt.Errorf("write record shard maasctl/maasctl-inventory.platform.route: %w", context.Canceled),
		fmt.Errorf("write record shard maasctl/maasctl-inventory.models.model: %w", context.Canceled))
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("stdout closed (broken pipe)"))
	got := stateWriteErr(ctx, "checkpoint", joined).Error()
	if got != "interrupted (stdout closed (broken pipe)) before its checkpoint was written: run again to finish it" {
		t.Errorf("interrupted: %q", got)
	}
	other := errors.New("configmaps is forbidden")
	if got := stateWriteErr(context.Background(), "checkpoint", other); !errors.Is(got, other) || got.Error() != "checkpoint: configmaps is forbidden" {
		t.Errorf("not interrupted: %q", got)
	}
}

// TestCSVStatusText: the CSV wait's progress names the phase, the reason
// only when OLM wrote one, and a CSV OLM has not judged yet in words (not
// "phase  ()").
func TestCSVStatusText(t *testing.T) {
	for js, want := range map[string]string{
		`{"apiVersion":"v1","kind":"C","status":{"phase":"Succeeded","reason":"InstallSucceeded","message":"install strategy completed with no errors"}}`: "phase Succeeded (InstallSucceeded): install strategy completed with no errors",
		`{"apiVersion":"v1","kind":"C","status":{"phase":"Installing"}}`:                                                                                  "phase Installing",
		`{"apiVersion":"v1","kind":"C"}`: "no phase yet (OLM has not judged the CSV)",
	} {
		if got := csvSucceeded(obj(t, js)).Status; got != want {
			t.Errorf("status of %s: %q, want %q", js, got, want)
		}
	}
}

// TestRunStartedMessage: the run's first line names the Gateway host, and
// where it came from when the inventory leaves it unset.
func TestRunStartedMessage(t *testing.T) {
	inv := inventory.Default()
	inv.Gateway.Hostname = ""
	e := &Env{Inv: inv}
	e.Facts.Host = "maas.apps.example.com"
	if got, want := runStartedMessage(25, e), "25 steps for Gateway host maas.apps.example.com (maas.<the cluster's apps domain>; set gateway.hostname to choose another)"; got != want {
		t.Errorf("unset hostname: %q, want %q", got, want)
	}
	inv.Gateway.Hostname = "maas.example.org"
	e.Facts.Host = inv.Gateway.Hostname
	if got, want := runStartedMessage(3, e), "3 steps for Gateway host maas.example.org"; got != want {
		t.Errorf("set hostname: %q, want %q", got, want)
	}
	if got := runStartedMessage(1, &Env{}); got != "1 steps" {
		t.Errorf("no host known: %q", got)
	}
}
