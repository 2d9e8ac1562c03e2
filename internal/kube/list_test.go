package kube

import (
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

func withManagedFields(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "managedFields": []any{map[string]any{"manager": "x"}}},
	}}
	return u
}

// TestLeanWatchStopsWithAnEventUnread: a watch stopped while the wrapper
// holds an event nobody reads ends its goroutine (apimachinery's
// watch.Filter would block on that send for good). Pure wrapper logic,
// on apimachinery's FakeWatcher.
func TestLeanWatchStopsWithAnEventUnread(t *testing.T) {
	base := runtime.NumGoroutine()
	fw := watch.NewFake()
	lw := LeanWatch(fw)
	fw.Add(withManagedFields("a")) // returns once the wrapper took it
	ev := <-lw.ResultChan()
	if _, ok := ev.Object.(*unstructured.Unstructured).Object["metadata"].(map[string]any)["managedFields"]; ok {
		t.Fatal("the event kept metadata.managedFields")
	}
	fw.Add(withManagedFields("b")) // the wrapper now waits to hand it on
	lw.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 5 s after Stop, %d before the watch: the wrapper's goroutine still waits to send", runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLeanList(t *testing.T) {
	l := &unstructured.UnstructuredList{Items: []unstructured.Unstructured{*withManagedFields("a"), *withManagedFields("b")}}
	LeanList(l)
	for _, it := range l.Items {
		if it.GetManagedFields() != nil {
			t.Errorf("%s kept managedFields", it.GetName())
		}
		if it.GetName() == "" {
			t.Error("metadata lost with managedFields")
		}
	}
}
