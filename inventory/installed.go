package inventory

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Redacted returns a copy of the inventory that is safe to store in the
// cluster and to print: vault.address is cleared (an address may carry
// credentials in its user part or query, and it is read from VAULT_ADDR or
// --vault-addr again on every run). The inventory holds no other secret:
// Vault tokens, AppRole IDs and passwords are read from the environment or
// files whose paths, not contents, are in the inventory.
func (inv *Inventory) Redacted() *Inventory {
	out := inv.clone()
	out.Vault.Address = ""
	return out
}

// Deployed returns the part of the inventory that decides what is in the
// cluster: Redacted without the settings of how maasctl itself runs
// (vault.auth, vault.kubeTokenPath and waitTimeoutSeconds), which change
// no object. Two inventories with equal Deployed values install the same
// objects.
func (inv *Inventory) Deployed() *Inventory {
	out := inv.Redacted()
	out.Vault = Vault{}
	out.WaitTimeoutSeconds = 0
	return out
}

func (inv *Inventory) clone() *Inventory {
	b, err := json.Marshal(inv)
	if err != nil {
		// Inventory holds only strings, integers, booleans, slices and
		// structs, which encoding/json always encodes.
		panic(fmt.Sprintf("encode inventory: %v", err))
	}
	var out Inventory
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("decode inventory: %v", err))
	}
	return &out
}

// ParseStored decodes an inventory YAML() wrote (a whole inventory, not
// an overlay: no defaults are merged in) and validates it. Unknown keys
// are errors.
func ParseStored(data []byte) (*Inventory, error) {
	var inv Inventory
	if err := yaml.UnmarshalStrict(data, &inv); err != nil {
		return nil, fmt.Errorf("parse inventory: %w", err)
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	return &inv, nil
}

// Apply returns base with the --set overrides sets applied in order (the
// syntax of Load), without files and without Default: "what the run's
// --set values make of this inventory". Errors name the bad path.
// Apply does not call Validate.
func Apply(base *Inventory, sets []string) (*Inventory, error) {
	doc, err := toGeneric(base)
	if err != nil {
		return nil, fmt.Errorf("encode inventory: %w", err)
	}
	root := doc.(map[string]any)
	for _, s := range sets {
		if err := applySet(root, s); err != nil {
			return nil, err
		}
	}
	inv, err := decodeInventory(root)
	if err != nil {
		return nil, fmt.Errorf("decode inventory: %w", err)
	}
	return inv, nil
}

// Change is one difference between two inventories: the key path as in
// --set (authPolicies[0].groups, database.storageSize) and the value on
// each side in YAML flow syntax; "(unset)" when a side has no value there.
type Change struct {
	Path string `json:"path"`
	From string `json:"from"`
	To   string `json:"to"`
}

func (c Change) String() string { return c.Path + ": " + c.From + " -> " + c.To }

// unset is the value of a side of a Change that has nothing at the path.
const unset = "(unset)"

// Diff lists the differences from one inventory to another, sorted by
// path. Nulls, empty lists and empty mappings are the same as missing
// values (as for Hash). Lists of mappings of equal length (authPolicies,
// operators) are compared element by element; lists of named mappings
// (name, or id for operators) whose names differ, element by name:
// "subscriptions[team-b]: (listed) -> (not listed)" for one removed; any
// other list that differs is one change of the whole list. No
// difference: nil.
func Diff(from, to *Inventory) []Change {
	a, err := toGeneric(from)
	if err != nil {
		panic(fmt.Sprintf("encode inventory: %v", err))
	}
	b, err := toGeneric(to)
	if err != nil {
		panic(fmt.Sprintf("encode inventory: %v", err))
	}
	var out []Change
	diffValue("", canonical(a), canonical(b), &out)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func diffValue(path string, a, b any, out *[]Change) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			diffValue(p, am[k], bm[k], out)
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	an, anOK := elementNames(al)
	bn, bnOK := elementNames(bl)
	if aok && bok && len(al) == len(bl) && allMaps(al) && allMaps(bl) && (!anOK || !bnOK || slices.Equal(an, bn)) {
		for i := range al {
			diffValue(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], out)
		}
		return
	}
	if anOK && bnOK {
		// Named elements (models, policies, subscriptions, operators)
		// added, removed or reordered: one change per element, by name
		// as --set names it (subscriptions[team-b]), not the whole list
		// on one line.
		for i, n := range an {
			p := fmt.Sprintf("%s[%s]", path, n)
			if j := slices.Index(bn, n); j >= 0 {
				diffValue(p, al[i], bl[j], out)
			} else {
				*out = append(*out, Change{Path: p, From: listed, To: notListed})
			}
		}
		for _, n := range bn {
			if !slices.Contains(an, n) {
				*out = append(*out, Change{Path: fmt.Sprintf("%s[%s]", path, n), From: notListed, To: listed})
			}
		}
		return
	}
	fa, fb := flow(a), flow(b)
	if fa != fb {
		*out = append(*out, Change{Path: path, From: fa, To: fb})
	}
}

// The two sides of a Change for a named list element one side lacks.
const (
	listed    = "(listed)"
	notListed = "(not listed)"
)

// elementNames returns the names of the elements of l, each a mapping
// with a string "name" (or, for operators, "id"), unique in l; ok is
// false for an empty list or any other.
func elementNames(l []any) (names []string, ok bool) {
	if len(l) == 0 {
		return nil, false
	}
	for _, e := range l {
		m, isMap := e.(map[string]any)
		if !isMap {
			return nil, false
		}
		n, _ := m["name"].(string)
		if n == "" {
			n, _ = m["id"].(string)
		}
		if n == "" || slices.Contains(names, n) {
			return nil, false
		}
		names = append(names, n)
	}
	return names, true
}

func allMaps(l []any) bool {
	for _, e := range l {
		if _, ok := e.(map[string]any); !ok {
			return false
		}
	}
	return true
}

// flow renders a generic value in YAML flow syntax (JSON is YAML flow).
func flow(v any) string {
	if v == nil {
		return unset
	}
	if s, ok := v.(string); ok && s != "" && !strings.ContainsAny(s, ",:[]{}\"' ") {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
