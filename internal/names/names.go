// Package names is the one place for the names maasctl writes under in
// every cluster: its state namespace and ConfigMaps, the managed-by label
// and the server-side apply field manager. It imports nothing, so the pure
// packages (assets) and the plumbing (internal/kube) can both use it.
package names

const (
	// StateNamespace holds maasctl's own state: checkpoints, the run
	// record and the run Lease.
	StateNamespace = "maasctl"
	// CheckpointsConfigMap holds the checkpoints in StateNamespace.
	CheckpointsConfigMap = "maasctl-checkpoints"
	// LeaseName is the coordination.k8s.io Lease that serialises runs.
	LeaseName = "maasctl-run"
	// ManagedByLabel (value ManagedByValue) marks every object maasctl
	// creates.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "maasctl"
	// FieldManager is the server-side apply field manager of every write
	// maasctl makes (https://kubernetes.io/docs/reference/using-api/server-side-apply/).
	FieldManager = "maasctl"
)
