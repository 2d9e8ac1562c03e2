package output

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/maasctl/maasctl/steps/event"
)

// TestFailedStepFix: a failed event's fix is a line of its own in the
// plain lines (after the failure, naming the step) and a field of its own
// in the JSON lines.
func TestFailedStepFix(t *testing.T) {
	failed := event.Event{Type: event.Failed, Step: "database/cluster", Index: 4, Total: 5, Duration: 3 * time.Second,
		Message: "PVC rhoai-maas-db/maas-postgres-1 is Pending (no StorageClass)", Fix: "set database.storageClass in the inventory"}

	var plain bytes.Buffer
	emit, end := New(Plain, &plain)
	emit(failed)
	end()
	lines := strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "failed after 3.0s: PVC rhoai-maas-db/maas-postgres-1 is Pending (no StorageClass)") ||
		strings.TrimSpace(lines[1]) != "database/cluster           fix: set database.storageClass in the inventory" {
		t.Errorf("plain lines:\n%s", plain.String())
	}

	var js bytes.Buffer
	emit, end = New(JSON, &js)
	emit(failed)
	emit(event.Event{Type: event.Failed, Step: "models", Message: "no fix known"})
	end()
	dec := json.NewDecoder(&js)
	var withFix, without map[string]any
	if err := dec.Decode(&withFix); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&without); err != nil {
		t.Fatal(err)
	}
	if withFix["fix"] != failed.Fix || withFix["message"] != failed.Message {
		t.Errorf("JSON of the failed event: %v", withFix)
	}
	if _, ok := without["fix"]; ok {
		t.Errorf("JSON of a failure without a fix has a fix field: %v", without)
	}
}

// TestProgressOneLine: a progress message that quotes a condition message
// with line breaks (Kuadrant's CEL error) is one plain line, indented
// under its step; the JSON line keeps the message whole.
func TestProgressOneLine(t *testing.T) {
	msg := "waiting for: MAAS-V012 TokenRateLimitPolicy llm-coding-assistant/maas-trlp: Enforced=False (InvalidCelExpression): validation issues: [ERROR: <input>:1:1: undeclared reference to 'auth'\n | auth.identity.selected_subscription_key\n | ^]"
	ev := event.Event{Type: event.Progress, Step: "verify/status", Index: 25, Total: 25, Message: msg}
	var plain bytes.Buffer
	emit, end := New(Plain, &plain)
	emit(ev)
	end()
	out := strings.TrimSuffix(plain.String(), "\n")
	if strings.Contains(out, "\n") || !strings.Contains(out, "'auth' | auth.identity.selected_subscription_key | ^]") || !strings.HasPrefix(strings.TrimSpace(out), "verify/status") {
		t.Errorf("plain progress line:\n%s", plain.String())
	}
	var js bytes.Buffer
	emit, end = New(JSON, &js)
	emit(ev)
	end()
	var got map[string]any
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || got["message"] != msg {
		t.Errorf("JSON progress (err %v): %v", err, got)
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 objects"}, {1, "1 object"}, {2, "2 objects"}, {-1, "-1 objects"}} {
		if got := Count(tc.n, "object", "objects"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := Count(1, "finished step", "finished steps"); got != "1 finished step" {
		t.Errorf("got %q", got)
	}
}
