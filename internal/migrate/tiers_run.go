package migrate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/kube"
)

// TiersOptions configures MigrateTiers.
type TiersOptions struct {
	// BackupDir is where the backup, the plan and the journal go: absent
	// or empty for a new migration, or the directory of an earlier run
	// that stopped, which is then resumed (its backup kept, its journal
	// appended to; see resumable). Required.
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
// *ModelsNotReadyError, in a dry run too, when a governed model has no
// Ready LLMInferenceService or no HTTPRoute on the Gateway (CheckModels;
// nothing changed in the cluster);
// *NotReadyError when the new objects did not become ready in time
// (nothing old deleted; it wraps a *waiters.TimeoutError naming them);
// *ValidationError when a final check failed.
func MigrateTiers(ctx context.Context, c *kube.Clients, o TiersOptions) (*TiersResult, error) {
	o.setDefaults()
	if o.BackupDir == "" {
		return nil, fmt.Errorf("a backup directory is required")
	}
	w := o.Out
	st, err := Discover(ctx, c, DiscoverOptions{Gateway: o.Gateway, MaaSNamespace: o.MaaSNamespace})
	if err != nil {
		return nil, err
	}
	res := &TiersResult{State: st}
	// An earlier run in this backup directory that stopped (a wait that
	// timed out, a kill) is resumed: its backup of the state before the
	// migration stays the one rollback restores, its journal is appended to.
	prior, err := resumable(o.BackupDir, st, o.DryRun)
	if err != nil {
		return res, err
	}
	if !st.HasTierObjects() {
		if prior != nil {
			fmt.Fprintf(w, "No tier resources are left: the migration recorded in %s has finished its apply phase; nothing was changed. Undo it with: maasctl migrate tiers --rollback %s\n", o.BackupDir, o.BackupDir)
			res.BackupDir = prior.Dir
			return res, nil
		}
		fmt.Fprintln(w, "No tier resources found (tier-to-group-mapping ConfigMap, tier-based gateway policies, tier annotations): nothing to migrate.")
		return res, nil
	}
	now := o.Now().UTC()
	id := filepath.Base(filepath.Clean(o.BackupDir))
	if prior != nil {
		id = prior.Manifest.ID
	}
	plan := BuildPlan(st, PlanOptions{BackupID: id, SkipInvalid: o.SkipInvalid})
	res.Plan = plan
	if plan.Err() == nil && plan.Empty() {
		fmt.Fprintln(w, "No tier configuration left to migrate: nothing was changed.")
		writeSkipped(w, plan)
		return res, nil
	}

	b, err := tiersBackup(w, o.BackupDir, prior, id, st, now)
	if err != nil {
		return res, err
	}
	res.BackupDir = b.Dir

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
	notReady := reportModels(w, st, plan, b.Dir, o.DryRun)
	if o.DryRun {
		return res, tiersDryRun(ctx, c, w, plan, notReady)
	}
	if notReady != nil {
		return res, notReady
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

// resumable opens the backup of an earlier run in dir, to resume it: nil
// when dir is absent or empty. It refuses a directory that holds no
// migration backup, a backup of another Gateway or MaaS namespace, a
// migration that was rolled back, and a dry run into an existing backup
// (a dry run writes a fresh backup and plan).
func resumable(dir string, st *State, dryRun bool) (*Backup, error) {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return nil, nil
	}
	b, err := OpenBackup(dir)
	if err != nil {
		return nil, fmt.Errorf("backup directory %s is not empty and holds no migration backup (%v); choose another --backup-dir", dir, err)
	}
	if dryRun {
		return nil, fmt.Errorf("backup directory %s holds the migration started %s; a dry run needs an empty --backup-dir (to go on with that migration, re-run without --dry-run)", dir, b.Manifest.Created.Format(time.RFC3339))
	}
	gw := st.Gateway.Namespace + "/" + st.Gateway.Name
	if b.Manifest.Gateway != gw || b.Manifest.MaaSNamespace != st.MaaSNamespace {
		return nil, fmt.Errorf("backup directory %s is of a migration for Gateway %s and MaaS namespace %s, not %s and %s; choose another --backup-dir",
			dir, b.Manifest.Gateway, b.Manifest.MaaSNamespace, gw, st.MaaSNamespace)
	}
	journal, err := b.Journal()
	if err != nil {
		return nil, err
	}
	for _, e := range journal {
		if e.Action == ActionRestored || e.Action == ActionRemoved {
			return nil, fmt.Errorf("the migration in %s was rolled back; start a new one with another --backup-dir", dir)
		}
	}
	return b, nil
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

// tiersBackup writes the backup of the state before the migration to dir
// and lists it, or keeps the one of the earlier run it resumes (prior).
func tiersBackup(w io.Writer, dir string, prior *Backup, id string, st *State, now time.Time) (*Backup, error) {
	if prior != nil {
		fmt.Fprintf(w, "== Backup (%s): resuming the migration started %s; its backup of the state before it is kept\n\n", dir, prior.Manifest.Created.Format(time.RFC3339))
		return prior, nil
	}
	fmt.Fprintf(w, "== Backup (%s)\n", dir)
	b, err := WriteBackup(dir, id, st, now)
	if err != nil {
		return nil, err
	}
	for _, e := range b.Manifest.Entries {
		fmt.Fprintf(w, "  %-10s %s -> %s\n", e.Role, e.Ref, e.File)
	}
	fmt.Fprintf(w, "  state summary -> %s\n\n", StateFile)
	return b, nil
}

// tiersDryRun checks every object of the plan with a server-side dry run
// (the CRD schemas and admission, nothing stored); when they pass it
// returns notReady, the models that would hold the real run (reportModels).
func tiersDryRun(ctx context.Context, c *kube.Clients, w io.Writer, plan *Plan, notReady error) error {
	for _, obj := range plan.Objects() {
		if _, err := c.DryRunApply(ctx, obj); err != nil {
			return fmt.Errorf("dry run: %w", err)
		}
	}
	fmt.Fprintln(w, "Dry run: the objects passed a server-side dry run; nothing was changed in the cluster.")
	writeSkipped(w, plan)
	return notReady
}

// reportModels checks the governed models (CheckModels) and prints the
// result: every one needs a Ready LLMInferenceService and its HTTPRoute on
// the Gateway, or its MaaSModelRef never turns Ready and the apply phase
// would wait its whole timeout for it. The error, a *ModelsNotReadyError,
// is nil when every model passes.
func reportModels(w io.Writer, st *State, plan *Plan, dir string, dryRun bool) error {
	problems, ok := CheckModels(st, plan)
	writeModels(w, problems, ok)
	fmt.Fprintln(w)
	if len(problems) == 0 {
		return nil
	}
	e := &ModelsNotReadyError{DryRun: dryRun, Problems: problems}
	if !dryRun {
		e.BackupDir = dir
	}
	return e
}

// setDefaults fills the options left zero: no output, the clock, a
// 10-minute wait bound.
func (o *TiersOptions) setDefaults() {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
}
