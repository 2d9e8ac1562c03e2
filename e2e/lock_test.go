package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/kube"
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
	env, err := testenv.Start(ctx, testenv.Options{NoControllers: true, NoPostgres: true, NoFixture: true, NoOLM: true})
	if err != nil {
		if os.Getenv("MAASCTL_REQUIRE_TESTENV") == "" {
			t.Skipf("local control plane unavailable: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := kube.New(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
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

	// Unchanged since the run took it: deleted.
	lock, err := engine.AcquireLock(ctx, c.Kube, "run-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Get(ctx, engine.LeaseName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after Release of an unchanged Lease: %v, want NotFound", err)
	}

	// Renewed by this run with the answer lost: still this run's, deleted.
	lock, err = engine.AcquireLock(ctx, c.Kube, "run-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	touch("run-b")
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Get(ctx, engine.LeaseName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after Release of a Lease this run renewed unseen: %v, want NotFound", err)
	}

	// Taken over by another run: it stays theirs.
	lock, err = engine.AcquireLock(ctx, c.Kube, "run-c", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	touch("run-d")
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(ctx, engine.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after Release of a Lease another run took over: %v, want it kept", err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "run-d" {
		t.Errorf("the Lease is held by %q, want run-d", h)
	}
}
