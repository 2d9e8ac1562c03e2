package inventory

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

var inventoryType = reflect.TypeFor[Inventory]()

// Load builds the effective inventory: Default(), then each YAML file in
// order, then each --set override in order; later sources win.
//
// Files use the lowerCamelCase JSON keys of the inventory types (the keys
// YAML() prints). Mappings merge key by key; a list replaces the list before
// it whole (no element-wise merge); null resets a value to its zero value.
// Unknown keys, keys that differ only in case, scalars of the wrong kind (a
// string where an integer is expected, an unquoted 1.10 where a string is
// expected) and duplicate keys are errors that name the file and the key path
// (externalModels[0].prot) and list the valid keys there; all problems of one
// file are reported together. Parsing follows sigs.k8s.io/yaml: YAML 1.1
// scalars, so an unquoted yes is a boolean.
//
// sets are "path=value". path is the dotted key path as in files, with list
// elements addressed by index (externalModels[0].port=8081) or, where the
// element has an "id" field (operators) or else a "name" field, by that
// value (operators[rhoai].channel=stable-3.6,
// subscriptions[llama-coder-default].priority=5); a selector of digits only
// is an index, and --set cannot append elements. value is read as the
// field's type: strings literally (1.10 stays "1.10"; surrounding YAML
// quotes are removed), integers and booleans as YAML scalars (8081, true,
// no), lists and mappings in YAML flow syntax
// (rhoai.managedComponents=[dashboard,kserve,aigateway]). An empty value
// sets a string to "" and a list or mapping to empty; integers and booleans
// need a value. An unknown path is an error that names it and lists the valid
// keys at that level.
//
// Load does not call Validate.
func Load(files []string, sets []string) (*Inventory, error) {
	doc, err := toGeneric(Default())
	if err != nil {
		return nil, fmt.Errorf("encode default inventory: %w", err)
	}
	root := doc.(map[string]any)
	for _, file := range files {
		overlay, err := readFile(file)
		if err != nil {
			return nil, err
		}
		mergeInto(root, overlay)
	}
	for _, s := range sets {
		if err := applySet(root, s); err != nil {
			return nil, err
		}
	}
	inv, err := decodeInventory(root)
	if err != nil {
		return nil, fmt.Errorf("decode effective inventory: %w", err)
	}
	return inv, nil
}

// readFile parses one inventory file into a checked generic mapping.
func readFile(file string) (map[string]any, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read inventory file: %w", err)
	}
	overlay, err := parseOverlay(data)
	if err != nil {
		return nil, fmt.Errorf("inventory file %s: %w", file, err)
	}
	return overlay, nil
}

// parseOverlay parses YAML (or JSON) into a generic mapping and checks it
// against the inventory schema.
func parseOverlay(data []byte) (map[string]any, error) {
	// Strict: duplicate keys are errors (the YAML spec forbids them).
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	doc, err := decodeGeneric(j)
	if err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	if doc == nil { // empty file or a lone null
		return map[string]any{}, nil
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the top level must be a mapping of inventory keys (%s), got %s", validKeys(inventoryType), describe(doc))
	}
	if errs := normalize("", m, inventoryType); len(errs) > 0 {
		return nil, joinProblems(errs)
	}
	return m, nil
}

// decodeInventory strictly decodes the generic document into a fresh
// Inventory. normalize has already rejected everything strict decoding
// would, with better messages; this is the single place that produces the
// typed value.
func decodeInventory(root map[string]any) (*Inventory, error) {
	if errs := normalize("", root, inventoryType); len(errs) > 0 {
		return nil, joinProblems(errs)
	}
	b, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	var inv Inventory
	if err := yaml.UnmarshalStrict(b, &inv); err != nil {
		return nil, err
	}
	return &inv, nil
}

// problems is several independent errors about one input, printed one per
// line under the caller's prefix.
type problems []error

func (p problems) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(p))
	for _, e := range p {
		b.WriteString("\n  - ")
		b.WriteString(e.Error())
	}
	return b.String()
}

func (p problems) Unwrap() []error { return p }

// joinProblems returns the only error, or all of them as problems.
func joinProblems(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return problems(errs)
}
