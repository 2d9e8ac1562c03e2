package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// AnsiblePrefix starts every variable of the original Ansible role
// (roles/rhoai_maas, reference/DEPLOYMENT.md "Configuration reference" and
// "Administer").
const AnsiblePrefix = "rhoai_maas_"

// Unmapped is a value of an Ansible variable that import did not translate,
// with the reason. Import never guesses a value it cannot read literally.
type Unmapped struct {
	// File is the vars file the value came from.
	File string `json:"file"`
	// Path is the variable, with the position inside it when the value is
	// nested: rhoai_maas_subscriptions[1].groups[0].
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

func (u Unmapped) String() string { return fmt.Sprintf("%s (%s): %s", u.Path, u.File, u.Reason) }

// AnsibleImport is the result of reading Ansible group_vars/host_vars files.
type AnsibleImport struct {
	// Files are the files read, in order; later files win per variable,
	// like Ansible's variable precedence between host_vars and group_vars
	// when given in that order.
	Files []string
	// Overlay is the inventory overlay (lowerCamelCase keys, the format of
	// an inventory file) built from the variables that could be mapped.
	Overlay map[string]any
	// Imported lists the rhoai_maas_* variables that were translated.
	Imported []string
	// Unmapped lists what was not translated: Jinja expressions and
	// lookups, Ansible Vault ciphertext, unknown variables and keys.
	Unmapped []Unmapped
}

// IsAnsibleVars reports whether data is an Ansible vars file: a YAML mapping
// with at least one rhoai_maas_* key.
func IsAnsibleVars(data []byte) bool {
	m := map[string]any{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return false
	}
	for k := range m {
		if strings.HasPrefix(k, AnsiblePrefix) {
			return true
		}
	}
	return false
}

// scalar and list converters for one variable.
type ansibleVar struct {
	path []string // inventory key path
	conv func(imp *importer, varPath string, v any) (any, bool)
}

// ansibleVars maps the role's variables to inventory keys. The role's list
// items use snake_case keys; they map to the inventory's lowerCamelCase.
var ansibleVars = map[string]ansibleVar{
	"rhoai_maas_hostname":               {[]string{"gateway", "hostname"}, plain},
	"rhoai_maas_gateway_cert_secret":    {[]string{"gateway", "certSecret"}, plain},
	"rhoai_maas_gateway_cert_issuer":    {[]string{"gateway", "certIssuer"}, plain},
	"rhoai_maas_gateway_service_type":   {[]string{"gateway", "serviceType"}, plain},
	"rhoai_maas_gateway_create_route":   {[]string{"gateway", "createRoute"}, plain},
	"rhoai_maas_db_secret_name":         {[]string{"database", "secretName"}, plain},
	"rhoai_maas_db_secret_namespace":    {[]string{"database", "namespace"}, plain},
	"rhoai_maas_db_sslmode":             {[]string{"dbConfig", "sslMode"}, plain},
	"rhoai_maas_dsc_managed_components": {[]string{"rhoai", "managedComponents"}, plain},
	"rhoai_maas_dsc_removed_components": {[]string{"rhoai", "removedComponents"}, plain},
	"rhoai_maas_wait_timeout":           {[]string{"waitTimeoutSeconds"}, plain},
	"rhoai_maas_external_models":        {[]string{"externalModels"}, items(externalModelKeys)},
	"rhoai_maas_auth_policies":          {[]string{"authPolicies"}, items(authPolicyKeys)},
	"rhoai_maas_subscriptions":          {[]string{"subscriptions"}, items(subscriptionKeys)},
	"rhoai_maas_operators":              {[]string{"operators"}, operators},
}

// itemKeys maps a role list item's keys to inventory keys; a nested
// converter handles a key whose value is itself a list of items.
type itemKeys map[string]struct {
	to   string
	conv func(imp *importer, varPath string, v any) (any, bool)
}

var modelRefKeys = itemKeys{
	"name":      {"name", plain},
	"namespace": {"namespace", plain},
}

var tokenRateLimitKeys = itemKeys{
	"limit":  {"limit", plain},
	"window": {"window", plain},
}

var subscriptionModelKeys = itemKeys{
	"name":      {"name", plain},
	"namespace": {"namespace", plain},
	// DEPLOYMENT.md's own example spells it tokenRateLimits (the CRD's
	// name) inside otherwise snake_case items; accept both.
	"tokenRateLimits":   {"tokenRateLimits", items(tokenRateLimitKeys)},
	"token_rate_limits": {"tokenRateLimits", items(tokenRateLimitKeys)},
}

var externalModelKeys = itemKeys{
	"name":           {"name", plain},
	"namespace":      {"namespace", plain},
	"display_name":   {"displayName", plain},
	"provider_name":  {"providerName", plain},
	"provider_type":  {"providerType", plain},
	"endpoint":       {"endpoint", plain},
	"port":           {"port", plain},
	"tls":            {"tls", plain},
	"api_key_secret": {"apiKeySecret", plain},
	"target_model":   {"targetModel", plain},
	"api_format":     {"apiFormat", plain},
	"path":           {"path", plain},
}

var authPolicyKeys = itemKeys{
	"name":       {"name", plain},
	"groups":     {"groups", plain},
	"users":      {"users", plain},
	"model_refs": {"modelRefs", items(modelRefKeys)},
}

var subscriptionKeys = itemKeys{
	"name":         {"name", plain},
	"display_name": {"displayName", plain},
	"priority":     {"priority", plain},
	"groups":       {"groups", plain},
	"users":        {"users", plain},
	"model_refs":   {"modelRefs", items(subscriptionModelKeys)},
}

var operatorKeys = itemKeys{
	"name":                  {"package", plain},
	"package":               {"package", plain},
	"channel":               {"channel", plain},
	"namespace":             {"namespace", plain},
	"source":                {"source", plain},
	"source_namespace":      {"sourceNamespace", plain},
	"approval":              {"approval", plain},
	"install_plan_approval": {"approval", plain},
	"operator_group":        {"operatorGroup", plain},
	"starting_csv":          {"startingCSV", plain},
	"min_version":           {"minVersion", plain},
}

type importer struct {
	file     string
	unmapped []Unmapped
}

func (imp *importer) reject(path, reason string) {
	imp.unmapped = append(imp.unmapped, Unmapped{File: imp.file, Path: path, Reason: reason})
}

// literal reports whether every string inside v can be taken literally:
// no Jinja ({{ }}, {% %}), no Ansible Vault ciphertext. It records each
// value that cannot.
func (imp *importer) literal(path string, v any) bool {
	ok := true
	switch t := v.(type) {
	case string:
		switch {
		case strings.Contains(t, "{{") || strings.Contains(t, "{%"):
			reason := "a Jinja expression; its value is only known to Ansible"
			if strings.Contains(t, "lookup(") || strings.Contains(t, "query(") {
				reason = "an Ansible lookup; its value is only known to Ansible"
			}
			imp.reject(path, fmt.Sprintf("%s (%q)", reason, t))
			ok = false
		case strings.HasPrefix(strings.TrimSpace(t), "$ANSIBLE_VAULT"):
			imp.reject(path, "Ansible Vault ciphertext (!vault); decrypt it or put the plain value in the inventory")
			ok = false
		}
	case []any:
		for i, x := range t {
			if !imp.literal(fmt.Sprintf("%s[%d]", path, i), x) {
				ok = false
			}
		}
	case map[string]any:
		keys := sortedKeys(t)
		for _, k := range keys {
			if !imp.literal(path+"."+k, t[k]) {
				ok = false
			}
		}
	}
	return ok
}

// plain takes a value as it is (after the literal check).
func plain(imp *importer, path string, v any) (any, bool) { return v, true }

// items converts a list of role items with keys.
func items(keys itemKeys) func(imp *importer, path string, v any) (any, bool) {
	return func(imp *importer, path string, v any) (any, bool) {
		list, ok := v.([]any)
		if !ok {
			imp.reject(path, "expected a list, got "+describe(v))
			return nil, false
		}
		out := make([]any, 0, len(list))
		good := true
		for i, it := range list {
			ip := fmt.Sprintf("%s[%d]", path, i)
			m, ok := it.(map[string]any)
			if !ok {
				imp.reject(ip, "expected a mapping, got "+describe(it))
				good = false
				continue
			}
			item := map[string]any{}
			for _, k := range sortedKeys(m) {
				spec, known := keys[k]
				if !known {
					imp.reject(ip+"."+k, "unknown key; the role's keys here are "+strings.Join(itemKeyNames(keys), ", "))
					good = false
					continue
				}
				if _, dup := item[spec.to]; dup {
					imp.reject(ip+"."+k, "given twice (under two spellings)")
					good = false
					continue
				}
				cv, ok := spec.conv(imp, ip+"."+k, m[k])
				if !ok {
					good = false
					continue
				}
				item[spec.to] = cv
			}
			out = append(out, item)
		}
		return out, good
	}
}

func itemKeyNames(keys itemKeys) []string {
	var out []string
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// operatorIDs are the inventory IDs of the role's operators by package.
var operatorIDs = map[string]string{"rhcl-operator": "rhcl", "leader-worker-set": "lws", "rhods-operator": "rhoai"}

// operators converts rhoai_maas_operators. Each entry overrides the default
// operator with the same package (the role's variable carries channel and
// catalog, not the OperatorGroup shape maasctl also needs); an entry for
// another package starts empty and must be complete.
func operators(imp *importer, path string, v any) (any, bool) {
	conv, ok := items(operatorKeys)(imp, path, v)
	if !ok {
		return nil, false
	}
	defaults := map[string]Operator{}
	for _, op := range Default().Operators {
		defaults[op.Package] = op
	}
	var out []any
	for i, it := range conv.([]any) {
		m := it.(map[string]any)
		pkg, _ := m["package"].(string)
		if pkg == "" {
			imp.reject(fmt.Sprintf("%s[%d]", path, i), "no name (the OLM package)")
			return nil, false
		}
		base := map[string]any{}
		if d, ok := defaults[pkg]; ok {
			g, err := toGeneric(d)
			if err != nil {
				return nil, false
			}
			base = g.(map[string]any)
		} else {
			id := operatorIDs[pkg]
			if id == "" {
				id = strings.TrimSuffix(pkg, "-operator")
			}
			base["id"] = id
		}
		for k, x := range m {
			base[k] = x
		}
		out = append(out, base)
	}
	return out, true
}

// ImportAnsible reads rhoai_maas_* variables from Ansible vars files
// (group_vars/host_vars YAML) and builds the equivalent inventory overlay.
// Later files win per variable. Variables without the prefix are ignored;
// rhoai_maas_* variables import does not know, and values it cannot read
// literally (Jinja, lookups, vault ciphertext), are listed in Unmapped and
// left out: a variable with any such value inside is left out whole, since
// an inventory list replaces the default list whole.
//
// Errors: unreadable files, invalid YAML, or mapped values of the wrong
// shape for the inventory (named by inventory path and file).
func ImportAnsible(files ...string) (*AnsibleImport, error) {
	res := &AnsibleImport{Files: files, Overlay: map[string]any{}}
	type source struct {
		file string
		val  any
	}
	vars := map[string]source{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read Ansible vars file: %w", err)
		}
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("Ansible vars file %s: parse YAML: %w", f, err)
		}
		doc, err := decodeGeneric(j)
		if err != nil {
			return nil, fmt.Errorf("Ansible vars file %s: parse YAML: %w", f, err)
		}
		if doc == nil {
			continue
		}
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("Ansible vars file %s: the top level must be a mapping of variables, got %s", f, describe(doc))
		}
		for k, v := range m {
			if strings.HasPrefix(k, AnsiblePrefix) {
				vars[k] = source{f, v}
			}
		}
	}
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		src := vars[name]
		imp := &importer{file: src.file}
		spec, known := ansibleVars[name]
		switch {
		case !known || spec.conv == nil:
			imp.reject(name, "not a variable of the rhoai_maas role that maasctl knows")
		case imp.literal(name, src.val):
			if v, ok := spec.conv(imp, name, src.val); ok {
				setPath(res.Overlay, spec.path, v)
				res.Imported = append(res.Imported, name)
			}
		}
		res.Unmapped = append(res.Unmapped, imp.unmapped...)
	}
	// Check the overlay against the inventory schema, naming the file.
	b, err := json.Marshal(res.Overlay)
	if err != nil {
		return nil, err
	}
	if _, err := parseOverlay(b); err != nil {
		return nil, fmt.Errorf("Ansible vars %s: %w", strings.Join(files, ", "), err)
	}
	return res, nil
}

func setPath(m map[string]any, path []string, v any) {
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// YAML renders the import as an inventory file: a header naming the source
// files and every value that was not imported, then the overlay.
func (a *AnsibleImport) YAML() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# maasctl inventory imported from Ansible vars: %s\n", strings.Join(a.Files, ", "))
	if len(a.Unmapped) > 0 {
		b.WriteString("# Not imported (set these by hand):\n")
		for _, u := range a.Unmapped {
			fmt.Fprintf(&b, "#   %s\n", u)
		}
	}
	body, err := yaml.Marshal(a.Overlay)
	if err != nil {
		return nil, err
	}
	if len(a.Overlay) == 0 {
		body = []byte("{}\n")
	}
	b.Write(body)
	return b.Bytes(), nil
}

// UnmappedError says that an Ansible vars file given as an inventory holds
// values maasctl cannot use as they are.
type UnmappedError struct {
	Unmapped []Unmapped
}

func (e *UnmappedError) Error() string {
	var s []string
	for _, u := range e.Unmapped {
		s = append(s, "\n  - "+u.String())
	}
	return "the Ansible vars hold values maasctl cannot use as they are:" + strings.Join(s, "") +
		"\nconvert the file with 'maasctl inventory import FILE > inventory.yaml', set those values there, and pass that file"
}

// LoadWithAnsible is Load, except that a file whose top level has
// rhoai_maas_* keys is read as Ansible vars (ImportAnsible) instead of as an
// inventory file. Values such a file holds that import cannot map are an
// *UnmappedError: install never guesses them.
func LoadWithAnsible(files []string, sets []string) (*Inventory, error) {
	doc, err := toGeneric(Default())
	if err != nil {
		return nil, fmt.Errorf("encode default inventory: %w", err)
	}
	root := doc.(map[string]any)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read inventory file: %w", err)
		}
		var overlay map[string]any
		if IsAnsibleVars(data) {
			imp, err := ImportAnsible(file)
			if err != nil {
				return nil, err
			}
			if len(imp.Unmapped) > 0 {
				return nil, fmt.Errorf("inventory file %s: %w", file, &UnmappedError{Unmapped: imp.Unmapped})
			}
			b, err := json.Marshal(imp.Overlay)
			if err != nil {
				return nil, err
			}
			if overlay, err = parseOverlay(b); err != nil {
				return nil, fmt.Errorf("inventory file %s: %w", file, err)
			}
		} else if overlay, err = readFile(file); err != nil {
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
