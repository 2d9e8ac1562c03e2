package steps

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// maas-api runs its schema migrations at every start (case N10): after a
// password change maasctl restarts it, and a maas-api that cannot migrate
// (its role does not own the tables, a dirty schema_migrations) then
// crash-loops. The restart's rollout wait would only time out on that;
// instead it reads what the maas-api pods report, as verify's MAAS-V015
// does, and fails at once naming the pod, the cause and the DBA's fix.

// MigrationFailedError is a maas-api that crash-loops on its schema
// migration while maasctl waits for it.
type MigrationFailedError struct {
	Failure    verify.MigrationFailure
	Cause, Fix string
	Namespace  string
}

func (e *MigrationFailedError) Error() string {
	return fmt.Sprintf("maas-api cannot start: its schema migration fails (pod %s/%s, CrashLoopBackOff: %s): %s. Fix: %s; then run maasctl again (it finishes what it started)",
		e.Namespace, e.Failure.Pod, e.Failure.Message, e.Cause, e.Fix)
}

// migrationFailure returns the migration failure a crash-looping pod of
// pods reports, nil when none does.
func migrationFailure(inv *inventory.Inventory, rel release.Release, pods []corev1.Pod) *MigrationFailedError {
	apiNS := rel.MaaSAPINamespace(inv)
	s := &verify.State{Inv: inv, Release: rel}
	for i := range pods {
		if pods[i].DeletionTimestamp != nil {
			continue
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pods[i])
		if err != nil {
			continue
		}
		s.MaaSAPIPods = append(s.MaaSAPIPods, &unstructured.Unstructured{Object: u})
	}
	for _, f := range verify.MigrationFailuresOf(s) {
		if !f.CrashLoop {
			continue
		}
		cause, fix := verify.MigrationCause(s, f)
		return &MigrationFailedError{Failure: f, Cause: cause, Fix: fix, Namespace: apiNS}
	}
	return nil
}

// watchMaaSAPIMigrations reads the pods of selector sel in apiNS every
// interval until ctx ends, and calls fail once with the first migration
// failure they report. It gives up silently when it may not list pods
// (the rollout wait still runs).
func watchMaaSAPIMigrations(ctx context.Context, e *Env, apiNS, sel string, interval time.Duration, fail func(error)) {
	pods := e.Clients.Kube.CoreV1().Pods(apiNS)
	for {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
		switch {
		case err == nil:
			if f := migrationFailure(e.Inv, e.Facts.Release, l.Items); f != nil {
				fail(f)
				return
			}
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || errors.Is(err, context.Canceled):
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
