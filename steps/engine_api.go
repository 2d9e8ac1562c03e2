package steps

import "github.com/maasctl/maasctl/steps/engine"

// The engine's checkpoints, Lease and errors (package engine), under the
// names package steps has always exported.
type (
	// Checkpoint is engine.Checkpoint.
	Checkpoint = engine.Checkpoint
	// Checkpoints is engine.Checkpoints.
	Checkpoints = engine.Checkpoints
	// Lock is engine.Lock.
	Lock = engine.Lock
	// LockHeldError is engine.LockHeldError.
	LockHeldError = engine.LockHeldError
	// StepError is engine.StepError.
	StepError = engine.StepError
	// RunError is engine.RunError.
	RunError = engine.RunError
)

// State names (internal/names, through package engine).
const (
	StateNamespace       = engine.StateNamespace
	CheckpointsConfigMap = engine.CheckpointsConfigMap
	LeaseName            = engine.LeaseName
)

// LoadCheckpoints is engine.LoadCheckpoints.
var LoadCheckpoints = engine.LoadCheckpoints

// AcquireLock is engine.AcquireLock.
var AcquireLock = engine.AcquireLock

// Identity is engine.Identity.
func Identity() string { return engine.Identity() }

// IsLockHeld is engine.IsLockHeld.
func IsLockHeld(err error) bool { return engine.IsLockHeld(err) }
