package main

import (
	"cmp"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newMigrateCmd) }

func newMigrateCmd(g *globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "migrate",
		Short: "Migrate a tier-based MaaS (RHOAI 3.2/3.3) to subscriptions (3.4+)",
		Long: `Migrate moves the old MaaS configuration to its 3.4+ form, following the
upgrade guide (UPGRADE-3.2-TO-3.4.md). Run it after the operator upgrade,
once the maas.opendatahub.io kinds are served.`,
	}
	c.AddCommand(newMigrateTiersCmd(g), newMigratePlatformCmd(g))
	return c
}

type migrateTiersOptions struct {
	backupDir, rollback, endpoint  string
	gatewayNS, gatewayName, maasNS string
	dryRun, skipInvalid            bool
	timeout                        time.Duration
}

func newMigrateTiersCmd(g *globalOptions) *cobra.Command {
	o := &migrateTiersOptions{}
	c := &cobra.Command{
		Use:   "tiers",
		Short: "Replace tiers with MaaSModelRef, MaaSAuthPolicy and MaaSSubscription objects",
		Long: `Tiers migrates the 3.2 tier system (the tier-to-group-mapping ConfigMap, the
tier-based AuthPolicy and TokenRateLimitPolicy on the MaaS Gateway, and the
alpha.maas.opendatahub.io/tiers annotations on LLMInferenceServices) in the
guide's phases:

  backup    every object the guide backs up, as YAML, plus a state summary,
            in --backup-dir
  audit     old and new gateway-level policies on the Gateway, and what each
            tier grants (groups, models, token limits)
  plan      per tier one MaaSAuthPolicy (its groups, the models annotated
            with it) and one MaaSSubscription (the token limits of the
            TokenRateLimitPolicy limit that selects it, priority = tier
            level), and one MaaSModelRef per model; --dry-run stops here
  apply     create them, wait until they are Ready/Active and their Kuadrant
            policies Enforced, only then delete the old policies and the
            ConfigMap and remove the annotations; every change is journaled
  validate  old objects gone, new ones ready; with --endpoint, the tier
            lookup endpoint answers 404

Anything the subscription model cannot express stops the plan and names the
object; nothing is changed then. A model whose tier annotation cannot be used
(not a JSON array of tier names, or a tier the ConfigMap does not define) stops
it too, unless --skip-invalid: the migration then goes on without that model,
lists it in the plan and the summary, and leaves its annotation as it is.
Undo with --rollback DIR.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runMigrateTiers(c, g, o) },
	}
	f := c.Flags()
	f.StringVar(&o.backupDir, "backup-dir", "", "directory for the backup, plan and journal (default ./maasctl-backup-<UTC timestamp>)")
	f.BoolVar(&o.dryRun, "dry-run", false, "back up, audit and plan (plan.yaml in the backup directory), change nothing in the cluster")
	f.BoolVar(&o.skipInvalid, "skip-invalid", false, "migrate without the models whose tier annotation cannot be used (reported, annotation left as it is) instead of refusing")
	f.StringVar(&o.rollback, "rollback", "", "undo the migration recorded in this backup directory")
	f.StringVar(&o.endpoint, "endpoint", "", "MaaS base URL, e.g. https://maas.apps.example.com; validate checks that its tier lookup endpoint is gone (404)")
	f.StringVar(&o.gatewayNS, "gateway-namespace", session.DefaultGatewayNamespace, "namespace of the MaaS Gateway")
	f.StringVar(&o.gatewayName, "gateway-name", session.DefaultGatewayName, "name of the MaaS Gateway")
	f.StringVar(&o.maasNS, "maas-namespace", session.DefaultMaaSNamespace, "namespace for the MaaSAuthPolicy and MaaSSubscription objects")
	return c
}

func runMigrateTiers(c *cobra.Command, g *globalOptions, o *migrateTiersOptions) error {
	if o.rollback != "" && (o.dryRun || o.backupDir != "" || o.skipInvalid) {
		return &usageError{fmt.Errorf("--rollback cannot be combined with --dry-run, --backup-dir or --skip-invalid")}
	}
	o.timeout = cmp.Or(g.in.timeout, 10*time.Minute) // the global --timeout
	if o.timeout < time.Second {
		return &usageError{fmt.Errorf("--timeout %s is under a second; give a duration such as 90s or 10m", o.timeout)}
	}
	s, err := migrateSession(c, g)
	if err != nil {
		return err
	}
	out := c.OutOrStdout()
	if o.rollback != "" {
		fmt.Fprintf(out, "== Rollback from %s\n", o.rollback)
		res, err := s.MigrateRollback(c.Context(), session.RollbackOptions{Dir: o.rollback, Timeout: o.timeout, Out: out})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "Rollback complete: %d restored, %d unchanged, %d removed, %d skipped. The operator itself is not reverted.\n",
			len(res.Restored), len(res.Unchanged), len(res.Removed), len(res.Skipped))
		return nil
	}
	dir := o.backupDir
	if dir == "" {
		dir = filepath.Join(".", "maasctl-backup-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	_, err = s.MigrateTiers(c.Context(), session.TiersOptions{
		BackupDir: dir, DryRun: o.dryRun, SkipInvalid: o.skipInvalid, Timeout: o.timeout, Endpoint: o.endpoint,
		Gateway:       types.NamespacedName{Namespace: o.gatewayNS, Name: o.gatewayName},
		MaaSNamespace: o.maasNS,
		Out:           out,
	})
	return err
}

type migratePlatformOptions struct {
	fromFile, aitenantNS, aitenantName, tenantNS string
	dryRun, overwrite                            bool
}

func newMigratePlatformCmd(g *globalOptions) *cobra.Command {
	o := &migratePlatformOptions{}
	c := &cobra.Command{
		Use:   "platform-config",
		Short: "Carry custom ModelsAsService settings to the AITenant and the tenant configuration",
		Long: `Platform-config reads the old cluster-scoped ModelsAsService CR
(default-modelsasservice, from the cluster or --from-file) and applies its
custom settings to their new owners per the upgrade guide's field table:
gateway and external OIDC to AITenant ai-tenants/models-as-a-service, API
keys and telemetry to the tenant configuration default-tenant
(MaasTenantConfig, or Tenant on 3.4). Fields at their default are left
alone. A new owner that already holds another custom value is a conflict:
nothing is written unless --overwrite is given.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runMigratePlatform(c, g, o) },
	}
	f := c.Flags()
	f.StringVar(&o.fromFile, "from-file", "", "read the old ModelsAsService from this backup file instead of the cluster")
	f.BoolVar(&o.dryRun, "dry-run", false, "report and check with a server-side dry run; write nothing")
	f.BoolVar(&o.overwrite, "overwrite", false, "replace custom values already set on the new owners")
	f.StringVar(&o.aitenantNS, "aitenant-namespace", session.DefaultAITenantNamespace, "namespace of the AITenant")
	f.StringVar(&o.aitenantName, "aitenant-name", session.DefaultAITenantName, "name of the AITenant")
	f.StringVar(&o.tenantNS, "tenant-namespace", session.DefaultMaaSNamespace, "namespace of the tenant configuration default-tenant")
	return c
}

func runMigratePlatform(c *cobra.Command, g *globalOptions, o *migratePlatformOptions) error {
	s, err := migrateSession(c, g)
	if err != nil {
		return err
	}
	rep, err := s.MigratePlatformConfig(c.Context(), session.PlatformOptions{
		FromFile: o.fromFile, DryRun: o.dryRun, Overwrite: o.overwrite,
		AITenant:        types.NamespacedName{Namespace: o.aitenantNS, Name: o.aitenantName},
		TenantNamespace: o.tenantNS,
	})
	if rep != nil {
		session.WritePlatformReport(c.OutOrStdout(), rep)
	}
	if err != nil {
		return err
	}
	n := len(rep.Moved())
	switch {
	case o.dryRun:
		fmt.Fprintf(c.OutOrStdout(), "Dry run: %d field(s) would move; nothing was written.\n", n)
	case n == 0:
		fmt.Fprintln(c.OutOrStdout(), "Nothing to move: every setting is at its default or already in place.")
	default:
		fmt.Fprintf(c.OutOrStdout(), "Moved %d field(s).\n", n)
	}
	return nil
}

// migrateSession opens the session of the global flags and connects, so
// the cluster token may come from Vault (--kube-token-from-vault) as for
// every command.
func migrateSession(c *cobra.Command, g *globalOptions) (*session.Session, error) {
	s, err := g.open(c)
	if err != nil {
		return nil, err
	}
	if err := s.Connect(c.Context()); err != nil {
		return nil, err
	}
	return s, nil
}
