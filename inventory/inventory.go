// Package inventory holds the typed description of one maasctl deployment: the
// default inventory (the table in DESIGN.md, "What gets deployed"), loading of
// YAML files and --set overrides, and validation with field paths. It never
// talks to a cluster.
package inventory

// Inventory is everything maasctl deploys. The zero value is not useful; start
// from Default() and overlay user files with Load.
//
// YAML keys are lowerCamelCase; unknown keys are rejected by Load.
type Inventory struct {
	// Database is the CloudNativePG database that stores MaaS API keys.
	Database Database `json:"database"`
	// Operators are the OLM Subscriptions installed in the operators phase,
	// keyed by a short ID ("rhcl", "lws", "rhoai").
	Operators []Operator `json:"operators"`
	// Monitoring turns on User Workload Monitoring.
	Monitoring Monitoring `json:"monitoring"`
	// Gateway is the MaaS Gateway, its certificate and its Route.
	Gateway Gateway `json:"gateway"`
	// Kuadrant is the Kuadrant instance and Authorino TLS.
	Kuadrant Kuadrant `json:"kuadrant"`
	// DBConfig is the Secret that gives maas-api its database URL.
	DBConfig DBConfig `json:"dbConfig"`
	// RHOAI is the DSCInitialization, DataScienceCluster and dashboard config.
	RHOAI RHOAI `json:"rhoai"`
	// ExternalModels are the OpenAI-compatible servers published through MaaS.
	ExternalModels []ExternalModel `json:"externalModels"`
	// AuthPolicies decide who may call which model (MaaSAuthPolicy).
	AuthPolicies []AuthPolicy `json:"authPolicies"`
	// Subscriptions decide how many tokens callers get (MaaSSubscription).
	Subscriptions []Subscription `json:"subscriptions"`
	// Vault is where the database password is kept.
	Vault Vault `json:"vault"`
	// WaitTimeoutSeconds bounds every wait of every step, in seconds
	// (rhoai_maas_wait_timeout). Default 900.
	WaitTimeoutSeconds int `json:"waitTimeoutSeconds"`
}

// Database describes the CNPG Cluster and its credentials.
type Database struct {
	// Operator is the CNPG operator Subscription; it is only created when the
	// cluster does not already serve postgresql.cnpg.io.
	Operator Operator `json:"operator"`
	// Namespace of the Cluster and its Secret. Default rhoai-maas-db.
	Namespace string `json:"namespace"`
	// ClusterName is the CNPG Cluster name. Default maas-postgres.
	ClusterName string `json:"clusterName"`
	// SecretName is the basic-auth Secret with the owner's credentials
	// (rhoai_maas_db_secret_name). Default maas-postgres-secret.
	SecretName string `json:"secretName"`
	// Owner is the database user. Default maas.
	Owner string `json:"owner"`
	// Name is the database created by initdb. Default maas.
	Name string `json:"name"`
	// Instances is the number of PostgreSQL instances. Default 1.
	Instances int `json:"instances"`
	// StorageSize is the PVC size as a Kubernetes quantity. Default 5Gi.
	StorageSize string `json:"storageSize"`
	// StorageClass is the PVC storage class; empty means the cluster default.
	StorageClass string `json:"storageClass,omitempty"`
	// MaxConnections is PostgreSQL max_connections. Default 100.
	MaxConnections int `json:"maxConnections"`
	// VaultPath is the logical KV path of the password
	// (mount/path, without data/). Default kv/cloudnativepg/maas-postgres.
	VaultPath string `json:"vaultPath"`
	// PasswordLength is the length of a generated password, ≥ 32. Default 40.
	PasswordLength int `json:"passwordLength"`
	// VaultAllowUnprotectedKVv1 accepts a KV v1 mount at VaultPath. KV v1
	// has no check-and-set, so a write always overwrites: maasctl cannot
	// create the password only if it is absent, and two runs at once may
	// store two different passwords. Without it (the default, false)
	// maasctl refuses a KV v1 mount before writing; with it, preflight
	// warns. Use a KV v2 mount instead where you can.
	VaultAllowUnprotectedKVv1 bool `json:"vaultAllowUnprotectedKVv1,omitempty"`
	// ClientImage is the image of the short Jobs that prove (and, on
	// `maasctl database rotate-password`, change) the owner's password on
	// the live database; it must hold psql and sh. Empty means
	// DefaultDBClientImage (CloudNativePG's PostgreSQL operand image).
	ClientImage string `json:"clientImage,omitempty"`
}

// DefaultDBClientImage is the Database.ClientImage used when none is set:
// the PostgreSQL image CloudNativePG runs its instances with
// (ghcr.io/cloudnative-pg/postgresql, which ships psql).
const DefaultDBClientImage = "ghcr.io/cloudnative-pg/postgresql:17"

// Operator is one OLM Subscription with its Namespace and OperatorGroup.
type Operator struct {
	// ID is the short name used in step IDs (operators/<id>).
	ID string `json:"id"`
	// Package is the OLM package name (Subscription spec.name).
	Package string `json:"package"`
	// Channel is the pinned update channel.
	Channel string `json:"channel"`
	// Source and SourceNamespace name the CatalogSource.
	Source          string `json:"source"`
	SourceNamespace string `json:"sourceNamespace"`
	// Namespace is where the Subscription and the operator live.
	Namespace string `json:"namespace"`
	// OperatorGroup is the name used when a new OperatorGroup must be created;
	// a compatible existing one is always reused instead.
	OperatorGroup string `json:"operatorGroup"`
	// AllNamespaces selects an all-namespaces OperatorGroup (no targetNamespaces);
	// otherwise the group targets its own namespace.
	AllNamespaces bool `json:"allNamespaces"`
	// Approval is the InstallPlan approval: Automatic or Manual.
	Approval string `json:"approval"`
	// MinVersion is the lowest acceptable CSV version (semver without "v");
	// empty means any. RHCL 1.4.0 has a known auth bypass, so 1.4.1.
	MinVersion string `json:"minVersion,omitempty"`
	// StartingCSV optionally pins the first CSV.
	StartingCSV string `json:"startingCSV,omitempty"`
}

// Monitoring is the User Workload Monitoring switch.
type Monitoring struct {
	// EnableUserWorkload merges enableUserWorkload: true into
	// openshift-monitoring/cluster-monitoring-config. Default true.
	EnableUserWorkload bool `json:"enableUserWorkload"`
}

// Gateway describes the Gateway API objects in front of MaaS.
type Gateway struct {
	// ClassName is the GatewayClass. Default openshift-default.
	ClassName string `json:"className"`
	// ControllerName is the GatewayClass controller.
	// Default openshift.io/gateway-controller/v1.
	ControllerName string `json:"controllerName"`
	// Name and Namespace of the Gateway. Default maas-default-gateway,
	// openshift-ingress.
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Hostname is the one host the Gateway serves; empty means
	// maas.<spec.domain of config.openshift.io/v1 Ingress cluster>
	// (rhoai_maas_hostname). Never a wildcard.
	Hostname string `json:"hostname,omitempty"`
	// CertificateName is the cert-manager Certificate.
	// Default maas-default-gateway-cert.
	CertificateName string `json:"certificateName"`
	// CertSecret is the TLS Secret in the Gateway namespace
	// (rhoai_maas_gateway_cert_secret). Default maas-gateway-tls.
	CertSecret string `json:"certSecret"`
	// CertIssuer is the ClusterIssuer (rhoai_maas_gateway_cert_issuer); empty
	// means bring your own Secret. Default letsencrypt-production.
	CertIssuer string `json:"certIssuer"`
	// ServiceType is the Gateway's Service type, ClusterIP or LoadBalancer
	// (rhoai_maas_gateway_service_type). Default ClusterIP.
	ServiceType string `json:"serviceType"`
	// CreateRoute adds the passthrough Route (rhoai_maas_gateway_create_route).
	// Default true.
	CreateRoute bool `json:"createRoute"`
	// RouteName is the passthrough Route. Default maas-default-gateway-https.
	RouteName string `json:"routeName"`
}

// Kuadrant describes the Kuadrant instance and Authorino TLS.
type Kuadrant struct {
	// Name and Namespace of the Kuadrant CR. Default kuadrant, kuadrant-system.
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// OperatorNamespace holds the Kuadrant operator pod that is restarted once
	// on MissingDependency. Default openshift-operators.
	OperatorNamespace string `json:"operatorNamespace"`
	// OperatorSelector selects that pod.
	// Default app=kuadrant,control-plane=controller-manager.
	OperatorSelector string `json:"operatorSelector"`
	// AuthorinoTLS turns on Authorino's listener TLS with a service-CA
	// certificate. Default true.
	AuthorinoTLS bool `json:"authorinoTLS"`
	// AuthorinoName is the Authorino CR Kuadrant creates. Default authorino.
	AuthorinoName string `json:"authorinoName"`
	// AuthorinoService is the Service annotated for the service-CA certificate.
	// Default authorino-authorino-authorization.
	AuthorinoService string `json:"authorinoService"`
	// AuthorinoCertSecret is the Secret the service CA writes.
	// Default authorino-server-cert.
	AuthorinoCertSecret string `json:"authorinoCertSecret"`
	// AuthServiceTimeout is how long the gateway's Wasm shim waits for
	// Authorino per request (the Kuadrant operator's AUTH_SERVICE_TIMEOUT,
	// a Go duration; upstream default 200ms, kuadrant-operator
	// internal/wasm/utils.go). Default 2s: RHOAIENG-71638, where 200 ms
	// made API-key validation time out under load.
	AuthServiceTimeout string `json:"authServiceTimeout"`
	// RateLimitFailureMode is what the gateway does when Limitador cannot
	// be reached: "deny" answers 500 (fail closed), "allow" lets requests
	// through without quota (fail open, the upstream default). It sets the
	// Kuadrant operator's RATELIMIT_SERVICE_FAILURE_MODE,
	// RATELIMIT_CHECK_SERVICE_FAILURE_MODE and
	// RATELIMIT_REPORT_SERVICE_FAILURE_MODE (kuadrant-operator
	// internal/wasm/utils.go; case N05). Default deny.
	RateLimitFailureMode string `json:"rateLimitFailureMode"`
	// OperatorEnv are further variables maasctl sets in the RHCL
	// Subscription's spec.config.env (which OLM copies into every
	// container of the operator's Deployments). Entries of other names
	// already in the Subscription are kept (case B19).
	OperatorEnv []EnvVar `json:"operatorEnv,omitempty"`
}

// EnvVar is one environment variable of an operator Subscription's
// spec.config.env.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Kuadrant operator environment variables maasctl owns (kuadrant-operator
// v1.5 internal/wasm/utils.go and internal/controller
// data_plane_policies_workflow.go).
const (
	EnvGatewayControllerNames = "ISTIO_GATEWAY_CONTROLLER_NAMES"
	EnvAuthServiceTimeout     = "AUTH_SERVICE_TIMEOUT"
	EnvRateLimitFailure       = "RATELIMIT_SERVICE_FAILURE_MODE"
	EnvRateLimitCheckFailure  = "RATELIMIT_CHECK_SERVICE_FAILURE_MODE"
	EnvRateLimitReportFailure = "RATELIMIT_REPORT_SERVICE_FAILURE_MODE"
	// IstioGatewayController is the Kuadrant operator's built-in gateway
	// controller name: other names (OpenShift's
	// openshift.io/gateway-controller/v1) need EnvGatewayControllerNames.
	IstioGatewayController = "istio.io/gateway-controller"
)

// MissingEnv lists "NAME=value" of want that have (an environment by
// variable name) does not hold with that exact value, in want's order.
func MissingEnv(have map[string]string, want []EnvVar) []string {
	var out []string
	for _, w := range want {
		if v, ok := have[w.Name]; !ok || v != w.Value {
			out = append(out, w.Name+"="+w.Value)
		}
	}
	return out
}

// EnvByName reads an env list as decoded from JSON or YAML (a
// Subscription's spec.config.env or a container's env: maps with name and
// value) into values by name; an entry with valueFrom reads as "".
func EnvByName(env []any) map[string]string {
	out := map[string]string{}
	for _, item := range env {
		m, _ := item.(map[string]any)
		n, _ := m["name"].(string)
		v, _ := m["value"].(string)
		out[n] = v
	}
	return out
}

// KuadrantOperatorEnv is the spec.config.env maasctl keeps in the RHCL
// Subscription, in this order: ISTIO_GATEWAY_CONTROLLER_NAMES when the
// Gateway's controller is not Kuadrant's built-in one, AUTH_SERVICE_TIMEOUT,
// the three rate-limit failure modes, then kuadrant.operatorEnv. Empty
// settings are left out.
func (inv *Inventory) KuadrantOperatorEnv() []EnvVar {
	k := inv.Kuadrant
	var out []EnvVar
	if c := inv.Gateway.ControllerName; c != "" && c != IstioGatewayController {
		out = append(out, EnvVar{EnvGatewayControllerNames, c})
	}
	if k.AuthServiceTimeout != "" {
		out = append(out, EnvVar{EnvAuthServiceTimeout, k.AuthServiceTimeout})
	}
	if m := k.RateLimitFailureMode; m != "" {
		out = append(out, EnvVar{EnvRateLimitFailure, m}, EnvVar{EnvRateLimitCheckFailure, m}, EnvVar{EnvRateLimitReportFailure, m})
	}
	return append(out, k.OperatorEnv...)
}

// DBConfig is the maas-db-config Secret.
type DBConfig struct {
	// Name and Namespace of the Secret. Default maas-db-config,
	// redhat-ai-gateway-infra.
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// SSLMode is the libpq sslmode (rhoai_maas_db_sslmode). Default require.
	SSLMode string `json:"sslMode"`
}

// RHOAI describes DSCInitialization, DataScienceCluster and the dashboard.
type RHOAI struct {
	// DSCIName and DSCName. Default default-dsci, default-dsc.
	DSCIName string `json:"dsciName"`
	DSCName  string `json:"dscName"`
	// ApplicationsNamespace is DSCI spec.applicationsNamespace.
	// Default redhat-ods-applications.
	ApplicationsNamespace string `json:"applicationsNamespace"`
	// MonitoringNamespace is DSCI spec.monitoring.namespace.
	// Default redhat-ods-monitoring.
	MonitoringNamespace string `json:"monitoringNamespace"`
	// ManagedComponents are set to Managed; every other DSC component Removed
	// (rhoai_maas_dsc_managed_components). Default dashboard, kserve,
	// aigateway, ogx.
	ManagedComponents []string `json:"managedComponents"`
	// RemovedComponents are set to Removed
	// (rhoai_maas_dsc_removed_components).
	RemovedComponents []string `json:"removedComponents"`
	// MaaSNamespace holds MaaSAuthPolicy and MaaSSubscription objects.
	// Default models-as-a-service.
	MaaSNamespace string `json:"maasNamespace"`
	// MaaSAPINamespace holds the maas-api Deployment. Default
	// redhat-ai-gateway-infra.
	MaaSAPINamespace string `json:"maasAPINamespace"`
	// DashboardConfigName is the OdhDashboardConfig. Default odh-dashboard-config.
	DashboardConfigName string `json:"dashboardConfigName"`
}

// ExternalModel is one OpenAI-compatible server published through MaaS
// (one entry of rhoai_maas_external_models).
type ExternalModel struct {
	// Name is the ExternalModel and MaaSModelRef name, and the model ID
	// clients send. DNS-1123 label.
	Name string `json:"name"`
	// Namespace of the model objects and the API-key Secret.
	Namespace string `json:"namespace"`
	// DisplayName is shown in the dashboard.
	DisplayName string `json:"displayName,omitempty"`
	// ProviderName is the ExternalProvider; it must not collide with a Service
	// in the namespace.
	ProviderName string `json:"providerName"`
	// ProviderType is openai, anthropic, azure, vertex or bedrock.
	ProviderType string `json:"providerType"`
	// Endpoint is a host name without scheme or port.
	Endpoint string `json:"endpoint"`
	// Port is the TCP port, 1–65535.
	Port int `json:"port"`
	// TLS says whether the endpoint speaks HTTPS.
	TLS bool `json:"tls"`
	// APIKeySecret is the Secret (key "api-key") holding the provider key.
	APIKeySecret string `json:"apiKeySecret"`
	// TargetModel is the model name the upstream server expects.
	TargetModel string `json:"targetModel"`
	// APIFormat is the request format, e.g. openai-chat.
	APIFormat string `json:"apiFormat"`
	// Path is the upstream request path, starting with "/".
	Path string `json:"path"`
}

// ModelRef names a model by name and namespace.
type ModelRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// AuthPolicy is one MaaSAuthPolicy (rhoai_maas_auth_policies).
type AuthPolicy struct {
	Name      string     `json:"name"`
	Groups    []string   `json:"groups,omitempty"`
	Users     []string   `json:"users,omitempty"`
	ModelRefs []ModelRef `json:"modelRefs"`
}

// MinUsefulTokenLimit is the smallest per-user token limit that is not
// flagged: below it one or two chat completions use up the window and
// every later request gets 429 until it resets (the default 3.x
// subscription limit of 1000 tokens per hour is used up by one chat: case
// B17; rhoai-maas-guide 10-post-upgrade-troubleshooting, issue 9).
// Preflight warns about such a limit in the inventory and doctor about one
// in the cluster; both read this one number.
const MinUsefulTokenLimit = 2000

// TokenRateLimit is a token budget per user per window.
type TokenRateLimit struct {
	// Limit is the number of tokens, ≥ 1.
	Limit int64 `json:"limit"`
	// Window matches ^[1-9]\d{0,3}(s|m|h)$, e.g. 1h.
	Window string `json:"window"`
}

// SubscriptionModel is one model of a subscription with its limits.
type SubscriptionModel struct {
	Name            string           `json:"name"`
	Namespace       string           `json:"namespace"`
	TokenRateLimits []TokenRateLimit `json:"tokenRateLimits"`
}

// Subscription is one MaaSSubscription (rhoai_maas_subscriptions).
type Subscription struct {
	Name        string `json:"name"`
	DisplayName string `json:"displayName,omitempty"`
	// Priority decides which subscription wins for users in several; higher wins.
	Priority  int                 `json:"priority"`
	Groups    []string            `json:"groups,omitempty"`
	Users     []string            `json:"users,omitempty"`
	ModelRefs []SubscriptionModel `json:"modelRefs"`
}

// Vault says how maasctl reaches Vault. The address, TLS settings and token
// come from the environment (VAULT_ADDR, VAULT_NAMESPACE, VAULT_CACERT,
// VAULT_CAPATH, VAULT_SKIP_VERIFY, VAULT_TOKEN, ~/.vault-token) like the
// vault CLI. Credentials never go into the inventory.
type Vault struct {
	// Address overrides VAULT_ADDR when set.
	Address string `json:"address,omitempty"`
	// Auth is how maasctl logs in. Default: method token.
	Auth VaultAuth `json:"auth"`
	// KubeTokenPath is "PATH:KEY" of a Kubernetes bearer token kept in
	// Vault, for example "kv/data/lab/rhoai-deployer:token" (the deployer
	// ServiceAccount's token, as the playbook looked it up). When set,
	// maasctl talks to the API server of the kubeconfig's cluster (or
	// --server) with that token instead of the kubeconfig's credentials,
	// and never writes it to disk. Empty: use the kubeconfig as is.
	KubeTokenPath string `json:"kubeTokenPath,omitempty"`
}

// VaultAuth selects the Vault auth method
// (https://developer.hashicorp.com/vault/docs/auth).
type VaultAuth struct {
	// Method is "token" (VAULT_TOKEN or ~/.vault-token), "kubernetes"
	// (service account JWT and a role, in a pod or Job) or "approle" (role
	// ID and secret ID, for CI). Default token.
	Method string `json:"method"`
	// MountPath is where the method is enabled (auth/<mountPath>); empty
	// means the method's name: kubernetes or approle.
	MountPath string `json:"mountPath,omitempty"`
	// Role is the Vault role of Kubernetes auth (required for it).
	Role string `json:"role,omitempty"`
	// ServiceAccountTokenPath is the JWT file Kubernetes auth presents;
	// empty means /var/run/secrets/kubernetes.io/serviceaccount/token.
	ServiceAccountTokenPath string `json:"serviceAccountTokenPath,omitempty"`
	// RoleIDFile and SecretIDFile hold the AppRole credentials; empty means
	// the environment variables VAULT_ROLE_ID and VAULT_SECRET_ID.
	RoleIDFile   string `json:"roleIDFile,omitempty"`
	SecretIDFile string `json:"secretIDFile,omitempty"`
}

// Operator returns the operator with the given ID, or nil.
func (inv *Inventory) Operator(id string) *Operator {
	for i := range inv.Operators {
		if inv.Operators[i].ID == id {
			return &inv.Operators[i]
		}
	}
	return nil
}
