package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/maasctl/maasctl/internal/output"
)

// interruption is the cause (context.Cause) of a run's cancellation: a
// signal, or stdout closed under a running command.
type interruption struct{ why string }

func (i *interruption) Error() string { return i.why }

// errStdoutClosed marks a run stopped because its stdout reader went away
// (maasctl install | head -1).
var errStdoutClosed = &interruption{"stdout closed (broken pipe)"}

// interruptible returns a context cancelled, with an interruption as its
// cause, on the first SIGINT or SIGTERM, and a writer for stdout that
// cancels it when a write fails with EPIPE and discards the output from
// then on.
//
// SIGPIPE is ignored (signal.Ignore): Go's runtime would otherwise kill
// the process on the first write to a closed stdout (os/file_unix.go
// epipecheck), without running deferred cleanup, leaving the run Lease
// held. With it ignored the write returns EPIPE instead, the run stops as
// an interruption, releases its Lease and exits 141. A second SIGINT or
// SIGTERM exits at once (130) without cleanup, unless it comes within
// sameSignalWindow of the first (one request sent twice, as GNU timeout
// does).
func interruptible(parent context.Context, stdout *os.File, stderr io.Writer) (context.Context, io.Writer, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var first time.Time
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				now := time.Now()
				switch {
				case first.IsZero():
					first = now
					fmt.Fprintf(stderr, "maasctl: %s received: stopping the running steps and releasing the run Lease (send it again to exit at once)\n", s)
					cancel(&interruption{"received " + s.String()})
				case sameRequest(first, now):
					// GNU timeout, and a kill of the process group, send
					// the child the signal twice at once: one request.
				default:
					output.Abandon() // a live view draws no more
					fmt.Fprintf(stderr, "maasctl: %s again: exiting at once, without cleanup; a run Lease not released yet stays until it expires\n", s)
					os.Exit(exitInterrupt)
				}
			}
		}
	}()
	out := &pipeGuard{f: stdout, broken: func() { cancel(errStdoutClosed) }}
	return ctx, out, func() { signal.Stop(sigs); close(done); cancel(nil) }
}

// sameSignalWindow is how soon after the first a signal counts as the same
// stop request: GNU timeout sends SIGTERM to the command and then to its
// whole process group, so the command gets it twice within microseconds;
// a person repeating Ctrl-C takes far longer than this.
const sameSignalWindow = 500 * time.Millisecond

// sameRequest reports whether a signal at now repeats the first one, at
// first, as part of the same stop request (sameSignalWindow).
func sameRequest(first, now time.Time) bool { return now.Sub(first) < sameSignalWindow }

// pipeGuard writes to f until a write fails with EPIPE; then it calls
// broken once and discards what follows, so that a run whose stdout reader
// went away stops cleanly. Fd lets output.New see a terminal through it.
type pipeGuard struct {
	f      *os.File
	broken func()
	once   sync.Once
	closed bool
	mu     sync.Mutex
}

func (p *pipeGuard) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return len(b), nil
	}
	n, err := p.f.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		p.closed = true
		p.once.Do(p.broken)
		return len(b), nil
	}
	return n, err
}

// Fd is the file descriptor of the guarded file.
func (p *pipeGuard) Fd() uintptr { return p.f.Fd() }
