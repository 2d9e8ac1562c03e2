package engine

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCutError: a failed run's error is kept whole up to
// MaxCheckpointError bytes, and cut at a rune boundary beyond.
func TestCutError(t *testing.T) {
	if got := CutError("preflight failed"); got != "preflight failed" {
		t.Errorf("short error changed: %q", got)
	}
	long := strings.Repeat("é", MaxCheckpointError) // 2 bytes each
	got := CutError(long)
	if !strings.HasSuffix(got, "…") || len(got) > MaxCheckpointError+len("…") || !utf8.ValidString(got) {
		t.Errorf("cut error: %d bytes, valid UTF-8 %v, ends %q", len(got), utf8.ValidString(got), got[len(got)-4:])
	}
}
