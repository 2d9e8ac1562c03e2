package session

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/waiters"
)

// TestIsTimeout: exit code 4 for a run whose every failed step timed out
// waiting or had its request cut by the step's timeout, also through a
// step's Problem; 1 when any failed otherwise.
func TestIsTimeout(t *testing.T) {
	timeout := &waiters.TimeoutError{Blocked: []waiters.Blocked{{Object: "Gateway openshift-ingress/maas-default-gateway", Status: "Programmed=False"}}}
	other := errors.New("apply: forbidden")
	// client-go's words for a response body read cut by the context's
	// deadline (a CI check, 2026-12-07, install --timeout 4s).
	readCut := fmt.Errorf("unexpected error when reading response body. Please retry. Original error: %w", context.DeadlineExceeded)
	step := func(id string, err error) *steps.StepError { return &steps.StepError{Step: id, Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a wait's own error", timeout, true},
		{"wrapped", fmt.Errorf("verify: %w", timeout), true},
		{"a run whose one failure timed out", &steps.RunError{Failed: []*steps.StepError{step("platform/gateway", timeout)}}, true},
		{"a timeout inside a step's Problem", &steps.RunError{Failed: []*steps.StepError{step("platform/gateway", &steps.Problem{Message: "the Gateway is not programmed", Err: timeout})}}, true},
		{"a request cut by the step's timeout", &steps.RunError{Failed: []*steps.StepError{step("dbsecret/maas-db-config", &steps.StepTimeoutError{Timeout: 4 * time.Second, Err: readCut})}}, true},
		{"a wait's timeout and a request cut by it", &steps.RunError{Failed: []*steps.StepError{step("platform/gateway", timeout), step("dbsecret/maas-db-config", &steps.StepTimeoutError{Timeout: 4 * time.Second, Err: readCut})}}, true},
		{"a deadline error the runner did not attribute to the step's timeout", &steps.RunError{Failed: []*steps.StepError{step("dbsecret/maas-db-config", readCut)}}, false},
		{"a timeout and another failure", &steps.RunError{Failed: []*steps.StepError{step("platform/gateway", timeout), step("database/secret", other)}}, false},
		{"a run without a timeout", &steps.RunError{Failed: []*steps.StepError{step("database/secret", other)}}, false},
		{"a run with only blocked steps", &steps.RunError{Blocked: []string{"models/model"}}, false},
		{"another error", other, false},
	} {
		if got := IsTimeout(tc.err); got != tc.want {
			t.Errorf("%s: IsTimeout = %v, want %v", tc.name, got, tc.want)
		}
	}
}
