package sim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// crdFile is one upstream CRD from the CRD folder.
type crdFile struct {
	// Path is relative to the CRD folder ("kuadrant/kuadrant.io_kuadrants.yaml").
	Path string
	Name string // plural.group
	Kind string
	// Version is the storage version.
	Version string
	obj     *unstructured.Unstructured
}

// crdStore loads CRD files lazily and caches them.
type crdStore struct {
	dir   string
	mu    sync.Mutex
	files map[string]*crdEntry
}

// crdEntry is one file of a crdStore, parsed once; concurrent loads of
// other files do not wait for it.
type crdEntry struct {
	once sync.Once
	f    *crdFile
	err  error
}

func newCRDStore(dir string) *crdStore {
	return &crdStore{dir: dir, files: map[string]*crdEntry{}}
}

// glob returns the CRD files matching pattern (relative to the folder),
// sorted by path. Errors when a file does not parse or nothing matches.
func (s *crdStore) glob(pattern string) ([]*crdFile, error) {
	paths, err := filepath.Glob(filepath.Join(s.dir, pattern))
	if err != nil {
		return nil, fmt.Errorf("crd glob %s: %w", pattern, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("crd glob %s: no files in %s", pattern, s.dir)
	}
	sort.Strings(paths)
	out := make([]*crdFile, 0, len(paths))
	for _, p := range paths {
		rel, _ := filepath.Rel(s.dir, p)
		f, err := s.load(rel)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// preload parses the files of patterns ahead of their first use, ignoring
// errors (the use reports them). Parsing the largest upstream CRD (2.7 MB
// of YAML for LLMInferenceService) takes 0.2 s of an idle CPU and more on
// a loaded one, time that would otherwise fall inside the delay of the
// reconcile that first registers it.
func (s *crdStore) preload(ctx context.Context, patterns []string) {
	for _, p := range patterns {
		if ctx.Err() != nil {
			return
		}
		_, _ = s.glob(p)
	}
}

func (s *crdStore) load(rel string) (*crdFile, error) {
	s.mu.Lock()
	e := s.files[rel]
	if e == nil {
		e = &crdEntry{}
		s.files[rel] = e
	}
	s.mu.Unlock()
	e.once.Do(func() { e.f, e.err = s.parse(rel) })
	return e.f, e.err
}

func (s *crdStore) parse(rel string) (*crdFile, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, rel))
	if err != nil {
		return nil, fmt.Errorf("read crd: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse crd %s: %w", rel, err)
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GetKind() != "CustomResourceDefinition" {
		return nil, fmt.Errorf("parse crd %s: kind %q, want CustomResourceDefinition", rel, u.GetKind())
	}
	f := &crdFile{Path: rel, Name: u.GetName(), obj: u}
	f.Kind, _, _ = unstructured.NestedString(m, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(m, "spec", "versions")
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if st, _ := vm["storage"].(bool); st {
			f.Version, _ = vm["name"].(string)
		}
	}
	return f, nil
}

// parseCRDFile reads every CustomResourceDefinition of a multi-document
// YAML file (other kinds are skipped).
func parseCRDFile(path string) ([]*crdFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read crds: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*crdFile
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parse crds %s: %w", path, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("parse crds %s: %w", path, err)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		f := &crdFile{Path: path, Name: u.GetName(), obj: u}
		f.Kind, _, _ = unstructured.NestedString(m, "spec", "names", "kind")
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse crds %s: no CustomResourceDefinition in it", path)
	}
	return out, nil
}

// ensureCRDs creates the CRDs of files that do not exist yet, the way OLM's
// InstallPlan step or an operator's own CRD registration does (all at once:
// one large CRD does not hold the others back), and reports whether all of
// them are Established.
func (m *manager) ensureCRDs(ctx context.Context, files []*crdFile) (bool, error) {
	all := true
	var missing []*crdFile
	for _, f := range files {
		live := m.get(gvrCRD, "", f.Name)
		switch {
		case live == nil:
			missing = append(missing, f)
			all = false
		case !conditionTrue(live, "Established"):
			all = false
		}
	}
	errs := make([]error, len(missing))
	var wg sync.WaitGroup
	for i, f := range missing {
		wg.Go(func() {
			obj := f.obj.DeepCopy()
			delete(obj.Object, "status")
			unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
			if _, err := m.create(ctx, gvrCRD, obj); err != nil {
				errs[i] = err
				return
			}
			m.log.Info("registered crd", zap.String("crd", f.Name), zap.String("file", f.Path))
		})
	}
	wg.Wait()
	return all, errors.Join(errs...)
}

// ensureCRDsAsync is ensureCRDs without waiting for the creates: each
// missing CRD is created in the background (see background) and done is
// called after each create. It reports whether all CRDs of files exist and
// are Established now.
func (m *manager) ensureCRDsAsync(files []*crdFile, done func()) bool {
	all := true
	for _, f := range files {
		live := m.get(gvrCRD, "", f.Name)
		switch {
		case live == nil:
			all = false
			if _, created := m.crdsCreated.Load(f.Name); created {
				continue // the CRD watch has not delivered it yet
			}
			m.background("crd|"+f.Name, func(ctx context.Context) error {
				obj := f.obj.DeepCopy()
				delete(obj.Object, "status")
				unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
				if _, err := m.create(ctx, gvrCRD, obj); err != nil {
					return err
				}
				// Until the watch delivers it, a second create would cost
				// the API server another full decode and validation of the
				// CRD (seconds for the 2.7 MB LLMInferenceService CRD).
				m.crdsCreated.Store(f.Name, true)
				m.log.Info("registered crd", zap.String("crd", f.Name), zap.String("file", f.Path))
				return nil
			}, done)
		case !conditionTrue(live, "Established"):
			all = false
		}
	}
	return all
}

// crdEstablished reports whether the CRD named name exists and is Established.
func (m *manager) crdEstablished(name string) bool {
	return conditionTrue(m.get(gvrCRD, "", name), "Established")
}

// crdNames returns the names of files.
func crdNames(files []*crdFile) string {
	n := make([]string, len(files))
	for i, f := range files {
		n[i] = f.Name
	}
	return strings.Join(n, ", ")
}
