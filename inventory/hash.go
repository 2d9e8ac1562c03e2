package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Hash returns the lowercase hex SHA-256 of the inventory's canonical JSON:
// object keys sorted, and nulls, empty lists and empty mappings dropped, so a
// nil list and an empty list (which mean the same) hash the same. Checkpoints
// store it to notice a changed input. It is stable across runs and
// processes for equal inventories.
func (inv *Inventory) Hash() string {
	g, err := toGeneric(inv)
	if err != nil {
		// Inventory holds only strings, integers, booleans, slices and
		// structs, which encoding/json always encodes.
		panic(fmt.Sprintf("encode inventory: %v", err))
	}
	b, err := json.Marshal(canonical(g))
	if err != nil {
		panic(fmt.Sprintf("encode canonical inventory: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonical drops empty values from a generic JSON value; json.Marshal sorts
// map keys, which does the rest.
func canonical(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if c := canonical(e); c != nil {
				out[k] = c
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		if len(x) == 0 {
			return nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = canonical(e)
			if out[i] == nil {
				out[i] = map[string]any{}
			}
		}
		return out
	default:
		return v
	}
}
