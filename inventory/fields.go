package inventory

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/maasctl/maasctl/internal/suggest"
)

// The inventory is edited as generic JSON (map[string]any, []any, string,
// json.Number, bool, nil) so that YAML files and --set overrides share one
// code path. The Go types are the schema: the helpers here walk a generic
// value next to its reflect.Type.

// jsonField is one struct field as encoding/json sees it.
type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields returns the JSON-visible fields of struct type t in declaration
// order. The inventory types have no embedded structs, so embedding is not
// handled.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, typ: f.Type})
	}
	return out
}

// lookupField finds the field whose JSON name is exactly key. encoding/json
// would also accept a case-insensitive match; the inventory does not, so that
// "Port" in a file is reported instead of silently meaning "port".
func lookupField(t reflect.Type, key string) (jsonField, bool) {
	for _, f := range jsonFields(t) {
		if f.name == key {
			return f, true
		}
	}
	return jsonField{}, false
}

// validKeys lists the JSON names of struct type t, sorted, for error messages.
func validKeys(t reflect.Type) string {
	fs := jsonFields(t)
	names := make([]string, 0, len(fs))
	for _, f := range fs {
		names = append(names, f.name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// unknownKeyError describes a key that the struct type t does not have.
func unknownKeyError(where, key string, t reflect.Type) error {
	hint := ""
	var names []string
	for _, f := range jsonFields(t) {
		names = append(names, f.name)
		if hint == "" && strings.EqualFold(f.name, key) {
			hint = fmt.Sprintf(" (did you mean %q? keys are case-sensitive)", f.name)
		}
	}
	if near, ok := suggest.Closest(key, names); hint == "" && ok {
		hint = fmt.Sprintf(" (did you mean %q?)", near)
	}
	loc := "at the top level"
	if where != "" {
		loc = "in " + where
	}
	return fmt.Errorf("unknown key %q %s%s; valid keys: %s", key, loc, hint, validKeys(t))
}

// kindName names the JSON shape a Go type expects, for error messages.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping"
	default:
		return t.String()
	}
}

// describe names the JSON shape of a generic value, for error messages.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case json.Number:
		return "number " + x.String()
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// normalize checks generic value v against Go type t: every mapping key must
// be a field of the struct (exact case), every scalar must have the field's
// JSON kind. It returns one error per problem, each prefixed with its path
// (externalModels[0].port), so a file with several mistakes is reported in
// one go. null is accepted anywhere and means the zero value.
func normalize(path string, v any, t reflect.Type) []error {
	if v == nil {
		return nil
	}
	at := path
	if at == "" {
		at = "(top level)"
	}
	mismatch := func() []error {
		hint := ""
		if t.Kind() == reflect.String {
			hint = "; quote the value in YAML"
		}
		return []error{fmt.Errorf("%s: expected %s, got %s%s", at, kindName(t), describe(v), hint)}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return normalize(path, v, t.Elem())
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return mismatch()
		}
		var errs []error
		for _, key := range sortedKeys(m) {
			f, ok := lookupField(t, key)
			if !ok {
				errs = append(errs, unknownKeyError(path, key, t))
				continue
			}
			errs = append(errs, normalize(joinKey(path, key), m[key], f.typ)...)
		}
		return errs
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return mismatch()
		}
		var errs []error
		for _, key := range sortedKeys(m) {
			errs = append(errs, normalize(fmt.Sprintf("%s[%s]", path, key), m[key], t.Elem())...)
		}
		return errs
	case reflect.Slice, reflect.Array:
		l, ok := v.([]any)
		if !ok {
			return mismatch()
		}
		var errs []error
		for i, e := range l {
			errs = append(errs, normalize(fmt.Sprintf("%s[%d]", path, i), e, t.Elem())...)
		}
		return errs
	case reflect.String:
		if _, ok := v.(string); !ok {
			return mismatch()
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return mismatch()
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return mismatch()
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			return []error{fmt.Errorf("%s: expected an integer that fits in %d bits, got %s", at, t.Bits(), n)}
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			return mismatch()
		}
		if _, err := strconv.ParseUint(n.String(), 10, t.Bits()); err != nil {
			return []error{fmt.Errorf("%s: expected a non-negative integer that fits in %d bits, got %s", at, t.Bits(), n)}
		}
	}
	return nil
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// toGeneric turns a typed value into generic JSON with json.Number numbers.
func toGeneric(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeGeneric(b)
}

// decodeGeneric decodes JSON into generic values, keeping numbers exact.
func decodeGeneric(b []byte) (any, error) {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// mergeInto overlays src onto dst: mappings merge key by key, anything else
// (scalars, lists, null) replaces the old value whole. That is the documented
// rule for inventory files: a list in a file replaces the default list.
func mergeInto(dst, src map[string]any) {
	for k, sv := range src {
		sm, sIsMap := sv.(map[string]any)
		dm, dIsMap := dst[k].(map[string]any)
		if sIsMap && dIsMap {
			mergeInto(dm, sm)
			continue
		}
		dst[k] = sv
	}
}
