package steps

import (
	"testing"

	"github.com/maasctl/maasctl/internal/verify"
)

// TestOnlyKuadrantPending: the install's verify waits for a late
// Kuadrant write only while nothing but policy enforcement or the
// EnvoyFilter's failure modes fail.
func TestOnlyKuadrantPending(t *testing.T) {
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
		{"failure modes not rewritten yet", []verify.Check{check(verify.CodeOperatorEnv, verify.Pass), check(verify.CodeFailureModes, verify.Fail)}, true},
		{"failure modes and the operator env both fail", []verify.Check{check(verify.CodeOperatorEnv, verify.Fail), check(verify.CodeFailureModes, verify.Fail)}, false},
	} {
		if got := onlyKuadrantPending(&verify.Report{Checks: tc.checks}); got != tc.want {
			t.Errorf("%s: onlyKuadrantPending = %v, want %v", tc.name, got, tc.want)
		}
	}
}
