package e2e

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/steps"
)

// TestPreflightOnReRuns (issue 14, item 9): preflight's checks are the
// point of a re-run after an inventory change, so 'maasctl install' runs
// them on every run and prints their warnings, and a converged re-run
// still writes nothing. The built binary against the local control plane:
// a first install; a second with a token limit below
// inventory.MinUsefulTokenLimit (the access-pairing check warns; the
// inventory change does not touch preflight's own input hash, so before
// the fix its checkpoint matched and it was skipped silently); a third
// with the same inventory, converged: the warning again, every step
// unchanged, no write, no resourceVersion changed (checkpoints included);
// a fourth in plain output, where the warning is a line of its own.
func TestPreflightOnReRuns(t *testing.T) {
	parallel(t)
	fullOnly(t, "preflight's warnings on every re-run after an inventory change, with no write on a converged re-run (TestInstallEndToEnd checks the converged re-run writes nothing)")
	c := newCluster(t, clusterOptions{})
	const low = "subscriptions[llama-coder-default].modelRefs[0].tokenRateLimits[0].limit=1000"
	const warning = "allows 1000 tokens per"

	first := c.install(t)
	if first.exit != 0 {
		t.Fatalf("first install exit %d\n%s", first.exit, failedSummary(first))
	}
	preflightProgress := func(r run) []string {
		var out []string
		for _, ev := range r.events {
			if ev.Step == steps.PreflightStepID && ev.Type == steps.EventProgress {
				out = append(out, ev.Message)
			}
		}
		return out
	}
	hasWarning := func(msgs []string) bool {
		return slices.ContainsFunc(msgs, func(m string) bool {
			return strings.HasPrefix(m, "warning access-pairing: ") && strings.Contains(m, warning)
		})
	}

	second := c.install(t, "--set", low)
	if second.exit != 0 {
		t.Fatalf("install with the low limit: exit %d\n%s", second.exit, failedSummary(second))
	}
	if !slices.Contains(stepsWith(second.events, steps.EventStarted), steps.PreflightStepID) {
		t.Errorf("install after the inventory change: preflight did not run (no started event); unchanged: %v", stepsWith(second.events, steps.EventUnchanged))
	}
	if p := preflightProgress(second); !hasWarning(p) {
		t.Errorf("install after the inventory change: preflight progress %q lacks the access-pairing warning %q", p, warning)
	}

	before := managedObjects(t, c)
	cps := func() string {
		cm, err := c.clients.Kube.CoreV1().ConfigMaps(steps.StateNamespace).Get(context.Background(), steps.CheckpointsConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.ResourceVersion
	}
	cpRV := cps()
	third := c.install(t, "--set", low)
	if third.exit != 0 {
		t.Fatalf("converged re-run: exit %d\n%s", third.exit, failedSummary(third))
	}
	if !slices.Contains(stepsWith(third.events, steps.EventStarted), steps.PreflightStepID) {
		t.Errorf("converged re-run: preflight did not run (no started event)")
	}
	if p := preflightProgress(third); !hasWarning(p) {
		t.Errorf("converged re-run: preflight progress %q lacks the access-pairing warning %q", p, warning)
	}
	s3 := summary(t, third.events)
	unchanged := slices.Clone(s3.Unchanged)
	sort.Strings(unchanged)
	if ids := registryIDs(t); !slices.Equal(unchanged, ids) || len(s3.Done) != 0 {
		t.Errorf("converged re-run: done %v, unchanged %v; want every step unchanged", s3.Done, unchanged)
	}
	if s3.Writes != 0 {
		t.Errorf("converged re-run wrote %d times, want 0", s3.Writes)
	}
	after := managedObjects(t, c)
	for k, rv := range before {
		if after[k] != rv {
			t.Errorf("%s resourceVersion changed on the converged re-run: %s -> %s", k, rv, after[k])
		}
	}
	if got := cps(); got != cpRV {
		t.Errorf("the converged re-run rewrote the checkpoints ConfigMap (resourceVersion %s -> %s)", cpRV, got)
	}

	plain := c.maasctl(t, "install", "-o", "plain", "--set", low)
	if plain.exit != 0 {
		t.Fatalf("plain re-run: exit %d\n%s\n%s", plain.exit, plain.stdout, plain.stderr)
	}
	var line string
	for _, l := range strings.Split(plain.stdout, "\n") {
		if strings.Contains(l, steps.PreflightStepID) && strings.Contains(l, warning) {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "fix: raise subscriptions[].modelRefs[].tokenRateLimits[].limit") {
		t.Errorf("plain re-run: no preflight warning line with its fix in the output:\n%s", plain.stdout)
	}
	if !strings.Contains(plain.stdout, ", 0 writes to managed objects)") {
		t.Errorf("plain re-run: the summary line does not say 0 writes:\n%s", plain.stdout)
	}
}
