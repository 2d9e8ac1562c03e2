package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newRenderCmd) }

// renderedName matches the files a previous render wrote.
var renderedName = regexp.MustCompile(`^(\d\d-.+\.yaml|README\.md|kustomization\.yaml)$`)

func newRenderCmd(g *globalOptions) *cobra.Command {
	var dir, oldDir, image string
	var inCluster bool
	var secrets, store string
	c := &cobra.Command{
		Use:   "render --dir DIR",
		Short: "Write every manifest of the install for GitOps (Argo CD, ACM), numbered in apply order; no Secret values",
		Long: `Render writes the manifests 'maasctl install' applies for the inventory, one
file per step, numbered in apply order, plus a README.md. It needs no cluster,
so the inventory must set gateway.hostname. Secrets that carry the database
password are not rendered: the files and the README say which Secrets to
provide and where their values live in Vault. Files of an earlier render in
DIR are replaced.

Every document carries the Argo CD sync wave of its file (the file number)
and, when an earlier step's operator registers its kind,
argocd.argoproj.io/sync-options: SkipDryRunOnMissingResource=true;
kustomization.yaml lists the files for kustomize build or an Argo CD
Application. The Kuadrant operator restart that install does when Kuadrant
reports MissingDependency is rendered as an Argo CD PostSync hook Job. With
--secrets external-secrets the Secrets that carry the password are rendered
as ExternalSecrets (external-secrets.io/v1) that read Vault through the
ClusterSecretStore --secret-store and build maas-db-config with a template.

With --in-cluster, render writes a least-privilege in-cluster run instead:
the Namespaces its Roles live in, a ServiceAccount, a ClusterRole (the
cluster-wide permissions) and one Role per namespace with exactly what the
install's steps need (what maasctl preflight checks with
SelfSubjectAccessReviews, so a missing rule is named before any write),
their bindings, the inventory as a ConfigMap and a Job that runs maasctl
install with the in-cluster config (--image).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			dir = cmp.Or(dir, oldDir)
			ro := session.RenderOptions{Secrets: secrets, SecretStore: store}
			if err := ro.Validate(); err != nil {
				return &usageError{err}
			}
			if dir == "" {
				return &usageError{fmt.Errorf("--dir DIR is required: the directory to write the manifests to")}
			}
			inv, err := g.inventory()
			if err != nil {
				return err
			}
			out, err := session.Render(inv, session.RenderRequest{Options: ro, InCluster: inCluster, Image: image, Version: version})
			if err != nil {
				return err
			}
			if err := writeRender(dir, out); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "wrote %s to %s (see %s)\n", output.Count(len(out), "file", "files"), dir, filepath.Join(dir, "README.md"))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "", "directory to write the manifests to")
	f.BoolVar(&inCluster, "in-cluster", false, "instead of the manifests, render a least-privilege in-cluster run: a ServiceAccount with exactly the permissions preflight checks (ClusterRole and Roles), their bindings and a Job that runs maasctl install")
	f.StringVar(&secrets, "secrets", "", "how the Secrets that carry the database password are rendered: leave out to only describe them, or external-secrets for External Secrets Operator ExternalSecrets that read them from Vault")
	f.StringVar(&store, "secret-store", session.DefaultSecretStore, "with --secrets external-secrets: the ClusterSecretStore that reads Vault")
	f.StringVar(&image, "image", session.DefaultInstallerImage, "with --in-cluster: the maasctl image the Job runs (built from the Containerfile)")
	f.StringVarP(&oldDir, "output", "o", "", "directory to write the manifests to")
	_ = f.MarkDeprecated("output", "use --dir; -o/--output names an output format in every other command")
	return c
}

// writeRender writes the rendered files to dir, replacing the files of an
// earlier render there.
func writeRender(dir string, out []session.ManifestFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	old, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range old {
		if !e.IsDir() && renderedName.MatchString(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove the earlier render's %s: %w", e.Name(), err)
			}
		}
	}
	for _, f := range out {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", f.Name, err)
		}
	}
	return nil
}
