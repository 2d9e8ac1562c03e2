package suggest

import "testing"

func TestClosest(t *testing.T) {
	keys := []string{"database", "gateway", "operators", "platform", "platform/gateway", "subscriptions"}
	for _, tc := range []struct {
		word, want string
		ok         bool
	}{
		{"databse", "database", true},
		{"gatway", "gateway", true},
		{"platform/gatway", "platform/gateway", true},
		{"subscription", "subscriptions", true},
		{"gateway", "", false}, // valid already
		{"dsc", "", false},     // too short to guess
		{"kuadrant", "", false},
		{"xyz", "", false},
	} {
		got, ok := Closest(tc.word, keys)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("Closest(%q) = %q, %v; want %q, %v", tc.word, got, ok, tc.want, tc.ok)
		}
	}
}
