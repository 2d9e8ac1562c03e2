package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newDoctorCmd) }

type doctorOptions struct {
	dp       dataPathFlags
	output   string
	liveOnly bool
	database bool
	settle   time.Duration
}

func newDoctorCmd(g *globalOptions) *cobra.Command {
	o := &doctorOptions{}
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Explain why MaaS does not work: coded findings with evidence and the fix",
		Long: `Doctor turns every row of the deployment README's troubleshooting table into
a finding computed from live state: MaaS not enabled (the 3.4 spelling on 3.5),
Kuadrant MissingDependency, Gateway not Programmed (LoadBalancerPending and
DNSReady=False on ClusterIP are reported as harmless), maas-api missing,
maas-db-config missing, User Workload Monitoring off, 401/403/429 causes,
ExternalProvider not Ready (Secret, key api-key, label), Service Mesh older
than 3.3.1 and a model server without ready endpoints. Every verify check
(MAAS-V0xx) has a rule, so doctor also names objects maasctl installs that
are missing or not ready (the Kuadrant CR, the Route, a policy), a Kuadrant
operator that does not run, and an endpoint that does not answer. Every
install step has a rule too: doctor reads each step's state as maasctl
status does (its checkpoint against its own live Check) and names a step
that drifted, failed, was interrupted or never ran (MAAS-D030), or whose
state cannot be judged (MAAS-D031), with the command that converges. On a
cluster maasctl uninstall removed MaaS from (its mark, ConfigMap
maasctl/maasctl-uninstalled, is there) doctor says that alone (MAAS-D037)
and sends no request to the endpoint. Each
finding has a stable code (MAAS-D001 ...), the object, the evidence and a
fix that converges: maasctl install when the inventory is right, the
inventory change when it is not.

Without -f, --set or --defaults, doctor judges the cluster against the
inventory it was installed from (maasctl inventory show), and its fixes
name the install command that re-applies that inventory (maasctl install
-f <the file it was installed from>).

Access (403/429) is judged against that inventory, not against your own
groups: a policy changed outside the inventory is an error; you
not being in the groups the inventory grants is information.

Unless --live-only is given, doctor also probes the endpoint (mint a key,
list models, chat, no key; the key is revoked) so 401/403/429 are observed.
Set MAAS_API_KEY to have your own key tested too (it is never printed).

Like verify, doctor first reads again every 2s, for up to --settle, while
the only failed checks are Kuadrant policies still in Kuadrant's hands
(right after an install Kuadrant reports its policies Enforced=False
"waiting for the following components to sync" for a few seconds), and
says so on stderr: a policy Kuadrant is still syncing is not a finding.

Exit codes: 0 no error finding, 1 at least one error finding, 2 invalid
flags or inventory, 130 interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runDoctor(c, g, o) },
	}
	f := c.Flags()
	o.dp.register(f)
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.BoolVar(&o.liveOnly, "live-only", false, "only read the cluster; send no request to the endpoint")
	f.BoolVar(&o.database, "database", false, "also ask the database about maas-api's schema (owner, dirty migration, INVALID index) with a short read-only Job in the database namespace")
	f.DurationVar(&o.settle, "settle", time.Minute, settleUsage)
	return c
}

func runDoctor(c *cobra.Command, g *globalOptions, o *doctorOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if err := checkSettle(o.settle); err != nil {
		return err
	}
	s, err := connect(c, g)
	if err != nil {
		return err
	}
	dr := session.DoctorRequest{APIKey: os.Getenv("MAAS_API_KEY"), Database: o.database, Settle: o.settle, Waiting: settleWaiting(c, o.settle)}
	if !o.liveOnly {
		dr.DataPath = o.dp.options()
	}
	rep, err := s.Doctor(c.Context(), dr)
	if err != nil {
		return err
	}
	if o.output == "json" {
		err = rep.WriteJSON(c.OutOrStdout())
	} else {
		err = rep.WriteText(c.OutOrStdout())
	}
	if err != nil {
		return err
	}
	if n := len(rep.Errors()); n > 0 {
		return fmt.Errorf("doctor found %d error(s); apply the fixes above, then run 'maasctl verify'", n)
	}
	return nil
}
