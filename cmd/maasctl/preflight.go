package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newPreflightCmd) }

type preflightOptions struct {
	output  string
	ignore  []string
	approve bool
}

func newPreflightCmd(g *globalOptions) *cobra.Command {
	o := &preflightOptions{}
	c := &cobra.Command{
		Use:   "preflight",
		Short: "Check every prerequisite of the install without changing anything",
		Long: `Preflight runs the checks 'maasctl install' runs as its first step, and
reports every problem at once: OpenShift version, the platform's Gateway
API CRDs (read only: the OpenShift ingress operator owns them), Service
Mesh Subscriptions that block the ingress operator's own, cert-manager and
the ClusterIssuer, the model namespaces and API-key Secrets, CatalogSources
and channels, OperatorGroups, RHCL/Kuadrant versions (RHCL 1.4.0 is
denied), conflicting or orphaned operators, a StorageClass and stale
database volumes, the RHOAI layout and DSC singletons, MaaS
subscription/auth-policy pairing, Vault, and the permissions the install
needs. It only reads. Exit code 1 when a check fails; a finding with a
code (e.g. DEPENDENCY_VERSION_DENIED) carries it in -o json.

Checks: ` + fmt.Sprint(session.PreflightCheckNames()),
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runPreflight(c, g, o) },
	}
	f := c.Flags()
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringSliceVar(&o.ignore, "ignore-preflight", nil, "report the errors of these checks as warnings (comma-separated check names, or all)")
	f.BoolVar(&o.approve, "approve-installplans", false, "check the permission to approve InstallPlans, as install --approve-installplans needs")
	return c
}

func runPreflight(c *cobra.Command, g *globalOptions, o *preflightOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if err := session.ValidateIgnore(o.ignore); err != nil {
		return &usageError{err}
	}
	// The same Vault client and cluster credentials as install; without a
	// Vault client the vault check reports why.
	s, err := g.open(c)
	if err != nil {
		return err
	}
	if err := s.Connect(c.Context()); err != nil {
		return err
	}
	log, sync, err := g.logger()
	if err != nil {
		return err
	}
	defer sync()
	rep, err := s.Preflight(c.Context(), session.PreflightOptions{
		Policy: session.Policy{IgnorePreflight: o.ignore, ApproveInstallPlans: o.approve}, Log: log,
	})
	if err != nil {
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(c.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := rep.WriteText(c.OutOrStdout()); err != nil {
		return err
	}
	if errs := rep.Errors(); len(errs) > 0 {
		var names []string
		for _, f := range errs {
			if !slices.Contains(names, f.Check) {
				names = append(names, f.Check)
			}
		}
		return fmt.Errorf("preflight failed: %s (details above; --ignore-preflight NAME turns a check's errors into warnings)", strings.Join(names, ", "))
	}
	return nil
}
