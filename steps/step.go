// Package steps holds the install steps as data (the registry, a DAG), the
// Runner that executes them with checkpoints, a Lease lock and typed events,
// and one file per phase. Every verb of a step (apply, check, its wait
// rules, the objects it wants, its removal and its permissions) is a field
// of its Step, set in its phase's file; help, plan, status, diff, render,
// the run record, preflight's RBAC check and the uninstall order all read
// the same registry, and none of them switches on a step ID.
package steps

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// Secrets supplies the secret inputs of steps. Implementations must never
// log or return the secret inside an error.
type Secrets interface {
	// DBPassword returns the database owner's password, creating it in Vault
	// the first time (generated once, check-and-set).
	DBPassword(ctx context.Context) (string, error)
}

// Env is the narrow set of dependencies every step reads.
type Env struct {
	Clients *kube.Clients
	Inv     *inventory.Inventory
	Facts   assets.Facts
	// ReleaseDetected says Facts.Release was read from the cluster by
	// NewEnv (detectRelease), with its source; false when the Env was built
	// another way.
	ReleaseDetected bool
	Objects         assets.Rendered
	Secrets         Secrets
	Log             *zap.Logger
	// Progress reports what a step is doing or waiting on; never secrets.
	Progress func(stepID, msg string)
	// Policy holds the run's switches (preflight ignores, InstallPlan
	// approval); the zero value is the safe default.
	Policy Policy
	// Verify configures the data path of the verify step (verify.go).
	Verify VerifyOptions
	// Registry is the registry the Env was rendered for (nil: the
	// inventory's).
	Registry *Registry
	// Removes reports whether this run removes the object named by gvk,
	// ns and name because the inventory no longer lists it
	// (Removal.Prune): preflight judges the cluster without it. Nil: none.
	Removes func(gvk schema.GroupVersionKind, ns, name string) bool
}

// removes is Removes, false when it is nil.
func (e *Env) removes(gvk schema.GroupVersionKind, ns, name string) bool {
	return e.Removes != nil && e.Removes(gvk, ns, name)
}

// Step is one unit of the install with every verb of its own. Only ID and
// Title are required: a step without Apply applies its rendered objects
// and waits for each to be ready; without Check it checks them live; the
// other verbs have the defaults their doc comments name. Each verb is
// handed the step itself, so a phase file never repeats a step's ID.
type Step struct {
	// ID is phase/name, e.g. platform/gateway.
	ID string
	// Title is a short human description.
	Title string
	// After lists the IDs this step depends on.
	After []string
	// Serves names the API groups whose kinds are served once the step
	// ran (an operator's CRDs), for diff's "cannot be known before <step>
	// runs".
	Serves []string
	// Timeout bounds Apply; zero means the inventory's waitTimeoutSeconds.
	Timeout time.Duration
	// Apply makes the end state true and waits for it. Default: apply the
	// rendered objects and wait for each with the step's readiness (Ready).
	Apply func(ctx context.Context, e *Env, s *Step) error
	// Check reports whether the live end state is already true (read
	// only); the message says what is not as wanted when ok is false.
	// Default: every rendered object exists, holds the fields maasctl sets
	// and is ready by the step's readiness.
	Check func(ctx context.Context, e *Env, s *Step) (ok bool, msg string, err error)
	// Manifests renders the step's objects, for a step whose manifests are
	// not among the embedded ones (assets.Render). Default: assets.Render's
	// entry for the step's ID.
	Manifests func(inv *inventory.Inventory, f assets.Facts) ([]*unstructured.Unstructured, error)
	// HashExtra adds inputs that are not among the rendered objects (never a
	// secret value) to the step's input hash.
	HashExtra func(e *Env) string
	// Ready is the step's wait rule for obj, when it differs from the one
	// readiness table (waiters.Readiness); nil, or a nil result, means the
	// table. Apply's waits and Check read the same rule.
	Ready func(obj *unstructured.Unstructured) waiters.Condition
	// Objects lists every object the step writes, for the run record
	// (created versus adopted) and uninstall. Default: the rendered ones.
	Objects func(e *Env, s *Step) []*unstructured.Unstructured
	// Desired lists the objects the way Apply would write them now, for
	// diff. Default: the rendered objects, Namespaces created only when
	// missing.
	Desired func(ctx context.Context, e *Env, s *Step) ([]DesiredObject, error)
	// Render returns the manifests and explaining notes of the step for
	// 'maasctl render' (GitOps). Default: every rendered object.
	Render func(inv *inventory.Inventory, f assets.Facts, objs []*unstructured.Unstructured) (docs []*unstructured.Unstructured, notes []string, err error)
	// ExternalSecrets returns the External Secrets Operator objects that
	// provide, from Vault, the Secrets the step writes with the database
	// password, for 'maasctl render --secrets external-secrets' (store is
	// the ClusterSecretStore). Default: none.
	ExternalSecrets func(inv *inventory.Inventory, f assets.Facts, store string) []*unstructured.Unstructured
	// RenderApart makes render write each document of Render in a file of
	// its own, numbered in order (NN-<step>-<kind>.yaml), for a step whose
	// documents take effect only one after another: a GitOps engine that
	// retries a file until it applies would otherwise apply the later
	// document first and deadlock (platform/authorino-tls: Authorino's TLS
	// before its Service is annotated). Default: one file for the step.
	RenderApart bool
	// Access lists the permissions the step needs, for preflight's RBAC
	// check. Default: ObjectAccess of the rendered objects.
	Access func(e *Env, s *Step, resource func(schema.GroupVersionKind) string) []Access
	// Removal says how uninstall removes what the step created.
	Removal Removal
	// EveryRun makes the Runner run the step's Apply on every run, whatever
	// its checkpoint and Check say: for a step whose work is what it
	// reports (preflight: its checks and their warnings are the point of
	// a re-run after an inventory change). When the checkpoint already
	// says done for the same input hash and Apply succeeds again, the step
	// is reported unchanged (EventStarted, its progress, EventUnchanged)
	// and its checkpoint is not rewritten, so a converged re-run writes
	// nothing; otherwise it is done or failed like any step.
	EveryRun bool
	// ReadOnly says the step never writes to the cluster (preflight): the
	// Runner then starts it without waiting for the record's snapshot of
	// the objects that exist before the run (Record.Snapshot), which only
	// steps that write need.
	ReadOnly bool
}

// Removal is how uninstall removes a step's objects. The zero value
// deletes every object the step created, in reverse apply order, with the
// removal group of the step's phase.
type Removal struct {
	// Group is the group of the registry's removal order (RemovalGroups)
	// the step is removed with; empty means its phase.
	Group string
	// Data, when set, says what the step's objects hold (the database and
	// its credentials): they are kept unless --delete-data.
	Data string
	// DataNamespace, when set, is a namespace that stays while the data is
	// kept, even when maasctl created it.
	DataNamespace func(inv *inventory.Inventory) string
	// Keep returns why a live object the step created is kept ("" to
	// delete it), e.g. a ConfigMap that now holds other settings.
	Keep func(e RecordEntry, live *unstructured.Unstructured) string
	// VaultSecret returns the Vault path deleted with --delete-data
	// (after the step's objects).
	VaultSecret func(inv *inventory.Inventory) string
	// CRDs are the CRDs removing the step frees, for --purge-crds.
	CRDs func() []string
	// Prune makes install remove, after the step's Apply, the objects an
	// earlier run of the step created that its objects no longer include
	// (Record.Dropped: the inventory no longer lists them), and makes the
	// step's Check fail while any is left. For steps whose objects are
	// the inventory's own lists (models, MaaSAuthPolicies,
	// MaaSSubscriptions): taking an access grant out of the inventory must
	// take it out of the cluster. Never for a step whose objects hold data
	// (Data) or are shared with the platform.
	Prune bool
}

// DesiredObject is one object a step would write, for diff: applied with
// server-side apply, created only when missing (Ensure), or not
// computable (Note says why).
type DesiredObject struct {
	Obj    *unstructured.Unstructured
	Ensure bool
	Note   string
}

// Phase returns the phase part of the step ID.
func (s *Step) Phase() string { p, _, _ := strings.Cut(s.ID, "/"); return p }

// removalGroup is the group the step is removed with.
func (s *Step) removalGroup() string {
	if s.Removal.Group != "" {
		return s.Removal.Group
	}
	return s.Phase()
}

// readiness is the step's wait rule for obj: its Ready, else the table.
func (s *Step) readiness(obj *unstructured.Unstructured) waiters.Condition {
	if s.Ready != nil {
		if c := s.Ready(obj); c != nil {
			return c
		}
	}
	return waiters.Readiness(obj)
}

func (s *Step) apply(ctx context.Context, e *Env) error {
	if s.Apply == nil {
		return applyAndWait(ctx, e, s)
	}
	return s.Apply(ctx, e, s)
}

func (s *Step) check(ctx context.Context, e *Env) (bool, string, error) {
	if s.Check == nil {
		return checkObjects(ctx, e, s)
	}
	return s.Check(ctx, e, s)
}

// objects is every object the step writes (Objects, else the rendered ones).
func (s *Step) objects(e *Env) []*unstructured.Unstructured {
	if s.Objects != nil {
		return s.Objects(e, s)
	}
	return e.objects(s.ID)
}

func (e *Env) objects(id string) []*unstructured.Unstructured { return e.Objects[id] }

func (e *Env) progress(id, format string, args ...any) {
	if e.Progress != nil {
		e.Progress(id, fmt.Sprintf(format, args...))
	}
}
