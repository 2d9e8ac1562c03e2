package inventory

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// YAML renders the inventory as YAML with the keys Load accepts, sorted
// alphabetically (sigs.k8s.io/yaml goes through JSON). Loading the output
// again yields the same inventory. The inventory holds no secrets, so the
// output is safe to print.
func (inv *Inventory) YAML() ([]byte, error) {
	out, err := yaml.Marshal(inv)
	if err != nil {
		return nil, fmt.Errorf("render inventory as YAML: %w", err)
	}
	return out, nil
}
