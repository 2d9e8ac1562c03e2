package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maasctl/maasctl/steps"
)

// TestRecreatedObjectRecordedAfterKill (issue 17, "Uninstall forgets what
// it created"): the Kuadrant CR maasctl created is deleted; the next
// install re-creates it and is SIGKILLed right after that apply, before
// the step's bookkeeping. The run after it must still record the new UID,
// so that uninstall removes the CR instead of keeping it "re-created by
// someone else". Red before the fix: the killed run left the step's old
// "done" checkpoint, the next run skipped the step as unchanged and the
// record kept the deleted CR's UID.
func TestRecreatedObjectRecordedAfterKill(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	wantExit(t, c.maasctl(t, "install", "-o", "json"), 0, "install")
	kq := lobj{"kuadrant.io/v1beta1", "Kuadrant", "kuadrant-system", "kuadrant"}
	old := c.live(t, kq).GetUID()

	ri, _, err := c.clients.Resource(kq.stub().GroupVersionKind(), kq.ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := ri.Delete(context.Background(), kq.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return c.live(t, kq) == nil, nil
	}); err != nil {
		t.Fatalf("Kuadrant CR not gone: %v", err)
	}

	// The re-creating run, killed right after it applied the new CR.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := c.start(ctx, t, "install", "-o", "json")
	cmd, sc := run.cmd, run.lines
	killed := false
	for sc.Scan() {
		var ev steps.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Step == "platform/kuadrant" && ev.Type == steps.EventProgress && strings.HasPrefix(ev.Message, "applied Kuadrant kuadrant-system/kuadrant") {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
			break
		}
	}
	for sc.Scan() {
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatal("the re-creating run never applied the Kuadrant CR")
	}
	recreated := c.live(t, kq)
	if recreated == nil || recreated.GetUID() == old {
		t.Fatalf("the killed run should have re-created the Kuadrant CR (old UID %s, now %v)", old, recreated)
	}

	// The next run finishes what the killed one started.
	r := c.maasctl(t, "install", "-o", "json")
	wantExit(t, r, 0, "install after the kill")
	if got := stepsWith(r.events, steps.EventDone); !contains(got, "platform/kuadrant") {
		t.Errorf("platform/kuadrant must run again after the kill (its re-apply was not finished); done steps: %v", got)
	}

	un := c.maasctl(t, "uninstall", "--yes", "-o", "json")
	wantExit(t, un, 0, "uninstall")
	if strings.Contains(un.stdout, "re-created by someone else") {
		t.Errorf("uninstall took maasctl's own re-created object for someone else's:\n%s", un.stdout)
	}
	assertGone(t, c, "uninstall", kq)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
