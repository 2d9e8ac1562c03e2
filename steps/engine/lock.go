package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/names"
)

// LeaseName is the coordination.k8s.io Lease that serialises runs.
const LeaseName = names.LeaseName

// LockHeldError says another run holds the Lease.
type LockHeldError struct {
	Holder    string
	RenewTime time.Time
	Expires   time.Time
}

func (e *LockHeldError) Error() string {
	return fmt.Sprintf("another maasctl run holds Lease %s/%s: %s (last renewed %s, expires %s); wait for it to finish, or if it was killed, re-run after the lease expires",
		StateNamespace, LeaseName, e.Holder, e.RenewTime.Format(time.RFC3339), e.Expires.Format(time.RFC3339))
}

// IsLockHeld reports whether err is a LockHeldError.
func IsLockHeld(err error) bool {
	var l *LockHeldError
	return errors.As(err, &l)
}

// Lock is a held run Lease. Release it when the run ends.
type Lock struct {
	kc       kubernetes.Interface
	identity string
	duration time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
	writes   atomic.Int64
	// rv is the resourceVersion of the Lease as this run last wrote it;
	// Release deletes exactly that Lease.
	rv atomic.Pointer[string]
	// TookOver, when not empty, says whose unexpired Lease this run took
	// over because its holder process is gone (see deadHolder).
	TookOver string
}

// The Lease annotations that let a later run on the same machine tell
// that the holder process is gone: the holder's pid, host name, kernel
// boot id and pid namespace. A pid is only meaningful on the same boot of
// the same kernel and in the same pid namespace (two containers may share
// a host name and reuse pids).
const (
	holderPIDAnnotation   = "maasctl.io/holder-pid"
	holderHostAnnotation  = "maasctl.io/holder-host"
	holderBootAnnotation  = "maasctl.io/holder-boot-id"
	holderPIDNSAnnotation = "maasctl.io/holder-pid-namespace"
)

// processFacts are this process's values of the holder annotations; a
// fact this system cannot tell (no /proc) is left out, and a Lease
// without all four is never taken over early.
func processFacts() map[string]string {
	f := map[string]string{holderPIDAnnotation: strconv.Itoa(os.Getpid())}
	if h, err := os.Hostname(); err == nil {
		f[holderHostAnnotation] = h
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		f[holderBootAnnotation] = strings.TrimSpace(string(b))
	}
	if ns, err := os.Readlink("/proc/self/ns/pid"); err == nil {
		f[holderPIDNSAnnotation] = ns
	}
	return f
}

// deadHolder reports whether the holder described by a Lease's
// annotations ran on this machine, boot and pid namespace (self, from
// processFacts) with a pid other than ours that alive says is gone. A
// missing or differing fact means "cannot tell": the Lease then blocks
// until it expires.
func deadHolder(ann, self map[string]string, alive func(pid int) bool) (pid int, dead bool) {
	for _, k := range []string{holderHostAnnotation, holderBootAnnotation, holderPIDNSAnnotation} {
		if ann[k] == "" || ann[k] != self[k] {
			return 0, false
		}
	}
	pid, err := strconv.Atoi(ann[holderPIDAnnotation])
	if err != nil || pid <= 0 || ann[holderPIDAnnotation] == self[holderPIDAnnotation] {
		return 0, false
	}
	return pid, !alive(pid)
}

// processAlive reports whether a process with pid exists (kill(pid, 0);
// EPERM means it exists under another user).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Identity returns "user@host pid N started T", the holder string other runs see.
func Identity() string {
	u := "unknown"
	if cu, err := user.Current(); err == nil {
		u = cu.Username
	}
	h, _ := os.Hostname()
	return fmt.Sprintf("%s@%s pid %d started %s", u, h, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
}

// AcquireLock takes the run Lease or fails at once with a LockHeldError
// naming the holder. A lease whose renewTime + leaseDurationSeconds has passed
// (its run was killed) is taken over, and so is an unexpired one whose
// holder was a process on this machine that is gone (deadHolder; the
// Lock's TookOver says so). While held, the lease is renewed every
// duration/3; optimistic concurrency (resourceVersion) decides races.
func AcquireLock(ctx context.Context, kc kubernetes.Interface, identity string, duration time.Duration) (*Lock, error) {
	if err := ensureStateNamespace(ctx, kc); err != nil {
		return nil, err
	}
	leases := kc.CoordinationV1().Leases(StateNamespace)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(duration / time.Second)
	self := processFacts()
	l := &Lock{kc: kc, identity: identity, duration: duration, done: make(chan struct{})}
	cur, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	var taken *coordinationv1.Lease
	switch {
	case apierrors.IsNotFound(err):
		taken, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: StateNamespace, Annotations: self},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{FieldManager: names.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil, heldBy(ctx, leases, "a run that started at the same moment")
		}
	case err != nil:
		return nil, fmt.Errorf("read Lease %s/%s: %w", StateNamespace, LeaseName, err)
	default:
		if h := ptr.Deref(cur.Spec.HolderIdentity, ""); h != "" && cur.Spec.RenewTime != nil {
			exp := cur.Spec.RenewTime.Add(time.Duration(ptr.Deref(cur.Spec.LeaseDurationSeconds, 0)) * time.Second)
			if time.Now().Before(exp) {
				pid, dead := deadHolder(cur.GetAnnotations(), self, processAlive)
				if !dead {
					return nil, &LockHeldError{Holder: h, RenewTime: cur.Spec.RenewTime.Time, Expires: exp}
				}
				l.TookOver = fmt.Sprintf("took over Lease %s/%s from %s: its process (pid %d on this machine) is gone, so it was not released; the Lease would have expired at %s",
					StateNamespace, LeaseName, h, pid, exp.Format(time.RFC3339))
			}
		}
		cur.SetAnnotations(mergeAnnotations(cur.GetAnnotations(), self))
		cur.Spec.HolderIdentity, cur.Spec.LeaseDurationSeconds = &identity, &secs
		cur.Spec.AcquireTime, cur.Spec.RenewTime = &now, &now
		taken, err = leases.Update(ctx, cur, metav1.UpdateOptions{FieldManager: names.FieldManager})
		if apierrors.IsConflict(err) {
			return nil, heldBy(ctx, leases, "another run that took the expired lease just now")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("take Lease %s/%s: %w", StateNamespace, LeaseName, err)
	}
	l.writes.Add(1)
	l.rv.Store(&taken.ResourceVersion)
	rctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.renew(rctx, taken)
	return l, nil
}

// mergeAnnotations is ann with the holder annotations replaced by self's
// (a fact self lacks is removed, so that a stale one never matches).
func mergeAnnotations(ann, self map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ann {
		out[k] = v
	}
	for _, k := range []string{holderPIDAnnotation, holderHostAnnotation, holderBootAnnotation, holderPIDNSAnnotation} {
		delete(out, k)
		if v, ok := self[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Holder reads the run Lease without taking it: the run that holds it now
// (its identity: user, host, pid, start; last renewal; expiry), or nil when
// none does (no Lease, no holder, expired at now, or held by a process of
// this machine that is gone: a killed run's Lease, which the next run
// takes over). For status reports; errors are the API's, NotFound aside.
func Holder(ctx context.Context, kc kubernetes.Interface, now time.Time) (*LockHeldError, error) {
	cur, err := kc.CoordinationV1().Leases(StateNamespace).Get(ctx, LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	holder := ptr.Deref(cur.Spec.HolderIdentity, "")
	if holder == "" || cur.Spec.RenewTime == nil {
		return nil, nil
	}
	exp := cur.Spec.RenewTime.Add(time.Duration(ptr.Deref(cur.Spec.LeaseDurationSeconds, 0)) * time.Second)
	if !exp.After(now) {
		return nil, nil
	}
	// A holder that was a process on this machine and is gone is not
	// running either: the next run takes its Lease over at once.
	if _, dead := deadHolder(cur.GetAnnotations(), processFacts(), processAlive); dead {
		return nil, nil
	}
	return &LockHeldError{Holder: holder, RenewTime: cur.Spec.RenewTime.Time, Expires: exp}, nil
}

// heldBy re-reads the Lease after this run lost a race for it, so that the
// error names the winner (user, host, pid, start time); fallback describes
// the winner when the Lease cannot be read.
func heldBy(ctx context.Context, leases coordinationv1client.LeaseInterface, fallback string) error {
	cur, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil || ptr.Deref(cur.Spec.HolderIdentity, "") == "" || cur.Spec.RenewTime == nil {
		return &LockHeldError{Holder: fallback}
	}
	exp := cur.Spec.RenewTime.Add(time.Duration(ptr.Deref(cur.Spec.LeaseDurationSeconds, 0)) * time.Second)
	return &LockHeldError{Holder: *cur.Spec.HolderIdentity, RenewTime: cur.Spec.RenewTime.Time, Expires: exp}
}

// renew renews the Lease every duration/3 from last, the Lease as this
// run last wrote it: an Update with its resourceVersion, no read. A
// Conflict means the Lease changed since (another run took it over once it
// expired, or a renewal of ours was applied although its answer was
// lost); only then is it read, and renewed if this run still holds it.
// One request per renewal instead of a read and a write each (issue 16).
func (l *Lock) renew(ctx context.Context, last *coordinationv1.Lease) {
	defer close(l.done)
	t := time.NewTicker(l.duration / 3)
	defer t.Stop()
	leases := l.kc.CoordinationV1().Leases(StateNamespace)
	update := func(cur *coordinationv1.Lease) (*coordinationv1.Lease, error) {
		next := cur.DeepCopy()
		now := metav1.NewMicroTime(time.Now())
		next.Spec.RenewTime = &now
		return leases.Update(ctx, next, metav1.UpdateOptions{FieldManager: names.FieldManager})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			updated, err := update(last)
			if apierrors.IsConflict(err) {
				cur, gerr := leases.Get(ctx, LeaseName, metav1.GetOptions{})
				if gerr != nil || ptr.Deref(cur.Spec.HolderIdentity, "") != l.identity {
					continue
				}
				updated, err = update(cur)
			}
			if err == nil {
				l.writes.Add(1)
				l.rv.Store(&updated.ResourceVersion)
				last = updated
			}
		}
	}
}

// Writes is the number of lease writes this lock made.
func (l *Lock) Writes() int64 { return l.writes.Load() }

// Release stops renewing and deletes the Lease if this run still holds it.
func (l *Lock) Release(ctx context.Context) error {
	l.cancel()
	<-l.done
	// Deleted as this run last wrote it (a resourceVersion precondition,
	// no read). On a Conflict the Lease changed since: another run took it
	// over (it stays theirs), or a renewal of ours was applied although its
	// answer was lost (cancelled by Release, or retried after the
	// connection dropped); the Lease is then read and deleted if this run
	// still holds it.
	leases := l.kc.CoordinationV1().Leases(StateNamespace)
	err := leases.Delete(ctx, LeaseName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: l.rv.Load()}})
	if apierrors.IsConflict(err) {
		cur, gerr := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		if gerr != nil || ptr.Deref(cur.Spec.HolderIdentity, "") != l.identity {
			return nil
		}
		err = leases.Delete(ctx, LeaseName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cur.ResourceVersion}})
	}
	if err == nil {
		l.writes.Add(1)
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func ensureStateNamespace(ctx context.Context, kc kubernetes.Interface) error {
	// Through the run's read view (kube.ReadView), which reads Namespaces
	// by one LIST: the steps read several more.
	_, err := kc.CoreV1().Namespaces().Get(kube.ViewReads(ctx), StateNamespace, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Namespace %s: %w", StateNamespace, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   StateNamespace,
		Labels: map[string]string{names.ManagedByLabel: names.ManagedByValue},
	}}
	// Bookkeeping: the run's read view stays open (kube.KeepView).
	_, err = kc.CoreV1().Namespaces().Create(kube.KeepView(ctx), ns, metav1.CreateOptions{FieldManager: names.FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Namespace %s: %w", StateNamespace, err)
	}
	return nil
}
