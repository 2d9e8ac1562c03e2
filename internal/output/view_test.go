package output

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/maasctl/maasctl/internal/termtest"
	"github.com/maasctl/maasctl/steps/event"
)

// fakeRun is a run of five steps as the engine emits it: two finished
// (done, unchanged), one failed with its fix apart (event.Event.Fix),
// one running for 65s that waits on a Deployment, one not started.
func fakeRun(t0 time.Time) []event.Event {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	return []event.Event{
		{Type: event.RunStarted, Message: "5 steps", Total: 5, Time: at(0)},
		{Type: event.Started, Step: "preflight", Index: 1, Total: 5, Title: "Preflight checks", Time: at(0)},
		{Type: event.Done, Step: "preflight", Index: 1, Total: 5, Duration: 1200 * time.Millisecond, Time: at(1200 * time.Millisecond)},
		{Type: event.Started, Step: "namespaces", Index: 2, Total: 5, Time: at(time.Second)},
		{Type: event.Unchanged, Step: "namespaces", Index: 2, Total: 5, Duration: 300 * time.Millisecond, Time: at(1300 * time.Millisecond)},
		{Type: event.Started, Step: "operators/rhoai", Index: 3, Total: 5, Title: "RHOAI operator", Time: at(2 * time.Second)},
		{Type: event.Progress, Step: "operators/rhoai", Index: 3, Total: 5, Message: "applied Subscription redhat-ods-operator/rhods-operator", Time: at(3 * time.Second)},
		{Type: event.Progress, Step: "operators/rhoai", Index: 3, Total: 5, Message: "waiting for Deployment redhat-ods-operator/rhods-operator: Available", Time: at(4 * time.Second)},
		{Type: event.Started, Step: "database/cluster", Index: 4, Total: 5, Time: at(2 * time.Second)},
		{Type: event.Failed, Step: "database/cluster", Index: 4, Total: 5, Duration: 3 * time.Second, Time: at(5 * time.Second),
			Message: "PVC rhoai-maas-db/maas-postgres-1 is Pending (no StorageClass)", Fix: "set database.storageClass in the inventory"},
	}
}

// TestLiveViewOnAPseudoTerminal drives the live view through a pty and
// reads the screen with a terminal emulator: the running step has a
// spinner, its elapsed time and the object and condition it waits on;
// finished steps are one line each; the footer counts, times and names the
// slowest step; a resize (SIGWINCH) redraws at the new width without
// wrapping; the end leaves the view and prints the failure in full.
func TestLiveViewOnAPseudoTerminal(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if err := pty.Setsize(tty, &pty.Winsize{Cols: 140, Rows: 20}); err != nil {
		t.Fatal(err)
	}
	scr := termtest.New(master, 140, 20)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0.Add(67 * time.Second) } // operators/rhoai started 65s ago
	emit, end := live(tty, tty.Fd(), now)
	for _, ev := range fakeRun(t0) {
		emit(ev)
	}
	running := regexp.MustCompile(`^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \[ 3/5\] operators/rhoai +1m05s  waiting for Deployment redhat-ods-operator/rhods-operator: Available$`)
	want := []*regexp.Regexp{
		regexp.MustCompile(`^maasctl: running 5 steps$`),
		regexp.MustCompile(`^✓ \[ 1/5\] preflight +done 1\.2s$`),
		regexp.MustCompile(`^= \[ 2/5\] namespaces +unchanged 300ms$`),
		running,
		regexp.MustCompile(`^✗ \[ 4/5\] database/cluster +failed after 3\.0s: PVC rhoai-maas-db/maas-postgres-1 is Pending \(no StorageClass\)$`),
		regexp.MustCompile(`^─── 1 running · 1 done · 1 unchanged · 1 failed · 0 not run · 1 to go │ elapsed 1m07s │ slowest operators/rhoai 1m05s$`),
	}
	if !scr.WaitFor(5*time.Second, func(l []string) bool { return matchRows(l, want) }) {
		t.Fatalf("screen:\n%s\nwant rows matching %v", scr.Text(), want)
	}
	if strings.Contains(scr.Text(), "fix: set database.storageClass") {
		t.Errorf("the failure's later lines belong below the view when it ends, not in it:\n%s", scr.Text())
	}
	// Resize: the view redraws at 60 columns, cutting lines instead of
	// wrapping them (a wrapped line would push the footer down a row).
	if err := pty.Setsize(tty, &pty.Winsize{Cols: 60, Rows: 20}); err != nil {
		t.Fatal(err)
	}
	scr.Resize(60, 20)
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil { // the pty is not our controlling terminal
		t.Fatal(err)
	}
	narrow := regexp.MustCompile(`^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \[ 3/5\] operators/rhoai +1m05s  wait.*…$`)
	if !scr.WaitFor(5*time.Second, func(l []string) bool {
		return len(l) > 6 && narrow.MatchString(l[3]) && strings.HasPrefix(l[5], "─── 1 running") && l[6] == ""
	}) {
		t.Fatalf("after the resize to 60 columns, screen:\n%s", scr.Text())
	}
	if err := pty.Setsize(tty, &pty.Winsize{Cols: 140, Rows: 20}); err != nil {
		t.Fatal(err)
	}
	scr.Resize(140, 20)
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	if !scr.WaitFor(5*time.Second, func(l []string) bool { return matchRows(l, want) }) {
		t.Fatalf("after the resize back to 140 columns, screen:\n%s", scr.Text())
	}
	emit(event.Event{Type: event.Done, Step: "operators/rhoai", Index: 3, Total: 5, Duration: 70 * time.Second})
	emit(event.Event{Type: event.Blocked, Step: "models", Index: 5, Total: 5, Message: "database/cluster failed"})
	emit(event.Event{Type: event.RunDone, Duration: 75 * time.Second, Summary: &event.Summary{
		Done: []string{"operators/rhoai", "preflight"}, Unchanged: []string{"namespaces"}, Failed: []string{"database/cluster"}, Blocked: []string{"models"}, Duration: 75 * time.Second, Reads: 12, Writes: 3}})
	end()
	emit(event.Event{Type: event.Progress, Step: "late", Message: "after the end"}) // dropped, no new view
	tty.Close()
	<-scr.Closed()
	text := scr.Text()
	for _, w := range []string{
		"✓ [ 3/5] operators/rhoai",
		"- [ 5/5] models",
		"─── 0 running · 2 done · 1 unchanged · 1 failed · 1 not run │ elapsed 1m15s │ slowest operators/rhoai 1m10s\n",
		"✗ database/cluster failed after 3.0s:\n  PVC rhoai-maas-db/maas-postgres-1 is Pending (no StorageClass)\n  fix: set database.storageClass in the inventory",
		"maasctl: 2 done, 1 unchanged, 1 failed, 1 not run in 75.0s",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("the ended view lacks %q; screen:\n%s", w, text)
		}
	}
	if strings.Contains(text, "after the end") {
		t.Errorf("an event after the end started a new view:\n%s", text)
	}
}

// matchRows reports whether the first rows of the screen match want, row
// by row.
func matchRows(lines []string, want []*regexp.Regexp) bool {
	if len(lines) < len(want) {
		return false
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			return false
		}
	}
	return true
}

// TestAutoOnAPipeIsPlain: with stdout not a terminal, auto writes exactly
// the plain lines, with no terminal control byte in them.
func TestAutoOnAPipeIsPlain(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); got <- b }()
	evs := append(fakeRun(time.Now()), event.Event{Type: event.RunDone, Summary: &event.Summary{Duration: time.Second}})
	emit, end := New(Auto, w)
	for _, ev := range evs {
		emit(ev)
	}
	end()
	w.Close()
	auto := <-got
	var plain bytes.Buffer
	emit, end = New(Plain, &plain)
	for _, ev := range evs {
		emit(ev)
	}
	end()
	if !bytes.Equal(auto, plain.Bytes()) {
		t.Errorf("auto on a pipe:\n%s\nplain:\n%s", auto, plain.Bytes())
	}
	if bytes.ContainsRune(auto, 0x1b) || !bytes.Contains(auto, []byte("[ 3/5] ▶ operators/rhoai")) {
		t.Errorf("auto on a pipe is not the plain lines:\n%q", auto)
	}
}

// TestViewFoldsFinishedStepsToFitTheHeight: on a short terminal the
// oldest finished steps fold into one line; running steps and the footer
// stay.
func TestViewFoldsFinishedStepsToFitTheHeight(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m := newViewModel(func() time.Time { return t0.Add(67 * time.Second) })
	m.width, m.height = 200, 5
	for _, ev := range fakeRun(t0) {
		m.apply(ev)
	}
	lines := strings.Split(ansi.Strip(m.render()), "\n")
	if len(lines) != 4 { // one row for the cursor
		t.Fatalf("%d lines for a terminal of 5 rows:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.HasPrefix(lines[1], "… 3 finished steps not shown") || !strings.Contains(lines[2], "operators/rhoai") || !strings.Contains(lines[3], "1 running · 1 done") {
		t.Errorf("folded view:\n%s", strings.Join(lines, "\n"))
	}
}

// TestNoticesDuringTheView: what is written to a terminal stderr while
// the view draws becomes a line of the view; to a stderr that is no
// terminal, it is written as it is.
func TestNoticesDuringTheView(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if err := pty.Setsize(tty, &pty.Winsize{Cols: 140, Rows: 20}); err != nil {
		t.Fatal(err)
	}
	scr := termtest.New(master, 140, 20)
	var plain bytes.Buffer
	toPipe, toTerm := Notices(&plain), Notices(tty)
	emit, end := live(tty, tty.Fd(), time.Now)
	emit(event.Event{Type: event.RunStarted, Message: "1 steps", Total: 1})
	emit(event.Event{Type: event.Started, Step: "database/cluster", Index: 1, Total: 1})
	io.WriteString(toTerm, "maasctl: interrupt received: stopping\n")
	io.WriteString(toPipe, "to the pipe\n")
	notice := regexp.MustCompile(`^maasctl: interrupt received: stopping$`)
	if !scr.WaitFor(5*time.Second, func(l []string) bool {
		return len(l) > 3 && l[0] == "maasctl: running 1 steps" && notice.MatchString(l[1]) && strings.Contains(l[2], "database/cluster") && strings.HasPrefix(l[3], "─── 1 running")
	}) {
		t.Fatalf("screen:\n%s", scr.Text())
	}
	end()
	io.WriteString(toTerm, "after the view\n")
	tty.Close()
	<-scr.Closed()
	if plain.String() != "to the pipe\n" {
		t.Errorf("a non-terminal stderr got %q", plain.String())
	}
	if !strings.Contains(scr.Text(), "\nafter the view") {
		t.Errorf("after the view a notice goes to the terminal as it is:\n%s", scr.Text())
	}
}

// TestAbandonGivesTheTerminalBack: on a second Ctrl-C the process exits
// without ending the view; Abandon shows the cursor again and the last
// notice is written to the terminal, not into a view that draws no more.
func TestAbandonGivesTheTerminalBack(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if err := pty.Setsize(tty, &pty.Winsize{Cols: 140, Rows: 20}); err != nil {
		t.Fatal(err)
	}
	scr := termtest.New(master, 140, 20)
	emit, end := live(tty, tty.Fd(), time.Now)
	defer end()
	emit(event.Event{Type: event.Started, Step: "database/cluster", Index: 1, Total: 1})
	if !scr.WaitFor(5*time.Second, func(l []string) bool { return scr.CursorHidden() && strings.HasPrefix(l[1], "─── 1 running") }) {
		t.Fatalf("no view with a hidden cursor; screen:\n%s", scr.Text())
	}
	Abandon()
	io.WriteString(Notices(tty), "maasctl: interrupt again: exiting at once\n")
	if !scr.WaitFor(5*time.Second, func(l []string) bool {
		return !scr.CursorHidden() && strings.Contains(strings.Join(l, "\n"), "\nmaasctl: interrupt again: exiting at once")
	}) {
		t.Fatalf("cursor hidden %v; screen:\n%s", scr.CursorHidden(), scr.Text())
	}
}

// TestTypedKeysAndCtrlCLeaveTheViewAlone: while the view draws, keys
// typed on the terminal and the Ctrl-C that interrupts the run are not
// echoed into it, and Ctrl-C does not make the terminal discard output
// the view queued (NOFLSH); the terminal's modes come back at the end.
// Before quietTerminal, the pty echoed "abc^C" into a row of the view,
// and the flush on Ctrl-C lost part of a frame: the e2e
// TestLiveViewOnATerminal then found the header overwritten.
func TestTypedKeysAndCtrlCLeaveTheViewAlone(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if err := pty.Setsize(tty, &pty.Winsize{Cols: 140, Rows: 20}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if before.Lflag&unix.ECHO == 0 || before.Lflag&unix.NOFLSH != 0 {
		t.Fatalf("a new pty should echo and flush on signals: lflag %#x", before.Lflag)
	}
	scr := termtest.New(master, 140, 20)
	emit, end := live(tty, tty.Fd(), time.Now)
	emit(event.Event{Type: event.RunStarted, Message: "1 steps", Total: 1})
	emit(event.Event{Type: event.Started, Step: "database/cluster", Index: 1, Total: 1})
	if !scr.WaitFor(5*time.Second, func(l []string) bool { return len(l) > 2 && strings.HasPrefix(l[2], "─── 1 running") }) {
		t.Fatalf("no view; screen:\n%s", scr.Text())
	}
	during, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if during.Lflag&unix.ECHO != 0 || during.Lflag&unix.NOFLSH == 0 || during.Lflag&unix.ISIG == 0 {
		t.Errorf("while the view draws: ECHO %v (want off), NOFLSH %v (want on), ISIG %v (want on)",
			during.Lflag&unix.ECHO != 0, during.Lflag&unix.NOFLSH != 0, during.Lflag&unix.ISIG != 0)
	}
	if _, err := master.Write([]byte("abc\x03")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the spinner draws a few frames after the keys
	emit(event.Event{Type: event.Failed, Step: "database/cluster", Index: 1, Total: 1, Message: "interrupted"})
	end()
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag {
		t.Errorf("terminal modes not restored: lflag %#x, was %#x", after.Lflag, before.Lflag)
	}
	tty.Close()
	<-scr.Closed()
	if raw := scr.Raw(); strings.Contains(raw, "abc") || strings.Contains(raw, "^C") {
		t.Errorf("typed keys echoed into the view:\n%s", scr.Text())
	}
	if text := scr.Text(); !strings.HasPrefix(text, "maasctl: running 1 steps\n✗ [ 1/1] database/cluster") {
		t.Errorf("screen:\n%s", text)
	}
}
