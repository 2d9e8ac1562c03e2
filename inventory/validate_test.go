package inventory

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v, want nil", err)
	}
}

func TestDSCComponentsCoverDefaults(t *testing.T) {
	// Default() sets every DSC v2 component to Managed or Removed exactly once.
	d := Default().RHOAI
	got := append(slices.Clone(d.ManagedComponents), d.RemovedComponents...)
	slices.Sort(got)
	if want := DSCComponents(); !slices.Equal(got, want) {
		t.Errorf("managed+removed = %v, want every DSC v2 component %v", got, want)
	}
}

// secondModel appends a valid second external model.
func secondModel(inv *Inventory) {
	m := inv.ExternalModels[0]
	m.Name = "gpt-4-1-mini"
	m.ProviderName = "openai"
	m.Endpoint = "api.openai.com"
	m.Port = 443
	m.TLS = true
	m.APIKeySecret = "openai-key"
	inv.ExternalModels = append(inv.ExternalModels, m)
}

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Inventory)
		// paths are all field paths the errors must have, in order; the
		// first error's text must contain detail.
		paths  []string
		detail string
	}{
		{"namespace not a label", func(i *Inventory) { i.Database.Namespace = "RHOAI_db" }, []string{"database.namespace"}, "use e.g. rhoai-db"},
		{"namespace empty", func(i *Inventory) { i.Database.Namespace = "" }, []string{"database.namespace"}, "Required value"},
		{"cluster name must start with a letter", func(i *Inventory) { i.Database.ClusterName = "1pg" }, []string{"database.clusterName"}, "DNS-1035"},
		{"cluster name too long for -rw Service", func(i *Inventory) { i.Database.ClusterName = strings.Repeat("a", 61) }, []string{"database.clusterName"}, "at most 60 characters"},
		{"secret name not a subdomain", func(i *Inventory) { i.Database.SecretName = "Bad Secret" }, []string{"database.secretName"}, "DNS-1123 subdomain"},
		{"owner not an identifier", func(i *Inventory) { i.Database.Owner = "maas-user" }, []string{"database.owner"}, "PostgreSQL identifier"},
		{"database name empty", func(i *Inventory) { i.Database.Name = "" }, []string{"database.name"}, "PostgreSQL identifier"},
		{"instances zero", func(i *Inventory) { i.Database.Instances = 0 }, []string{"database.instances"}, "at least 1"},
		{"storage size not a quantity", func(i *Inventory) { i.Database.StorageSize = "5GB" }, []string{"database.storageSize"}, "5Gi"},
		{"storage size zero", func(i *Inventory) { i.Database.StorageSize = "0" }, []string{"database.storageSize"}, "greater than zero"},
		{"storage size empty", func(i *Inventory) { i.Database.StorageSize = "" }, []string{"database.storageSize"}, "Required"},
		{"storage class invalid", func(i *Inventory) { i.Database.StorageClass = "Fast_SSD" }, []string{"database.storageClass"}, "subdomain"},
		{"max connections zero", func(i *Inventory) { i.Database.MaxConnections = 0 }, []string{"database.maxConnections"}, "at least 1"},
		{"password too short", func(i *Inventory) { i.Database.PasswordLength = 31 }, []string{"database.passwordLength"}, "at least 32"},
		{"vault path empty", func(i *Inventory) { i.Database.VaultPath = "" }, []string{"database.vaultPath"}, "mount/path"},
		{"vault path leading slash", func(i *Inventory) { i.Database.VaultPath = "/kv/x" }, []string{"database.vaultPath"}, "use kv/x"},
		{"vault path without path", func(i *Inventory) { i.Database.VaultPath = "kv" }, []string{"database.vaultPath"}, "needs a mount and a path"},
		{"vault path empty segment", func(i *Inventory) { i.Database.VaultPath = "kv//x" }, []string{"database.vaultPath"}, "empty segment"},
		{"vault path with metadata/", func(i *Inventory) { i.Database.VaultPath = "kv/metadata/cloudnativepg/maas-postgres" }, []string{"database.vaultPath"}, "give the logical path kv/cloudnativepg/maas-postgres"},
		{"KV v1 allowance with a KV v2 data/ path", func(i *Inventory) {
			i.Database.VaultPath, i.Database.VaultAllowUnprotectedKVv1 = "kv/data/cloudnativepg/maas-postgres", true
		}, []string{"database.vaultAllowUnprotectedKVv1"}, "is a KV v2 API path"},
		{"vault auth method unknown", func(i *Inventory) { i.Vault.Auth.Method = "ldap" }, []string{"vault.auth.method"}, "supported values"},
		{"vault kubernetes auth without role", func(i *Inventory) { i.Vault.Auth.Method = "kubernetes" }, []string{"vault.auth.role"}, "Vault role"},
		{"vault token auth with a role", func(i *Inventory) { i.Vault.Auth.Role = "maasctl" }, []string{"vault.auth.role"}, "only to methods kubernetes and approle"},
		{"vault approle with a role", func(i *Inventory) { i.Vault.Auth.Method = "approle"; i.Vault.Auth.Role = "x" }, []string{"vault.auth.role"}, "only to method kubernetes"},
		{"vault auth mount with auth/", func(i *Inventory) { i.Vault.Auth.Method = "approle"; i.Vault.Auth.MountPath = "auth/approle" }, []string{"vault.auth.mountPath"}, "without auth/"},
		{"kube token path without key", func(i *Inventory) { i.Vault.KubeTokenPath = "kv/data/lab/rhoai-deployer" }, []string{"vault.kubeTokenPath"}, "PATH:KEY"},
		{"kube token path without mount", func(i *Inventory) { i.Vault.KubeTokenPath = "deployer:token" }, []string{"vault.kubeTokenPath"}, "needs a mount and a path"},
		{"database operator approval", func(i *Inventory) { i.Database.Operator.Approval = "Auto" }, []string{"database.operator.approval"}, `supported values: "Automatic", "Manual"`},
		{"channel empty", func(i *Inventory) { i.Operators[0].Channel = "" }, []string{"operators[0].channel"}, "stable-3.5"},
		{"package empty", func(i *Inventory) { i.Operators[1].Package = "" }, []string{"operators[1].package"}, "OLM package"},
		{"source empty", func(i *Inventory) { i.Operators[2].Source = "" }, []string{"operators[2].source"}, "CatalogSource"},
		{"source namespace invalid", func(i *Inventory) { i.Operators[2].SourceNamespace = "openshift.marketplace" }, []string{"operators[2].sourceNamespace"}, "DNS-1123 label"},
		{"min version not semver", func(i *Inventory) { i.Operators[0].MinVersion = "1.4" }, []string{"operators[0].minVersion"}, "MAJOR.MINOR.PATCH"},
		{"min version with v", func(i *Inventory) { i.Operators[0].MinVersion = "v1.4.1" }, []string{"operators[0].minVersion"}, "use 1.4.1"},
		{"min version word", func(i *Inventory) { i.Operators[0].MinVersion = "latest" }, []string{"operators[0].minVersion"}, "semantic version"},
		{"operator namespace capitals", func(i *Inventory) { i.Operators[0].Namespace = "Openshift-Operators" }, []string{"operators[0].namespace"}, "use e.g. openshift-operators"},
		{"operator group invalid", func(i *Inventory) { i.Operators[1].OperatorGroup = "lws_group" }, []string{"operators[1].operatorGroup"}, "subdomain"},
		{"starting CSV invalid", func(i *Inventory) { i.Operators[2].StartingCSV = "rhods operator" }, []string{"operators[2].startingCSV"}, "ClusterServiceVersion"},
		{"operator ID empty", func(i *Inventory) { i.Operators[0].ID = "" }, []string{"operators[0].id"}, "Required"},
		{"duplicate operator ID", func(i *Inventory) { i.Operators[1].ID = "rhcl" }, []string{"operators[1].id"}, "operators[0] already uses this ID"},
		{"operator ID collides with database operator", func(i *Inventory) { i.Operators[0].ID = "cnpg" }, []string{"operators[0].id"}, "database.operator already uses"},
		{"duplicate package in namespace", func(i *Inventory) {
			i.Operators[2].Namespace = "openshift-operators"
			i.Operators[2].Package = "rhcl-operator"
		}, []string{"operators[2].package"}, "one Subscription per package"},
		{"Service Mesh operator entry (case N02)", func(i *Inventory) { i.Operators[1].Package = "servicemeshoperator3" }, []string{"operators[1].package"}, "never subscribes Service Mesh"},
		{"OSSM 2 operator entry (case N02)", func(i *Inventory) { i.Operators[1].Package = "servicemeshoperator" }, []string{"operators[1].package"}, "ingress operator installs it"},
		{"wildcard hostname", func(i *Inventory) { i.Gateway.Hostname = "*.apps.example.com" }, []string{"gateway.hostname"}, "use e.g. maas.apps.example.com"},
		{"hostname with scheme", func(i *Inventory) { i.Gateway.Hostname = "https://maas.example.com" }, []string{"gateway.hostname"}, "subdomain"},
		{"service type", func(i *Inventory) { i.Gateway.ServiceType = "NodePort" }, []string{"gateway.serviceType"}, `"ClusterIP", "LoadBalancer"`},
		{"controller name not a path", func(i *Inventory) { i.Gateway.ControllerName = "gateway-controller" }, []string{"gateway.controllerName"}, "domain-prefixed path"},
		{"gateway name with dot", func(i *Inventory) { i.Gateway.Name = "maas.gateway" }, []string{"gateway.name"}, "use e.g. maas-gateway"},
		{"gateway namespace empty", func(i *Inventory) { i.Gateway.Namespace = "" }, []string{"gateway.namespace"}, "Required"},
		{"cert issuer invalid", func(i *Inventory) { i.Gateway.CertIssuer = "Lets Encrypt" }, []string{"gateway.certIssuer"}, "ClusterIssuer"},
		{"cert issuer empty is fine, cert secret not", func(i *Inventory) { i.Gateway.CertIssuer = ""; i.Gateway.CertSecret = "" }, []string{"gateway.certSecret"}, "Required"},
		{"route name empty with route", func(i *Inventory) { i.Gateway.RouteName = "" }, []string{"gateway.routeName"}, "Required"},
		{"selector empty", func(i *Inventory) { i.Kuadrant.OperatorSelector = "" }, []string{"kuadrant.operatorSelector"}, "Required"},
		{"selector unparsable", func(i *Inventory) { i.Kuadrant.OperatorSelector = "app in (" }, []string{"kuadrant.operatorSelector"}, "label selector"},
		{"authorino service starts with digit", func(i *Inventory) { i.Kuadrant.AuthorinoService = "1authorino" }, []string{"kuadrant.authorinoService"}, "DNS-1035"},
		{"kuadrant namespace", func(i *Inventory) { i.Kuadrant.Namespace = "kuadrant_system" }, []string{"kuadrant.namespace"}, "use e.g. kuadrant-system"},
		// The RHCL operator env maasctl keeps (issue 14 item 4, cases B19
		// and N05): each setting is checked before any write.
		{"auth service timeout without unit (B19)", func(i *Inventory) { i.Kuadrant.AuthServiceTimeout = "2" }, []string{"kuadrant.authServiceTimeout"}, "positive duration such as 2s"},
		{"auth service timeout zero (B19)", func(i *Inventory) { i.Kuadrant.AuthServiceTimeout = "0s" }, []string{"kuadrant.authServiceTimeout"}, "positive duration such as 2s"},
		{"rate limit failure mode (N05)", func(i *Inventory) { i.Kuadrant.RateLimitFailureMode = "closed" }, []string{"kuadrant.rateLimitFailureMode"}, `"deny", "allow"`},
		{"operator env names an owned variable (B19)", func(i *Inventory) {
			i.Kuadrant.OperatorEnv = []EnvVar{{Name: "FOO", Value: "bar"}, {Name: EnvRateLimitCheckFailure, Value: "allow"}}
		}, []string{"kuadrant.operatorEnv[1].name"}, "is set from kuadrant.rateLimitFailureMode: set that field instead"},
		{"operator env gateway controller (B19)", func(i *Inventory) {
			i.Kuadrant.OperatorEnv = []EnvVar{{Name: EnvGatewayControllerNames, Value: "istio.io/gateway-controller"}}
		}, []string{"kuadrant.operatorEnv[0].name"}, "is set from gateway.controllerName"},
		{"operator env twice (B19)", func(i *Inventory) {
			i.Kuadrant.OperatorEnv = []EnvVar{{Name: "FOO", Value: "a"}, {Name: "FOO", Value: "b"}}
		}, []string{"kuadrant.operatorEnv[1].name"}, "Duplicate value"},
		{"operator env name invalid (B19)", func(i *Inventory) { i.Kuadrant.OperatorEnv = []EnvVar{{Name: "LOG LEVEL", Value: "debug"}} }, []string{"kuadrant.operatorEnv[0].name"}, "environment variable name"},
		{"operator env name empty (B19)", func(i *Inventory) { i.Kuadrant.OperatorEnv = []EnvVar{{Value: "debug"}} }, []string{"kuadrant.operatorEnv[0].name"}, "environment variable name"},
		{"ssl mode", func(i *Inventory) { i.DBConfig.SSLMode = "on" }, []string{"dbConfig.sslMode"}, `"verify-full"`},
		{"db config namespace differs from maas-api", func(i *Inventory) { i.DBConfig.Namespace = "other" }, []string{"dbConfig.namespace"}, "rhoai.maasAPINamespace (redhat-ai-gateway-infra)"},
		{"unknown component", func(i *Inventory) { i.RHOAI.ManagedComponents = append(i.RHOAI.ManagedComponents, "codeflare") }, []string{"rhoai.managedComponents[4]"}, "Unsupported value"},
		{"component managed and removed", func(i *Inventory) { i.RHOAI.RemovedComponents = append(i.RHOAI.RemovedComponents, "dashboard") }, []string{"rhoai.removedComponents[13]"}, "either Managed or Removed"},
		{"component twice", func(i *Inventory) { i.RHOAI.ManagedComponents = append(i.RHOAI.ManagedComponents, "kserve") }, []string{"rhoai.managedComponents[4]"}, "Duplicate"},
		{"aigateway not managed", func(i *Inventory) {
			i.RHOAI.ManagedComponents = []string{"dashboard", "kserve", "ogx"}
			i.RHOAI.RemovedComponents = append(i.RHOAI.RemovedComponents, "aigateway")
		}, []string{"rhoai.managedComponents"}, "must include aigateway"},
		{"maas namespace", func(i *Inventory) { i.RHOAI.MaaSNamespace = "Models" }, []string{"rhoai.maasNamespace"}, "DNS-1123 label"},
		{"dsc name", func(i *Inventory) { i.RHOAI.DSCName = "" }, []string{"rhoai.dscName"}, "Required"},
		{"endpoint with scheme", func(i *Inventory) { i.ExternalModels[0].Endpoint = "https://api.openai.com" }, []string{"externalModels[0].endpoint"}, "remove the scheme: use api.openai.com"},
		{"endpoint with port", func(i *Inventory) { i.ExternalModels[0].Endpoint = "api.openai.com:443" }, []string{"externalModels[0].endpoint"}, "remove the port: use api.openai.com and set port: 443"},
		{"endpoint with scheme and path", func(i *Inventory) { i.ExternalModels[0].Endpoint = "https://api.openai.com/v1" }, []string{"externalModels[0].endpoint"}, "remove the scheme and the path: use api.openai.com"},
		{"endpoint bare service name", func(i *Inventory) { i.ExternalModels[0].Endpoint = "llama-coder" }, []string{"externalModels[0].endpoint"}, "llama-coder.llm-coding-assistant.svc.cluster.local"},
		{"endpoint with underscore", func(i *Inventory) { i.ExternalModels[0].Endpoint = "llama_coder.example.com" }, []string{"externalModels[0].endpoint"}, "fully qualified host name"},
		{"endpoint empty", func(i *Inventory) { i.ExternalModels[0].Endpoint = "" }, []string{"externalModels[0].endpoint"}, "Required"},
		{"port zero", func(i *Inventory) { i.ExternalModels[0].Port = 0 }, []string{"externalModels[0].port"}, "between 1 and 65535"},
		{"port too big", func(i *Inventory) { i.ExternalModels[0].Port = 65536 }, []string{"externalModels[0].port"}, "between 1 and 65535"},
		{"provider type", func(i *Inventory) { i.ExternalModels[0].ProviderType = "gpt" }, []string{"externalModels[0].providerType"}, `"bedrock"`},
		{"api format empty", func(i *Inventory) { i.ExternalModels[0].APIFormat = "" }, []string{"externalModels[0].apiFormat"}, "openai-chat"},
		{"path without slash", func(i *Inventory) { i.ExternalModels[0].Path = "v1/chat/completions" }, []string{"externalModels[0].path"}, "use /v1/chat/completions"},
		{"path empty", func(i *Inventory) { i.ExternalModels[0].Path = "" }, []string{"externalModels[0].path"}, "Required"},
		{"dotted api key secret (B16)", func(i *Inventory) { i.ExternalModels[0].APIKeySecret = "gpt4.1-key" }, []string{"externalModels[0].apiKeySecret"}, "such as gpt4-1-key"},
		{"api key secret empty", func(i *Inventory) { i.ExternalModels[0].APIKeySecret = "" }, []string{"externalModels[0].apiKeySecret"}, "Required"},
		{"target model empty", func(i *Inventory) { i.ExternalModels[0].TargetModel = "" }, []string{"externalModels[0].targetModel"}, "Required"},
		{"provider name with dot", func(i *Inventory) { i.ExternalModels[0].ProviderName = "llama.provider" }, []string{"externalModels[0].providerName"}, "ExternalProvider name"},
		{"model name with dot, refs follow it", func(i *Inventory) {
			i.ExternalModels[0].Name = "qwen3.5"
			i.AuthPolicies[0].ModelRefs[0].Name = "qwen3.5"
			i.Subscriptions[0].ModelRefs[0].Name = "qwen3.5"
		}, []string{"externalModels[0].name"}, "use e.g. qwen3-5"},
		{"duplicate model name", func(i *Inventory) {
			secondModel(i)
			i.ExternalModels[1].Name = i.ExternalModels[0].Name
			i.ExternalModels[1].Namespace = "other"
		}, []string{"externalModels[1].name"}, "externalModels[0] has the same name"},
		{"shared provider with different endpoint", func(i *Inventory) {
			secondModel(i)
			i.ExternalModels[1].ProviderName = i.ExternalModels[0].ProviderName
		}, []string{"externalModels[1].providerName"}, "externalModels[0] uses this provider"},
		{"policy without subjects", func(i *Inventory) { i.AuthPolicies[0].Groups = nil }, []string{"authPolicies[0].groups"}, "at least one group or user"},
		{"policy with user only is fine, empty user is not", func(i *Inventory) { i.AuthPolicies[0].Groups = nil; i.AuthPolicies[0].Users = []string{""} }, []string{"authPolicies[0].users[0]"}, "Required"},
		{"policy without models", func(i *Inventory) { i.AuthPolicies[0].ModelRefs = nil; i.Subscriptions = nil }, []string{"authPolicies[0].modelRefs"}, "at least one model"},
		{"policy ref to unknown model", func(i *Inventory) { i.AuthPolicies[0].ModelRefs[0].Namespace = "other" },
			// The subscription's model then has no policy either (B17).
			[]string{"authPolicies[0].modelRefs[0]", "subscriptions[0].modelRefs[0]"},
			"no externalModels entry has name qwen35-9b-coder and namespace other; known models (namespace/name): llm-coding-assistant/qwen35-9b-coder"},
		{"policy ref twice", func(i *Inventory) {
			i.AuthPolicies[0].ModelRefs = append(i.AuthPolicies[0].ModelRefs, i.AuthPolicies[0].ModelRefs[0])
		}, []string{"authPolicies[0].modelRefs[1]"}, "listed twice"},
		{"policy name invalid", func(i *Inventory) { i.AuthPolicies[0].Name = "Llama Access" }, []string{"authPolicies[0].name"}, "MaaSAuthPolicy name"},
		{"duplicate policy names", func(i *Inventory) { i.AuthPolicies = append(i.AuthPolicies, i.AuthPolicies[0]) }, []string{"authPolicies[1].name"}, "authPolicies[0] has the same name"},
		{"window in days", func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Window = "1d" }, []string{"subscriptions[0].modelRefs[0].tokenRateLimits[0].window"}, "use 24h"},
		{"window too long", func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Window = "10000s" }, []string{"subscriptions[0].modelRefs[0].tokenRateLimits[0].window"}, "1 to 9999"},
		{"window leading zero", func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Window = "01h" }, []string{"subscriptions[0].modelRefs[0].tokenRateLimits[0].window"}, "1 to 9999"},
		{"window empty", func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Window = "" }, []string{"subscriptions[0].modelRefs[0].tokenRateLimits[0].window"}, "Required"},
		{"limit zero", func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Limit = 0 }, []string{"subscriptions[0].modelRefs[0].tokenRateLimits[0].limit"}, "between 1 and 1000000000"},
		{"limit too large", func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Limit = 2_000_000_000 }, []string{"subscriptions[0].modelRefs[0].tokenRateLimits[0].limit"}, "between 1 and"},
		{"no limits", func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].TokenRateLimits = nil }, []string{"subscriptions[0].modelRefs[0].tokenRateLimits"}, "at least one limit"},
		{"subscription without subjects", func(i *Inventory) { i.Subscriptions[0].Groups = nil }, []string{"subscriptions[0].groups"}, "at least one group or user"},
		{"subscription without models", func(i *Inventory) { i.Subscriptions[0].ModelRefs = nil }, []string{"subscriptions[0].modelRefs"}, "Required"},
		{"subscription ref to unknown model", func(i *Inventory) { i.Subscriptions[0].ModelRefs[0].Name = "gpt-5" }, []string{"subscriptions[0].modelRefs[0]"}, "no externalModels entry has name gpt-5"},
		{"subscription model without auth policy (B17)", func(i *Inventory) {
			secondModel(i)
			m := i.Subscriptions[0].ModelRefs[0]
			m.Name = "gpt-4-1-mini"
			i.Subscriptions[0].ModelRefs = append(i.Subscriptions[0].ModelRefs, m)
		}, []string{"subscriptions[0].modelRefs[1]"}, "No active governance pairing found"},
		{"duplicate subscription names", func(i *Inventory) {
			dup := i.Subscriptions[0]
			dup.Priority++
			i.Subscriptions = append(i.Subscriptions, dup)
		}, []string{"subscriptions[1].name"}, "subscriptions[0] has the same name"},
		{"two subscriptions share a priority", func(i *Inventory) {
			dup := i.Subscriptions[0]
			dup.Name = "llama-coder-premium"
			i.Subscriptions = append(i.Subscriptions, dup)
		}, []string{"subscriptions[1].priority"}, "subscriptions[0] has the same priority"},
		{"priority beyond int32", func(i *Inventory) { i.Subscriptions[0].Priority = 1 << 40 }, []string{"subscriptions[0].priority"}, "int32"},
		{"vault address without scheme", func(i *Inventory) { i.Vault.Address = "vault.example.com:8200" }, []string{"vault.address"}, "https://vault.example.com:8200"},
		{"wait timeout zero", func(i *Inventory) { i.WaitTimeoutSeconds = 0 }, []string{"waitTimeoutSeconds"}, "between 1 and"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := Default()
			tt.mutate(inv)
			err := inv.Validate()
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate() = %v, want *ValidationError", err)
			}
			var got []string
			for _, fe := range verr.Errs {
				got = append(got, fe.Field)
			}
			if !slices.Equal(got, tt.paths) {
				t.Fatalf("error paths = %q, want %q\n%v", got, tt.paths, err)
			}
			if msg := verr.Errs[0].Error(); !strings.Contains(msg, tt.detail) {
				t.Errorf("error %q does not contain %q", msg, tt.detail)
			}
		})
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	inv := Default()
	inv.ExternalModels[0].Endpoint = "http://llama-coder:8080"
	inv.Gateway.Hostname = "*.apps.example.com"
	inv.WaitTimeoutSeconds = -1
	err := inv.Validate()
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Validate() = %v, want *ValidationError", err)
	}
	if len(verr.Errs) != 3 {
		t.Fatalf("got %d errors, want 3:\n%v", len(verr.Errs), err)
	}
	msg := err.Error()
	for _, want := range []string{
		"invalid inventory (3 problems):",
		"\n  - gateway.hostname: Invalid value",
		"\n  - externalModels[0].endpoint: Invalid value: \"http://llama-coder:8080\": remove the scheme and the port: use llama-coder and set port: 8080",
		"\n  - waitTimeoutSeconds: Invalid value: -1",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error text lacks %q:\n%s", want, msg)
		}
	}
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Type != field.ErrorTypeInvalid {
		t.Errorf("errors.As(*field.Error) = %v, want the first field error", fe)
	}
}

// TestValidateVaultAccepts: the Vault settings issue 7 allows, including
// the KV v2 API path with data/ (the vault package resolves both forms).
func TestValidateVaultAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Inventory)
	}{
		{"database path with data/", func(i *Inventory) { i.Database.VaultPath = "kv/data/cloudnativepg/maas-postgres" }},
		{"kube token path", func(i *Inventory) { i.Vault.KubeTokenPath = "kv/data/lab/rhoai-deployer:token" }},
		{"kubernetes auth", func(i *Inventory) {
			i.Vault.Auth = VaultAuth{Method: "kubernetes", Role: "maasctl", MountPath: "kubernetes-prod", ServiceAccountTokenPath: "/tmp/jwt"}
		}},
		{"approle auth", func(i *Inventory) {
			i.Vault.Auth = VaultAuth{Method: "approle", RoleIDFile: "/run/role-id", SecretIDFile: "/run/secret-id"}
		}},
		{"approle from the environment", func(i *Inventory) { i.Vault.Auth = VaultAuth{Method: "approle"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := Default()
			tt.mutate(inv)
			if err := inv.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}
