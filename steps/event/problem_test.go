package event

import (
	"errors"
	"fmt"
	"testing"
)

// TestMessageAndFix: a wrapped Problem's fix comes out of the wrapping
// text; a Problem without a fix and any other error are their text alone.
func TestMessageAndFix(t *testing.T) {
	cause := errors.New("deadline exceeded")
	p := &Problem{Message: "Certificate ns/c not Ready: " + cause.Error(), Fix: "check 'oc describe certificate c -n ns'", Err: cause}
	for _, tt := range []struct {
		err       error
		msg, fix  string
		errorText string
	}{
		{p, p.Message, p.Fix, "Certificate ns/c not Ready: deadline exceeded: check 'oc describe certificate c -n ns'"},
		{fmt.Errorf("step x: %w", p), "step x: " + p.Message, p.Fix, "step x: " + p.Message + ": " + p.Fix},
		{&Problem{Message: "no remedy known"}, "no remedy known", "", "no remedy known"},
		{cause, "deadline exceeded", "", "deadline exceeded"},
	} {
		msg, fix := MessageAndFix(tt.err)
		if msg != tt.msg || fix != tt.fix || tt.err.Error() != tt.errorText {
			t.Errorf("%v: message %q fix %q, want %q and %q (text %q)", tt.err, msg, fix, tt.msg, tt.fix, tt.errorText)
		}
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", p), cause) {
		t.Error("a Problem does not unwrap to its cause")
	}
}
