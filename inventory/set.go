package inventory

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// --set overrides: the syntax is documented at Load.

// stepKind says how one path step addresses its container.
type stepKind int

const (
	keyStep   stepKind = iota // .key on a mapping
	indexStep                 // [3] on a list
	nameStep                  // [rhoai] on a list, by id or name
)

// pathStep is one parsed element of a --set path.
type pathStep struct {
	kind  stepKind
	key   string // keyStep: the JSON key; nameStep: the id or name
	index int    // indexStep
}

// applySet applies one "path=value" override to the generic document.
func applySet(root map[string]any, set string) error {
	path, value, ok := strings.Cut(set, "=")
	if !ok {
		return fmt.Errorf("--set %q: want path=value, e.g. gateway.serviceType=LoadBalancer", set)
	}
	path = strings.TrimSpace(path)
	steps, err := parseSetPath(path)
	if err != nil {
		return fmt.Errorf("--set %s: %w", path, err)
	}
	if _, err := setIn(root, inventoryType, steps, "", value); err != nil {
		return fmt.Errorf("--set %s: %w", path, err)
	}
	return nil
}

// parseSetPath splits "a.b[0].c[name]" into steps.
func parseSetPath(p string) ([]pathStep, error) {
	if p == "" {
		return nil, errors.New("empty path; want e.g. gateway.hostname")
	}
	var steps []pathStep
	i := 0
	for {
		start := i
		for i < len(p) && p[i] != '.' && p[i] != '[' && p[i] != ']' {
			i++
		}
		if i == start {
			return nil, fmt.Errorf("empty key at offset %d", start)
		}
		steps = append(steps, pathStep{kind: keyStep, key: p[start:i]})
		for i < len(p) && p[i] == '[' {
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unclosed [ at offset %d", i)
			}
			sel := p[i+1 : i+end]
			i += end + 1
			if sel == "" {
				return nil, fmt.Errorf("empty [] at offset %d; want an index or a name", i-2)
			}
			if isDigits(sel) {
				n, err := strconv.Atoi(sel)
				if err != nil {
					return nil, fmt.Errorf("index %s is too large", sel)
				}
				steps = append(steps, pathStep{kind: indexStep, index: n})
			} else {
				steps = append(steps, pathStep{kind: nameStep, key: sel})
			}
		}
		if i == len(p) {
			return steps, nil
		}
		if p[i] != '.' {
			return nil, fmt.Errorf("unexpected %q at offset %d", p[i], i)
		}
		i++
	}
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// setIn sets value at steps below v (whose Go type is t) and returns the new
// v. at is the path walked so far, for messages.
func setIn(v any, t reflect.Type, steps []pathStep, at string, value string) (any, error) {
	if len(steps) == 0 {
		return parseSetValue(t, value)
	}
	st := steps[0]
	where := at
	if where == "" {
		where = "the top level"
	}
	switch st.kind {
	case keyStep:
		var childType reflect.Type
		switch t.Kind() {
		case reflect.Struct:
			f, ok := lookupField(t, st.key)
			if !ok {
				return nil, unknownKeyError(at, st.key, t)
			}
			childType = f.typ
		case reflect.Map:
			childType = t.Elem()
		case reflect.Slice:
			// "subscriptions.0" (Helm's and yq's habit) instead of
			// "subscriptions[0]": say how a list entry is addressed.
			sel := st.key
			if !isDigits(sel) {
				sel = "NAME"
			}
			return nil, fmt.Errorf("%s is %s: address an entry as %s[%s] (an index or the entry's id or name in brackets), not %s.%s", where, kindName(t), at, sel, at, st.key)
		default:
			return nil, fmt.Errorf("%s is %s and has no key %q", where, kindName(t), st.key)
		}
		m, _ := v.(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		child, err := setIn(m[st.key], childType, steps[1:], joinKey(at, st.key), value)
		if err != nil {
			return nil, err
		}
		m[st.key] = child
		return m, nil
	default:
		if t.Kind() != reflect.Slice {
			return nil, fmt.Errorf("%s is %s, not a list; it cannot be indexed", where, kindName(t))
		}
		l, _ := v.([]any)
		i := st.index
		label := strconv.Itoa(i)
		if st.kind == nameStep {
			var err error
			if i, err = selectElem(l, t.Elem(), st.key, where); err != nil {
				return nil, err
			}
			label = st.key
		} else if i >= len(l) {
			return nil, fmt.Errorf("index %d is out of range: %s has %d entries (appending is not supported with --set; use an inventory file)", i, where, len(l))
		}
		child, err := setIn(l[i], t.Elem(), steps[1:], fmt.Sprintf("%s[%s]", at, label), value)
		if err != nil {
			return nil, err
		}
		l[i] = child
		return l, nil
	}
}

// selectElem returns the index of the list element whose id (or, when the
// element type has no id, name) equals sel.
func selectElem(l []any, elem reflect.Type, sel, where string) (int, error) {
	if elem.Kind() != reflect.Struct {
		return 0, fmt.Errorf("entries of %s are %s and cannot be selected by name; use an index", where, kindName(elem))
	}
	keyField := ""
	for _, k := range []string{"id", "name"} {
		if _, ok := lookupField(elem, k); ok {
			keyField = k
			break
		}
	}
	if keyField == "" {
		return 0, fmt.Errorf("entries of %s have no id or name; use an index", where)
	}
	found := -1
	var have []string
	for i, e := range l {
		m, _ := e.(map[string]any)
		name, _ := m[keyField].(string)
		have = append(have, strconv.Quote(name))
		if name != sel {
			continue
		}
		if found >= 0 {
			return 0, fmt.Errorf("several entries of %s have %s %q; use an index", where, keyField, sel)
		}
		found = i
	}
	if found < 0 {
		list := "none"
		if len(have) > 0 {
			list = strings.Join(have, ", ")
		}
		return 0, fmt.Errorf("no entry of %s has %s %q; entries: %s", where, keyField, sel, list)
	}
	return found, nil
}

// parseSetValue turns the text after "=" into a generic value of type t.
func parseSetValue(t reflect.Type, value string) (any, error) {
	if t.Kind() == reflect.String {
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') {
			var s string
			if err := yaml.Unmarshal([]byte(value), &s); err != nil {
				return nil, fmt.Errorf("unquote %s: %w", value, err)
			}
			return s, nil
		}
		return value, nil
	}
	j, err := yaml.YAMLToJSONStrict([]byte(value))
	if err != nil {
		return nil, fmt.Errorf("parse value as YAML: %w", err)
	}
	g, err := decodeGeneric(j)
	if err != nil {
		return nil, fmt.Errorf("parse value as YAML: %w", err)
	}
	if g == nil {
		switch t.Kind() {
		case reflect.Slice, reflect.Map, reflect.Struct, reflect.Pointer:
			return nil, nil
		default:
			return nil, fmt.Errorf("needs %s, got an empty value", kindName(t))
		}
	}
	if errs := normalize("value", g, t); len(errs) > 0 {
		return nil, joinProblems(errs)
	}
	return g, nil
}
