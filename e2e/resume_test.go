package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/steps"
)

// TestInstallConcurrentKilledResumed: a second run while one holds the Lease
// exits at once (code 3) naming the holder; the first run is SIGKILLed in the
// middle of the install; a new run takes its unexpired Lease over at once
// (the holder process on this machine is gone), skips what the killed run
// finished, and completes. Vault still holds one
// password version.
func TestInstallConcurrentKilledResumed(t *testing.T) {
	fullOnly(t, "an install killed while steps run concurrently resumes (TestKillAnywhere kills at single points)")
	parallel(t)
	c := newCluster(t, clusterOptions{simDelay: map[string]time.Duration{
		"olm": 700 * time.Millisecond, "cnpg": 700 * time.Millisecond, "dsc": 700 * time.Millisecond,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := c.command(ctx, "install", "-o", "json", "--lease-duration", "60s")
	stdout, err := a.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Process.Kill(); _ = a.Wait() })
	events := make(chan steps.Event, 256)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev steps.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	next := func() steps.Event {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("first run ended before it was killed")
			}
			return ev
		case <-ctx.Done():
			t.Fatal("timed out reading the first run's events")
		}
		return steps.Event{}
	}
	for ev := next(); ev.Type != steps.EventRunStarted; ev = next() {
	}

	// The run holds the Lease now: a second run must refuse at once.
	b := c.maasctl(t, "install", "-o", "json")
	if b.exit != 3 {
		t.Fatalf("concurrent run exit %d, want 3 (lock held)\n%s\n%s", b.exit, b.stdout, b.stderr)
	}
	if !strings.Contains(b.stderr, "holds Lease maasctl/maasctl-run") || !strings.Contains(b.stderr, "pid ") {
		t.Errorf("concurrent run should name the Lease and its holder; stderr:\n%s", b.stderr)
	}
	if b.wall > 10*time.Second {
		t.Errorf("concurrent run took %s to refuse; it must fail fast", b.wall)
	}
	// status says a run is going on (its states may change under it).
	st := c.maasctl(t, "status", "-o", "json")
	var rep steps.StatusReport
	if err := json.Unmarshal([]byte(st.stdout), &rep); st.exit != 0 || err != nil {
		t.Fatalf("status during the run: exit %d, %v\n%s\n%s", st.exit, err, st.stdout, st.stderr)
	}
	if rep.Running == nil || !strings.Contains(rep.Running.Holder, "pid ") {
		t.Errorf("status during the run: running %+v, want the Lease holder named", rep.Running)
	}

	var doneBeforeKill []string
	for len(doneBeforeKill) < 8 {
		if ev := next(); ev.Type == steps.EventDone {
			doneBeforeKill = append(doneBeforeKill, ev.Step)
		}
	}
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range events {
	}
	_ = a.Wait()
	_, _ = io.Copy(io.Discard, stdout)
	t.Logf("killed after %d steps: %v", len(doneBeforeKill), doneBeforeKill)
	// Its Lease has not expired, but its process is gone: no run is going on.
	if st := c.maasctl(t, "status", "-o", "json"); st.exit != 0 || strings.Contains(st.stdout, `"running"`) {
		t.Errorf("status after the kill: exit %d; it must not report the killed run as running:\n%s\n%s", st.exit, st.stdout, st.stderr)
	}

	// The killed run's Lease has not expired (60 s), but its holder was
	// a process on this machine that is gone: the next run takes it over
	// at once and says so.
	lease, err := c.clients.Kube.CoordinationV1().Leases(steps.StateNamespace).Get(ctx, steps.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the killed run's Lease should still be there: %v", err)
	}
	expires := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	resumed := c.maasctl(t, "install", "-o", "json")
	if resumed.exit != 0 {
		t.Fatalf("resumed install exit %d\nstdout:\n%s\nstderr:\n%s", resumed.exit, resumed.stdout, resumed.stderr)
	}
	// Its first event (before any step) says it took the Lease over,
	// before the Lease's expiry (the message names the expiry time).
	tookOver := false
	for _, ev := range resumed.events {
		if ev.Type == steps.EventProgress && strings.Contains(ev.Message, "took over Lease maasctl/maasctl-run") && strings.Contains(ev.Message, "is gone") {
			tookOver = ev.Time.Before(expires)
		}
	}
	if !tookOver {
		t.Errorf("the resumed run should say, before %s, that it took over the dead holder's Lease; events:\n%s", expires, resumed.stdout)
	}
	unchanged := map[string]bool{}
	for _, id := range stepsWith(resumed.events, steps.EventUnchanged) {
		unchanged[id] = true
	}
	for _, id := range doneBeforeKill {
		if !unchanged[id] {
			t.Errorf("step %s finished before the kill but was applied again", id)
		}
	}
	if n := len(stepsWith(resumed.events, steps.EventDone)) + len(unchanged); n != len(registryIDs(t)) {
		t.Errorf("resumed run covered %d steps, want %d", n, len(registryIDs(t)))
	}
	if n := c.vault.Versions(vaultMount, vaultPath); n != 1 {
		t.Errorf("Vault has %d password versions after kill and resume, want 1", n)
	}
}
