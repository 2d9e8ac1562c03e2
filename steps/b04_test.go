package steps

import (
	"strings"
	"testing"
)

// TestSubscriptionChannelWait: after a channel change OLM reports the old
// CSV AtLatestKnown until it resolves the new channel; that is never done,
// and ResolutionFailed (ConstraintsNotSatisfiable) fails at once unless it
// was written for the spec before maasctl's change (case B04).
func TestSubscriptionChannelWait(t *testing.T) {
	sub := func(channel, installed, conds string) string {
		return `{"apiVersion":"v1","kind":"S","metadata":{"name":"rhods-operator","namespace":"redhat-ods-operator"},"spec":{"name":"rhods-operator","channel":"` + channel +
			`"},"status":{"state":"AtLatestKnown","installedCSV":"` + installed + `","currentCSV":"` + installed + `","conditions":[` + conds + `]}}`
	}
	nosat := `{"type":"ResolutionFailed","status":"True","reason":"ConstraintsNotSatisfiable","message":"no operators found in channel stable-3.6 of package rhods-operator"}`
	transient := `{"type":"ResolutionFailed","status":"True","reason":"ErrorPreventedResolution","message":"failed to populate resolver cache"}`
	for _, tt := range []struct {
		name, js, stale string
		done, failed    bool
	}{
		{"installed CSV of the channel", sub("stable-3.5", "rhods-operator.3.5.0", ""), "", true, false},
		{"old CSV after a channel change", sub("stable-3.5", "rhods-operator.3.4.4", ""), "", false, false},
		{"unversioned channel cannot be told", sub("stable", "rhods-operator.3.4.4", ""), "", true, false},
		{"v-prefixed channel", sub("stable-v1.0", "leader-worker-set.v1.0.0", ""), "", true, false},
		{"not satisfiable fails at once", sub("stable-3.6", "rhods-operator.3.5.0", nosat), "", false, true},
		{"stale not satisfiable waits", sub("stable-3.6", "rhods-operator.3.5.0", nosat), "no operators found in channel stable-3.6 of package rhods-operator", false, false},
		{"new message after a stale one fails", sub("stable-3.6", "rhods-operator.3.5.0", nosat), "no operators found in channel stable-3.7 of package rhods-operator", false, true},
		{"transient error keeps waiting", sub("stable-3.5", "rhods-operator.3.5.0", transient), "", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := subscriptionProgress(map[string]bool{}, tt.stale)(obj(t, tt.js))
			if r.Done != tt.done || (r.Failed != nil) != tt.failed {
				t.Fatalf("done=%v failed=%v (%s, %v), want done=%v failed=%v", r.Done, r.Failed != nil, r.Status, r.Failed, tt.done, tt.failed)
			}
			if r.Failed != nil {
				for _, want := range []string{"Subscription redhat-ods-operator/rhods-operator", "channel stable-3.6", "no operators found in channel stable-3.6"} {
					if !strings.Contains(r.Failed.Error(), want) {
						t.Errorf("error %q lacks %q", r.Failed, want)
					}
				}
			}
		})
	}
}

// TestVersionSkewMessage: the skew names the detected version, its CSV,
// the field the channel expects and the fixes (case B04).
func TestVersionSkewMessage(t *testing.T) {
	up := &VersionSkew{Channel: "stable-3.5", Want: "3.5", Have: "3.4", HaveVersion: "3.4.4", CSV: "redhat-ods-operator/rhods-operator.3.4.4", Namespace: "redhat-ods-operator", Package: "rhods-operator"}
	for _, want := range []string{"operator version 3.4.4", "CSV redhat-ods-operator/rhods-operator.3.4.4", "spec.components.kserve.modelsAsService",
		"expects spec.components.aigateway.modelsAsAService", "operators[rhoai].channel=stable-3.4", `{"spec":{"channel":"stable-3.5"}}`, "--ignore-preflight rhoai-version"} {
		if !strings.Contains(up.Error(), want) {
			t.Errorf("%q lacks %q", up.Error(), want)
		}
	}
	down := &VersionSkew{Channel: "stable-3.4", Want: "3.4", Have: "3.5", HaveVersion: "3.5.0", CSV: "ns/rhods-operator.3.5.0", Namespace: "ns", Package: "rhods-operator"}
	if !strings.Contains(down.Fix(), "never downgrades") || !strings.Contains(down.Fix(), "channel=stable-3.5") {
		t.Errorf("downgrade fix %q", down.Fix())
	}
}
