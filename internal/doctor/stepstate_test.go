package doctor_test

import (
	"strings"
	"testing"

	"github.com/maasctl/maasctl/internal/doctor"
)

func TestStepFindings(t *testing.T) {
	done := doctor.StepState{ID: "a/done", State: "done", Ran: true}
	cases := []struct {
		name  string
		steps []doctor.StepState
		want  map[string]string // object -> code
		fix   string
	}{
		{"all done", []doctor.StepState{done}, map[string]string{}, ""},
		{"nothing ran", []doctor.StepState{{ID: "a/x", State: "pending", Reason: "not done"}, {ID: "a/y", State: "pending", Reason: "not done"}},
			map[string]string{"run record": doctor.CodeStepNotConverged}, "maasctl install"},
		{"drifted", []doctor.StepState{done, {ID: "rhoai/dashboard", State: "drifted", Detail: "OdhDashboardConfig: spec.dashboardConfig.modelAsService", Ran: true}},
			map[string]string{"step rhoai/dashboard": doctor.CodeStepNotConverged}, "maasctl install"},
		{"failed", []doctor.StepState{done, {ID: "b/f", State: "failed", Detail: "boom", Ran: true}},
			map[string]string{"step b/f": doctor.CodeStepNotConverged}, "maasctl install"},
		{"never ran after others", []doctor.StepState{done, {ID: "b/n", State: "pending", Reason: "not done", Detail: "x missing"}},
			map[string]string{"step b/n": doctor.CodeStepNotConverged}, "maasctl install"},
		{"inputs changed", []doctor.StepState{done, {ID: "b/i", State: "pending", Reason: "inputs changed", Detail: "inventory changed", Ran: true}},
			map[string]string{"step b/i": doctor.CodeStepUnsure}, "maasctl plan"},
		{"unknown", []doctor.StepState{done, {ID: "b/u", State: "unknown", Detail: "check failed: vault sealed", Ran: true}},
			map[string]string{"step b/u": doctor.CodeStepUnsure}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := doctor.StepFindings(tc.steps)
			if len(got) != len(tc.want) {
				t.Fatalf("findings %+v, want %v", got, tc.want)
			}
			for _, f := range got {
				if tc.want[f.Object] != f.Code {
					t.Errorf("finding %s on %q, want %q", f.Code, f.Object, tc.want[f.Object])
				}
				if f.Evidence == "" || f.Cause == "" || !strings.HasPrefix(f.Fix, tc.fix) {
					t.Errorf("finding %+v: want evidence, cause and a fix starting %q", f, tc.fix)
				}
				if (f.Code == doctor.CodeStepNotConverged) != (f.Severity == doctor.Error) {
					t.Errorf("%s has severity %s", f.Code, f.Severity)
				}
			}
		})
	}
}
