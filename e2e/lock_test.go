package e2e

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// TestLockRenewal: on a real kube-apiserver, the run Lease is renewed every
// duration/3 from the Lease as the run last wrote it, without a read; a
// Lease changed since by this run's identity is read once and renewed
// again; one another run took over is never written again.
func TestLockRenewal(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, c := bareAPIServer(t, ctx)
	cfg := rest.CopyConfig(env.RESTConfig())
	var reads atomic.Int64 // GETs of the run Lease through kc
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/leases/"+engine.LeaseName) {
				reads.Add(1)
			}
			return next.RoundTrip(r)
		})
	})
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	leases := c.Kube.CoordinationV1().Leases(engine.StateNamespace)
	const run = "run-r"
	lock, err := engine.AcquireLock(ctx, kc, run, 3*time.Second) // renewed every second
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Release(ctx) }()
	// waitWrites waits until the lock has made n writes in all.
	waitWrites := func(n int64, why string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); lock.Writes() < n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d lease writes after 20 s, want %d", why, lock.Writes(), n)
			}
		}
	}
	before := reads.Load()    // AcquireLock's own read
	waitWrites(4, "renewals") // the take and three renewals
	if got := reads.Load() - before; got != 0 {
		t.Errorf("three renewals read the Lease %d times, want 0 (each renews the Lease it last wrote)", got)
	}
	l, err := leases.Get(ctx, engine.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != run || l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(l.Spec.AcquireTime.Time) {
		t.Fatalf("Lease holder %q, acquired %v, renewed %v: want %s and a renewal after the take", h, l.Spec.AcquireTime, l.Spec.RenewTime, run)
	}

	// Changed since by this run's identity (a renewal applied whose
	// answer was lost): the next renewal conflicts, reads once and renews.
	l.Annotations = map[string]string{"e2e.maasctl.io/touched": "1"}
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, w := reads.Load(), lock.Writes()
	waitWrites(w+2, "renewals after a change by this run")
	if got := reads.Load() - before; got != 1 {
		t.Errorf("renewals after a change by this run read the Lease %d times, want 1", got)
	}

	// Taken over by another run: never written again by this one.
	l, err = leases.Get(ctx, engine.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("run-other")
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w = lock.Writes()
	time.Sleep(3500 * time.Millisecond) // three renewal ticks
	if got := lock.Writes(); got != w {
		t.Errorf("the run wrote the Lease %d times after another run took it over", got-w)
	}
	if l, err = leases.Get(ctx, engine.LeaseName, metav1.GetOptions{}); err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "run-other" {
		t.Errorf("after the takeover the Lease is held by %q (err %v), want run-other", ptr.Deref(l.Spec.HolderIdentity, ""), err)
	}
}
