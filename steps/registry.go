package steps

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
)

// phases are the install phases in the documented order
// (reference/DEPLOYMENT.md, "Deploy"), each with the function that returns
// its steps for an inventory. A new phase is one line here and one in
// RemovalGroups. (A function, not a variable: preflight's RBAC check
// reads the registry, so a variable would be an initialization cycle.)
func phases() []func(*inventory.Inventory) []*Step {
	return []func(*inventory.Inventory) []*Step{
		preflightSteps,
		databaseSteps,
		operatorSteps,
		platformSteps,
		dbSecretSteps,
		rhoaiSteps,
		modelSteps,
		accessSteps,
		verifySteps,
	}
}

// RemovalGroups is the removal order beside the install order: the
// "Remove" section of reference/DEPLOYMENT.md (subscriptions and auth
// policies, model objects, DSC and DSCI, Gateway, Route and Kuadrant, the
// database, then the operators). A step is removed with the group its
// Removal.Group names, else its phase's. It only breaks ties among steps
// free at the same time; dependencies always win (RemovalOrder).
var RemovalGroups = []string{"verify", "access", "models", "rhoai", "platform", "dbsecret", "database", "operators", "preflight"}

// Registry is the ordered list of steps for one inventory, with the
// removal groups that order uninstall.
type Registry struct {
	Steps []*Step
	// Removal is the removal order of groups (RemovalGroups by default).
	Removal []string
	byID    map[string]*Step
}

// Get returns the step with id, or nil.
func (r *Registry) Get(id string) *Step { return r.byID[id] }

// NewRegistry returns the install steps for inv, in the documented order,
// and checks the DAG.
func NewRegistry(inv *inventory.Inventory) (*Registry, error) {
	var list []*Step
	for _, p := range phases() {
		list = append(list, p(inv)...)
	}
	return RegistryOf(list, RemovalGroups)
}

// RegistryOf builds a registry from steps in registry order and a removal
// order of groups. Every root step but preflight comes after it; the IDs
// must be unique, the dependencies known and acyclic, and every step's
// removal group must be listed in removal.
func RegistryOf(list []*Step, removal []string) (*Registry, error) {
	list = afterPreflight(list)
	r := &Registry{Steps: list, Removal: removal, byID: map[string]*Step{}}
	for _, s := range list {
		if r.byID[s.ID] != nil {
			return nil, fmt.Errorf("duplicate step %s", s.ID)
		}
		if !slices.Contains(removal, s.removalGroup()) {
			return nil, fmt.Errorf("step %s: removal group %q is not in the removal order %v: add it there (or set Removal.Group)", s.ID, s.removalGroup(), removal)
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

// afterPreflight makes every root step depend on the preflight step, when
// the list has one.
func afterPreflight(list []*Step) []*Step {
	if !slices.ContainsFunc(list, func(s *Step) bool { return s.ID == PreflightStepID }) {
		return list
	}
	for _, s := range list {
		if s.ID != PreflightStepID && len(s.After) == 0 {
			s.After = []string{PreflightStepID}
		}
	}
	return list
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

// ReverseOrder is the dependency order reversed: dependents before what
// they depend on. The uninstall order is RemovalOrder, which also follows
// the removal groups.
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

// Dependents returns, for every step, the steps that depend on it: the
// dependencies of the backward (uninstall) schedule.
func (r *Registry) Dependents() map[string][]string {
	out := map[string][]string{}
	for _, s := range r.Steps {
		for _, d := range s.After {
			out[d] = append(out[d], s.ID)
		}
	}
	return out
}

// removalRank orders removal groups: twice the position of a step's group
// in r.Removal. A step of the record that the registry does not have (an
// older inventory) is ranked by its phase; when that is unknown too, right
// after the first group: early, while every operator that might finalise
// its objects still runs (case B20).
func (r *Registry) removalRank(id string) int {
	group, _, _ := strings.Cut(id, "/")
	if s := r.Get(id); s != nil {
		group = s.removalGroup()
	}
	if i := slices.Index(r.Removal, group); i >= 0 {
		return 2 * i
	}
	return 1
}

// RemovalOrder is the uninstall order, the registry run backward: a step
// is removed only after every step that depends on it, so custom
// resources go while the operators that finalise them still run (case
// B20). Among steps free at the same time the removal groups decide, then
// reverse registry order. extra are step IDs found in the record but not
// in the registry (an older inventory); they have no dependencies.
func (r *Registry) RemovalOrder(extra []string) []string {
	index := map[string]int{}
	var ids []string
	for i, s := range r.Steps {
		index[s.ID] = i
		ids = append(ids, s.ID)
	}
	for _, id := range extra {
		if _, ok := index[id]; !ok {
			index[id] = len(index)
			ids = append(ids, id)
		}
	}
	dependents := map[string]int{}
	for d, ds := range r.Dependents() {
		dependents[d] = len(ds)
	}
	before := func(a, b string) bool {
		ra, rb := r.removalRank(a), r.removalRank(b)
		return ra < rb || ra == rb && index[a] > index[b]
	}
	done := map[string]bool{}
	var out []string
	for len(out) < len(ids) {
		var best string
		for _, id := range ids {
			if !done[id] && dependents[id] == 0 && (best == "" || before(id, best)) {
				best = id
			}
		}
		done[best] = true
		out = append(out, best)
		if s := r.Get(best); s != nil {
			for _, d := range s.After {
				dependents[d]--
			}
		}
	}
	return out
}

// registryFor returns reg, or the registry of inv when reg is nil.
func registryFor(reg *Registry, inv *inventory.Inventory) (*Registry, error) {
	if reg != nil {
		return reg, nil
	}
	return NewRegistry(inv)
}

// render renders the objects of every step: the embedded manifests
// (assets.Render), and for a step with Manifests, what that returns.
func (r *Registry) render(inv *inventory.Inventory, f assets.Facts) (assets.Rendered, error) {
	objs, err := assets.Render(inv, f)
	if err != nil {
		return nil, err
	}
	for _, s := range r.Steps {
		if s.Manifests != nil {
			if objs[s.ID], err = s.Manifests(inv, f); err != nil {
				return nil, fmt.Errorf("render step %s: %w", s.ID, err)
			}
		}
	}
	return objs, nil
}

// UninstallOrder is reg.RemovalOrder(extra).
func UninstallOrder(reg *Registry, extra []string) []string { return reg.RemovalOrder(extra) }
