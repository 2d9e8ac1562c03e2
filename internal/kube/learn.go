package kube

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// learnedMappings are the REST mappings LearnCRD took from CRD objects.
type learnedMappings struct {
	kinds     map[schema.GroupVersionKind]*meta.RESTMapping
	resources map[schema.GroupResource]bool
	// byCRD are the kinds and resource each CRD (by name) gave, so that a
	// later LearnCRD of it replaces them.
	byCRD map[string]learnedCRD
}

type learnedCRD struct {
	kinds    []schema.GroupVersionKind
	resource schema.GroupResource
}

// LearnCRD records the REST mappings of crd, a CustomResourceDefinition
// (apiextensions.k8s.io/v1) object the caller saw with condition
// Established=True, so that Mapping and Served answer its kind in every
// served version without re-reading discovery (issue 16: a first install
// re-read /api and /apis after each operator's CRDs became Established, 2
// requests each time). The mapping is the one the API server serves:
// resource status.acceptedNames.plural of spec.group at each
// spec.versions[].name with served=true, kind status.acceptedNames.kind,
// scope spec.scope ("Namespaced" or "Cluster"); apiextensions-apiserver
// serves a CRD under its accepted names once it is Established
// (pkg/apiserver/customresource_handler.go, getOrCreateServingInfoFor). A
// later LearnCRD of the same CRD replaces what the earlier one gave (a
// version no longer served is dropped). It reports whether it learned
// anything: false for an object that is not an Established CRD, has no
// accepted names, or serves no version; crd is only read. ResetMapper
// forgets everything learned (uninstall calls it once CRDs are deleted).
func (c *Clients) LearnCRD(crd *unstructured.Unstructured) bool {
	if crd == nil || (crd.GetKind() != "" && crd.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"})) || !crdEstablished(crd) {
		return false
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "status", "acceptedNames", "kind")
	plural, _, _ := unstructured.NestedString(crd.Object, "status", "acceptedNames", "plural")
	scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if group == "" || kind == "" || plural == "" || crd.GetName() == "" {
		return false
	}
	s := meta.RESTScopeNamespace
	switch scope {
	case "Namespaced":
	case "Cluster":
		s = meta.RESTScopeRoot
	default:
		return false
	}
	var ms []*meta.RESTMapping
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if served, _ := m["served"].(bool); !served || name == "" {
			continue
		}
		ms = append(ms, &meta.RESTMapping{
			Resource:         schema.GroupVersionResource{Group: group, Version: name, Resource: plural},
			GroupVersionKind: schema.GroupVersionKind{Group: group, Version: name, Kind: kind},
			Scope:            s,
		})
	}
	if len(ms) == 0 {
		return false
	}
	c.learnMu.Lock()
	defer c.learnMu.Unlock()
	l := &c.learned
	if l.kinds == nil {
		*l = learnedMappings{kinds: map[schema.GroupVersionKind]*meta.RESTMapping{}, resources: map[schema.GroupResource]bool{}, byCRD: map[string]learnedCRD{}}
	}
	if old, ok := l.byCRD[crd.GetName()]; ok {
		for _, k := range old.kinds {
			delete(l.kinds, k)
		}
		delete(l.resources, old.resource)
	}
	rec := learnedCRD{resource: schema.GroupResource{Group: group, Resource: plural}}
	for _, m := range ms {
		l.kinds[m.GroupVersionKind] = m
		rec.kinds = append(rec.kinds, m.GroupVersionKind)
	}
	l.resources[rec.resource] = true
	l.byCRD[crd.GetName()] = rec
	return true
}

func (c *Clients) learnedMapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, bool) {
	c.learnMu.RLock()
	defer c.learnMu.RUnlock()
	m, ok := c.learned.kinds[gvk]
	if !ok {
		return nil, false
	}
	cp := *m
	return &cp, true
}

func (c *Clients) learnedResource(gr schema.GroupResource) bool {
	c.learnMu.RLock()
	defer c.learnMu.RUnlock()
	return c.learned.resources[gr]
}

// crdEstablished reports whether crd has condition Established=True.
func crdEstablished(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" {
			return m["status"] == "True"
		}
	}
	return false
}
