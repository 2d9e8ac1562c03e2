package migrate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTierPredicate(t *testing.T) {
	universe := tierSet{"free": true, "premium": true, "enterprise": true}
	tests := []struct {
		name, predicate string
		want            []string
		wantErr         bool
	}{
		{name: "equals", predicate: `auth.identity.tier == "free"`, want: []string{"free"}},
		{name: "equals reversed", predicate: `"premium" == auth.identity.tier`, want: []string{"premium"}},
		{name: "single quotes", predicate: `auth.identity.tier == 'premium'`, want: []string{"premium"}},
		{name: "not equals", predicate: `auth.identity.tier != "free"`, want: []string{"enterprise", "premium"}},
		{name: "any tier", predicate: `auth.identity.tier != ""`, want: []string{"enterprise", "free", "premium"}},
		{name: "no tier", predicate: `auth.identity.tier == ""`, want: []string{}},
		{name: "unknown tier", predicate: `auth.identity.tier == "gold"`, want: []string{}},
		{name: "in list", predicate: `auth.identity.tier in ["free", 'premium']`, want: []string{"free", "premium"}},
		{name: "parenthesised", predicate: `( auth.identity.tier == "free" )`, want: []string{"free"}},
		{name: "no spaces", predicate: `auth.identity.tier=="free"`, want: []string{"free"}},
		{name: "conjunction", predicate: `auth.identity.tier == "free" && request.path == "/x"`, wantErr: true},
		{name: "other attribute", predicate: `auth.identity.userid == "bob"`, wantErr: true},
		{name: "function", predicate: `auth.identity.tier.startsWith("p")`, wantErr: true},
		{name: "quote inside literal", predicate: `auth.identity.tier == "a\" || true || \""`, want: []string{}},
		{name: "unbalanced parentheses kept", predicate: `(auth.identity.tier == "free") || (true)`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTierPredicate(tt.predicate, universe)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parseTierPredicate(%q) = %v, want an error", tt.predicate, got.sorted())
				}
				return
			}
			if err != nil {
				t.Fatalf("parseTierPredicate(%q): %v", tt.predicate, err)
			}
			if diff := cmp.Diff(tt.want, got.sorted()); diff != "" {
				t.Errorf("parseTierPredicate(%q) (-want +got):\n%s", tt.predicate, diff)
			}
		})
	}
}
