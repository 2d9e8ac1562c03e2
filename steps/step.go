// Package steps holds the install steps as data (the registry, a DAG), the
// Runner that executes them with checkpoints, a Lease lock and typed events,
// and one file per phase. Help, plan, status and the uninstall order all read
// the same registry.
package steps

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
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
	// Layout is the RHOAI layout NewEnv detected (DetectLayout), with its
	// source; nil when the Env was built another way.
	Layout  *Layout
	Objects assets.Rendered
	Secrets Secrets
	Log     *zap.Logger
	// Progress reports what a step is doing or waiting on; never secrets.
	Progress func(stepID, msg string)
	// Policy holds the run's switches (preflight ignores, InstallPlan
	// approval); the zero value is the safe default.
	Policy Policy
	// Verify configures the data path of the verify step (verify.go).
	Verify VerifyOptions
}

// Step is one unit of the install: it applies its objects with server-side
// apply and waits until they are ready.
type Step struct {
	// ID is phase/name, e.g. platform/gateway.
	ID string
	// Title is a short human description.
	Title string
	// After lists the IDs this step depends on.
	After []string
	// Timeout bounds Apply; zero means the inventory's waitTimeoutSeconds.
	Timeout time.Duration
	// Apply makes the end state true and waits for it.
	Apply func(ctx context.Context, e *Env) error
	// Check reports whether the live end state is already true (read only).
	// The message says what is not as wanted when ok is false.
	Check func(ctx context.Context, e *Env) (ok bool, msg string, err error)
	// HashExtra adds inputs that are not among the rendered objects (never a
	// secret value) to the step's input hash.
	HashExtra func(e *Env) string
}

// Phase returns the phase part of the step ID.
func (s *Step) Phase() string { p, _, _ := strings.Cut(s.ID, "/"); return p }

func (e *Env) objects(id string) []*unstructured.Unstructured { return e.Objects[id] }

func (e *Env) progress(id, format string, args ...any) {
	if e.Progress != nil {
		e.Progress(id, fmt.Sprintf(format, args...))
	}
}

// Registry is the ordered list of steps for one inventory.
type Registry struct {
	Steps []*Step
	byID  map[string]*Step
}

// Get returns the step with id, or nil.
func (r *Registry) Get(id string) *Step { return r.byID[id] }

// NewRegistry returns the install steps for inv, in the documented order
// (reference/DEPLOYMENT.md, "Deploy"), and checks the DAG.
func NewRegistry(inv *inventory.Inventory) (*Registry, error) {
	var list []*Step
	list = append(list, preflightSteps(inv)...)
	list = append(list, databaseSteps(inv)...)
	list = append(list, operatorSteps(inv)...)
	list = append(list, platformSteps(inv)...)
	list = append(list, dbSecretSteps(inv)...)
	list = append(list, rhoaiSteps(inv)...)
	list = append(list, modelSteps(inv)...)
	list = append(list, accessSteps(inv)...)
	list = append(list, verifySteps(inv)...)
	list = afterPreflight(list)
	r := &Registry{Steps: list, byID: map[string]*Step{}}
	for _, s := range list {
		if r.byID[s.ID] != nil {
			return nil, fmt.Errorf("duplicate step %s", s.ID)
		}
		r.byID[s.ID] = s
	}
	for _, s := range list {
		for _, d := range s.After {
			if r.byID[d] == nil {
				return nil, fmt.Errorf("step %s depends on unknown step %s", s.ID, d)
			}
		}
	}
	if _, err := r.TopoOrder(); err != nil {
		return nil, err
	}
	return r, nil
}

// TopoOrder returns the steps in dependency order, stable with respect to
// the registry order; a cycle is an error naming the steps in it.
func (r *Registry) TopoOrder() ([]*Step, error) {
	done := map[string]bool{}
	var out []*Step
	for len(out) < len(r.Steps) {
		progressed := false
		for _, s := range r.Steps {
			if done[s.ID] {
				continue
			}
			ready := true
			for _, d := range s.After {
				if !done[d] {
					ready = false
					break
				}
			}
			if ready {
				done[s.ID] = true
				out = append(out, s)
				progressed = true
			}
		}
		if !progressed {
			var left []string
			for _, s := range r.Steps {
				if !done[s.ID] {
					left = append(left, s.ID)
				}
			}
			sort.Strings(left)
			return nil, fmt.Errorf("dependency cycle among steps %s", strings.Join(left, ", "))
		}
	}
	return out, nil
}

// ReverseOrder is the uninstall order: dependents before what they depend on.
func (r *Registry) ReverseOrder() ([]*Step, error) {
	order, err := r.TopoOrder()
	if err != nil {
		return nil, err
	}
	out := make([]*Step, len(order))
	for i, s := range order {
		out[len(order)-1-i] = s
	}
	return out, nil
}
