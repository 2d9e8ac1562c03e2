package doctor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// TestNotInstalled: a cluster MaaS was uninstalled from (the uninstall's
// mark) gets one MAAS-D037 finding instead of a finding per removed object
// and step (the second new-user trial counted 35 errors after an
// intentional uninstall); without the mark (nothing installed MaaS yet, an
// install that stopped, MaaS installed by other means) doctor names every
// problem, as before.
func TestNotInstalled(t *testing.T) {
	pending := []doctor.StepState{{ID: "gateway/gateway", State: "pending", Reason: "not done", Detail: "Gateway missing"},
		{ID: "rhoai/dsc", State: "pending", Reason: "not done", Detail: "DSC missing"}}
	kept := []doctor.StepState{{ID: "database/cluster", State: "done", Ran: true}, pending[0], pending[1]}
	at := time.Date(2026, 12, 7, 23, 1, 2, 0, time.UTC)
	mark := &doctor.Uninstalled{At: at, Kept: []string{"Cluster maas-db/maas-db (the database)", "the password in Vault (the database)"}, Where: "ConfigMap maasctl/maasctl-uninstalled"}
	for _, tc := range []struct {
		name   string
		reader *verify.StaticReader
		steps  []doctor.StepState
		mark   *doctor.Uninstalled
		// one: only MAAS-D037, whose evidence and fix contain these.
		one           bool
		evidence, fix []string
	}{
		{name: "uninstalled, database kept", reader: verify.NewStaticReader(admin), steps: kept, mark: mark, one: true,
			evidence: []string{"maasctl uninstall finished at 2026-12-07T23:01:02Z", "ConfigMap maasctl/maasctl-uninstalled", "Cluster maas-db/maas-db (the database)", "the password in Vault"},
			fix:      []string{"maasctl install -f site.yaml", "delete ConfigMap maasctl/maasctl-uninstalled"}},
		// An object adopted at install (there before maasctl) stays after
		// uninstall: the mark still says MaaS was removed.
		{name: "uninstalled, adopted DataScienceCluster left", reader: healthy(t), steps: kept, mark: mark, one: true,
			evidence: []string{"maasctl uninstall finished"}},
		{name: "never installed", reader: verify.NewStaticReader(admin), steps: pending},
		{name: "installed by other means", reader: healthy(t), steps: pending},
		{name: "install stopped after the database", reader: verify.NewStaticReader(admin), steps: kept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := doctor.Run(context.Background(), doctor.Options{Inventory: inventory.Default(), Reader: tc.reader, Steps: tc.steps, Uninstalled: tc.mark,
				InstallCommand: "maasctl install -f site.yaml", Settle: time.Minute,
				DataPath: &verify.DataPathOptions{Endpoint: "http://127.0.0.1:1", Token: adminToken, RequestTimeout: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			codes := rep.Codes()
			if !tc.one {
				for _, c := range codes {
					if c == doctor.CodeNotInstalled {
						t.Fatalf("%s without the uninstall's mark: %v", doctor.CodeNotInstalled, rep.Findings)
					}
				}
				if len(codes) < 2 {
					t.Fatalf("findings %v, want one per problem", codes)
				}
				return
			}
			if len(codes) != 1 || codes[0] != doctor.CodeNotInstalled {
				t.Fatalf("findings %v, want only %s", codes, doctor.CodeNotInstalled)
			}
			f := rep.Findings[0]
			if f.Severity != doctor.Error || len(rep.DataPath) != 0 {
				t.Errorf("severity %s, %d data-path checks: want an error and no request to the endpoint", f.Severity, len(rep.DataPath))
			}
			for _, s := range tc.evidence {
				if !strings.Contains(f.Evidence, s) {
					t.Errorf("evidence %q lacks %q", f.Evidence, s)
				}
			}
			for _, s := range tc.fix {
				if !strings.Contains(f.Fix, s) {
					t.Errorf("fix %q lacks %q", f.Fix, s)
				}
			}
		})
	}
}
