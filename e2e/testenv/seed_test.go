package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// TestCopySparse: the copy has the same bytes and size, including a
// trailing run of zeros, and leaves zero runs unallocated.
func TestCopySparse(t *testing.T) {
	src := t.TempDir()
	data := make([]byte, 4<<20)
	copy(data[100:], "head")
	copy(data[2<<20:], "middle")
	if err := os.MkdirAll(filepath.Join(src, "member", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "member", "wal", "0.wal"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "small"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := copySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "member", "wal", "0.wal"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("copied WAL differs from the source (%d bytes, want %d)", len(got), len(data))
	}
	fi, err := os.Stat(filepath.Join(dst, "small"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "member", "wal", "0.wal"), &st); err != nil {
		t.Fatal(err)
	}
	if alloc := st.Blocks * 512; alloc >= int64(len(data))/2 {
		t.Errorf("copy allocates %d bytes of a %d-byte file that is almost all zeros, want it sparse", alloc, len(data))
	}
	if err := copySparse(src, dst); err == nil {
		t.Error("copy onto an existing folder succeeded, want an error")
	}
}

// TestEtcdSeed: with MAASCTL_TESTENV_SEED=off no seed is made or used;
// unset (the default) the first Start makes the seed, the next starts from it and serves the
// platform CRDs without creating them, and a change of a CRD file makes
// another seed.
// The binaries are linked into a folder of the test's own, so the seeds
// are made there and not in bin/testenv.
func TestEtcdSeed(t *testing.T) {
	bin := requireBinaries(t, Etcd, KubeAPIServer)
	own := t.TempDir()
	for _, b := range []string{Etcd, KubeAPIServer} {
		if err := os.Symlink(filepath.Join(bin, b), filepath.Join(own, b)); err != nil {
			t.Fatal(err)
		}
	}
	crdDir, err := defaultCRDDir()
	if err != nil {
		t.Fatal(err)
	}
	start := func(t *testing.T, crds string) string {
		t.Helper()
		var mu sync.Mutex
		var lines []string
		env, err := Start(t.Context(), Options{BinDir: own, CRDDir: crds, NoControllers: true, NoFixture: true,
			Logf: func(f string, a ...any) {
				mu.Lock()
				defer mu.Unlock()
				line := strings.TrimSpace(fmt.Sprintf(f, a...))
				lines = append(lines, line)
				t.Log(line)
			}})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		defer func() {
			if err := env.Stop(); err != nil {
				t.Errorf("Stop: %v", err)
			}
		}()
		dyn := dynamic.NewForConfigOrDie(env.RESTConfig())
		routes := schema.GroupVersionResource{Group: "route.openshift.io", Version: "v1", Resource: "routes"}
		if _, err := dyn.Resource(routes).Namespace("default").List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Errorf("list Routes (a platform CRD) right after Start: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
	seeds := func() []string {
		m, _ := filepath.Glob(filepath.Join(own, seedsDir, "*", "member"))
		return m
	}

	t.Setenv(EnvSeed, "off")
	log := start(t, crdDir)
	if strings.Contains(log, "seed") {
		t.Errorf("%s=off: want no seed, log:\n%s", EnvSeed, log)
	}
	if n := len(seeds()); n != 0 {
		t.Fatalf("%d seeds after a start with %s=off, want none", n, EnvSeed)
	}
	t.Setenv(EnvSeed, "")
	log = start(t, crdDir)
	if !strings.Contains(log, "etcd seed made") || !strings.Contains(log, "stored in the etcd seed") {
		t.Errorf("first start: want the seed made and the CRDs taken from it, log:\n%s", log)
	}
	if n := len(seeds()); n != 1 {
		t.Fatalf("%d seeds after the first seeded start, want 1", n)
	}
	log = start(t, crdDir)
	if strings.Contains(log, "etcd seed made") || !strings.Contains(log, "stored in the etcd seed") {
		t.Errorf("second start: want the stored seed reused, log:\n%s", log)
	}

	// Another content of one CRD file is another seed.
	changed := t.TempDir()
	if err := os.CopyFS(changed, os.DirFS(crdDir)); err != nil {
		t.Fatal(err)
	}
	files, err := PlatformCRDFiles(changed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(files[0], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(files[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("\n# changed\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	log = start(t, changed)
	if !strings.Contains(log, "etcd seed made") {
		t.Errorf("start with a changed CRD file: want a new seed, log:\n%s", log)
	}
	if n := len(seeds()); n != 2 {
		t.Errorf("%d seeds after a CRD file changed, want 2", n)
	}

}
