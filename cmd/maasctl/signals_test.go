package main

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// TestPipeGuardStopsTheRunOnABrokenStdout: once the reader of stdout is
// gone, a write cancels the run's context with errStdoutClosed (exit 141)
// and later writes are discarded without error, instead of the runtime
// killing the process with SIGPIPE and leaving the run Lease held.
func TestPipeGuardStopsTheRunOnABrokenStdout(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, out, stop := interruptible(context.Background(), w, io.Discard)
	defer stop()
	if _, err := out.Write([]byte("first line\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, _ := r.Read(buf); string(buf[:n]) != "first line\n" {
		t.Fatalf("read %q", buf[:n])
	}
	r.Close() // head -1 exits
	for i := 0; i < 2; i++ {
		if n, err := out.Write([]byte("more\n")); err != nil || n != 5 {
			t.Fatalf("write %d after the reader left: %d, %v (want 5, nil: discarded)", i, n, err)
		}
	}
	select {
	case <-ctx.Done():
	default:
		t.Fatal("the run's context is not cancelled")
	}
	if !errors.Is(context.Cause(ctx), errStdoutClosed) {
		t.Errorf("cause %v, want %v", context.Cause(ctx), errStdoutClosed)
	}
	if code := exitCode(ctx, nil); code != exitBrokenPipe {
		t.Errorf("exit %d, want %d", code, exitBrokenPipe)
	}
}

// TestSameRequest: a second signal within the window is the same stop
// request (GNU timeout signals the command and then its process group);
// one later is a person asking to exit at once.
func TestSameRequest(t *testing.T) {
	t0 := time.Now()
	if !sameRequest(t0, t0.Add(50*time.Microsecond)) {
		t.Error("a signal 50 µs after the first should be the same request")
	}
	if sameRequest(t0, t0.Add(2*time.Second)) {
		t.Error("a signal 2 s after the first should exit at once")
	}
}
