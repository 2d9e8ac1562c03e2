package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps/engine"
)

// InstallOptions are the inputs of Install.
type InstallOptions struct {
	Config      *rest.Config
	Inventory   *inventory.Inventory
	Secrets     Secrets
	Emit        func(Event)
	Log         *zap.Logger
	ToolVersion string
	// LeaseDuration is how long a killed run's lock blocks others. Default 60 s.
	LeaseDuration time.Duration
	// Identity names this run in the Lease. Default Identity().
	Identity string
	// Policy holds the run's switches (--ignore-preflight,
	// --approve-installplans).
	Policy Policy
	// Selection limits the run (--only, --skip, --from).
	Selection Selection
	// Verify turns on the data-path checks of the last step (verify.go).
	Verify VerifyOptions
	// Registry is the steps to run; nil means NewRegistry(Inventory).
	Registry *Registry
	// Source says where Inventory came from. When it is not Explicit (no
	// -f, no --defaults) and the cluster was installed from an inventory
	// that deploys other objects (and not only by the run's own --set
	// values), Install returns an *InventoryChangedError before any
	// write. The first step that
	// applies stores Inventory (redacted) and Source as the installed
	// inventory (InstalledInventoryConfigMap).
	Source InventorySource
}

// ErrInvalidInventory wraps inventory validation errors (exit code 2).
var ErrInvalidInventory = errors.New("invalid inventory")

// InvalidInventory wraps err, an inventory's load or validation error, so
// that errors.Is(err, ErrInvalidInventory) holds. Its message is err's,
// prefixed with "invalid inventory: " only when err does not say so
// already (inventory.ValidationError starts "invalid inventory (N
// problems):").
func InvalidInventory(err error) error { return &invalidInventoryError{err} }

type invalidInventoryError struct{ err error }

func (e *invalidInventoryError) Error() string {
	if msg := e.err.Error(); strings.Contains(msg, ErrInvalidInventory.Error()) {
		return msg
	}
	return ErrInvalidInventory.Error() + ": " + e.err.Error()
}

func (e *invalidInventoryError) Unwrap() []error { return []error{ErrInvalidInventory, e.err} }

// Install validates the inventory, checks it against the installed one
// (InstallOptions.Source), reads the facts it needs from the cluster,
// takes the run Lease, and runs every step. Validation happens before any
// request to the cluster.
func Install(ctx context.Context, o InstallOptions) (*Summary, error) {
	if err := o.Inventory.Validate(); err != nil {
		return nil, InvalidInventory(err)
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 60 * time.Second
	}
	if o.Identity == "" {
		o.Identity = Identity()
	}
	clients, err := kube.NewWithOptions(o.Config, kube.Options{Log: o.Log})
	if err != nil {
		return nil, err
	}
	reg, err := registryFor(o.Registry, o.Inventory)
	if err != nil {
		return nil, err
	}
	sel, err := o.Selection.Resolve(reg)
	if err != nil {
		return nil, err
	}
	// Until the run's first write, its reads share one view of the
	// cluster (kube.ReadView): a converged re-run then reads each object
	// once, and the kinds of viewWhole by one LIST each. Reads made before
	// the Lease is taken (the installed inventory, NewEnvFor's release
	// detection) answer the checks after it too. A run that released the
	// Lease in those milliseconds can only have left them older than the
	// checkpoints read after the Lease: a step it did not finish has no
	// done checkpoint and is applied; one it finished holds what this
	// run's inventory wants (an uninstall leaves no done checkpoint) or
	// another input hash, and is applied again.
	view := clients.BeginView(kube.ViewOptions{Whole: viewWhole})
	defer view.End()
	vctx := kube.ViewReads(ctx)
	// A plain run on a cluster installed from another inventory stops
	// here, before the Lease (the first write) is taken.
	if err := checkInstalled(vctx, clients, "install", o.Source, o.Inventory, changedFrom(vctx, clients, reg, o)); err != nil {
		return nil, err
	}
	// Rendering only reads the cluster (apps domain, RHOAI layout), so it
	// runs while the lock is taken; the run's state is read once the lock
	// is held (loadRunState).
	var env *Env
	envDone := make(chan error, 1)
	go func() {
		var err error
		env, err = NewEnvFor(vctx, clients, reg, o.Inventory, o.Secrets, o.Log)
		envDone <- err
	}()
	lock, err := AcquireLock(ctx, clients.Kube, o.Identity, o.LeaseDuration)
	if err != nil {
		<-envDone
		return nil, err
	}
	if lock.TookOver != "" && o.Emit != nil {
		o.Emit(Event{Type: EventProgress, Time: time.Now(), Message: lock.TookOver})
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = lock.Release(rctx)
	}()
	cps, rec, lerr := loadRunState(vctx, clients)
	if err := <-envDone; err != nil {
		return nil, err
	}
	if lerr != nil {
		return nil, lerr
	}
	rec.SetInstalled(o.Source, o.Inventory, o.ToolVersion)
	env.Policy = o.Policy
	env.Verify = o.Verify
	env.Removes = removesFunc(env, reg, rec)
	r := &Runner{Registry: reg, Env: env, Checkpoints: cps, Emit: o.Emit, ToolVersion: o.ToolVersion, Steps: sel, Record: rec}
	// Lease renewals during the run are counted apart; the writes that
	// took the Lease came before the run's count started.
	lockWrites0 := lock.Writes()
	sum, err := r.Run(ctx)
	if err == nil && ctx.Err() == nil {
		// A run in which no step applied (converged) stores a changed
		// source of the same inventory now (SaveInstalled: no write
		// otherwise, and none when a step already wrote it).
		err = rec.SaveInstalled(ctx)
	}
	if sum != nil {
		sum.LockWrites = lock.Writes()
		sum.Writes -= lock.Writes() - lockWrites0
	}
	return sum, err
}

// viewWhole are the resources an install's read view (kube.ReadView)
// reads by one LIST on their first read. A run reads several of each:
// every operator's Namespace, Subscription, CSV and OperatorGroup (across
// namespaces; a cluster holds few of them), the operators' Deployments and
// Pods in their namespace (openshift-operators holds all three of RHCL's),
// the Authorino CRs (the Kuadrant step reads the one it wants, verify
// lists them), and the TokenRateLimitPolicies the MaaS controller
// generates, one per model, which verify reads each (1,000 GETs at 1,000
// models; one LIST per namespace now). CSVs are listed without the
// copies OLM makes in every namespace of an AllNamespaces operator
// (olm.copiedFrom), like preflight's own LIST. Secrets are never listed: a LIST would carry every
// other Secret of the namespace.
var viewWhole = map[schema.GroupResource]kube.WholeList{
	{Group: "", Resource: "namespaces"}:                                 {},
	{Group: "operators.coreos.com", Resource: "subscriptions"}:          {},
	{Group: "operators.coreos.com", Resource: "operatorgroups"}:         {},
	{Group: "operators.coreos.com", Resource: "clusterserviceversions"}: {Selector: "!olm.copiedFrom"},
	{Group: "apps", Resource: "deployments"}:                            {PerNamespace: true},
	{Group: "", Resource: "pods"}:                                       {PerNamespace: true},
	{Group: "operator.authorino.kuadrant.io", Resource: "authorinos"}:   {PerNamespace: true},
	{Group: "kuadrant.io", Resource: "tokenratelimitpolicies"}:          {PerNamespace: true},
}

// NewEnv is NewEnvFor the registry of inv.
func NewEnv(ctx context.Context, c *kube.Clients, inv *inventory.Inventory, s Secrets, log *zap.Logger) (*Env, error) {
	return NewEnvFor(ctx, c, nil, inv, s, log)
}

// NewEnvFor resolves the facts rendering needs (the Gateway host and the
// RHOAI release, see detectRelease) and renders every step of reg (nil:
// NewRegistry(inv)).
func NewEnvFor(ctx context.Context, c *kube.Clients, reg *Registry, inv *inventory.Inventory, s Secrets, log *zap.Logger) (*Env, error) {
	reg, err := registryFor(reg, inv)
	if err != nil {
		return nil, err
	}
	host, err := GatewayHost(ctx, c, inv)
	if err != nil {
		return nil, err
	}
	rel, err := detectRelease(ctx, c, inv)
	if err != nil {
		return nil, err
	}
	facts := assets.Facts{Host: host, Release: rel}
	objs, err := reg.render(inv, facts)
	if err != nil {
		return nil, err
	}
	return &Env{Clients: c, Inv: inv, Facts: facts, ReleaseDetected: true, Objects: objs, Secrets: s, Log: log, Registry: reg}, nil
}

var ingressConfigGVK = schema.GroupVersionKind{Group: "config.openshift.io", Version: "v1", Kind: "Ingress"}

// setHostname is the fix when the apps domain cannot be read.
const setHostname = "set gateway.hostname (e.g. --set gateway.hostname=maas.apps.example.com)"

// GatewayHost returns gateway.hostname, or maas.<apps domain> read from
// config.openshift.io/v1 Ingress "cluster" .spec.domain.
func GatewayHost(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (string, error) {
	if inv.Gateway.Hostname != "" {
		return inv.Gateway.Hostname, nil
	}
	ri, _, err := c.Resource(ingressConfigGVK, "")
	if err != nil {
		return "", &Problem{Message: "read the apps domain: " + err.Error(), Fix: setHostname, Err: err}
	}
	ing, err := ri.Get(ctx, "cluster", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", &Problem{Message: "config.openshift.io Ingress cluster not found, so the apps domain is unknown", Fix: setHostname}
	}
	if err != nil {
		return "", fmt.Errorf("read config.openshift.io Ingress cluster: %w", err)
	}
	domain, _, _ := unstructured.NestedString(ing.Object, "spec", "domain")
	if domain == "" {
		return "", &Problem{Message: "config.openshift.io Ingress cluster has no spec.domain", Fix: "set gateway.hostname"}
	}
	return "maas." + domain, nil
}

// changedFrom is checkInstalled's diff for install: the steps whose
// objects differ between the installed inventory and o's (none when
// either cannot be read).
func changedFrom(ctx context.Context, clients *kube.Clients, reg *Registry, o InstallOptions) func(old *inventory.Inventory) []string {
	return func(old *inventory.Inventory) []string {
		oreg, err := registryFor(o.Registry, old)
		if err != nil {
			return nil
		}
		a, erra := NewEnvFor(ctx, clients, oreg, old, nil, o.Log)
		b, errb := NewEnvFor(ctx, clients, reg, o.Inventory, nil, o.Log)
		if erra != nil || errb != nil {
			return nil
		}
		return changedSteps(a, b)
	}
}

// loadRunState reads the run's checkpoints and record with one LIST of
// the state namespace's maasctl ConfigMaps (LoadRecord: the record's
// shards, which carry most steps' checkpoints, and the checkpoints
// ConfigMap, which holds the others), once the run holds the Lease. The
// checkpoints are given the record as their Carrier: a step's checkpoint
// is written with its record shard, one write (issue 16). A record LIST
// without the checkpoints ConfigMap but with shards (an older maasctl's
// ConfigMap without maasctl's label) reads it by name.
func loadRunState(ctx context.Context, clients *kube.Clients) (*Checkpoints, *Record, error) {
	rec, err := LoadRecord(ctx, clients)
	if err != nil {
		return nil, nil, err
	}
	var cps *Checkpoints
	if rec.cpData == nil && rec.Shards() > 0 {
		if cps, err = LoadCheckpoints(ctx, clients); err != nil {
			return nil, nil, err
		}
	} else {
		cps = engine.NewCheckpoints(clients, rec.cpData)
	}
	cps.Merge(rec.Checkpoints())
	cps.SetCarrier(rec)
	return cps, rec, nil
}
