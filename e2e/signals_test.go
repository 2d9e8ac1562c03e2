package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/steps"
)

// TestInterruptAndBrokenStdout (issue 17, "Interruptions read as
// timeouts"): SIGTERM during a long wait is reported as an interruption
// naming the object the step waited on (never "timed out"), exits 130 and
// releases the run Lease; a run whose stdout reader goes away
// (maasctl install | head -1) stops the same way with exit 141 instead of
// dying of SIGPIPE with the Lease held. Red before the fix: the first
// printed "timed out waiting for ...", the second died of SIGPIPE and the
// next run exited 3.
func TestInterruptAndBrokenStdout(t *testing.T) {
	parallel(t)
	// The database Cluster stays unready for a minute: database/cluster
	// waits while the other steps run.
	c := newCluster(t, clusterOptions{simDelay: map[string]time.Duration{"cnpg": 90 * time.Second}})
	leaseGone := func(what string) {
		t.Helper()
		_, err := c.clients.Kube.CoordinationV1().Leases(steps.StateNamespace).Get(context.Background(), steps.LeaseName, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: the run Lease is still there (err %v); it must be released", what, err)
		}
	}
	// exitOf is the exit code of a finished command (-1: killed by a signal).
	exitOf := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		return 0
	}

	t.Run("SIGTERM during a wait", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		run := c.start(ctx, t, "install", "-o", "json")
		cmd, sc, stderr := run.cmd, run.lines, run.stderr
		// Wait until database/cluster reports what it waits on.
		var seen []string
		for sc.Scan() {
			seen = append(seen, sc.Text())
			if strings.Contains(sc.Text(), `"step":"database/cluster"`) && strings.Contains(sc.Text(), `"type":"progress"`) && strings.Contains(sc.Text(), "waiting") {
				break
			}
		}
		// status names the run in progress (it holds the Lease).
		if st := c.maasctl(t, "status", "-o", "json"); st.exit != 0 || !strings.Contains(st.stdout, `"running": {`) || !strings.Contains(st.stdout, "pid ") {
			t.Errorf("status during the run: exit %d; want the run holding the Lease named:\n%s\n%s", st.exit, st.stdout, st.stderr)
		}
		// Twice at once, as GNU timeout sends it (to the command, then to
		// its process group): one stop request, still a clean stop.
		for range 2 {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
		for sc.Scan() {
			seen = append(seen, sc.Text())
		}
		code := exitOf(cmd.Wait())
		events := parseEvents(strings.Join(seen, "\n"))
		if code != 130 {
			t.Fatalf("exit %d, want 130\nstderr:\n%s", code, stderr.String())
		}
		var msg string
		for _, ev := range events {
			if ev.Type == steps.EventFailed && ev.Step == "database/cluster" {
				msg = ev.Message
			}
		}
		if !strings.Contains(msg, "interrupted (received terminated) while waiting for Cluster rhoai-maas-db/maas-postgres") {
			t.Errorf("database/cluster's failure should name the interruption and the Cluster it waited on; got %q", msg)
		}
		if s := stderr.String(); strings.Contains(s, "timed out") || strings.Contains(s, "exiting at once") || !strings.Contains(s, "terminated received: stopping the running steps") {
			t.Errorf("stderr should report the interruption, never a timeout:\n%s", s)
		}
		leaseGone("after SIGTERM")
	})

	t.Run("stdout closed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		run := c.start(ctx, t, "install", "-o", "plain")
		cmd, stderr := run.cmd, run.stderr
		if !run.lines.Scan() { // head -1
			t.Fatalf("no first line: %v", run.lines.Err())
		}
		_ = run.out.Close()
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("maasctl died of %s; it must stop cleanly\nstderr:\n%s", ws.Signal(), stderr.String())
			}
		}
		if code := exitOf(err); code != 141 {
			t.Fatalf("exit %d, want 141\nstderr:\n%s", code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "stdout closed (broken pipe)") {
			t.Errorf("stderr should say why the run stopped:\n%s", stderr.String())
		}
		leaseGone("after stdout closed")
	})

	// The next run is not refused: the Lease was released both times.
	r := c.maasctl(t, "install", "-o", "json", "--only", steps.PreflightStepID)
	wantExit(t, r, 0, "a run after the interrupted ones")
}
