package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newVerifyCmd) }

// connect opens the session of the global flags (readSession, status.go,
// so --kube-token-from-vault and Ansible vars files work as for every
// command) and connects. Without -f, --set or --defaults the inventory is
// the one the cluster was installed from, and stderr says so: verify,
// doctor and gather judge the cluster against what it was installed from.
func connect(c *cobra.Command, g *globalOptions) (*session.Session, error) {
	s, against, err := readSession(c, g)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(against, "the inventory installed from") {
		fmt.Fprintf(c.ErrOrStderr(), "maasctl: judging the cluster against %s\n", against)
	}
	return s, nil
}

// checkOutput accepts text (alias table) or json.
func checkOutput(o string) error {
	switch o {
	case "text", "table", "json":
		return nil
	}
	return &usageError{fmt.Errorf("--output %q: want text (also spelled table) or json", o)}
}

// dataPathFlags configure requests to the MaaS endpoint (verify, doctor).
type dataPathFlags struct {
	endpoint, token, caFile, subscription string
	insecure                              bool
	timeout                               time.Duration
}

func (f *dataPathFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoint, "endpoint", "", "MaaS base URL (default https://<host of the Route>)")
	fs.StringVar(&f.token, "token", "", "OpenShift bearer token used to mint and revoke the verify API key (default: the kubeconfig's token)")
	fs.StringVar(&f.caFile, "ca-file", "", "PEM CA bundle to trust for the endpoint (e.g. a self-signed test certificate)")
	fs.BoolVar(&f.insecure, "insecure-skip-tls-verify", false, "do not verify the endpoint's certificate")
	fs.StringVar(&f.subscription, "subscription", "", "MaaSSubscription the API key that verify mints is bound to (default: the highest-priority inventory subscription you own)")
	fs.DurationVar(&f.timeout, "request-timeout", 60*time.Second, "timeout of each request to the endpoint")
}

// options are the data-path options of the flags; the session fills the
// token from the kubeconfig when --token is not given (it is never
// printed).
func (f *dataPathFlags) options() *session.DataPathOptions {
	return &session.DataPathOptions{
		Endpoint: f.endpoint, Token: f.token, CAFile: f.caFile, InsecureSkipTLSVerify: f.insecure,
		Subscription: f.subscription, RequestTimeout: f.timeout,
	}
}

type verifyOptions struct {
	dp         dataPathFlags
	output     string
	liveOnly   bool
	probeQuota bool
	bodySize   string
	database   bool
	settle     time.Duration
}

func newVerifyCmd(g *globalOptions) *cobra.Command {
	o := &verifyOptions{}
	c := &cobra.Command{
		Use:   "verify",
		Short: "Prove that users can reach the models through MaaS (read-only checks plus the request path)",
		Long: `Verify runs the checks of the deployment README's "Verify" list against the
live cluster (DSC Ready, Kuadrant Ready, Gateway Programmed, maas-api 1/1,
providers, models and policies Ready/Active, generated Kuadrant policies
Enforced) and then the data path: /maas-api/health, mint an API key with your
OpenShift token, list the models, send a small chat completion, expect 401
without a key and, with --probe-quota, expect 429 from a dedicated low-limit
probe subscription that verify creates and deletes. Every key verify mints is
revoked at the end. No key or token is ever printed.

Each check has a stable code (MAAS-V001 ...); a failed check says the cause
and the fix. While the only failed checks are Kuadrant policies still in
Kuadrant's hands (Enforced=False "waiting for the following components to
sync" on AuthConfigs or Limitador, token limits refused for an undeclared
"auth" while the Gateway AuthPolicy exists, the gateway's Wasm failure
modes not yet rewritten by an operator that already runs with their env,
no status yet, or a status for an older generation), verify reads them
again every 2s for up to --settle
and says so on stderr, before the data path runs.

Exit codes: 0 every check passed, 1 a check failed, 2 invalid flags or
inventory, 130 interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runVerify(c, g, o) },
	}
	f := c.Flags()
	o.dp.register(f)
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.BoolVar(&o.liveOnly, "live-only", false, "run only the read-only cluster checks, not the data path")
	f.BoolVar(&o.probeQuota, "probe-quota", false, "create a low-limit probe MaaSSubscription owned by you, expect 429, then delete it")
	f.StringVar(&o.bodySize, "probe-body-size", "0", "also send a request of this size (e.g. 256Ki) to detect a gateway body cap; 0 = off")
	f.DurationVar(&o.settle, "settle", time.Minute, settleUsage)
	f.BoolVar(&o.database, "database", false, "also ask the database about maas-api's schema (owner, dirty migration, INVALID index) with a short read-only Job in the database namespace (MAAS-V016)")
	return c
}

func runVerify(c *cobra.Command, g *globalOptions, o *verifyOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	size, err := resource.ParseQuantity(o.bodySize)
	if err != nil || size.Sign() < 0 {
		return &usageError{fmt.Errorf("--probe-body-size %q: want a size such as 256Ki", o.bodySize)}
	}
	if err := checkSettle(o.settle); err != nil {
		return err
	}
	s, err := connect(c, g)
	if err != nil {
		return err
	}
	vr := session.VerifyRequest{Database: o.database, Settle: o.settle, Waiting: settleWaiting(c, o.settle)}
	if !o.liveOnly {
		vr.DataPath = o.dp.options()
		vr.DataPath.ProbeQuota, vr.DataPath.ProbeBodySize = o.probeQuota, int(size.Value())
	}
	rep, err := s.Verify(c.Context(), vr)
	if o.liveOnly {
		// After what verify printed on stderr while it checked (the
		// release layout's warning, the settle wait).
		for _, name := range []string{"endpoint", "token", "ca-file", "insecure-skip-tls-verify", "subscription", "probe-quota", "probe-body-size"} {
			if c.Flags().Changed(name) {
				fmt.Fprintf(c.ErrOrStderr(), "maasctl: --live-only checks no data path: --%s is ignored\n", name)
			}
		}
	}
	if err != nil {
		return err
	}
	if n := pendingFailures(rep); n > 0 && o.settle > 0 {
		fmt.Fprintf(c.ErrOrStderr(), "maasctl: Kuadrant still reported %d failed check(s) as syncing when --settle %s ran out (\"pending\": true in -o json); the cause and fix of each say where to look if it never ends\n", n, o.settle)
	}
	out := c.OutOrStdout()
	if o.output == "json" {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return err
	}
	if !rep.Passed {
		return fmt.Errorf("%s; run 'maasctl doctor' for the causes", rep.Summary())
	}
	return nil
}

// pendingFailures counts the failed checks of rep that were still Pending
// when the settle wait ended.
func pendingFailures(rep *session.VerifyReport) int {
	n := 0
	for _, ch := range rep.Failed() {
		if ch.Pending {
			n++
		}
	}
	return n
}

// settleUsage is the help of --settle, a flag of verify and doctor.
const settleUsage = "while the only failed checks are Kuadrant policies still in Kuadrant's hands (Enforced=False \"waiting for the following components to sync\" on AuthConfigs or Limitador, token limits refused for an undeclared \"auth\" while the Gateway AuthPolicy exists, the gateway's Wasm failure modes not yet rewritten by an operator that already runs with their env, no status yet, or a status for an older generation), read them again every 2s for up to this long; 0 judges the first read"

// checkSettle refuses a negative --settle before anything is read.
func checkSettle(d time.Duration) error {
	if d < 0 {
		return &usageError{fmt.Errorf("--settle %s: want a duration of 0 or more, such as 1m", d)}
	}
	return nil
}

// settleWaiting tells on stderr, once per new set, which checks the
// --settle wait is waiting for.
func settleWaiting(c *cobra.Command, d time.Duration) func(string) {
	return func(pending string) {
		fmt.Fprintf(c.ErrOrStderr(), "maasctl: waiting for Kuadrant (up to --settle %s): %s\n", d, pending)
	}
}
