package inventory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// writeFile writes content to name in a fresh temp dir and returns the path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadNothingIsDefault(t *testing.T) {
	got, err := Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Load(nil, nil) differs from Default() (-want +got):\n%s", diff)
	}
}

func TestLoadTwoFilesLaterWins(t *testing.T) {
	first := writeFile(t, "first.yaml", `
gateway:
  hostname: first.apps.example.com
  serviceType: LoadBalancer
waitTimeoutSeconds: 1200
operators:
- id: rhoai
  package: rhods-operator
  channel: stable-3.5
`)
	second := writeFile(t, "second.yaml", `
gateway:
  hostname: maas.apps.example.com
monitoring:
  enableUserWorkload: false
`)
	got, err := Load([]string{first, second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Gateway.Hostname = "maas.apps.example.com" // second file wins
	want.Gateway.ServiceType = "LoadBalancer"       // first file, not overridden
	want.WaitTimeoutSeconds = 1200
	want.Monitoring.EnableUserWorkload = false
	// The list replaces the default list whole: no element-wise merge, so
	// fields not in the file are zero.
	want.Operators = []Operator{{ID: "rhoai", Package: "rhods-operator", Channel: "stable-3.5"}}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Load() mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadNullAndEmptyList(t *testing.T) {
	f := writeFile(t, "f.yaml", "gateway:\n  certIssuer: null\nrhoai:\n  removedComponents: []\n")
	got, err := Load([]string{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Gateway.CertIssuer != "" || len(got.RHOAI.RemovedComponents) != 0 {
		t.Errorf("certIssuer = %q, removedComponents = %v; want both emptied", got.Gateway.CertIssuer, got.RHOAI.RemovedComponents)
	}
	if got.Gateway.Name != "maas-default-gateway" {
		t.Errorf("gateway.name = %q, want the default kept", got.Gateway.Name)
	}
}

func TestLoadEmptyFile(t *testing.T) {
	for _, content := range []string{"", "# nothing\n", "null\n", "{}\n"} {
		got, err := Load([]string{writeFile(t, "empty.yaml", content)}, nil)
		if err != nil {
			t.Fatalf("content %q: %v", content, err)
		}
		if diff := cmp.Diff(Default(), got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("content %q changed the inventory:\n%s", content, diff)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string // substrings of the error
	}{
		{"unknown top-level key", "gatway:\n  name: x\n",
			[]string{"bad.yaml", `unknown key "gatway" at the top level`, "valid keys: authPolicies, database, dbConfig"}},
		{"unknown nested key in a list", "externalModels:\n- name: m\n  prot: 8080\n",
			[]string{"bad.yaml", `unknown key "prot" in externalModels[0]`, "valid keys: apiFormat, apiKeySecret"}},
		{"key differs in case", "gateway:\n  HostName: maas.example.com\n",
			[]string{`unknown key "HostName" in gateway`, `did you mean "hostname"?`}},
		{"deep unknown key", "subscriptions:\n- name: s\n  modelRefs:\n  - name: m\n    tokenRateLimits:\n    - limit: 1\n      windw: 1h\n",
			[]string{`unknown key "windw" in subscriptions[0].modelRefs[0].tokenRateLimits[0]`, "valid keys: limit, window"}},
		{"several problems at once", "gatway: {}\nwaitTimeoutSeconds: soon\n",
			[]string{"bad.yaml: 2 problems:\n  - ", `unknown key "gatway"`, "\n  - waitTimeoutSeconds: expected an integer, got string \"soon\""}},
		{"string for integer", "externalModels:\n- port: http\n",
			[]string{`externalModels[0].port: expected an integer, got string "http"`}},
		{"float for integer", "database:\n  instances: 1.5\n",
			[]string{"database.instances: expected an integer that fits in 64 bits, got 1.5"}},
		{"number for string", "operators:\n- channel: 1.10\n",
			[]string{"operators[0].channel: expected a string, got number 1.1; quote the value in YAML"}},
		{"yes for string", "operators:\n- approval: yes\n",
			[]string{"operators[0].approval: expected a string, got boolean true"}},
		{"string for bool", "gateway:\n  createRoute: \"false\"\n",
			[]string{`gateway.createRoute: expected a boolean (true or false), got string "false"`}},
		{"scalar for list", "rhoai:\n  managedComponents: dashboard\n",
			[]string{`rhoai.managedComponents: expected a list, got string "dashboard"`}},
		{"list at top level", "- a\n- b\n",
			[]string{"the top level must be a mapping"}},
		{"duplicate key", "gateway:\n  name: a\n  name: b\n",
			[]string{"bad.yaml", "parse YAML", "already set"}},
		{"not YAML", "gateway: [\n",
			[]string{"bad.yaml", "parse YAML"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := writeFile(t, "bad.yaml", tt.content)
			_, err := Load([]string{f}, nil)
			if err == nil {
				t.Fatal("Load() = nil error, want one")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load([]string{p}, nil)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Load(missing) = %v, want an error naming %s", err, p)
	}
}

func TestLoadSecondFileErrorNamesIt(t *testing.T) {
	good := writeFile(t, "good.yaml", "waitTimeoutSeconds: 60\n")
	bad := writeFile(t, "bad.yaml", "vault:\n  adress: https://vault:8200\n")
	_, err := Load([]string{good, bad}, nil)
	if err == nil || !strings.Contains(err.Error(), "inventory file "+bad+":") || strings.Contains(err.Error(), good) {
		t.Fatalf("Load() = %v, want an error naming only %s", err, bad)
	}
	if !strings.Contains(err.Error(), `unknown key "adress" in vault (did you mean "address"?); valid keys: address`) {
		t.Errorf("error %q lacks the key path and valid keys", err)
	}
}
