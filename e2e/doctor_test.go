package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/maasctl/maasctl/internal/doctor"
)

// doctorRun runs maasctl doctor -o json against the cluster and, when p is
// given, its data plane, and parses the report.
func doctorRun(t *testing.T, c *cluster, p *plane, extra ...string) (*doctor.Report, run) {
	t.Helper()
	args := []string{"doctor", "-o", "json"}
	if p != nil {
		args = append(args, "--endpoint", p.URL(), "--ca-file", p.ca)
	} else {
		args = append(args, "--live-only")
	}
	r := c.maasctl(t, append(args, extra...)...)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor output is not a JSON report (exit %d): %v\nstdout:\n%s\nstderr:\n%s", r.exit, err, r.stdout, r.stderr)
	}
	return &rep, r
}

// doctorFinding is what a test expects doctor to report.
type doctorFinding struct {
	code, object, evidence, fix string
}

// expectFinding runs doctor and asserts exit 1 and a finding with the
// code, object, evidence and fix; it returns the run for leak checks.
func expectFinding(t *testing.T, c *cluster, p *plane, want doctorFinding) run {
	t.Helper()
	rep, r := doctorRun(t, c, p)
	if r.exit != 1 {
		t.Errorf("doctor exit %d, want 1 (error findings)", r.exit)
	}
	for _, f := range rep.Findings {
		if f.Code != want.code {
			continue
		}
		if f.Object == want.object && strings.Contains(f.Evidence, want.evidence) && strings.Contains(f.Fix, want.fix) && f.Cause != "" {
			return r
		}
		t.Errorf("%s: object %q evidence %q fix %q\nwant object %q, evidence ⊇ %q, fix ⊇ %q", f.Code, f.Object, f.Evidence, f.Fix, want.object, want.evidence, want.fix)
		return r
	}
	t.Errorf("doctor did not report %s; codes %v\n%s", want.code, rep.Codes(), r.stdout)
	return r
}

// TestDoctorFreshCluster runs doctor on the fixture (a fresh OpenShift
// cluster meeting the prerequisites, nothing installed): it must name what
// is missing with codes and fixes and exit 1.
func TestDoctorFreshCluster(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	rep, r := doctorRun(t, c, nil)
	if r.exit != 1 {
		t.Errorf("doctor exit %d on a fresh cluster, want 1", r.exit)
	}
	codes := strings.Join(rep.Codes(), " ")
	for _, want := range []string{doctor.CodeMaaSAPIMissing, doctor.CodeDBConfigMissing, doctor.CodeMonitoringOff, doctor.CodeModelNotServing, doctor.CodeGovernanceGap} {
		if !strings.Contains(codes, want) {
			t.Errorf("fresh cluster: no %s in %s", want, codes)
		}
	}
	for _, f := range rep.Findings {
		if f.Code == "" || f.Object == "" || f.Evidence == "" || f.Fix == "" {
			t.Errorf("incomplete finding %+v", f)
		}
	}
	text := c.maasctl(t, "doctor", "--live-only")
	if text.exit != 1 || !strings.Contains(text.stdout, doctor.CodeDBConfigMissing) || !strings.Contains(text.stdout, "fix:") {
		t.Errorf("text output (exit %d):\n%s", text.exit, text.stdout)
	}
}
