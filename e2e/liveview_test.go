package e2e

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/internal/termtest"
	"github.com/maasctl/maasctl/steps"
)

// TestLiveViewOnATerminal (issue 15): 'maasctl install' with its stdout
// and stderr on a pseudo-terminal draws the live view (read back with a
// terminal emulator): the running database/cluster step with a spinner,
// a ticking elapsed time and the Cluster it waits on, finished steps as
// one line, the footer. Ctrl-C typed on that terminal still interrupts
// the run as without the view (which takes no input, so the terminal
// sends SIGINT): the step fails naming the interruption, the handler's
// notice is a line of the view (not written under it, shifting it),
// the failure is printed in full below the view, exit 130, the run Lease
// is released.
func TestLiveViewOnATerminal(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{simDelay: map[string]time.Duration{"cnpg": 90 * time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := c.command(ctx, "install") // -o auto
	// Tall enough for everything printed after Ctrl-C: the 25 step rows,
	// then each failure in full and the error summary below the view. At
	// 60 rows a long failure (operators/rhcl still waiting for OLM to copy
	// the Subscription's env, six wrapped rows twice) scrolled the header
	// off the top (CI check of 2026-12-03), and the header count below
	// then saw 0.
	const cols, rows = 150, 100
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: cols, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	scr := termtest.New(master, cols, rows)
	waiting := regexp.MustCompile(`^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \[ ?\d+/\d+\] database/cluster +(\d+s|\dm\d\ds)  waiting for Cluster rhoai-maas-db/maas-postgres`)
	preflight := regexp.MustCompile(`^✓ \[ ?1/\d+\] ` + regexp.QuoteMeta(steps.PreflightStepID) + ` +done \d`)
	footer := regexp.MustCompile(`^─── [1-9]\d* running · [1-9]\d* done · \d+ unchanged · 0 failed · 0 not run .*│ elapsed \S+ │ slowest \S+ \S+$`)
	// The step's line, whatever it waits on now (the Cluster, its PVC).
	running := regexp.MustCompile(`^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \[ ?\d+/\d+\] database/cluster +(\d+s|\dm\d\ds)  \S`)
	elapsed := func(lines []string) string {
		for _, l := range lines {
			if m := running.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		}
		return ""
	}
	var first, lastRunning string
	if !scr.WaitFor(3*time.Minute, func(l []string) bool {
		first = elapsed(l)
		if first != "" {
			lastRunning = strings.Join(l, "\n")
		}
		return first != "" && anyRow(l, waiting) && anyRow(l, preflight) && anyRow(l, footer)
	}) {
		t.Fatalf("no live view with database/cluster waiting on its Cluster; the last screen with it running:\n%s\nscreen:\n%s", lastRunning, scr.Text())
	}
	if !scr.WaitFor(10*time.Second, func(l []string) bool { e := elapsed(l); return e != "" && e != first }) {
		t.Errorf("the elapsed time of database/cluster stays %s; screen:\n%s", first, scr.Text())
	}
	t.Logf("screen while running:\n%s", scr.Text())
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C on the terminal
		t.Fatal(err)
	}
	werr := cmd.Wait()
	<-scr.Closed()
	text := scr.Text()
	t.Logf("screen at the end:\n%s", text)
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("Ctrl-C: %v, want exit 130; screen:\n%s", werr, text)
	}
	for _, w := range []string{
		"interrupt received: stopping the running steps",
		"✗ database/cluster failed after",
		"interrupted (received interrupt) while waiting for Cluster rhoai-maas-db/maas-postgres",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("the screen lacks %q", w)
		}
	}
	if n := strings.Count(text, "maasctl: running "); n != 1 {
		t.Errorf("the header is on the screen %d times (a line written under the view shifted it)", n)
	}
	if strings.Contains(text, "timed out") {
		t.Errorf("an interruption reads as a timeout:\n%s", text)
	}
	// Nothing secret in any byte the view wrote (issue 15): the database
	// password (generated into Vault before database/cluster waits) and
	// the Vault token.
	pw := c.vault.Data(vaultMount, vaultPath)["password"]
	if pw == "" {
		t.Error("no database password in Vault when the view ran: the leak check would prove nothing")
	}
	raw := scr.Raw()
	for name, secret := range map[string]string{"the database password": pw, "the Vault token": c.vaultToken} {
		if secret != "" && strings.Contains(raw, secret) {
			t.Errorf("%s appears in the terminal output", name)
		}
	}
	assertNoSecret(t, c, pw, map[string]string{"the terminal output": raw})
	_, err = c.clients.Kube.CoordinationV1().Leases(steps.StateNamespace).Get(context.Background(), steps.LeaseName, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the run Lease is still there after Ctrl-C (err %v)", err)
	}
}

func anyRow(lines []string, re *regexp.Regexp) bool {
	for _, l := range lines {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}
