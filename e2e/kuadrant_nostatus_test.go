package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/maasctl/maasctl/waiters"
)

// TestKuadrantNoStatusComponentReconciled: the CI failure of
// TestKuadrantStalledComponentReconciled made deterministic. When the
// reconcile that loses the Limitador create is the only one, the real
// kuadrant-operator v1.5.2 writes no status at all (its status updater is
// the workflow's postcondition, which policy-machinery v0.8.0 skips after a
// failed task), so the Kuadrant CR has no Ready condition. Here one
// ValidatingAdmissionPolicy denies the Limitador's create and another the
// Kuadrant CR's status updates, until the CR has been quiet for 10 s with
// no Ready condition; after 45 s of that, with the operator pod Ready all
// along, maasctl must set the reconcile trigger and the install finish.
func TestKuadrantNoStatusComponentReconciled(t *testing.T) {
	fullOnly(t, "maasctl sets the reconcile trigger on a Kuadrant CR left without status (steps TestKuadrantSuspects covers the decision)")
	parallel(t)
	c := newCluster(t, clusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const denyLimitador, denyStatus = "e2e-deny-limitador", "e2e-deny-kuadrant-status"
	denyAdmission(ctx, t, c, denyLimitador, admissionv1.Create, "limitador.kuadrant.io", "limitadors")
	denyAdmission(ctx, t, c, denyStatus, admissionv1.Update, "kuadrant.io", "kuadrants/status")

	done := make(chan run, 1)
	go func() { done <- c.install(t, "--only", kuadrantSteps) }()

	kq := lobj{"kuadrant.io/v1beta1", "Kuadrant", "kuadrant-system", "kuadrant"}
	limitador := lobj{"limitador.kuadrant.io/v1alpha1", "Limitador", "kuadrant-system", "limitador"}
	var rv string
	var since time.Time
	denied := false
	poll(t, ctx, "a Limitador create denied, then Kuadrant without a Ready condition and unchanged for 10 s", func() (bool, string) {
		if denied = denied || denials(ctx, t, c, denyLimitador) > 0; !denied {
			return false, "no Limitador create denied yet"
		}
		u := c.live(t, kq)
		if u == nil {
			return false, "no Kuadrant CR"
		}
		if u.GetResourceVersion() != rv {
			rv, since = u.GetResourceVersion(), time.Now()
		}
		cond, _ := waiters.GetCondition(u, "Ready")
		if cond.Status != "" {
			t.Fatalf("Kuadrant reported %s although its status updates are denied", cond)
		}
		return time.Since(since) > 10*time.Second, "unchanged for " + time.Since(since).Round(time.Second).String()
	})
	for _, name := range []string{denyLimitador, denyStatus} {
		allowAdmission(ctx, t, c, name)
	}
	t.Logf("admission policies removed at %s; the Limitador exists: %v", time.Now().Format("15:04:05"), c.live(t, limitador) != nil)

	var r run
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the install did not end")
	}
	wantExit(t, r, 0, "install after the Limitador create and the status updates were denied")
	p := progress(r, "platform/kuadrant")
	if !strings.Contains(p, "has reported no Ready condition for 45s and Limitador kuadrant-system/limitador does not exist: the Kuadrant operator does not retry a failed reconcile") {
		t.Errorf("platform/kuadrant did not report its reconcile request for a Kuadrant CR without status:\n%s", p)
	}
	if c.live(t, limitador) == nil {
		t.Errorf("no Limitador %s/%s after the install", limitador.ns, limitador.name)
	}
	if a := c.live(t, kq).GetAnnotations(); a["extensions.kuadrant.io/trigger-reason"] != "maasctl: Limitador limitador missing" {
		t.Errorf("Kuadrant CR without maasctl's reconcile trigger: %v", a)
	}
}
