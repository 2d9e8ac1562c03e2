package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHeapProfile: MAASCTL_MEMPROFILE gets a pprof heap profile (gzip-
// compressed protobuf) when the command ends; a path that cannot be
// created is a notice on stderr naming the variable, not a failure; unset
// writes nothing.
func TestHeapProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heap.pprof")
	t.Setenv("MAASCTL_MEMPROFILE", path)
	var stderr bytes.Buffer
	heapProfile(&stderr)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b || stderr.Len() != 0 {
		t.Errorf("profile of %d bytes (gzip magic %x), stderr %q; want a gzip-compressed pprof profile and no notice", len(b), b[:min(2, len(b))], stderr.String())
	}

	t.Setenv("MAASCTL_MEMPROFILE", filepath.Join(t.TempDir(), "missing", "heap.pprof"))
	stderr.Reset()
	heapProfile(&stderr)
	if !strings.Contains(stderr.String(), "MAASCTL_MEMPROFILE") {
		t.Errorf("unwritable path: stderr %q, want a notice naming MAASCTL_MEMPROFILE", stderr.String())
	}

	t.Setenv("MAASCTL_MEMPROFILE", "")
	stderr.Reset()
	heapProfile(&stderr)
	if stderr.Len() != 0 {
		t.Errorf("unset: stderr %q, want nothing", stderr.String())
	}
}
