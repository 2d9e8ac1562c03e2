package steps

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
)

// The defaults of a Step's verbs and the helpers phase files build theirs
// from. Nothing here knows a step by name.

// desired is the step's Desired, or the default: the rendered objects,
// Namespaces created only when missing.
func (s *Step) desired(ctx context.Context, e *Env) ([]DesiredObject, error) {
	if s.Desired != nil {
		return s.Desired(ctx, e, s)
	}
	return desiredOf(e.objects(s.ID), true), nil
}

// desiredOf lists objs as applied; with ensureNS, Namespaces as created only
// when missing.
func desiredOf(objs []*unstructured.Unstructured, ensureNS bool) []DesiredObject {
	out := make([]DesiredObject, 0, len(objs))
	for _, o := range objs {
		out = append(out, DesiredObject{Obj: o, Ensure: ensureNS && o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1"})
	}
	return out
}

// desiredApplied is Desired for steps that apply every object, Namespaces
// included (their labels).
func desiredApplied(_ context.Context, e *Env, s *Step) ([]DesiredObject, error) {
	return desiredOf(e.objects(s.ID), false), nil
}

// secretsDesired is the Desired of a step that writes Secrets built from
// Vault data: its rendered objects (Namespaces only when missing), each
// Secret build returns, and, for a Secret in a namespace that is not among
// the rendered objects, that Namespace first. Without the password each
// Secret of the step's Objects is a note.
func secretsDesired(ctx context.Context, e *Env, s *Step, build func() ([]*unstructured.Unstructured, error)) ([]DesiredObject, error) {
	out := desiredOf(e.objects(s.ID), true)
	secrets, err := build()
	if err != nil {
		for _, o := range s.objects(e) {
			if isSecret(o) {
				out = append(out, DesiredObject{Obj: o, Note: "cannot be known without the password from Vault: " + err.Error()})
			}
		}
		return out, nil
	}
	rendered := map[string]bool{}
	for _, o := range e.objects(s.ID) {
		if o.GetKind() == "Namespace" {
			rendered[o.GetName()] = true
		}
	}
	for _, sec := range secrets {
		if ns := sec.GetNamespace(); !rendered[ns] {
			out = append(out, DesiredObject{Obj: namespaceObject(ns), Ensure: true})
		}
		out = append(out, DesiredObject{Obj: sec})
	}
	return out, nil
}

// render is the step's Render, or every rendered object.
func (s *Step) render(inv *inventory.Inventory, f assets.Facts, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
	if s.Render != nil {
		return s.Render(inv, f, objs)
	}
	return objs, nil, nil
}

// secretStub names a Secret a step builds at apply time, without data.
func secretStub(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Secret")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// Access is one permission, asked with a SelfSubjectAccessReview.
type Access struct {
	Verb, Group, Resource, Namespace, Name string
}

type access = Access

func (a Access) String() string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	switch {
	case a.Name != "" && a.Namespace == "":
		return fmt.Sprintf("%s %s %s", a.Verb, r, a.Name)
	case a.Namespace == "":
		return fmt.Sprintf("%s %s (cluster-wide)", a.Verb, r)
	}
	return fmt.Sprintf("%s %s in namespace %s", a.Verb, r, a.Namespace)
}

// access is the step's Access, or ObjectAccess of its rendered objects.
func (s *Step) access(e *Env, resource func(schema.GroupVersionKind) string) []Access {
	var out []Access
	if s.Access != nil {
		out = s.Access(e, s, resource)
	} else {
		out = ObjectAccess(e.objects(s.ID), resource, true)
	}
	if s.Removal.Prune {
		// Removing what the inventory no longer lists (Runner.prune)
		// deletes objects of the step's kinds in the step's namespaces.
		seen := map[Access]bool{}
		for _, o := range e.objects(s.ID) {
			if isNamespace(o.GroupVersionKind()) {
				continue // never pruned (Record.Dropped)
			}
			a := Access{"delete", o.GroupVersionKind().Group, resource(o.GroupVersionKind()), o.GetNamespace(), ""}
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// ObjectAccess is what applying and waiting on objs needs: get, patch
// (server-side apply creates through patch, which the apiserver also
// authorizes as create), list and watch on each kind in its namespace, and
// create unless the objects exist before the step (create false). A
// Namespace needs get and patch on itself, create, and list and watch.
func ObjectAccess(objs []*unstructured.Unstructured, resource func(schema.GroupVersionKind) string, create bool) []Access {
	var out []Access
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if gvk.Kind == "Namespace" && gvk.Group == "" {
			// Server-side apply of an existing Namespace is a patch; the
			// wait for it to be Active lists and watches Namespaces.
			out = append(out, Access{"get", "", "namespaces", "", o.GetName()}, Access{"patch", "", "namespaces", "", o.GetName()},
				Access{"create", "", "namespaces", "", ""}, Access{"list", "", "namespaces", "", ""}, Access{"watch", "", "namespaces", "", ""})
			continue
		}
		res, ns := resource(gvk), o.GetNamespace()
		for _, v := range []string{"get", "patch", "list", "watch"} {
			out = append(out, Access{v, gvk.Group, res, ns, ""})
		}
		if create {
			out = append(out, Access{"create", gvk.Group, res, ns, ""})
		}
	}
	return out
}

// withAccess is an Access of the rendered objects (ObjectAccess) plus
// what extra returns: the calls the step makes beside applying them.
func withAccess(extra ...func(e *Env) []Access) func(*Env, *Step, func(schema.GroupVersionKind) string) []Access {
	return func(e *Env, s *Step, resource func(schema.GroupVersionKind) string) []Access {
		out := ObjectAccess(e.objects(s.ID), resource, true)
		for _, x := range extra {
			out = append(out, x(e)...)
		}
		return out
	}
}

// secretAccess is get, create and patch on Secrets in ns.
func secretAccess(ns string) func(*Env) []Access {
	return func(*Env) []Access {
		return []Access{{"get", "", "secrets", ns, ""}, {"create", "", "secrets", ns, ""}, {"patch", "", "secrets", ns, ""}}
	}
}

// readAccess is get, list and watch on a resource in ns ("" cluster-wide).
func readAccess(group, resource, ns string) []Access {
	return []Access{{"get", group, resource, ns, ""}, {"list", group, resource, ns, ""}, {"watch", group, resource, ns, ""}}
}
