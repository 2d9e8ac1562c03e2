package migrate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/kube"
)

// TiersOptions configures MigrateTiers.
type TiersOptions struct {
	// BackupDir is where the backup, the plan and the journal go; it must
	// not exist or be empty. Required.
	BackupDir string
	// DryRun stops after the plan: the backup and plan.yaml are written,
	// the cluster is not changed.
	DryRun bool
	// SkipInvalid migrates without the models whose tier annotation cannot
	// be used (PlanOptions.SkipInvalid) instead of refusing; the plan and
	// the summary list them, and their annotations are left as they are.
	SkipInvalid bool
	// Timeout bounds the wait for the new objects (and, separately, for the
	// old ones to be gone). Default 10 minutes.
	Timeout time.Duration
	// Endpoint, when set, is the MaaS base URL whose tier lookup endpoint
	// the validate phase expects to answer 404; HTTPClient calls it.
	Endpoint   string
	HTTPClient *http.Client
	// Gateway is the MaaS Gateway; MaaSNamespace holds the new
	// MaaSAuthPolicy and MaaSSubscription objects. Zero values: defaults.
	Gateway       types.NamespacedName
	MaaSNamespace string
	// Out receives the report of every phase.
	Out io.Writer
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// TiersResult is what MigrateTiers did.
type TiersResult struct {
	// BackupDir is empty when there was nothing to migrate.
	BackupDir string
	State     *State
	Plan      *Plan
	// Applied is true when the new objects were created and the old ones
	// removed.
	Applied bool
}

// MigrateTiers runs the migration in the upgrade guide's phases: backup
// (Phase 2), audit (3.4), plan (Phase 5), then, unless DryRun, apply
// (Phases 5 and 4, in that order: the old configuration goes only after
// the new one is enforced) and validate (4.5, 5.4).
//
// A plan that changes nothing (only skipped models are left, SkipInvalid)
// ends before the backup with the skipped models reported.
//
// Errors: *UnmappableError when the plan has blockers (nothing changed;
// an unusable tier annotation is one unless SkipInvalid);
// *NotReadyError when the new objects did not become ready in time
// (nothing old deleted; it wraps a *waiters.TimeoutError naming them);
// *ValidationError when a final check failed.
func MigrateTiers(ctx context.Context, c *kube.Clients, o TiersOptions) (*TiersResult, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.BackupDir == "" {
		return nil, fmt.Errorf("a backup directory is required")
	}
	w := o.Out
	st, err := Discover(ctx, c, DiscoverOptions{Gateway: o.Gateway, MaaSNamespace: o.MaaSNamespace})
	if err != nil {
		return nil, err
	}
	res := &TiersResult{State: st}
	if !st.HasTierObjects() {
		fmt.Fprintln(w, "No tier resources found (tier-to-group-mapping ConfigMap, tier-based gateway policies, tier annotations): nothing to migrate.")
		return res, nil
	}
	now := o.Now().UTC()
	id := filepath.Base(filepath.Clean(o.BackupDir))
	plan := BuildPlan(st, PlanOptions{BackupID: id, SkipInvalid: o.SkipInvalid})
	res.Plan = plan
	if plan.Err() == nil && plan.Empty() {
		fmt.Fprintln(w, "No tier configuration left to migrate: nothing was changed.")
		writeSkipped(w, plan)
		return res, nil
	}

	fmt.Fprintf(w, "== Backup (%s)\n", o.BackupDir)
	b, err := WriteBackup(o.BackupDir, id, st, now)
	if err != nil {
		return res, err
	}
	res.BackupDir = b.Dir
	for _, e := range b.Manifest.Entries {
		fmt.Fprintf(w, "  %-10s %s -> %s\n", e.Role, e.Ref, e.File)
	}
	fmt.Fprintf(w, "  state summary -> %s\n\n", StateFile)

	fmt.Fprintln(w, "== Audit")
	WriteAudit(w, st, plan)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "== Plan")
	WritePlan(w, plan)
	if err := plan.Err(); err != nil {
		return res, err
	}
	if err := b.WritePlan(plan); err != nil {
		return res, err
	}
	fmt.Fprintf(w, "  plan written to %s\n\n", filepath.Join(b.Dir, PlanFile))
	if o.DryRun {
		// A server-side dry run checks every object against the CRD schemas
		// and admission without storing anything.
		for _, obj := range plan.Objects() {
			if _, err := c.DryRunApply(ctx, obj); err != nil {
				return res, fmt.Errorf("dry run: %w", err)
			}
		}
		fmt.Fprintln(w, "Dry run: the objects passed a server-side dry run; nothing was changed in the cluster.")
		writeSkipped(w, plan)
		return res, nil
	}

	fmt.Fprintln(w, "== Apply")
	if err := applyPlan(ctx, c, b, plan, o.Timeout, w); err != nil {
		return res, err
	}
	res.Applied = true
	fmt.Fprintln(w)
	fmt.Fprintln(w, "== Validate")
	if err := validate(ctx, c, plan, ValidateOptions{Endpoint: o.Endpoint, HTTPClient: o.HTTPClient, Wait: o.Timeout}, w); err != nil {
		return res, err
	}
	fmt.Fprintf(w, "\nMigration complete. Every change is in %s; undo with: maasctl migrate tiers --rollback %s\n",
		filepath.Join(b.Dir, JournalFile), b.Dir)
	writeSkipped(w, plan)
	return res, nil
}

// writeSkipped ends a run's summary with the models SkipInvalid left out.
func writeSkipped(w io.Writer, p *Plan) {
	if len(p.Skipped) == 0 {
		return
	}
	fmt.Fprintf(w, "Skipped %d model(s) whose tier annotation cannot be used (%s); they were not migrated and keep their annotation:\n", len(p.Skipped), SkipInvalidFlag)
	for _, s := range p.Skipped {
		fmt.Fprintf(w, "  - %s\n", s)
	}
}
