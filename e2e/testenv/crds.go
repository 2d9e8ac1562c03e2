package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// FieldManager is the server-side apply field manager of everything testenv
// writes (CRDs, the Node, fixture objects and their status).
const FieldManager = "maasctl-testenv"

// PlatformCRDDirs are the folders under the CRD tree installed at start:
// what a fresh OpenShift 4.22 cluster with the cert-manager operator serves
// (Route, Ingress and ClusterVersion config, cert-manager, Gateway API).
// OLM's CRDs come from its module (OLMCRDFiles). Operator-owned CRDs (cnpg,
// kuadrant, authorino, lws-operator, opendatahub, ...) are inlined in the
// generated catalogs' bundles (WriteCatalog): OLM's InstallPlans create
// them; the RHOAI operator's component CRDs (odh-dashboard, kserve,
// ai-gateway-operator, maas) are registered by its simulator.
var PlatformCRDDirs = []string{"openshift", "cert-manager", "gateway-api"}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// PlatformCRDFiles returns the *.yaml files of PlatformCRDDirs under
// crdDir, sorted. It fails if a folder is missing or empty.
func PlatformCRDFiles(crdDir string) ([]string, error) {
	var files []string
	for _, d := range PlatformCRDDirs {
		m, err := filepath.Glob(filepath.Join(crdDir, d, "*.yaml"))
		if err != nil {
			return nil, fmt.Errorf("list platform CRDs: %w", err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("list platform CRDs: no *.yaml in %s (set %s to the CRD tree)", filepath.Join(crdDir, d), EnvCRDDir)
		}
		sort.Strings(m)
		files = append(files, m...)
	}
	return files, nil
}

// InstallCRDs creates or updates (server-side apply, field manager
// FieldManager, forced) every CustomResourceDefinition in files (YAML, one
// or more documents each; documents of other kinds are an error), then
// watches until each is Established. It fails fast when a CRD reports
// NamesAccepted=False, and otherwise when ctx ends, naming the CRDs not yet
// Established.
func InstallCRDs(ctx context.Context, cfg *rest.Config, files ...string) error {
	return installCRDs(ctx, cfg, true, files...)
}

// installCRDs is InstallCRDs; without apply it only waits until the CRDs
// of files, already stored (an etcd seed), are Established.
func installCRDs(ctx context.Context, cfg *rest.Config, apply bool, files ...string) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	ri := dyn.Resource(crdGVR)
	// Decode and check everything before the first write.
	type source struct {
		file string
		crd  *unstructured.Unstructured
	}
	var crds []source
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("install CRDs: %w", err)
		}
		objs, err := decodeObjects(b, f)
		if err != nil {
			return fmt.Errorf("install CRDs: %w", err)
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				return fmt.Errorf("install CRDs: %s: %s %s is not a CustomResourceDefinition", f, o.GetKind(), o.GetName())
			}
			unstructured.RemoveNestedField(o.Object, "status")
			crds = append(crds, source{file: f, crd: o})
			names = append(names, o.GetName())
		}
	}
	// A few requests in flight: each CRD write costs the apiserver schema
	// and CEL compilation, which overlaps well with request transfer.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	if !apply {
		crds = nil // already stored: only wait below
	}
	for _, c := range crds {
		g.Go(func() error {
			if _, err := ri.Apply(gctx, c.crd.GetName(), c.crd, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
				return fmt.Errorf("install CRD %s from %s: %w", c.crd.GetName(), c.file, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := waitEstablished(ctx, ri, names); err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	return nil
}

// waitEstablished watches all CRDs until every one in names has condition
// Established=True (apiextensions-apiserver sets it once the resource is
// served).
func waitEstablished(ctx context.Context, ri dynamic.ResourceInterface, names []string) error {
	pending := map[string]bool{}
	for _, n := range names {
		pending[n] = true
	}
	if len(pending) == 0 {
		return nil
	}
	err := waitFor(ctx, ri, "", func(u *unstructured.Unstructured) (bool, error) {
		if !pending[u.GetName()] {
			return false, nil
		}
		if hasCondition(u, "NamesAccepted", "False") {
			return false, fmt.Errorf("CRD %s: NamesAccepted is False", u.GetName())
		}
		if hasCondition(u, "Established", "True") {
			delete(pending, u.GetName())
		}
		return len(pending) == 0, nil
	})
	if err != nil && len(pending) > 0 {
		left := make([]string, 0, len(pending))
		for n := range pending {
			left = append(left, n)
		}
		slices.Sort(left)
		return fmt.Errorf("wait for Established (still waiting on %s): %w", strings.Join(left, ", "), err)
	}
	return err
}

// ReadObjects reads the objects of a multi-document YAML (or JSON) file,
// as decodeObjects does; errors name the file and the document.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeObjects(data, path)
}

// decodeObjects splits YAML (or JSON) documents into objects, skipping
// empty documents. Every object needs apiVersion, kind and metadata.name.
func decodeObjects(data []byte, source string) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: read document %d: %w", source, i, err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		// utiljson keeps integers as int64 (as the API machinery expects),
		// where encoding/json would make them float64.
		var m map[string]any
		if err := utiljson.Unmarshal(j, &m); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("%s: document %d: apiVersion, kind and metadata.name are required", source, i)
		}
		out = append(out, u)
	}
}
