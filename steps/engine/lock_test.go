package engine

import (
	"testing"
)

func TestDeadHolder(t *testing.T) {
	self := map[string]string{
		holderPIDAnnotation: "100", holderHostAnnotation: "host-a",
		holderBootAnnotation: "boot-1", holderPIDNSAnnotation: "pid:[4026531836]",
	}
	holder := func(mod map[string]string) map[string]string {
		h := map[string]string{
			holderPIDAnnotation: "42", holderHostAnnotation: "host-a",
			holderBootAnnotation: "boot-1", holderPIDNSAnnotation: "pid:[4026531836]",
		}
		for k, v := range mod {
			if v == "" {
				delete(h, k)
				continue
			}
			h[k] = v
		}
		return h
	}
	gone := func(int) bool { return false }
	alive := func(int) bool { return true }
	tests := []struct {
		name  string
		ann   map[string]string
		alive func(int) bool
		dead  bool
	}{
		{"gone on this machine", holder(nil), gone, true},
		{"still running", holder(nil), alive, false},
		{"other host", holder(map[string]string{holderHostAnnotation: "host-b"}), gone, false},
		{"other boot (pids restart)", holder(map[string]string{holderBootAnnotation: "boot-0"}), gone, false},
		{"other pid namespace (a container with the same host name)", holder(map[string]string{holderPIDNSAnnotation: "pid:[4026532000]"}), gone, false},
		{"lease of an older maasctl without annotations", nil, gone, false},
		{"no boot id recorded", holder(map[string]string{holderBootAnnotation: ""}), gone, false},
		{"our own pid", holder(map[string]string{holderPIDAnnotation: "100"}), gone, false},
		{"pid not a number", holder(map[string]string{holderPIDAnnotation: "x"}), gone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid, dead := deadHolder(tt.ann, self, tt.alive)
			if dead != tt.dead {
				t.Fatalf("dead = %t, want %t", dead, tt.dead)
			}
			if dead && pid != 42 {
				t.Errorf("pid %d, want 42", pid)
			}
		})
	}
}

func TestMergeAnnotationsDropsStaleHolderFacts(t *testing.T) {
	got := mergeAnnotations(
		map[string]string{"other": "kept", holderBootAnnotation: "old", holderPIDAnnotation: "1"},
		map[string]string{holderPIDAnnotation: "2", holderHostAnnotation: "h"})
	want := map[string]string{"other": "kept", holderPIDAnnotation: "2", holderHostAnnotation: "h"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func TestProcessFactsAndAlive(t *testing.T) {
	f := processFacts()
	if f[holderPIDAnnotation] == "" {
		t.Fatalf("no pid in %v", f)
	}
	if _, dead := deadHolder(f, f, processAlive); dead {
		t.Error("this process's own Lease must never read as a dead holder")
	}
	if !processAlive(1) {
		t.Error("pid 1 should be alive")
	}
}
