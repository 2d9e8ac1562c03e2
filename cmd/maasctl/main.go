// Command maasctl installs Red Hat OpenShift AI with Models-as-a-Service and
// publishes an OpenAI-compatible model server through it. Commands are thin:
// flags → options struct → one library call.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/steps/session"
)

// Exit codes (documented in README.md).
const (
	exitOK        = 0
	exitFailed    = 1   // a step failed; re-run after fixing the cause
	exitBadInput  = 2   // invalid flags or inventory, or a plain run on a cluster installed from another inventory; nothing was changed
	exitLockHeld  = 3   // another run holds the Lease
	exitTimeout   = 4   // a wait timed out
	exitInterrupt = 130 // SIGINT or SIGTERM; the Lease is released
	// exitBrokenPipe: stdout was closed under the run (128 + SIGPIPE, as a
	// shell reports a process killed by it); the Lease is released.
	exitBrokenPipe = 141
)

func main() {
	stderr := output.Notices(os.Stderr) // lines of the live view while it draws
	// client-go's own log (klog) never reaches stderr: it goes to the
	// debug log once a command builds it (globalOptions.logger), and
	// nowhere before.
	klog.SetLoggerWithOptions(logr.Discard(), klog.ContextualLogger(true))
	softMemoryLimit()
	stopProfile := cpuProfile(stderr)
	ctx, stdout, stop := interruptible(context.Background(), os.Stdout, stderr)
	root := newRootCmd()
	asPlugin(root, os.Args[0])
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	code := exitCode(ctx, err)
	stop()
	stopProfile()
	heapProfile(stderr)
	os.Exit(code)
}

// cpuProfile starts a Go CPU profile (runtime/pprof; read it with go tool
// pprof) written to the file MAASCTL_CPUPROFILE names, for the benchmarks
// (e2e/bench). Unset: nothing. The returned func stops and flushes it. A
// file that cannot be created is a notice on stderr, not a failure.
func cpuProfile(stderr io.Writer) func() {
	path := os.Getenv("MAASCTL_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(stderr, "maasctl: MAASCTL_CPUPROFILE:", err)
		if f != nil {
			_ = f.Close()
		}
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

// DefaultMemoryLimit is the Go runtime's soft memory limit maasctl sets
// when GOMEMLIMIT is not in the environment: 100 MiB of heap, stacks and
// runtime metadata (runtime/debug.SetMemoryLimit; the executable's own
// pages, about 40 MB of resident set, are not counted). Without a limit
// the garbage collector lets the heap grow to twice what is live (GOGC=100),
// and the bursts of a 1,000-model install (its first record, the verify
// snapshot of every model's objects) took the resident set to 225 MiB with
// 90 MB live; with it the collector runs earlier instead. A live heap over
// the limit costs CPU, never correctness: the runtime bounds the collector
// to about half the CPU and then lets the heap grow. GOMEMLIMIT (Go's own
// variable: a size such as 300MiB, or "off") replaces it.
const DefaultMemoryLimit = 100 << 20

func softMemoryLimit() {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(DefaultMemoryLimit)
	}
}

// heapProfile writes a Go heap profile (runtime/pprof "heap": the
// sampled in-use and allocated bytes by call site; go tool pprof
// -sample_index=alloc_space or inuse_space) to the file MAASCTL_MEMPROFILE
// names, when the command ends, for the benchmarks' memory figures
// (e2e/bench). Unset: nothing. A file that cannot be written is a notice
// on stderr, not a failure.
func heapProfile(stderr io.Writer) {
	path := os.Getenv("MAASCTL_MEMPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "maasctl: MAASCTL_MEMPROFILE:", err)
	}
}

// asPlugin makes help and usage lines show the name the binary was called
// by when it runs as a kubectl or oc plugin: installed as kubectl-maas (or
// oc-maas) on the PATH, "kubectl maas install" finds it (kubectl's plugin
// mechanism: an executable named kubectl-<name>), and its usage reads
// "kubectl maas install ..." (cobra's CommandDisplayNameAnnotation).
func asPlugin(root *cobra.Command, argv0 string) {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	for _, host := range []string{"kubectl-", "oc-"} {
		if name, ok := strings.CutPrefix(base, host); ok && name != "" {
			if root.Annotations == nil {
				root.Annotations = map[string]string{}
			}
			root.Annotations[cobra.CommandDisplayNameAnnotation] = strings.TrimSuffix(host, "-") + " " + name
			return
		}
	}
}

func exitCode(ctx context.Context, err error) int {
	if err == nil && ctx.Err() == nil {
		return exitOK
	}
	cause := context.Cause(ctx)
	if err == nil {
		// The command finished although its stdout went away.
		err = cause
	} else if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "maasctl: stopped: %v\n", cause)
	}
	fmt.Fprintln(os.Stderr, "Error:", err)
	var usage *usageError
	var sessionUsage *session.UsageError
	var flag *session.FlagError
	switch {
	case errors.Is(cause, errStdoutClosed):
		return exitBrokenPipe
	case ctx.Err() != nil:
		return exitInterrupt
	case errors.As(err, &usage), errors.As(err, &sessionUsage), errors.As(err, &flag), errors.Is(err, session.ErrInvalidInventory), errors.Is(err, session.ErrInventoryChanged):
		return exitBadInput
	case session.IsLockHeld(err):
		return exitLockHeld
	case session.IsTimeout(err):
		return exitTimeout
	}
	return exitFailed
}

// usageError marks bad flags or arguments (exit code 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }
