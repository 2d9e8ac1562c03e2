package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/steps/engine"
)

var recreateKillsFlag = flag.String("maasctl.recreate-kills", "",
	`kill points of TestRecreatedObjectRecordedAfterKill: "all" kills at every event of the re-creating run in turn (default $E2E_RECREATE_KILLS, else a sample of the Kuadrant step's events)`)

// recreateKillsAll reports whether every event of the re-creating run is
// a kill point (-maasctl.recreate-kills=all or E2E_RECREATE_KILLS=all).
func recreateKillsAll() bool {
	return *recreateKillsFlag == "all" || *recreateKillsFlag == "" && os.Getenv("E2E_RECREATE_KILLS") == "all"
}

// recreateKey names an event of the re-creating run so that it is found
// again in another run: step, type and the message up to its first colon
// (a wait's status after it changes from run to run), and which
// occurrence of that name it is.
type recreateKey struct {
	name string
	nth  int
}

func (k recreateKey) String() string { return fmt.Sprintf("%s #%d", k.name, k.nth) }

func recreateKeys(evs []steps.Event) []recreateKey {
	seen := map[string]int{}
	var out []recreateKey
	for _, ev := range evs {
		msg, _, _ := strings.Cut(ev.Message, ":")
		name := ev.Step + " " + string(ev.Type) + " " + msg
		seen[name]++
		out = append(out, recreateKey{name, seen[name]})
	}
	return out
}

// TestRecreatedObjectRecordedAfterKill (issue 17, "Uninstall forgets what
// it created"; "a test kills at every event of a re-creating run and then
// uninstalls cleanly"): the Kuadrant CR maasctl created is deleted; the
// next install re-creates it and is SIGKILLed at one of its events. The
// run after it must record the new UID, so that uninstall removes the CR,
// the Authorino CR and Service its operator made from it (and the
// Namespace maasctl created) instead of keeping the CR "re-created by
// someone else". Each kill point is followed by that install and
// uninstall, then a fresh install for the next point.
//
// The kill points are the events of a reference re-creating run. By
// default a sample of four: the Kuadrant step's "applied Kuadrant"
// progress (between the apply and the step's bookkeeping) and its done
// event, and two events spread over the run; with
// -maasctl.recreate-kills=all (or E2E_RECREATE_KILLS=all) every event in
// turn. The test runs with MAASCTL_E2E_FULL=1 only (in make test, with two
// kill points, until 2026-12-07; cut for CI's time). Red before the fix (at the
// "applied" point): the killed run left the step's old "done" checkpoint,
// the next run skipped the step as unchanged and the record kept the
// deleted CR's UID. A kill after the step's new checkpoint was written
// (and before its done event) leaves nothing to re-apply: the step's
// record, written with it, holds the new UID.
func TestRecreatedObjectRecordedAfterKill(t *testing.T) {
	parallel(t)
	fullOnly(t, "an object re-created by a run killed mid-way is recorded, so uninstall removes it (TestKillAnywhere kills at single points and checks the writes)")
	c := newCluster(t, clusterOptions{})
	kq := lobj{"kuadrant.io/v1beta1", "Kuadrant", "kuadrant-system", "kuadrant"}
	hanging := []lobj{kq,
		{"operator.authorino.kuadrant.io/v1beta1", "Authorino", "kuadrant-system", "authorino"},
		{"v1", "Service", "kuadrant-system", "authorino-authorino-authorization"},
	}
	if c.live(t, lobj{"v1", "Namespace", "", "kuadrant-system"}) == nil {
		hanging = append(hanging, lobj{"v1", "Namespace", "", "kuadrant-system"})
	}
	wantExit(t, c.maasctl(t, "install", "-o", "json"), 0, "install")

	deleteCR := func(t *testing.T) string {
		t.Helper()
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
		return string(old)
	}

	// The reference re-creating run, uninterrupted: its events are the
	// kill points.
	deleteCR(t)
	ref := c.maasctl(t, "install", "-o", "json")
	wantExit(t, ref, 0, "the uninterrupted re-creating install")
	keys := recreateKeys(ref.events)
	var points []recreateKey
	if recreateKillsAll() {
		points = keys
	} else {
		for i, ev := range ref.events {
			if ev.Step == "platform/kuadrant" && (ev.Type == steps.EventDone ||
				ev.Type == steps.EventProgress && strings.HasPrefix(ev.Message, "applied Kuadrant kuadrant-system/kuadrant")) {
				points = append(points, keys[i])
			}
		}
		if len(points) != 2 {
			t.Fatalf("the re-creating run's Kuadrant step emitted %v, want its applied Kuadrant and done events to kill at", points)
		}
		// And two events spread over the whole run.
		for k := 1; k <= 2; k++ {
			if pt := keys[len(keys)*k/3]; !slices.Contains(points, pt) {
				points = append(points, pt)
			}
		}
	}
	t.Logf("%d events in the re-creating run (%s), %d kill points: %v", len(keys), ref.wall.Round(time.Millisecond), len(points), points)

	for i, pt := range points {
		ok := t.Run(fmt.Sprintf("kill %d at %s", i+1, pt), func(t *testing.T) {
			t0 := time.Now()
			old := deleteCR(t)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			killStart := time.Now()
			run := c.start(ctx, t, "install", "-o", "json")
			seen := map[string]int{}
			killed, stepDone := false, false
			for run.lines.Scan() {
				var ev steps.Event
				if json.Unmarshal(run.lines.Bytes(), &ev) != nil {
					continue
				}
				msg, _, _ := strings.Cut(ev.Message, ":")
				name := ev.Step + " " + string(ev.Type) + " " + msg
				seen[name]++
				if ev.Step == "platform/kuadrant" && ev.Type == steps.EventDone {
					stepDone = true
				}
				if name == pt.name && seen[name] == pt.nth {
					if err := run.cmd.Process.Signal(syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
					killed = true
					break
				}
			}
			for run.lines.Scan() {
			}
			_ = run.cmd.Wait()
			if !killed {
				// The event did not recur in this run (a wait's progress
				// depends on timing): the run finished uninterrupted.
				t.Logf("event %s did not occur; the run ended on its own", pt)
			}

			// The step's checkpoint is written before its done event
			// (Runner.runStep), and its dependents start before both: a
			// kill between the two leaves a done checkpoint, with the
			// record of the new CR in the same write, and no done event.
			rec, err := steps.LoadRecord(context.Background(), c.clients)
			if err != nil {
				t.Fatalf("read the record after the kill: %v", err)
			}
			cps, err := engine.LoadCheckpoints(context.Background(), c.clients)
			if err != nil {
				t.Fatalf("read the checkpoints after the kill: %v", err)
			}
			written := false
			for _, cp := range append(rec.Checkpoints(), slices.Collect(maps.Values(cps.All()))...) {
				written = written || cp.Step == "platform/kuadrant" && cp.Result == "done" && !cp.StartedAt.Before(killStart)
			}
			r := c.maasctl(t, "install", "-o", "json")
			wantExit(t, r, 0, "install after the kill")
			if got := stepsWith(r.events, steps.EventDone); !stepDone && !written && !contains(got, "platform/kuadrant") {
				t.Errorf("platform/kuadrant must run again after a kill before its checkpoint was written; done steps: %v", got)
			}
			if u := c.live(t, kq); u == nil || string(u.GetUID()) == old {
				t.Fatalf("after the kill and the install the Kuadrant CR is %v, want a re-created one (old UID %s)", u, old)
			}
			un := c.maasctl(t, "uninstall", "--yes", "-o", "json")
			wantExit(t, un, 0, "uninstall")
			if strings.Contains(un.stdout, "re-created by someone else") {
				t.Errorf("uninstall took maasctl's own re-created object for someone else's:\n%s", un.stdout)
			}
			assertGone(t, c, "uninstall after a kill at "+pt.String(), hanging...)
			if i+1 < len(points) && !t.Failed() {
				wantExit(t, c.maasctl(t, "install", "-o", "json"), 0, "install for the next kill point")
			}
			t.Logf("kill point %s: killed=%v, done event seen %v, new done checkpoint %v, %s", pt, killed, stepDone, written, time.Since(t0).Round(time.Second))
		})
		if !ok {
			break
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
