package steps

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/kube"
)

// Diff actions.
const (
	// DiffCreate: the object does not exist and would be created.
	DiffCreate = "create"
	// DiffUpdate: the object exists and applying would change the fields
	// listed.
	DiffUpdate = "update"
	// DiffDelete: an earlier run created the object and the inventory no
	// longer lists it: install removes it (Removal.Prune).
	DiffDelete = "delete"
	// DiffUnknown: the result cannot be known yet (its kind is not served
	// before an earlier step installs its operator, or the object is made by
	// an operator first). It counts as a change: nothing proves otherwise.
	DiffUnknown = "unknown"
)

// FieldChange is one field that applying would change. Secret data values
// are never included: Masked is set and Old/New are empty.
type FieldChange struct {
	// Path is the field, e.g. spec.modelRefs[0].tokenRateLimits[0].limit or
	// metadata.labels["app.kubernetes.io/managed-by"].
	Path string `json:"path"`
	// Op is "+" (added), "-" (removed) or "~" (changed).
	Op     string `json:"op"`
	Old    any    `json:"old,omitempty"`
	New    any    `json:"new,omitempty"`
	Masked bool   `json:"masked,omitempty"`
}

// ObjectDiff is what an install would do to one object.
type ObjectDiff struct {
	Step    string        `json:"step"`
	Object  string        `json:"object"`
	Action  string        `json:"action"`
	Note    string        `json:"note,omitempty"`
	Changes []FieldChange `json:"changes,omitempty"`
}

// DiffReport lists the objects an install would change; objects it would
// leave as they are do not appear.
type DiffReport struct {
	// Against names the inventory the cluster is compared against (as in
	// PlanReport), e.g. "the default inventory with --set ..." when the
	// cluster was installed from another one.
	Against string       `json:"inventory,omitempty"`
	Objects []ObjectDiff `json:"objects"`
}

// Changed reports whether anything would change (or cannot be known).
func (d *DiffReport) Changed() bool { return len(d.Objects) > 0 }

// Diff compares, object by object, what the install steps would write with
// what the cluster has: each object is applied with server-side apply in
// dry-run mode (dryRun=All, field manager maasctl, force) and the result is
// compared with the live object field by field, managedFields, status and
// other server-maintained metadata stripped, Secret data masked. Objects
// whose kind is not served yet are reported as unknown, naming the step
// that installs it. Objects an earlier run created that the inventory no
// longer lists are reported with action delete (Removal.Prune). It changes
// nothing and takes no lock.
func Diff(ctx context.Context, o PlanOptions) (*DiffReport, error) {
	r, err := newReadOnlyRunner(ctx, o)
	if err != nil {
		return nil, err
	}
	sel, err := o.Selection.Resolve(r.Registry)
	if err != nil {
		return nil, err
	}
	order, err := r.Registry.TopoOrder()
	if err != nil {
		return nil, err
	}
	rep := &DiffReport{Against: o.Against}
	for _, s := range order {
		if sel != nil && !sel[s.ID] {
			continue
		}
		items, err := s.desired(ctx, r.Env)
		if err != nil {
			return nil, fmt.Errorf("diff step %s: %w", s.ID, err)
		}
		for _, it := range items {
			d, err := diffObject(ctx, r, s.ID, it)
			if err != nil {
				return nil, fmt.Errorf("diff step %s: %w", s.ID, err)
			}
			if d != nil {
				rep.Objects = append(rep.Objects, *d)
			}
		}
		dropped, err := r.droppedLive(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("diff step %s: %w", s.ID, err)
		}
		rep.Objects = append(rep.Objects, dropped...)
	}
	return rep, nil
}

// droppedLive are the objects of step s that install would remove
// (Record.Dropped) and that still exist as maasctl created them (same
// UID): one that is gone or that someone re-created is left alone.
func (r *Runner) droppedLive(ctx context.Context, s *Step) ([]ObjectDiff, error) {
	if r.Record == nil || !s.Removal.Prune {
		return nil, nil
	}
	var out []ObjectDiff
	for _, en := range r.Record.Dropped(r.Env, s) {
		live, err := r.Env.Clients.Get(ctx, en.Object())
		if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if string(live.GetUID()) != en.UID {
			continue
		}
		out = append(out, ObjectDiff{Step: s.ID, Object: en.String(), Action: DiffDelete, Note: "no longer in the inventory"})
	}
	return out, nil
}

func notServedNote(reg *Registry, o *unstructured.Unstructured) string {
	gvk := o.GroupVersionKind()
	kind := gvk.Kind + "." + gvk.Group + "/" + gvk.Version
	for _, s := range reg.Steps {
		if slices.Contains(s.Serves, gvk.Group) {
			return fmt.Sprintf("cannot be known before %s runs: %s is not served yet", s.ID, kind)
		}
	}
	return fmt.Sprintf("cannot be known: %s is not served (is its operator installed?)", kind)
}

func diffObject(ctx context.Context, r *Runner, stepID string, it DesiredObject) (*ObjectDiff, error) {
	o := it.Obj
	d := &ObjectDiff{Step: stepID, Object: kube.Describe(o)}
	if it.Note != "" {
		d.Action, d.Note = DiffUnknown, it.Note
		return d, nil
	}
	live, err := r.Env.Clients.Get(ctx, o)
	switch {
	case kube.IsNotServed(err):
		d.Action, d.Note = DiffUnknown, notServedNote(r.Registry, o)
		return d, nil
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return nil, fmt.Errorf("get %s: %w", kube.Describe(o), err)
	}
	if it.Ensure {
		if live != nil {
			return nil, nil
		}
		d.Action = DiffCreate
		d.Changes = fieldChanges(nil, stripServerFields(o.DeepCopy()), isSecret(o))
		return d, nil
	}
	dry, err := r.Env.Clients.DryRunApply(ctx, o)
	switch {
	case kube.IsNotServed(err):
		d.Action, d.Note = DiffUnknown, notServedNote(r.Registry, o)
		return d, nil
	case err != nil && live == nil && apierrors.IsNotFound(err):
		// The namespace does not exist yet: the dry run cannot run, the
		// object would be created as rendered.
		d.Action, d.Note = DiffCreate, "namespace "+o.GetNamespace()+" does not exist yet"
		d.Changes = fieldChanges(nil, stripServerFields(o.DeepCopy()), isSecret(o))
		return d, nil
	case err != nil:
		d.Action, d.Note = DiffUnknown, "the apply would fail: "+redactSecretErr(o, err)
		return d, nil
	}
	if live == nil {
		d.Action = DiffCreate
		d.Changes = fieldChanges(nil, stripServerFields(dry), isSecret(o))
		return d, nil
	}
	d.Action = DiffUpdate
	d.Changes = fieldChanges(stripServerFields(live), stripServerFields(dry), isSecret(o))
	if len(d.Changes) == 0 {
		return nil, nil
	}
	return d, nil
}

// redactSecretErr keeps an API error about a Secret from echoing its data
// (validation messages can quote a value).
func redactSecretErr(o *unstructured.Unstructured, err error) string {
	if isSecret(o) {
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			return string(st.Status().Reason)
		}
		return "error"
	}
	return err.Error()
}

func isSecret(o *unstructured.Unstructured) bool {
	return o.GetKind() == "Secret" && o.GetAPIVersion() == "v1"
}

// stripServerFields removes what the API server maintains and an apply
// never changes on purpose: status, managedFields, resourceVersion,
// generation, uid, creationTimestamp, selfLink.
func stripServerFields(u *unstructured.Unstructured) map[string]any {
	m := u.DeepCopy().Object
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		for _, f := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink"} {
			delete(md, f)
		}
	}
	return m
}

// fieldChanges lists the leaf fields that differ between old and new (old
// nil: everything is added). With mask, data and stringData values are
// replaced by a marker.
func fieldChanges(old, new map[string]any, mask bool) []FieldChange {
	var out []FieldChange
	var oldV any
	if old != nil {
		oldV = old
	}
	walkDiff(oldV, new, "", old == nil, &out)
	if mask {
		for i := range out {
			if p := out[i].Path; strings.HasPrefix(p, "data") || strings.HasPrefix(p, "stringData") {
				out[i].Old, out[i].New, out[i].Masked = nil, nil, true
			}
		}
	}
	return out
}

func walkDiff(old, new any, path string, absent bool, out *[]FieldChange) {
	om, oIsMap := old.(map[string]any)
	nm, nIsMap := new.(map[string]any)
	if oIsMap && nIsMap {
		keys := map[string]bool{}
		for k := range om {
			keys[k] = true
		}
		for k := range nm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			ov, oin := om[k]
			nv, nin := nm[k]
			p := joinPath(path, k)
			switch {
			case !oin:
				leaves(nv, p, "+", out)
			case !nin:
				leaves(ov, p, "-", out)
			default:
				walkDiff(ov, nv, p, false, out)
			}
		}
		return
	}
	ol, oIsList := old.([]any)
	nl, nIsList := new.([]any)
	if oIsList && nIsList {
		for i := 0; i < len(ol) || i < len(nl); i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch {
			case i >= len(ol):
				leaves(nl[i], p, "+", out)
			case i >= len(nl):
				leaves(ol[i], p, "-", out)
			default:
				walkDiff(ol[i], nl[i], p, false, out)
			}
		}
		return
	}
	if old == nil && absent {
		leaves(new, path, "+", out)
		return
	}
	if equalValue(old, new) {
		return
	}
	*out = append(*out, FieldChange{Path: path, Op: "~", Old: old, New: new})
}

// leaves appends every leaf of v (a scalar, or an empty map or list) under
// path with op.
func leaves(v any, path, op string, out *[]FieldChange) {
	add := func(val any) {
		c := FieldChange{Path: path, Op: op}
		if op == "-" {
			c.Old = val
		} else {
			c.New = val
		}
		*out = append(*out, c)
	}
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			add(map[string]any{})
			return
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			leaves(t[k], joinPath(path, k), op, out)
		}
	case []any:
		if len(t) == 0 {
			add([]any{})
			return
		}
		for i, x := range t {
			leaves(x, fmt.Sprintf("%s[%d]", path, i), op, out)
		}
	default:
		add(v)
	}
}

func equalValue(a, b any) bool {
	if af, ok := number(a); ok {
		bf, ok := number(b)
		return ok && af == bf
	}
	return reflect.DeepEqual(a, b)
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// joinPath appends key k to path, quoting keys with dots or slashes
// (labels, annotations) as ["k"].
func joinPath(path, k string) string {
	if plainKey.MatchString(k) {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	return fmt.Sprintf("%s[%q]", path, k)
}
