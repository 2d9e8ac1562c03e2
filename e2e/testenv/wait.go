package testenv

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// waitFor lists and watches the objects of ri (restricted to one name when
// name is non-empty) until cond returns true for an event's object, cond
// returns an error, or ctx ends. Objects present at the start count as
// Added events.
func waitFor(ctx context.Context, ri dynamic.ResourceInterface, name string, cond func(*unstructured.Unstructured) (bool, error)) error {
	sel := func(o *metav1.ListOptions) {
		if name != "" {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			sel(&o)
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			sel(&o)
			return ri.Watch(ctx, o)
		},
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, nil
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		return cond(u)
	})
	return err
}

// hasCondition reports whether u's status.conditions has type t with
// status s.
func hasCondition(u *unstructured.Unstructured, t, s string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == t && m["status"] == s {
			return true
		}
	}
	return false
}

// probeReadyz makes one GET /readyz request.
func probeReadyz(ctx context.Context, cfg *rest.Config) error {
	if cfg == nil {
		return fmt.Errorf("readyz: no kubeconfig")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	if string(body) != "ok" {
		return fmt.Errorf("readyz: %q", body)
	}
	return nil
}
