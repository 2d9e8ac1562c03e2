package steps

import (
	"testing"

	"github.com/maasctl/maasctl/internal/verify"
)

// TestOnlyEnforcementPending: the install's verify waits for a late
// Kuadrant status only while nothing but policy enforcement fails.
func TestOnlyEnforcementPending(t *testing.T) {
	check := func(code string, r verify.Result) verify.Check { return verify.Check{Code: code, Result: r} }
	for _, tc := range []struct {
		name   string
		checks []verify.Check
		want   bool
	}{
		{"all pass", []verify.Check{check(verify.CodeDSCReady, verify.Pass)}, false},
		{"auth policy not enforced yet", []verify.Check{check(verify.CodeDSCReady, verify.Pass), check(verify.CodeAuthEnforced, verify.Fail)}, true},
		{"both policies not enforced yet", []verify.Check{check(verify.CodeAuthEnforced, verify.Fail), check(verify.CodeTokenLimitEnf, verify.Fail)}, true},
		{"another check fails too", []verify.Check{check(verify.CodeTokenLimitEnf, verify.Fail), check(verify.CodeSubscriptionAct, verify.Fail)}, false},
		{"only another check fails", []verify.Check{check(verify.CodeDBConfig, verify.Fail)}, false},
	} {
		if got := onlyEnforcementPending(&verify.Report{Checks: tc.checks}); got != tc.want {
			t.Errorf("%s: onlyEnforcementPending = %v, want %v", tc.name, got, tc.want)
		}
	}
}
