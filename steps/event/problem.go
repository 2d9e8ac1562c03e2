package event

import (
	"errors"
	"strings"
)

// Problem is a failure in two parts kept apart until it is rendered: what
// is wrong (Message, naming the object or field) and what resolves it
// (Fix, the command or setting). A step that fails with a Problem (also
// wrapped) gets a failed Event whose Message and Fix are these; the
// renderers print the fix on its own line. It lives in this package,
// which imports nothing of maasctl, so that every package (waiters,
// internal/kube) can fail with one.
type Problem struct {
	// Message says what is wrong; it includes Err's text when Err caused it.
	Message string
	// Fix is the command or setting that resolves it; "" when none is known.
	Fix string
	// Err is the cause (for errors.Is and errors.As), or nil.
	Err error
}

// Error is "Message: Fix" (Message alone without a fix), the text the
// final error and the run record show.
func (p *Problem) Error() string {
	if p.Fix == "" {
		return p.Message
	}
	return p.Message + ": " + p.Fix
}

// Unwrap returns the cause.
func (p *Problem) Unwrap() error { return p.Err }

// MessageAndFix splits err for a failed Event: with a Problem in its
// chain, message is err's text with that Problem's fix taken out (the
// wrapping text kept) and fix is the Problem's Fix; otherwise message is
// err's text and fix "".
func MessageAndFix(err error) (message, fix string) {
	if err == nil {
		return "", ""
	}
	msg := err.Error()
	var p *Problem
	if !errors.As(err, &p) || p.Fix == "" {
		return msg, ""
	}
	return strings.Replace(msg, p.Error(), p.Message, 1), p.Fix
}
