package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNextBackoff(t *testing.T) {
	first := 10 * time.Second
	var got []time.Duration
	var b time.Duration
	for range 7 {
		b = nextBackoff(b, time.Second, first)
		got = append(got, b)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("back-offs (-want +got):\n%s", d)
	}
	if b := nextBackoff(5*time.Minute, 10*time.Minute, first); b != first {
		t.Errorf("after 10 min of running: back-off %s, want %s (reset)", b, first)
	}
}

func TestParseArgs(t *testing.T) {
	a, err := parseArgs([]string{"--forward=6443", "--restart", "--restart-backoff=250ms", "--", "a", "x", "---", "b"})
	if err != nil {
		t.Fatal(err)
	}
	want := runArgs{forwards: []int{6443}, restart: true, backoff: 250 * time.Millisecond, progs: [][]string{{"a", "x"}, {"b"}}}
	if d := cmp.Diff(want, a, cmp.AllowUnexported(runArgs{})); d != "" {
		t.Errorf("parseArgs (-want +got):\n%s", d)
	}
	if a, _ := parseArgs([]string{"--", "a"}); a.restart || a.backoff != restartBackoff {
		t.Errorf("defaults: restart %v, back-off %s; want false, %s", a.restart, a.backoff, restartBackoff)
	}
	for _, bad := range [][]string{{"--restart-backoff=soon", "--", "a"}, {"--restart-backoff=-1s", "--", "a"}, {"--", "a", "---"}} {
		if _, err := parseArgs(bad); err == nil {
			t.Errorf("parseArgs(%q): no error", bad)
		}
	}
}

// buildNetnsRun builds this command into a temporary folder; it needs root
// to run (unshare).
func buildNetnsRun(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns-run needs root (unshare CLONE_NEWNET)")
	}
	bin := filepath.Join(t.TempDir(), "netns-run")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestRestart runs a program that always fails under --restart: it is
// started again after 100 ms, then 200 ms, each restart logged, and
// netns-run ends on SIGTERM. Without --restart the first exit ends
// netns-run with the program's status.
func TestRestart(t *testing.T) {
	bin := buildNetnsRun(t)
	runs := filepath.Join(t.TempDir(), "runs")
	prog := []string{"--", "sh", "-c", "echo run >> " + runs + "; exit 3"}

	cmd := exec.Command(bin, append([]string{"--restart", "--restart-backoff=100ms"}, prog...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(runs)
		if strings.Count(string(b), "run\n") >= 3 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("netns-run ended (%v) before the third run; stderr:\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no third run in 20 s; stderr:\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("netns-run still runs 5 s after SIGTERM")
	}
	for _, want := range []string{
		"netns-run: restart sh in 100ms: it exited (exit status 3)",
		"netns-run: restart sh in 200ms: it exited (exit status 3)",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}

	err := exec.Command(bin, prog...).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("without --restart: %v, want exit status 3", err)
	}
}
