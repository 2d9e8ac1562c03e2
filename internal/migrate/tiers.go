package migrate

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Tier is one entry of the tier-to-group-mapping ConfigMap (upgrade guide
// 1.1; maas-api 3.2 tier configuration: name, displayName or description,
// level, groups). A user belongs to the highest-level tier one of whose
// groups they are in.
type Tier struct {
	Name        string   `json:"name"`
	DisplayName string   `json:"displayName,omitempty"`
	Description string   `json:"description,omitempty"`
	Level       int32    `json:"level"`
	Groups      []string `json:"groups"`
}

// ParseTiers decodes the "tiers" key of a tier-to-group-mapping ConfigMap.
// Errors: a missing key, YAML that is not a list of tiers, a tier without a
// name, a duplicate name.
func ParseTiers(cm *unstructured.Unstructured) ([]Tier, error) {
	data, found, _ := unstructured.NestedString(cm.Object, "data", TierConfigMapKey)
	if !found {
		return nil, fmt.Errorf("no data key %q", TierConfigMapKey)
	}
	var tiers []Tier
	if err := yaml.Unmarshal([]byte(data), &tiers); err != nil {
		return nil, fmt.Errorf("data key %q: %w", TierConfigMapKey, err)
	}
	seen := map[string]bool{}
	for i, t := range tiers {
		if t.Name == "" {
			return nil, fmt.Errorf("data key %q: tier %d has no name", TierConfigMapKey, i)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("data key %q: tier %q is defined twice", TierConfigMapKey, t.Name)
		}
		seen[t.Name] = true
	}
	sort.SliceStable(tiers, func(i, j int) bool { return tiers[i].Level < tiers[j].Level })
	return tiers, nil
}

// ParseTierAnnotation decodes the alpha.maas.opendatahub.io/tiers value: a
// JSON array of tier names (upstream docs/content/migration/
// tier-to-subscription.md). An empty array means every tier. Errors:
// anything else, JSON null included (it would otherwise decode as the
// empty array and grant every tier), and an empty tier name.
func ParseTierAnnotation(v string) ([]string, error) {
	var names []string
	if err := json.Unmarshal([]byte(v), &names); err != nil {
		return nil, fmt.Errorf("annotation %s=%q is not a JSON array of tier names: %w", TierAnnotation, v, err)
	}
	if names == nil {
		return nil, fmt.Errorf("annotation %s=%q is not a JSON array of tier names", TierAnnotation, v)
	}
	for i, n := range names {
		if n == "" {
			return nil, fmt.Errorf("annotation %s=%q: entry %d is an empty tier name", TierAnnotation, v, i)
		}
	}
	return names, nil
}

// TokenLimit is one token rate: at most Limit tokens per Window per user.
// Window uses the MaaSSubscription form: 1-9999 followed by s, m or h.
type TokenLimit struct {
	Limit  int64  `json:"limit"`
	Window string `json:"window"`
}

// String renders the limit as "100/1m".
func (l TokenLimit) String() string { return fmt.Sprintf("%d/%s", l.Limit, l.Window) }

// maxTokenLimit is the MaaSSubscription tokenRateLimits[].limit maximum
// (CRD maas.opendatahub.io_maassubscriptions.yaml: 1 to 1,000,000,000).
const maxTokenLimit = 1_000_000_000

// subscriptionWindow converts a Kuadrant rate window ("1m", "1h30m",
// "500ms"; kuadrant.io TokenRateLimitPolicy rates[].window) to the
// MaaSSubscription form ^[1-9]\d{0,3}(s|m|h)$, using the largest unit that
// divides it exactly. Errors when no unit fits (sub-second windows, or more
// than 9999 hours).
func subscriptionWindow(w string) (string, error) {
	d, err := time.ParseDuration(w)
	if err != nil || d <= 0 {
		return "", fmt.Errorf("window %q is not a duration", w)
	}
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.d == 0 {
			n := int64(d / u.d)
			if n >= 1 && n <= 9999 {
				return fmt.Sprintf("%d%s", n, u.name), nil
			}
		}
	}
	return "", fmt.Errorf("window %q cannot be written as 1-9999 seconds, minutes or hours, the MaaSSubscription window form", w)
}

// validName reports whether s can be part of an object name (DNS-1123
// label).
func validName(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }
