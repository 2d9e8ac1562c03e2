package inventory

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestLoadSet(t *testing.T) {
	tests := []struct {
		name   string
		sets   []string
		modify func(*Inventory) // applied to Default() to get the expected result
	}{
		{"index", []string{"externalModels[0].port=8081"},
			func(i *Inventory) { i.ExternalModels[0].Port = 8081 }},
		{"operator by id", []string{"operators[rhoai].channel=stable-3.6"},
			func(i *Inventory) { i.Operators[2].Channel = "stable-3.6" }},
		{"subscription by name", []string{"subscriptions[llama-coder-default].priority=5"},
			func(i *Inventory) { i.Subscriptions[0].Priority = 5 }},
		{"nested by name and index", []string{"subscriptions[llama-coder-default].modelRefs[0].tokenRateLimits[0].window=24h"},
			func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Window = "24h" }},
		{"int64", []string{"subscriptions[0].modelRefs[qwen35-9b-coder].tokenRateLimits[0].limit=5000000000"},
			func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Limit = 5_000_000_000 }},
		{"bool false", []string{"gateway.createRoute=false"},
			func(i *Inventory) { i.Gateway.CreateRoute = false }},
		{"bool YAML 1.1 no", []string{"monitoring.enableUserWorkload=no"},
			func(i *Inventory) { i.Monitoring.EnableUserWorkload = false }},
		{"bool true", []string{"externalModels[0].tls=true"},
			func(i *Inventory) { i.ExternalModels[0].TLS = true }},
		{"int", []string{"waitTimeoutSeconds=1200"},
			func(i *Inventory) { i.WaitTimeoutSeconds = 1200 }},
		{"list", []string{"rhoai.managedComponents=[dashboard,aigateway]"},
			func(i *Inventory) { i.RHOAI.ManagedComponents = []string{"dashboard", "aigateway"} }},
		{"list with colons", []string{"authPolicies[llama-coder-access].groups=[system:authenticated, admins]"},
			func(i *Inventory) { i.AuthPolicies[0].Groups = []string{"system:authenticated", "admins"} }},
		{"list element", []string{"rhoai.managedComponents[1]=trainer"},
			func(i *Inventory) { i.RHOAI.ManagedComponents[1] = "trainer" }},
		{"empty list", []string{"authPolicies[0].users=[]"},
			func(i *Inventory) { i.AuthPolicies[0].Users = []string{} }},
		{"list of objects", []string{"authPolicies[0].modelRefs=[{name: a, namespace: b}]"},
			func(i *Inventory) { i.AuthPolicies[0].ModelRefs = []ModelRef{{Name: "a", Namespace: "b"}} }},
		{"string that looks like a number stays literal", []string{"operators[rhcl].channel=1.10"},
			func(i *Inventory) { i.Operators[0].Channel = "1.10" }},
		{"string that looks like a bool stays literal", []string{"database.owner=yes"},
			func(i *Inventory) { i.Database.Owner = "yes" }},
		{"quoted string", []string{"gateway.hostname='maas.apps.example.com'"},
			func(i *Inventory) { i.Gateway.Hostname = "maas.apps.example.com" }},
		{"value containing =", []string{"kuadrant.operatorSelector=app=kuadrant"},
			func(i *Inventory) { i.Kuadrant.OperatorSelector = "app=kuadrant" }},
		{"empty string", []string{"gateway.certIssuer="},
			func(i *Inventory) { i.Gateway.CertIssuer = "" }},
		{"field omitted by default", []string{"vault.address=https://vault.example.com:8200"},
			func(i *Inventory) { i.Vault.Address = "https://vault.example.com:8200" }},
		{"database operator", []string{"database.operator.approval=Manual"},
			func(i *Inventory) { i.Database.Operator.Approval = "Manual" }},
		{"later set wins", []string{"waitTimeoutSeconds=10", "waitTimeoutSeconds=20"},
			func(i *Inventory) { i.WaitTimeoutSeconds = 20 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(nil, tt.sets)
			if err != nil {
				t.Fatalf("Load(%q) = %v", tt.sets, err)
			}
			want := Default()
			tt.modify(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Load(%q) mismatch (-want +got):\n%s", tt.sets, diff)
			}
		})
	}
}

func TestLoadSetWinsOverFile(t *testing.T) {
	f := writeFile(t, "f.yaml", "gateway:\n  serviceType: LoadBalancer\n  hostname: a.example.com\n")
	got, err := Load([]string{f}, []string{"gateway.serviceType=ClusterIP"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Gateway.ServiceType != "ClusterIP" || got.Gateway.Hostname != "a.example.com" {
		t.Errorf("gateway = %+v, want serviceType from --set and hostname from the file", got.Gateway)
	}
}

func TestLoadSetOnFileList(t *testing.T) {
	// --set selects by name among the entries the files produced.
	f := writeFile(t, "f.yaml", "operators:\n- id: extra\n  package: p\n")
	got, err := Load([]string{f}, []string{"operators[extra].channel=fast"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Operator{{ID: "extra", Package: "p", Channel: "fast"}}
	if diff := cmp.Diff(want, got.Operators, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("operators mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadSetErrors(t *testing.T) {
	tests := []struct {
		name string
		set  string
		want []string
	}{
		{"unknown top-level key", "gatway.name=x",
			[]string{"--set gatway.name:", `unknown key "gatway" at the top level`, "valid keys: authPolicies, database, dbConfig, externalModels, gateway,"}},
		{"unknown nested key", "gateway.hostnme=x",
			[]string{"--set gateway.hostnme:", `unknown key "hostnme" in gateway (did you mean "hostname"?)`, "valid keys: certIssuer, certSecret, certificateName, className, controllerName, createRoute, hostname, name, namespace, routeName, serviceType"}},
		{"unknown key in element", "operators[rhoai].chanel=x",
			[]string{`unknown key "chanel" in operators[rhoai]`, "valid keys: allNamespaces, approval, channel"}},
		{"case differs", "gateway.Hostname=x",
			[]string{`did you mean "hostname"?`}},
		{"index out of range", "externalModels[3].port=1",
			[]string{"index 3 is out of range: externalModels has 1 entries"}},
		{"unknown name", "operators[nope].channel=x",
			[]string{`no entry of operators has id "nope"; entries: "rhcl", "lws", "rhoai"`}},
		{"not an integer", "externalModels[0].port=abc",
			[]string{"--set externalModels[0].port:", `expected an integer, got string "abc"`}},
		{"float for integer", "externalModels[0].port=80.5",
			[]string{"expected an integer that fits in 64 bits, got 80.5"}},
		{"not a bool", "gateway.createRoute=maybe",
			[]string{`expected a boolean (true or false), got string "maybe"`}},
		{"empty integer", "waitTimeoutSeconds=",
			[]string{"needs an integer, got an empty value"}},
		{"scalar for list", "rhoai.managedComponents=dashboard",
			[]string{`expected a list, got string "dashboard"`}},
		{"number in string list", "rhoai.managedComponents=[1.10]",
			[]string{"value[0]: expected a string, got number 1.1; quote the value"}},
		{"unknown key in object value", "authPolicies[0].modelRefs=[{nme: a}]",
			[]string{`unknown key "nme" in value[0] (did you mean "name"?); valid keys: name, namespace`}},
		{"no equals", "gateway.name",
			[]string{"want path=value"}},
		{"index on object", "gateway[0].name=x",
			[]string{"gateway is a mapping, not a list"}},
		{"dotted index on list", "subscriptions.0.name=x",
			[]string{"subscriptions is a list: address an entry as subscriptions[0] (an index or the entry's id or name in brackets), not subscriptions.0"}},
		{"dotted name on list", "operators.rhoai.channel=x",
			[]string{"address an entry as operators[NAME]", "not operators.rhoai"}},
		{"key on scalar", "gateway.name.x=y",
			[]string{`gateway.name is a string and has no key "x"`}},
		{"by name on string list", "rhoai.managedComponents[kserve]=x",
			[]string{"entries of rhoai.managedComponents are a string and cannot be selected by name"}},
		{"unclosed bracket", "operators[rhoai.channel=x",
			[]string{"unclosed ["}},
		{"empty key", "gateway..name=x",
			[]string{"empty key at offset 8"}},
		{"empty selector", "operators[].channel=x",
			[]string{"empty []"}},
		{"junk after bracket", "operators[0]x=y",
			[]string{`unexpected 'x'`}},
		{"empty path", "=x",
			[]string{"empty path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(nil, []string{tt.set})
			if err == nil {
				t.Fatalf("Load(--set %s) = nil error, want one", tt.set)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
