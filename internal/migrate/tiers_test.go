package migrate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestSubscriptionWindow(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "minute", in: "1m", want: "1m"},
		{name: "hour", in: "1h", want: "1h"},
		{name: "minutes that are hours", in: "120m", want: "2h"},
		{name: "compound", in: "1h30m", want: "90m"},
		{name: "seconds", in: "45s", want: "45s"},
		{name: "milliseconds that are seconds", in: "2000ms", want: "2s"},
		{name: "a day in hours", in: "24h", want: "24h"},
		{name: "sub-second", in: "500ms", wantErr: true},
		{name: "too many hours", in: "10000h", wantErr: true},
		{name: "not a duration", in: "1d", wantErr: true},
		{name: "zero", in: "0s", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := subscriptionWindow(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("subscriptionWindow(%q) = %q, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("subscriptionWindow(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseTiers(t *testing.T) {
	cm := func(data string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": TierConfigMapName, "namespace": "maas-api"},
			"data":     map[string]any{"tiers": data},
		}}
	}
	tests := []struct {
		name    string
		cm      *unstructured.Unstructured
		want    []Tier
		wantErr string
	}{
		{
			name: "guide, sorted by level",
			cm: cm(`
- name: premium
  displayName: Premium Tier
  level: 1
  groups: [premium-users]
- name: free
  displayName: Free Tier
  level: 0
  groups: [system:authenticated]
`),
			want: []Tier{
				{Name: "free", DisplayName: "Free Tier", Level: 0, Groups: []string{"system:authenticated"}},
				{Name: "premium", DisplayName: "Premium Tier", Level: 1, Groups: []string{"premium-users"}},
			},
		},
		{name: "no key", cm: &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{}}}, wantErr: `no data key "tiers"`},
		{name: "not a list", cm: cm("tiers: free"), wantErr: `data key "tiers"`},
		{name: "no name", cm: cm("- level: 1\n  groups: [a]"), wantErr: "tier 0 has no name"},
		{name: "duplicate", cm: cm("- name: a\n- name: a"), wantErr: `tier "a" is defined twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTiers(tt.cm)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTiers error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseTiers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseTierAnnotation(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
		wantErr  bool
	}{
		{name: "two tiers", in: `["free","premium"]`, want: []string{"free", "premium"}},
		{name: "empty means all", in: `[]`, want: []string{}},
		{name: "not json", in: `free,premium`, wantErr: true},
		{name: "not strings", in: `[1]`, wantErr: true},
		{name: "null is not an array", in: `null`, wantErr: true},
		{name: "object", in: `{"tiers":["free"]}`, wantErr: true},
		{name: "empty name", in: `[""]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTierAnnotation(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseTierAnnotation(%q) error %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}
