// Command maasctl installs Red Hat OpenShift AI with Models-as-a-Service and
// publishes an OpenAI-compatible model server through it. Commands are thin:
// flags → options struct → one library call.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/steps/session"
	"github.com/maasctl/maasctl/waiters"
)

// Exit codes (documented in README.md).
const (
	exitOK        = 0
	exitFailed    = 1 // a step failed; re-run after fixing the cause
	exitBadInput  = 2 // invalid flags or inventory; nothing was changed
	exitLockHeld  = 3 // another run holds the Lease
	exitTimeout   = 4 // a wait timed out
	exitInterrupt = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRootCmd().ExecuteContext(ctx)
	os.Exit(exitCode(ctx, err))
}

func exitCode(ctx context.Context, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(os.Stderr, "Error:", err)
	var usage *usageError
	var flag *session.FlagError
	switch {
	case ctx.Err() != nil:
		return exitInterrupt
	case errors.As(err, &usage), errors.As(err, &flag), errors.Is(err, steps.ErrInvalidInventory):
		return exitBadInput
	case steps.IsLockHeld(err):
		return exitLockHeld
	case waiters.IsTimeout(err):
		return exitTimeout
	}
	return exitFailed
}

// usageError marks bad flags or arguments (exit code 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }
