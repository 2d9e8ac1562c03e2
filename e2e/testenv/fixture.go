package testenv

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
)

// fixtureFS holds the fixture, applied in file name order (namespaces
// first). See the files for what each object stands for.
//
//go:embed fixture/*.yaml
var fixtureFS embed.FS

var parsedFixture = sync.OnceValues(func() ([]*unstructured.Unstructured, error) {
	names, err := fs.Glob(fixtureFS, "fixture/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*unstructured.Unstructured
	for _, n := range names {
		b, err := fixtureFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		objs, err := decodeObjects(b, path.Base(n))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
})

// FixtureObjects returns a new deep copy of the fixture: a fresh OpenShift
// 4.22 cluster with cert-manager that meets maasctl's prerequisites
// (DESIGN.md, "Testing"). In apply order:
//
//   - Namespaces openshift-operators, openshift-marketplace,
//     openshift-monitoring, openshift-ingress, openshift-config,
//     cert-manager, llm-coding-assistant;
//   - OperatorGroup openshift-operators/global-operators (all namespaces;
//     status.namespaces [""]) and CatalogSources
//     openshift-marketplace/redhat-operators and certified-operators
//     (grpc, status.connectionState.lastObservedState READY);
//   - config.openshift.io/v1 Ingress "cluster" (spec.domain
//     apps.openshift.example.com) and ClusterVersion "version" (4.22.3,
//     history Completed);
//   - cert-manager ClusterIssuer letsencrypt-production (ACME, dns01
//     route53), condition Ready=True;
//   - StorageClass "standard" (the default class);
//   - Service llm-coding-assistant/llama-coder (8080/TCP, selector
//     app=llama-coder) and Secret llm-coding-assistant/llama-coder-api-key
//     (key api-key, a fixed non-secret test value).
//
// An object's status, where present, is written through the status
// subresource by [ApplyObjects]. Tests may change the copies and apply them
// (Options.Fixture or ApplyObjects).
func FixtureObjects() []*unstructured.Unstructured {
	objs, err := parsedFixture()
	if err != nil {
		// The fixture is embedded; TestFixtureObjects proves it parses.
		panic(fmt.Sprintf("testenv: embedded fixture: %v", err))
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	return out
}

// ApplyFixture applies [FixtureObjects] with [ApplyObjects]. The platform
// CRDs must be installed first (Start does both).
func ApplyFixture(ctx context.Context, cfg *rest.Config) error {
	if err := ApplyObjects(ctx, cfg, FixtureObjects()...); err != nil {
		return fmt.Errorf("apply fixture: %w", err)
	}
	return nil
}

// ApplyObjects server-side applies each object in order (field manager
// FieldManager, forced, strict field validation so a misspelt field fails
// instead of being pruned), then, if the object has a status, applies that
// status through the status subresource, as the owning controller would.
// Kinds are resolved through discovery; a kind whose CRD was just
// established is retried for up to 10 s until discovery serves it.
func ApplyObjects(ctx context.Context, cfg *rest.Config, objs ...*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apply objects: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apply objects: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, obj := range objs {
		if err := applyObject(ctx, dyn, mapper, obj); err != nil {
			return err
		}
	}
	return nil
}

func applyObject(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	id := obj.GetKind() + " " + obj.GetName()
	if obj.GetNamespace() != "" {
		id = obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	var mapping *meta.RESTMapping
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			mapper.Reset()
			return false, nil
		}
		if err != nil {
			return false, err
		}
		mapping = m
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("apply %s: resolve %s: %w", id, gvk, err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}

	body := obj.DeepCopy()
	status, hasStatus, _ := unstructured.NestedFieldCopy(body.Object, "status")
	unstructured.RemoveNestedField(body.Object, "status")
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true), FieldValidation: "Strict"}
	data, err := json.Marshal(body.Object)
	if err != nil {
		return fmt.Errorf("apply %s: %w", id, err)
	}
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts); err != nil {
		return fmt.Errorf("apply %s: %w", id, err)
	}
	if !hasStatus {
		return nil
	}
	st := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	st.SetAPIVersion(obj.GetAPIVersion())
	st.SetKind(obj.GetKind())
	st.SetName(obj.GetName())
	st.SetNamespace(obj.GetNamespace())
	if data, err = json.Marshal(st.Object); err != nil {
		return fmt.Errorf("apply %s status: %w", id, err)
	}
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts, "status"); err != nil {
		return fmt.Errorf("apply %s status: %w", id, err)
	}
	return nil
}
