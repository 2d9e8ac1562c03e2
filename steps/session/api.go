package session

import (
	"errors"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/gather"
	"github.com/maasctl/maasctl/internal/migrate"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/waiters"
)

// The types the commands fill or print, so that a command needs this
// package, inventory and the output renderers only.
type (
	// Event is one run event (install, uninstall, rotate-password).
	Event = steps.Event
	// Policy holds install's switches (--ignore-preflight,
	// --approve-installplans).
	Policy = steps.Policy
	// Selection is --only, --skip and --from.
	Selection = steps.Selection
	// VerifyOptions turn on the data-path checks of install's last step.
	VerifyOptions = steps.VerifyOptions
	// Step is one install step as the registry lists it.
	Step = steps.Step

	PlanReport      = steps.PlanReport
	StatusReport    = steps.StatusReport
	DiffReport      = steps.DiffReport
	ObjectDiff      = steps.ObjectDiff
	FieldChange     = steps.FieldChange
	UninstallReport = steps.UninstallReport
	UninstallStep   = steps.UninstallStep
	UninstallAction = steps.UninstallAction
	PreflightReport = steps.PreflightReport
	RotateResult    = steps.RotateResult
	ManifestFile    = steps.ManifestFile
	// RenderOptions say how render writes the Secrets that carry the
	// database password (--secrets, --secret-store).
	RenderOptions = steps.RenderOptions
	// InstalledInventory is the inventory the cluster was installed from.
	InstalledInventory = steps.InstalledInventory

	// DataPathOptions configure the requests to the MaaS endpoint
	// (verify, doctor).
	DataPathOptions = verify.DataPathOptions
	VerifyReport    = verify.Report
	DoctorReport    = doctor.Report
	GatherResult    = gather.Result

	TiersOptions    = migrate.TiersOptions
	TiersResult     = migrate.TiersResult
	RollbackOptions = migrate.RollbackOptions
	RollbackResult  = migrate.RollbackResult
	PlatformOptions = migrate.PlatformOptions
	PlatformReport  = migrate.PlatformReport
)

// Diff actions (DiffReport).
const (
	DiffCreate  = steps.DiffCreate
	DiffUpdate  = steps.DiffUpdate
	DiffUnknown = steps.DiffUnknown
	DiffDelete  = steps.DiffDelete
)

// Names and defaults the commands show.
const (
	// StateNamespace holds maasctl's checkpoints and installed inventory.
	StateNamespace = steps.StateNamespace
	// InstalledInventoryConfigMap is the ConfigMap of the installed
	// inventory in StateNamespace.
	InstalledInventoryConfigMap = steps.InstalledInventoryConfigMap
	DefaultSecretStore          = steps.DefaultSecretStore
	DefaultInstallerImage       = steps.DefaultInstallerImage

	DefaultGatewayNamespace  = migrate.DefaultGatewayNamespace
	DefaultGatewayName       = migrate.DefaultGatewayName
	DefaultMaaSNamespace     = migrate.DefaultMaaSNamespace
	DefaultAITenantNamespace = migrate.DefaultAITenantNamespace
	DefaultAITenantName      = migrate.DefaultAITenantName
)

// Errors the commands map to exit codes.
var (
	// ErrInvalidInventory wraps inventory validation errors (exit 2).
	ErrInvalidInventory = steps.ErrInvalidInventory
	// ErrInventoryChanged: a plain run on a cluster installed from
	// another inventory (exit 2).
	ErrInventoryChanged = steps.ErrInventoryChanged
)

// IsLockHeld reports whether another run holds the run Lease.
func IsLockHeld(err error) bool { return steps.IsLockHeld(err) }

// IsTimeout reports whether a wait timed out (exit code 4): err is or wraps
// a waiters.TimeoutError or a steps.StepTimeoutError (the step's timeout ran
// out during a request), or it is a run's steps.RunError whose every failed
// step failed so. A run where any step failed otherwise is not a
// timeout (exit code 1): the other failure is the one to fix first.
func IsTimeout(err error) bool {
	var run *steps.RunError
	if errors.As(err, &run) {
		if len(run.Failed) == 0 {
			return false
		}
		for _, f := range run.Failed {
			if !waiters.IsTimeout(f) && !steps.IsStepTimeout(f) {
				return false
			}
		}
		return true
	}
	return waiters.IsTimeout(err) || steps.IsStepTimeout(err)
}

// PreflightCheckNames are the names --ignore-preflight accepts.
func PreflightCheckNames() []string { return steps.PreflightCheckNames() }

// ValidateIgnore checks --ignore-preflight names.
func ValidateIgnore(names []string) error { return steps.ValidateIgnore(names) }

// WritePlatformReport prints what migrate platform-config moved.
var WritePlatformReport = migrate.WritePlatformReport

// UsageError is a bad flag or argument value found by the session (exit
// 2: nothing was changed). Its message is its cause's.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }
