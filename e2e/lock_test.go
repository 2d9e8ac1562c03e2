package e2e

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/maasctl/maasctl/steps/engine"
)

// TestLockReleaseAfterLeaseChanged: Release deletes the run Lease by the
// resourceVersion the run last wrote, without a read. On a real
// kube-apiserver: a Lease changed since by this run's identity (a renewal
// applied whose answer was lost) is still deleted; one another run holds
// now stays.
func TestLockReleaseAfterLeaseChanged(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, c := bareAPIServer(t, ctx)
	leases := c.Kube.CoordinationV1().Leases(engine.StateNamespace)
	touch := func(holder string) {
		t.Helper()
		l, err := leases.Get(ctx, engine.LeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(holder), &now
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name, run, changedBy string // changedBy: "" for no change
		kept                 bool
	}{
		{"unchanged since the run took it: deleted", "run-a", "", false},
		{"renewed by this run, the answer lost: still this run's, deleted", "run-b", "run-b", false},
		{"taken over by another run: it stays theirs", "run-c", "run-d", true},
	} {
		lock, err := engine.AcquireLock(ctx, c.Kube, tc.run, time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.changedBy != "" {
			touch(tc.changedBy)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("%s: Release: %v", tc.name, err)
		}
		l, err := leases.Get(ctx, engine.LeaseName, metav1.GetOptions{})
		switch {
		case !tc.kept && !apierrors.IsNotFound(err):
			t.Fatalf("%s: after Release the Lease read gives %v, want NotFound", tc.name, err)
		case tc.kept && err != nil:
			t.Fatalf("%s: after Release: %v, want the Lease kept", tc.name, err)
		case tc.kept && ptr.Deref(l.Spec.HolderIdentity, "") != tc.changedBy:
			t.Errorf("%s: the Lease is held by %q, want %s", tc.name, ptr.Deref(l.Spec.HolderIdentity, ""), tc.changedBy)
		}
	}
}
