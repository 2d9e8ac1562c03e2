package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/maasctl/maasctl/steps/session"
)

// TestPlanTableKeepsLongDetails (a new user's trial, session 42): the
// plan table printed to a pipe cut a drifted step's reason at 120 bytes,
// losing the field that differs; it now keeps all of it on one row.
func TestPlanTableKeepsLongDetails(t *testing.T) {
	detail := "MaaSSubscription models-as-a-service/llama-coder-default differs at spec.modelRefs[0].tokenRateLimits[0].limit from what maasctl applies\n(live 100, applied 200000)"
	rep := &session.PlanReport{}
	js, _ := json.Marshal(map[string]any{"steps": []map[string]any{{"id": "access/subscription", "wouldRun": true, "selected": true, "reason": "drifted: " + detail, "detail": detail}}})
	if err := json.Unmarshal(js, rep); err != nil || len(rep.Run()) != 1 {
		t.Fatalf("plan report: %v", err)
	}
	var out bytes.Buffer
	if err := writePlan(&out, rep); err != nil {
		t.Fatal(err)
	}
	if want := strings.ReplaceAll(detail, "\n", " "); !strings.Contains(out.String(), want) {
		t.Errorf("the plan table lacks the whole detail %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "…") {
		t.Errorf("the plan table cuts a detail:\n%s", out.String())
	}
}
