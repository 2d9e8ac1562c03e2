package inventory

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
)

// ValidationError is every problem Validate found. Each entry's Field is the
// inventory path as written in YAML (externalModels[0].endpoint) and its
// Detail says how to fix it.
type ValidationError struct {
	Errs field.ErrorList
}

// Error lists the problems one per line.
func (e *ValidationError) Error() string {
	var b strings.Builder
	plural := "s"
	if len(e.Errs) == 1 {
		plural = ""
	}
	fmt.Fprintf(&b, "invalid inventory (%d problem%s):", len(e.Errs), plural)
	for _, fe := range e.Errs {
		b.WriteString("\n  - ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Unwrap returns the individual *field.Error values, for errors.As.
func (e *ValidationError) Unwrap() []error {
	out := make([]error, len(e.Errs))
	for i, fe := range e.Errs {
		out[i] = fe
	}
	return out
}

// DSCComponents returns the component keys of DataScienceCluster v2
// (datasciencecluster.opendatahub.io/v2, spec.components) in RHOAI 3.5, sorted.
// Each call returns a fresh slice.
func DSCComponents() []string { return slices.Clone(dscComponents) }

// dscComponents is hard-coded from spec.versions[v2] spec.components of
// shared/crds/opendatahub/rhoai-3.5/datasciencecluster.opendatahub.io_datascienceclusters.yaml.
// Update it together with the pinned RHOAI channel.
var dscComponents = []string{
	"aigateway", "aipipelines", "dashboard", "feastoperator", "kserve", "kueue",
	"llamastackoperator", "mcplifecycleoperator", "mlflowoperator", "modelregistry",
	"ogx", "ray", "sparkoperator", "trainer", "trainingoperator", "trustyai", "workbenches",
}

// Allowed values, each from the upstream API that consumes the field.
var (
	// ExternalModel providers maasctl renders (ExternalProvider spec.provider).
	providerTypes = []string{"openai", "anthropic", "azure", "vertex", "bedrock"}
	// OLM Subscription spec.installPlanApproval.
	approvals = []string{"Automatic", "Manual"}
	// Service spec.type values a Gateway may ask for.
	serviceTypes = []string{"ClusterIP", "LoadBalancer"}
	// libpq sslmode values (PostgreSQL docs, "libpq: SSL Support").
	sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}
)

var (
	// MaaSSubscription spec.modelRefs[].tokenRateLimits[].window.
	windowRE = regexp.MustCompile(`^[1-9]\d{0,3}(s|m|h)$`)
	daysRE   = regexp.MustCompile(`^([1-9]\d*)d$`)
	// ExternalProvider spec.endpoint (inference.opendatahub.io/v1alpha1).
	endpointRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)+$`)
	// GatewayClass spec.controllerName (gateway.networking.k8s.io/v1).
	controllerNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$`)
	// Unquoted PostgreSQL identifier, as used for the owner role and the
	// database name in CNPG initdb and in the DB_CONNECTION_URL.
	pgIdentRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

const (
	// MaaSSubscription tokenRateLimits[].limit maximum.
	maxTokenLimit = 1_000_000_000
	// Bound for waitTimeoutSeconds: a week; far above any real wait and far
	// below time.Duration overflow.
	maxWaitTimeoutSeconds = 7 * 24 * 3600
	minPasswordLength     = 32
)

// Validate checks the inventory against the rules of the objects it becomes
// (CRD patterns, Kubernetes name rules, libpq, OLM, Vault paths) and the
// references between its parts. It returns nil or a *ValidationError holding
// every problem found, not just the first.
func (inv *Inventory) Validate() error {
	v := &validator{}
	v.database(field.NewPath("database"), &inv.Database)

	ids := map[string]*field.Path{}
	v.operator(field.NewPath("database", "operator"), &inv.Database.Operator, ids)
	ops := field.NewPath("operators")
	subs := map[string]*field.Path{}
	for i := range inv.Operators {
		p := ops.Index(i)
		op := &inv.Operators[i]
		v.operator(p, op, ids)
		key := op.Namespace + "/" + op.Package
		if prev, ok := subs[key]; ok && op.Package != "" {
			v.add(field.Invalid(p.Child("package"), op.Package, fmt.Sprintf("%s already subscribes to package %s in namespace %s; OLM allows one Subscription per package and namespace", prev, op.Package, op.Namespace)))
		} else {
			subs[key] = p
		}
	}

	v.gateway(field.NewPath("gateway"), &inv.Gateway)
	v.kuadrant(field.NewPath("kuadrant"), &inv.Kuadrant)
	v.dbConfig(field.NewPath("dbConfig"), &inv.DBConfig, inv.RHOAI.MaaSAPINamespace)
	v.rhoai(field.NewPath("rhoai"), &inv.RHOAI)
	models := v.externalModels(field.NewPath("externalModels"), inv.ExternalModels)
	granted := v.authPolicies(field.NewPath("authPolicies"), inv.AuthPolicies, models)
	v.subscriptions(field.NewPath("subscriptions"), inv.Subscriptions, models, granted)
	v.vault(field.NewPath("vault"), &inv.Vault)

	p := field.NewPath("waitTimeoutSeconds")
	if inv.WaitTimeoutSeconds < 1 || inv.WaitTimeoutSeconds > maxWaitTimeoutSeconds {
		v.add(field.Invalid(p, inv.WaitTimeoutSeconds, fmt.Sprintf("must be between 1 and %d seconds; the default is 900", maxWaitTimeoutSeconds)))
	}

	if len(v.errs) == 0 {
		return nil
	}
	return &ValidationError{Errs: v.errs}
}

// validator collects field errors.
type validator struct {
	errs field.ErrorList
}

func (v *validator) add(e *field.Error) { v.errs = append(v.errs, e) }

// name checks a Kubernetes object name or namespace with check (one of the
// validation.IsDNS* functions). what names the object ("Secret name"),
// example is a valid value for the hint.
func (v *validator) name(p *field.Path, s, what, example string, check func(string) []string, rule string) {
	if s == "" {
		v.add(field.Required(p, fmt.Sprintf("set the %s, a %s such as %s", what, rule, example)))
		return
	}
	msgs := check(s)
	if len(msgs) == 0 {
		return
	}
	detail := fmt.Sprintf("the %s must be a %s: %s", what, rule, strings.Join(msgs, "; "))
	if fix := sanitizeName(s, rule == ruleSubdomain); fix != "" && fix != s && len(check(fix)) == 0 {
		detail += fmt.Sprintf("; use e.g. %s", fix)
	}
	v.add(field.Invalid(p, s, detail))
}

const (
	ruleLabel     = "DNS-1123 label"
	ruleSubdomain = "DNS-1123 subdomain"
	ruleDNS1035   = "DNS-1035 label"
)

// label checks a namespace or a name Kubernetes (or a CRD pattern) limits to
// a DNS-1123 label.
func (v *validator) label(p *field.Path, s, what, example string) {
	v.name(p, s, what, example, validation.IsDNS1123Label, ruleLabel)
}

// subdomain checks a name Kubernetes allows to be a DNS-1123 subdomain.
func (v *validator) subdomain(p *field.Path, s, what, example string) {
	v.name(p, s, what, example, validation.IsDNS1123Subdomain, ruleSubdomain)
}

// serviceName checks a name that is, or becomes, a Service name (DNS-1035:
// a label that starts with a letter).
func (v *validator) serviceName(p *field.Path, s, what, example string) {
	v.name(p, s, what, example, validation.IsDNS1035Label, ruleDNS1035)
}

func (v *validator) required(p *field.Path, s, hint string) bool {
	if strings.TrimSpace(s) == "" {
		v.add(field.Required(p, hint))
		return false
	}
	return true
}

func (v *validator) oneOf(p *field.Path, s string, allowed []string) {
	for _, a := range allowed {
		if s == a {
			return
		}
	}
	v.add(field.NotSupported(p, s, allowed))
}

// sanitizeName proposes a compliant name: lower case, every other character
// replaced by '-', trimmed and shortened. Dots survive only in subdomains.
func sanitizeName(s string, subdomain bool) string {
	maxLen := 63
	if subdomain {
		maxLen = 253
	}
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r == '.' && subdomain:
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	out := b.String()
	if len(out) > maxLen {
		out = out[:maxLen]
	}
	return strings.Trim(out, "-.")
}

func (v *validator) database(p *field.Path, d *Database) {
	v.label(p.Child("namespace"), d.Namespace, "database namespace", "rhoai-maas-db")
	// CNPG names the Services <cluster>-rw, -ro and -r after the Cluster.
	v.serviceName(p.Child("clusterName"), d.ClusterName, "CNPG Cluster name", "maas-postgres")
	if len(d.ClusterName) > 60 {
		v.add(field.Invalid(p.Child("clusterName"), d.ClusterName, "must be at most 60 characters so that the Service <name>-rw fits in 63; use a shorter name such as maas-postgres"))
	}
	v.subdomain(p.Child("secretName"), d.SecretName, "Secret name", "maas-postgres-secret")
	for _, f := range []struct{ key, val, what string }{
		{"owner", d.Owner, "database owner role"},
		{"name", d.Name, "database name"},
	} {
		if !pgIdentRE.MatchString(f.val) {
			v.add(field.Invalid(p.Child(f.key), f.val, fmt.Sprintf("the %s must be an unquoted PostgreSQL identifier: lower case letters, digits and _, starting with a letter or _, at most 63 characters, e.g. maas", f.what)))
		}
	}
	if d.Instances < 1 {
		v.add(field.Invalid(p.Child("instances"), d.Instances, "must be at least 1 PostgreSQL instance"))
	}
	if d.StorageSize == "" {
		v.add(field.Required(p.Child("storageSize"), "set the PVC size as a Kubernetes quantity, e.g. 5Gi"))
	} else if q, err := resource.ParseQuantity(d.StorageSize); err != nil {
		v.add(field.Invalid(p.Child("storageSize"), d.StorageSize, "must be a Kubernetes quantity such as 5Gi or 500Mi"))
	} else if q.Sign() <= 0 {
		v.add(field.Invalid(p.Child("storageSize"), d.StorageSize, "must be greater than zero, e.g. 5Gi"))
	}
	if d.StorageClass != "" {
		v.subdomain(p.Child("storageClass"), d.StorageClass, "StorageClass name", "gp3-csi")
	}
	if d.MaxConnections < 1 {
		v.add(field.Invalid(p.Child("maxConnections"), d.MaxConnections, "must be at least 1; the default is 100"))
	}
	if d.PasswordLength < minPasswordLength {
		v.add(field.Invalid(p.Child("passwordLength"), d.PasswordLength, fmt.Sprintf("must be at least %d characters", minPasswordLength)))
	}
	v.vaultPath(p.Child("vaultPath"), d.VaultPath)
	if parts := strings.Split(d.VaultPath, "/"); d.VaultAllowUnprotectedKVv1 && len(parts) >= 3 && parts[1] == "data" {
		v.add(field.Invalid(p.Child("vaultAllowUnprotectedKVv1"), true, fmt.Sprintf(
			"database.vaultPath %s is a KV v2 API path (data/ after the mount), and KV v2 needs no KV v1 allowance: remove vaultAllowUnprotectedKVv1, or give the KV v1 path without data/", d.VaultPath)))
	}
}

// vaultPath checks a KV path "mount/path...". Both the logical path and
// the KV v2 API path with data/ after the mount are accepted (the vault
// package detects the KV version and drops data/ on KV v2); metadata/
// names no secret.
func (v *validator) vaultPath(p *field.Path, s string) {
	const example = "kv/cloudnativepg/maas-postgres"
	if s == "" {
		v.add(field.Required(p, "set the KV path as mount/path, e.g. "+example))
		return
	}
	if strings.HasPrefix(s, "/") {
		v.add(field.Invalid(p, s, "remove the leading slash: use "+strings.TrimLeft(s, "/")))
		return
	}
	parts := strings.Split(s, "/")
	if len(parts) < 2 {
		v.add(field.Invalid(p, s, "needs a mount and a path, e.g. "+example))
		return
	}
	for _, part := range parts {
		if part == "" {
			v.add(field.Invalid(p, s, "has an empty segment (double or trailing slash); use mount/path, e.g. "+example))
			return
		}
	}
	if len(parts) >= 3 && parts[1] == "metadata" {
		fixed := parts[0] + "/" + strings.Join(parts[2:], "/")
		v.add(field.Invalid(p, s, fmt.Sprintf("metadata/ holds no secret data: give the logical path %s (or the data/ API path)", fixed)))
	}
}

// serviceMeshPackages are the OLM packages of OpenShift Service Mesh 2 and
// 3 and upstream Sail.
var serviceMeshPackages = map[string]bool{"servicemeshoperator": true, "servicemeshoperator3": true, "sailoperator": true}

func (v *validator) operator(p *field.Path, op *Operator, ids map[string]*field.Path) {
	v.label(p.Child("id"), op.ID, "operator ID", "rhoai")
	if op.ID != "" {
		if prev, ok := ids[op.ID]; ok {
			e := field.Duplicate(p.Child("id"), op.ID)
			e.Detail = fmt.Sprintf("%s already uses this ID; operator IDs name steps and must be unique", prev)
			v.add(e)
		} else {
			ids[op.ID] = p
		}
	}
	// Package names are PackageManifest object names.
	v.subdomain(p.Child("package"), op.Package, "OLM package name", "rhods-operator")
	if serviceMeshPackages[op.Package] {
		v.add(field.Invalid(p.Child("package"), op.Package,
			"maasctl never subscribes Service Mesh: on OpenShift 4.19+ the ingress operator installs it for Gateway API, and a second OSSM Subscription leaves the GatewayClass at Accepted=Unknown; remove this operators entry"))
	}
	v.required(p.Child("channel"), op.Channel, "set the OLM update channel to pin, e.g. stable-3.5")
	v.subdomain(p.Child("source"), op.Source, "CatalogSource name", "redhat-operators")
	v.label(p.Child("sourceNamespace"), op.SourceNamespace, "CatalogSource namespace", "openshift-marketplace")
	v.label(p.Child("namespace"), op.Namespace, "operator namespace", "openshift-operators")
	v.subdomain(p.Child("operatorGroup"), op.OperatorGroup, "OperatorGroup name", "global-operators")
	v.oneOf(p.Child("approval"), op.Approval, approvals)
	if op.MinVersion != "" {
		mp := p.Child("minVersion")
		switch {
		case strings.HasPrefix(op.MinVersion, "v"):
			v.add(field.Invalid(mp, op.MinVersion, "drop the leading v: use "+strings.TrimPrefix(op.MinVersion, "v")))
		case strings.TrimSpace(op.MinVersion) != op.MinVersion:
			v.add(field.Invalid(mp, op.MinVersion, "remove the surrounding spaces"))
		default:
			if _, err := version.ParseSemantic(op.MinVersion); err != nil {
				v.add(field.Invalid(mp, op.MinVersion, "must be a semantic version MAJOR.MINOR.PATCH (the CSV spec.version), e.g. 1.4.1"))
			}
		}
	}
	if op.StartingCSV != "" {
		v.subdomain(p.Child("startingCSV"), op.StartingCSV, "ClusterServiceVersion name", "rhods-operator.3.5.0")
	}
}

func (v *validator) gateway(p *field.Path, g *Gateway) {
	v.subdomain(p.Child("className"), g.ClassName, "GatewayClass name", "openshift-default")
	if g.ControllerName == "" {
		v.add(field.Required(p.Child("controllerName"), "set the GatewayClass controller, e.g. openshift.io/gateway-controller/v1"))
	} else if !controllerNameRE.MatchString(g.ControllerName) || len(g.ControllerName) > 253 {
		v.add(field.Invalid(p.Child("controllerName"), g.ControllerName, "must be a domain-prefixed path (GatewayClass spec.controllerName), e.g. openshift.io/gateway-controller/v1"))
	}
	// The Gateway's generated Deployment and Service are named after it.
	v.label(p.Child("name"), g.Name, "Gateway name", "maas-default-gateway")
	v.label(p.Child("namespace"), g.Namespace, "Gateway namespace", "openshift-ingress")
	if g.Hostname != "" {
		hp := p.Child("hostname")
		if strings.Contains(g.Hostname, "*") {
			v.add(field.Invalid(hp, g.Hostname, fmt.Sprintf("must be one host, not a wildcard: HTTP/2 clients reuse a connection for every host a certificate covers, so the console and other apps hosts would be sent to the MaaS gateway behind its passthrough Route and get 404s (DEPLOYMENT.md prerequisites); use e.g. maas.%s or leave it empty for maas.<apps domain>", strings.TrimLeft(g.Hostname, "*."))))
		} else {
			v.subdomain(hp, g.Hostname, "Gateway hostname", "maas.apps.example.com")
		}
	}
	v.subdomain(p.Child("certificateName"), g.CertificateName, "Certificate name", "maas-default-gateway-cert")
	v.subdomain(p.Child("certSecret"), g.CertSecret, "TLS Secret name", "maas-gateway-tls")
	if g.CertIssuer != "" {
		v.subdomain(p.Child("certIssuer"), g.CertIssuer, "ClusterIssuer name", "letsencrypt-production")
	}
	v.oneOf(p.Child("serviceType"), g.ServiceType, serviceTypes)
	if g.CreateRoute || g.RouteName != "" {
		v.subdomain(p.Child("routeName"), g.RouteName, "Route name", "maas-default-gateway-https")
	}
}

func (v *validator) kuadrant(p *field.Path, k *Kuadrant) {
	v.subdomain(p.Child("name"), k.Name, "Kuadrant name", "kuadrant")
	v.label(p.Child("namespace"), k.Namespace, "Kuadrant namespace", "kuadrant-system")
	v.label(p.Child("operatorNamespace"), k.OperatorNamespace, "Kuadrant operator namespace", "openshift-operators")
	sp := p.Child("operatorSelector")
	// An empty selector would match, and restart, every pod in the namespace.
	if v.required(sp, k.OperatorSelector, "set the label selector of the Kuadrant operator pod, e.g. app=kuadrant,control-plane=controller-manager") {
		if _, err := labels.Parse(k.OperatorSelector); err != nil {
			v.add(field.Invalid(sp, k.OperatorSelector, "must be a label selector such as app=kuadrant,control-plane=controller-manager: "+err.Error()))
		}
	}
	// Kuadrant derives the Authorino Service names from the Authorino name.
	v.label(p.Child("authorinoName"), k.AuthorinoName, "Authorino name", "authorino")
	v.serviceName(p.Child("authorinoService"), k.AuthorinoService, "Authorino Service name", "authorino-authorino-authorization")
	v.subdomain(p.Child("authorinoCertSecret"), k.AuthorinoCertSecret, "Secret name", "authorino-server-cert")
	if t := k.AuthServiceTimeout; t != "" {
		if d, err := time.ParseDuration(t); err != nil || d <= 0 {
			v.add(field.Invalid(p.Child("authServiceTimeout"), t, "must be a positive duration such as 2s or 500ms (the Wasm shim's wait for Authorino)"))
		}
	}
	if k.RateLimitFailureMode != "" {
		v.oneOf(p.Child("rateLimitFailureMode"), k.RateLimitFailureMode, failureModes)
	}
	owned := map[string]string{
		EnvGatewayControllerNames: "gateway.controllerName",
		EnvAuthServiceTimeout:     "kuadrant.authServiceTimeout",
		EnvRateLimitFailure:       "kuadrant.rateLimitFailureMode",
		EnvRateLimitCheckFailure:  "kuadrant.rateLimitFailureMode",
		EnvRateLimitReportFailure: "kuadrant.rateLimitFailureMode",
	}
	seen := map[string]bool{}
	for i, ev := range k.OperatorEnv {
		ep := p.Child("operatorEnv").Index(i).Child("name")
		switch {
		case len(validation.IsEnvVarName(ev.Name)) > 0:
			v.add(field.Invalid(ep, ev.Name, "must be an environment variable name: "+strings.Join(validation.IsEnvVarName(ev.Name), "; ")))
		case owned[ev.Name] != "":
			v.add(field.Invalid(ep, ev.Name, "is set from "+owned[ev.Name]+": set that field instead"))
		case seen[ev.Name]:
			v.add(field.Duplicate(ep, ev.Name))
		}
		seen[ev.Name] = true
	}
}

// failureModes are the Kuadrant Wasm shim's failure modes
// (kuadrant-operator internal/wasm FailureModeAllow, FailureModeDeny).
var failureModes = []string{"deny", "allow"}

func (v *validator) dbConfig(p *field.Path, c *DBConfig, maasAPINamespace string) {
	v.subdomain(p.Child("name"), c.Name, "Secret name", "maas-db-config")
	v.label(p.Child("namespace"), c.Namespace, "Secret namespace", "redhat-ai-gateway-infra")
	// A Pod can only read Secrets of its own namespace.
	if c.Namespace != "" && maasAPINamespace != "" && c.Namespace != maasAPINamespace {
		v.add(field.Invalid(p.Child("namespace"), c.Namespace, fmt.Sprintf("maas-api reads this Secret from its own namespace; set it to rhoai.maasAPINamespace (%s)", maasAPINamespace)))
	}
	v.oneOf(p.Child("sslMode"), c.SSLMode, sslModes)
}

func (v *validator) rhoai(p *field.Path, r *RHOAI) {
	v.subdomain(p.Child("dsciName"), r.DSCIName, "DSCInitialization name", "default-dsci")
	v.subdomain(p.Child("dscName"), r.DSCName, "DataScienceCluster name", "default-dsc")
	v.label(p.Child("applicationsNamespace"), r.ApplicationsNamespace, "applications namespace", "redhat-ods-applications")
	v.label(p.Child("monitoringNamespace"), r.MonitoringNamespace, "monitoring namespace", "redhat-ods-monitoring")
	v.label(p.Child("maasNamespace"), r.MaaSNamespace, "MaaS namespace", "models-as-a-service")
	v.label(p.Child("maasAPINamespace"), r.MaaSAPINamespace, "maas-api namespace", "redhat-ai-gateway-infra")
	v.subdomain(p.Child("dashboardConfigName"), r.DashboardConfigName, "OdhDashboardConfig name", "odh-dashboard-config")

	known := sets.New(dscComponents...)
	managed := sets.New[string]()
	check := func(key string, list []string, seen sets.Set[string]) {
		lp := p.Child(key)
		for i, c := range list {
			switch {
			case !known.Has(c):
				v.add(field.NotSupported(lp.Index(i), c, dscComponents))
			case seen.Has(c):
				e := field.Duplicate(lp.Index(i), c)
				e.Detail = "listed twice; remove one"
				v.add(e)
			}
			seen.Insert(c)
		}
	}
	check("managedComponents", r.ManagedComponents, managed)
	removed := sets.New[string]()
	check("removedComponents", r.RemovedComponents, removed)
	for i, c := range r.RemovedComponents {
		if managed.Has(c) {
			v.add(field.Invalid(p.Child("removedComponents").Index(i), c, "also listed in rhoai.managedComponents; a component is either Managed or Removed, keep it in one list"))
		}
	}
	if !managed.Has("aigateway") {
		v.add(field.Invalid(p.Child("managedComponents"), r.ManagedComponents, "must include aigateway: MaaS is enabled through DataScienceCluster v2 spec.components.aigateway.modelsAsAService"))
	}
}

// unique reports elem (a list element) when another element already has its
// name.
func (v *validator) unique(elem *field.Path, name string, seen map[string]*field.Path, why string) {
	if name == "" {
		return
	}
	if prev, ok := seen[name]; ok {
		e := field.Duplicate(elem.Child("name"), name)
		e.Detail = fmt.Sprintf("%s has the same name; %s", prev, why)
		v.add(e)
		return
	}
	seen[name] = elem
}

func (v *validator) vault(p *field.Path, vt *Vault) {
	if vt.Address != "" {
		u, err := url.Parse(vt.Address)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(field.Invalid(p.Child("address"), vt.Address, "must be an http or https URL such as https://vault.example.com:8200, or empty to use VAULT_ADDR"))
		}
	}
	v.vaultAuth(p.Child("auth"), &vt.Auth)
	if vt.KubeTokenPath != "" {
		kp := p.Child("kubeTokenPath")
		i := strings.LastIndex(vt.KubeTokenPath, ":")
		if i < 0 || strings.TrimSpace(vt.KubeTokenPath[i+1:]) == "" {
			v.add(field.Invalid(kp, vt.KubeTokenPath, "must be PATH:KEY, e.g. kv/data/lab/rhoai-deployer:token"))
		} else {
			v.vaultPath(kp, vt.KubeTokenPath[:i])
		}
	}
}

// vaultAuth checks the auth method settings; credentials themselves come
// from files or the environment and are checked when maasctl logs in.
func (v *validator) vaultAuth(p *field.Path, a *VaultAuth) {
	switch a.Method {
	case "token":
		for _, f := range [][2]string{{"mountPath", a.MountPath}, {"role", a.Role}, {"serviceAccountTokenPath", a.ServiceAccountTokenPath},
			{"roleIDFile", a.RoleIDFile}, {"secretIDFile", a.SecretIDFile}} {
			if f[1] != "" {
				v.add(field.Invalid(p.Child(f[0]), f[1], "applies only to methods kubernetes and approle; method is token"))
			}
		}
	case "kubernetes":
		if strings.TrimSpace(a.Role) == "" {
			v.add(field.Required(p.Child("role"), "Kubernetes auth needs the Vault role bound to the service account"))
		}
		if a.RoleIDFile != "" || a.SecretIDFile != "" {
			v.add(field.Invalid(p.Child("roleIDFile"), a.RoleIDFile+a.SecretIDFile, "roleIDFile and secretIDFile apply only to method approle"))
		}
	case "approle":
		if a.Role != "" || a.ServiceAccountTokenPath != "" {
			v.add(field.Invalid(p.Child("role"), a.Role+a.ServiceAccountTokenPath, "role and serviceAccountTokenPath apply only to method kubernetes; AppRole uses roleIDFile/secretIDFile or VAULT_ROLE_ID/VAULT_SECRET_ID"))
		}
	default:
		v.add(field.NotSupported(p.Child("method"), a.Method, []string{"token", "kubernetes", "approle"}))
	}
	if m := a.MountPath; m != "" && (strings.HasPrefix(m, "/") || strings.HasSuffix(m, "/") || strings.HasPrefix(m, "auth/") || strings.Contains(m, "//")) {
		v.add(field.Invalid(p.Child("mountPath"), m, "give the path the method is enabled at, without auth/ and slashes, e.g. kubernetes-prod"))
	}
}
