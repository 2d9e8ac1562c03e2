package verify

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// Result is the outcome of one check.
type Result string

// Check results.
const (
	Pass Result = "pass"
	Fail Result = "fail"
	Skip Result = "skip"
)

// Check is one verified fact: a stable code, what was checked, the result,
// what was observed and, on failure, the cause and the command that fixes
// it. No field ever holds a secret (API key, token, password).
type Check struct {
	Code   string `json:"code"`
	Title  string `json:"title"`
	Object string `json:"object,omitempty"`
	Result Result `json:"result"`
	Detail string `json:"detail,omitempty"`
	Cause  string `json:"cause,omitempty"`
	Fix    string `json:"fix,omitempty"`
	// Class is how a failed data-path response was classified (case B17),
	// e.g. "forbidden" or "quota"; empty for control-plane checks.
	Class string `json:"class,omitempty"`
	// Pending is true on a failed check whose state is still in
	// Kuadrant's hands, so a later read may pass: MAAS-V017 while the
	// operator already runs with the failure-mode env (MAAS-V013 passes),
	// and MAAS-V010 and MAAS-V012 on a Kuadrant policy with no Accepted
	// or Enforced condition written yet, a status for an older generation
	// than its spec, or Enforced=False "waiting for the
	// following components to sync" naming only AuthConfigs and Limitador
	// (kuadrant-operator v1.5.2 internal/kuadrant/errors.go ErrOutOfSync,
	// written while Authorino or Limitador has not loaded what Kuadrant
	// generated; kuadrantSyncing), or, for a generated
	// TokenRateLimitPolicy, Enforced=False InvalidCelExpression on an
	// undeclared `auth` while the Gateway AuthPolicy exists
	// (authUndeclared). An AuthConfig that Authorino refuses looks the
	// same: only time tells them apart (Options.Settle).
	Pending bool `json:"pending,omitempty"`
}

// CodeInfo describes one check code of the catalogue.
type CodeInfo struct {
	Code  string `json:"code"`
	Title string `json:"title"`
	// DataPath is true for checks that send requests to the MaaS endpoint.
	DataPath bool `json:"dataPath"`
}

// Check codes. They are stable: a code is never reused for another check.
// The first group mirrors the "Verify the deployment" list of the deployment
// README (../shared/reference/DEPLOYMENT.md); the second is the data path.
const (
	CodeDSCReady          = "MAAS-V001"
	CodeKuadrantReady     = "MAAS-V002"
	CodeGatewayProgrammed = "MAAS-V003"
	CodeMaaSAPIAvailable  = "MAAS-V004"
	CodeDBConfig          = "MAAS-V005"
	CodeProviderReady     = "MAAS-V006"
	CodeModelReady        = "MAAS-V007"
	CodeModelRefReady     = "MAAS-V008"
	CodeAuthPolicyActive  = "MAAS-V009"
	CodeAuthEnforced      = "MAAS-V010"
	CodeSubscriptionAct   = "MAAS-V011"
	CodeTokenLimitEnf     = "MAAS-V012"
	CodeOperatorEnv       = "MAAS-V013"
	CodeRoute             = "MAAS-V014"
	CodeMaaSAPIMigrations = "MAAS-V015"
	CodeDBSchema          = "MAAS-V016"
	CodeFailureModes      = "MAAS-V017"
	CodeAuthorinoTrust    = "MAAS-V018"
	CodeHealth            = "MAAS-V020"
	CodeMintKey           = "MAAS-V021"
	CodeListModels        = "MAAS-V022"
	CodeChat              = "MAAS-V023"
	CodeNoKey401          = "MAAS-V024"
	CodeQuota429          = "MAAS-V025"
	CodeBodySize          = "MAAS-V026"
	CodeKeysRevoked       = "MAAS-V027"
	CodeBogusKey          = "MAAS-V028"
)

// AuthBypass names, in a failed check's cause, a negative data-path probe
// (MAAS-V024, MAAS-V028) that the gateway answered with 2xx (case N04).
const AuthBypass = "AUTH_BYPASS"

// Catalogue lists every check code in report order.
var Catalogue = []CodeInfo{
	{CodeDSCReady, "DataScienceCluster phase Ready", false},
	{CodeKuadrantReady, "Kuadrant Ready", false},
	{CodeGatewayProgrammed, "Gateway Programmed", false},
	{CodeMaaSAPIAvailable, "Deployment maas-api available (1/1)", false},
	{CodeDBConfig, "Secret maas-db-config present with DB_CONNECTION_URL", false},
	{CodeProviderReady, "ExternalProvider Ready", false},
	{CodeModelReady, "ExternalModel Ready", false},
	{CodeModelRefReady, "MaaSModelRef Ready", false},
	{CodeAuthPolicyActive, "MaaSAuthPolicy Active", false},
	{CodeAuthEnforced, "Gateway-level AuthPolicy of the MaaS controller Accepted and Enforced", false},
	{CodeSubscriptionAct, "MaaSSubscription Active", false},
	{CodeTokenLimitEnf, "generated Kuadrant TokenRateLimitPolicy Enforced", false},
	{CodeOperatorEnv, "RHCL operator env (Subscription spec.config.env, running pod)", false},
	{CodeRoute, "passthrough Route to the Gateway present", false},
	{CodeMaaSAPIMigrations, "maas-api pods report no failed schema migration", false},
	{CodeDBSchema, "MaaS schema healthy in the database (owner, not dirty, indexes valid)", false},
	{CodeFailureModes, "gateway Wasm failure modes as the inventory says (rate limits, auth fail closed)", false},
	{CodeAuthorinoTrust, "Authorino trusts the service CA for its calls to maas-api", false},
	{CodeHealth, "GET /maas-api/health answers 200", true},
	{CodeMintKey, "API key minted (POST /maas-api/v1/api-keys)", true},
	{CodeListModels, "GET /v1/models lists each model", true},
	{CodeChat, "chat completion answers", true},
	{CodeNoKey401, "request without an API key gets 401 or 403", true},
	{CodeBogusKey, "request with a bogus API key gets 401 or 403", true},
	{CodeQuota429, "request over a probe subscription's limit gets 429", true},
	{CodeBodySize, "large request body passes the gateway", true},
	{CodeKeysRevoked, "API keys minted by verify revoked", true},
}

// TitleOf returns the catalogue title of code.
func TitleOf(code string) string {
	for _, c := range Catalogue {
		if c.Code == code {
			return c.Title
		}
	}
	return code
}

func newCheck(code, object string) Check {
	return Check{Code: code, Title: TitleOf(code), Object: object}
}

func (c Check) pass(detail string) Check { c.Result, c.Detail = Pass, detail; return c }

func (c Check) fail(detail, cause, fix string) Check {
	c.Result, c.Detail, c.Cause, c.Fix = Fail, detail, cause, fix
	return c
}

func (c Check) failDiag(detail string, dg Diagnosis) Check {
	c = c.fail(detail, dg.Cause, dg.Fix)
	c.Class = string(dg.Class)
	return c
}

// briefDetail is how many runes of a check's detail Brief keeps.
const briefDetail = 200

// Brief is c on one line, for progress messages: "<code> <object>:
// <detail>", with the detail's runs of white space (the line breaks of a
// CEL error Kuadrant quotes) made one space and the detail cut to
// briefDetail runes, "…" marking the cut. The report keeps the detail
// whole.
func (c Check) Brief() string {
	d := []rune(strings.Join(strings.Fields(c.Detail), " "))
	if len(d) > briefDetail {
		d = append(d[:briefDetail-1], '…')
	}
	return c.Code + " " + c.Object + ": " + string(d)
}

// pending marks a failed check as Pending.
func (c Check) pending() Check { c.Pending = c.Result == Fail; return c }

func (c Check) skip(detail string) Check { c.Result, c.Detail = Skip, detail; return c }

// Codes returns every check code of the Catalogue, in report order: the
// list a doctor rule must exist for (internal/doctor VerifyCoverage).
func Codes() []string {
	out := make([]string, len(Catalogue))
	for i, c := range Catalogue {
		out[i] = c.Code
	}
	return out
}

// LiveChecks evaluates the control-plane checks (MAAS-V001 to MAAS-V014) on
// a snapshot. They only read.
func LiveChecks(s *State) []Check {
	var out []Check
	out = append(out, checkDSC(s), checkKuadrant(s), checkGateway(s), checkMaaSAPI(s), checkDBConfig(s))
	out = append(out, checkProviders(s)...)
	out = append(out, checkModels(s)...)
	out = append(out, checkPolicies(s, s.AuthPolicies, CodeAuthPolicyActive, "", "MaaSAuthPolicy", "", "")...)
	if len(s.Inv.AuthPolicies) > 0 {
		out = append(out, checkGatewayAuth(s))
	}
	out = append(out, checkPolicies(s, s.Subscriptions, CodeSubscriptionAct, CodeTokenLimitEnf, "MaaSSubscription", "TokenRateLimitPolicy", "tokenRateLimitStatuses")...)
	env, modes := checkOperatorEnv(s), checkFailureModes(s)
	if env.Result == Pass {
		// The operator runs with the env (MAAS-V013): it rewrites the
		// gateway's Wasm failure modes on its next reconcile, seconds
		// after its new pod is Ready (kuadrant-operator v1.5.2 internal/wasm
		// utils.go reads the env; istio_extension_reconciler.go rewrites
		// the EnvoyFilter). A mismatch meanwhile may pass on a later read.
		modes = modes.pending()
	}
	return append(out, env, checkRoute(s), checkMigrations(s), checkDBSchema(s), modes, checkAuthorinoTrust(s))
}

// checkRoute (MAAS-V014): the passthrough Route that publishes the
// Gateway exists when the inventory creates one (gateway.createRoute);
// without it clients reach no MaaS endpoint.
func checkRoute(s *State) Check {
	g := s.Inv.Gateway
	if !g.CreateRoute {
		return newCheck(CodeRoute, "Route").skip("the inventory creates no Route (gateway.createRoute false)")
	}
	c := newCheck(CodeRoute, describe("Route", g.Namespace, g.RouteName))
	if s.Route == nil {
		return c.fail(s.MissingReason("Route", g.Namespace, g.RouteName),
			"the passthrough Route does not exist, so clients reach no MaaS endpoint", "maasctl install")
	}
	return c.pass("host " + orNone(str(s.Route, "spec", "host")))
}

// envEffects says what goes wrong without each Kuadrant operator variable
// maasctl sets (kuadrant-operator v1.5 internal/wasm/utils.go,
// internal/controller/data_plane_policies_workflow.go).
var envEffects = map[string]string{
	inventory.EnvGatewayControllerNames: "Kuadrant does not recognise the OpenShift gateway, so its policies are not enforced there",
	inventory.EnvAuthServiceTimeout:     "the gateway gives up on Authorino after the 200 ms default and API-key checks time out under load (RHOAIENG-71638)",
	inventory.EnvRateLimitFailure:       "requests pass without quota whenever Limitador is unavailable (fail open)",
	inventory.EnvRateLimitCheckFailure:  "token quotas pass unchecked whenever Limitador is unavailable (fail open)",
	inventory.EnvRateLimitReportFailure: "token usage goes unreported whenever Limitador is unavailable (fail open)",
}

// checkOperatorEnv (MAAS-V013): the RHCL Subscription's spec.config.env
// holds every variable of inventory.KuadrantOperatorEnv with its value, and
// a Running Kuadrant operator pod runs with them (OLM copies the list into
// the Deployment; the operator reads it at start).
func checkOperatorEnv(s *State) Check {
	op := s.Inv.Operator("rhcl")
	want := s.Inv.KuadrantOperatorEnv()
	if op == nil || len(want) == 0 {
		return newCheck(CodeOperatorEnv, "Subscription").skip("the inventory sets no RHCL operator env")
	}
	c := newCheck(CodeOperatorEnv, describe("Subscription", op.Namespace, op.Package))
	if s.RHCLSubscription == nil {
		return c.fail(s.MissingReason("Subscription", op.Namespace, op.Package), "the RHCL Subscription does not exist", "maasctl install")
	}
	env, _, _ := unstructured.NestedSlice(s.RHCLSubscription.Object, "spec", "config", "env")
	if miss := inventory.MissingEnv(inventory.EnvByName(env), want); len(miss) > 0 {
		return c.fail("spec.config.env lacks "+strings.Join(miss, ", "), envEffect(miss),
			"maasctl install (it upserts these variables by name and keeps the other entries; a JSON merge patch of spec.config.env replaces the whole list)")
	}
	k := s.Inv.Kuadrant
	var stale []string
	for _, p := range s.KuadrantPods {
		if str(p, "status", "phase") != "Running" || p.GetDeletionTimestamp() != nil {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(p.Object, "spec", "containers")
		var miss []string
		for _, ct := range cs {
			m, _ := ct.(map[string]any)
			cenv, _, _ := unstructured.NestedSlice(m, "env")
			miss = append(miss, inventory.MissingEnv(inventory.EnvByName(cenv), want)...)
		}
		if len(miss) == 0 {
			return c.pass("spec.config.env and Running pod " + p.GetName() + " hold " + strings.Join(envNames(want), ", "))
		}
		stale = append(stale, "pod "+p.GetName()+" lacks "+strings.Join(miss, ", "))
	}
	if len(stale) == 0 {
		return c.fail("no Running Kuadrant operator pod ("+k.OperatorSelector+" in "+k.OperatorNamespace+")", "the RHCL operator is not running",
			"oc get pods -n "+k.OperatorNamespace+" -l "+k.OperatorSelector)
	}
	return c.fail(strings.Join(stale, "; "), "the running operator pod predates the Subscription's env (OLM updated the Deployment; the pod was not replaced)",
		KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector))
}

func envNames(env []inventory.EnvVar) []string {
	out := make([]string, len(env))
	for i, e := range env {
		out[i] = e.Name
	}
	return out
}

// envEffect joins what goes wrong without the variables of miss
// ("NAME=value").
func envEffect(miss []string) string {
	var out []string
	for _, m := range miss {
		name, _, _ := strings.Cut(m, "=")
		if e := envEffects[name]; e != "" {
			out = append(out, name+": "+e)
		} else {
			out = append(out, name+" is set in kuadrant.operatorEnv")
		}
	}
	return strings.Join(out, "; ")
}

func str(u *unstructured.Unstructured, path ...string) string {
	if u == nil {
		return ""
	}
	v, _, _ := unstructured.NestedString(u.Object, path...)
	return v
}

func cond(u *unstructured.Unstructured, typ string) (waiters.Cond, bool) {
	if u == nil {
		return waiters.Cond{}, false
	}
	return waiters.GetCondition(u, typ)
}

// falseConditions renders every condition that is not True, except those
// whose True value is bad (Degraded) which are rendered when True.
func falseConditions(u *unstructured.Unstructured) string {
	l, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var parts []string
	for _, x := range l {
		m, _ := x.(map[string]any)
		typ, _ := m["type"].(string)
		st, _ := m["status"].(string)
		bad := st != "True"
		if typ == "Degraded" {
			bad = st == "True"
		}
		if !bad {
			continue
		}
		if sev, _ := m["severity"].(string); sev == "Info" {
			continue
		}
		c, _ := waiters.GetCondition(u, typ)
		parts = append(parts, c.String())
	}
	return strings.Join(parts, "; ")
}

func checkDSC(s *State) Check {
	name := s.Release.DSC(s.Inv)
	c := newCheck(CodeDSCReady, describe("DataScienceCluster", "", name))
	if s.DSC == nil {
		return c.fail(s.MissingReason("DataScienceCluster", "", name),
			"the DataScienceCluster does not exist, or RHOAI is not installed",
			"maasctl install")
	}
	phase := str(s.DSC, "status", "phase")
	maasCond := s.Release.MaaSCondition()
	if _, ok := cond(s.DSC, maasCond); phase == "Ready" && !ok {
		// An aggregate Ready without the release's own MaaS condition
		// says nothing about MaaS; on 3.5 the 3.4 name
		// ModelsAsServiceReady never stands in for it (case B04).
		return c.fail("phase Ready but no "+maasCond+" condition",
			"the RHOAI operator has not reported MaaS under the name RHOAI "+s.Release.Version+" uses ("+maasCond+")",
			"oc get datasciencecluster "+name+" -o yaml; check the operator version against operators[rhoai].channel (maasctl preflight, check rhoai-version)")
	}
	if phase == "Ready" {
		return c.pass("phase Ready")
	}
	detail := "phase " + orNone(phase)
	if fc := falseConditions(s.DSC); fc != "" {
		detail += "; " + fc
	}
	cause, fix := "a DSC component is not ready", "maasctl doctor; oc get datasciencecluster "+name+" -o yaml"
	maas, _ := cond(s.DSC, s.Release.MaaSCondition())
	switch {
	case strings.Contains(maas.Message, s.Inv.DBConfig.Name):
		cause = fmt.Sprintf("MaaS is blocked: Secret %s/%s (the maas-api database URL) is missing", s.Release.DBConfigNamespace(s.Inv), s.Inv.DBConfig.Name)
		fix = "maasctl install (re-creates " + s.Inv.DBConfig.Name + " from Vault)"
	case maas.Status == "False" && maas.Reason == "Removed":
		cause = "MaaS is not enabled: " + s.Release.MaaSField() + " is not Managed (RHOAI " + s.Release.Version + " spelling)"
		fix = "maasctl install"
	}
	return c.fail(detail, cause, fix)
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// KuadrantRestartCommand is the documented fix for a Kuadrant operator that
// started before its dependencies (deployment README, troubleshooting; case
// B01).
func KuadrantRestartCommand(namespace, selector string) string {
	return fmt.Sprintf("oc delete pod -n %s -l %s", namespace, selector)
}

func checkKuadrant(s *State) Check {
	k := s.Inv.Kuadrant
	c := newCheck(CodeKuadrantReady, describe("Kuadrant", k.Namespace, k.Name))
	if s.Kuadrant == nil {
		return c.fail(s.MissingReason("Kuadrant", k.Namespace, k.Name), "the Kuadrant instance does not exist", "maasctl install")
	}
	r, ok := cond(s.Kuadrant, "Ready")
	if ok && r.Status == "True" {
		return c.pass(r.String())
	}
	if !ok {
		return c.fail("no Ready condition", "the Kuadrant operator has not reconciled the instance (is RHCL installed and its operator running?)",
			"oc get pods -n "+k.OperatorNamespace+" -l "+k.OperatorSelector)
	}
	if r.Reason == "MissingDependency" {
		return c.fail(r.String(), "the Kuadrant operator started before Istio (Gateway API provider) existed and keeps its stale dependency check",
			KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector))
	}
	return c.fail(r.String(), "Kuadrant is not ready: "+orNone(r.Reason), "oc describe kuadrant "+k.Name+" -n "+k.Namespace)
}

func checkGateway(s *State) Check {
	g := s.Inv.Gateway
	c := newCheck(CodeGatewayProgrammed, describe("Gateway", g.Namespace, g.Name))
	if s.Gateway == nil {
		return c.fail(s.MissingReason("Gateway", g.Namespace, g.Name), "the MaaS Gateway does not exist", "maasctl install")
	}
	p, ok := cond(s.Gateway, "Programmed")
	if ok && p.Status == "True" {
		return c.pass(p.String())
	}
	detail := "no Programmed condition"
	if ok {
		detail = p.String()
	}
	if lc := listenerProblems(s.Gateway); lc != "" {
		detail += "; listeners: " + lc
		return c.fail(detail, "a listener's TLS certificate is not usable (Certificate "+g.CertificateName+" not Ready or Secret "+g.CertSecret+" missing)",
			"oc describe certificate "+g.CertificateName+" -n "+g.Namespace)
	}
	return c.fail(detail, "the Gateway is not programmed by the OpenShift Gateway controller",
		"oc describe gateway "+g.Name+" -n "+g.Namespace)
}

// listenerProblems renders listener conditions that are not True.
func listenerProblems(gw *unstructured.Unstructured) string {
	ls, _, _ := unstructured.NestedSlice(gw.Object, "status", "listeners")
	var parts []string
	for _, l := range ls {
		m, _ := l.(map[string]any)
		conds, _ := m["conditions"].([]any)
		for _, x := range conds {
			cm, _ := x.(map[string]any)
			typ, _ := cm["type"].(string)
			if typ == "Conflicted" {
				continue
			}
			if cm["status"] != "True" && (typ == "ResolvedRefs" || typ == "Accepted") {
				parts = append(parts, fmt.Sprintf("%v %s=%v (%v): %v", m["name"], typ, cm["status"], cm["reason"], cm["message"]))
			}
		}
	}
	return strings.Join(parts, "; ")
}

func checkMaaSAPI(s *State) Check {
	ns := s.Release.MaaSAPINamespace(s.Inv)
	c := newCheck(CodeMaaSAPIAvailable, describe("Deployment", ns, "maas-api"))
	if s.MaaSAPI == nil {
		cause := "the RHOAI operator did not deploy maas-api"
		if m, ok := cond(s.DSC, s.Release.MaaSCondition()); ok && m.Status != "True" {
			cause += ": DSC " + m.String()
		}
		return c.fail(s.MissingReason("Deployment", ns, "maas-api"), cause, "maasctl doctor")
	}
	ready, _, _ := unstructured.NestedInt64(s.MaaSAPI.Object, "status", "readyReplicas")
	if cause, fix, ok := MaaSAPIScaledToZero(s); ok {
		return c.fail(fmt.Sprintf("spec.replicas 0 (scaled to 0 replicas), %d ready", ready), cause, fix)
	}
	want, found, _ := unstructured.NestedInt64(s.MaaSAPI.Object, "spec", "replicas")
	if !found {
		want = 1 // the API server's default
	}
	detail := fmt.Sprintf("%d/%d ready", ready, want)
	if a, ok := cond(s.MaaSAPI, "Available"); ok && a.Status == "True" && ready >= want {
		return c.pass(detail)
	}
	return c.fail(detail, "maas-api pods are not ready (it crash-loops when its database is unreachable)",
		fmt.Sprintf("oc logs -n %s deploy/maas-api --tail=20", ns))
}

// MaaSAPIScaledToZero is the cause and fix when the maas-api Deployment's
// spec.replicas is 0 (someone ran oc scale --replicas=0): no pod runs, so
// nothing crash-loops and its logs say nothing; the Deployment may even
// be Available (0 of 0). ok is false when maas-api is missing or asks for
// replicas.
func MaaSAPIScaledToZero(s *State) (cause, fix string, ok bool) {
	if s.MaaSAPI == nil {
		return "", "", false
	}
	want, found, _ := unstructured.NestedInt64(s.MaaSAPI.Object, "spec", "replicas")
	if !found || want != 0 {
		return "", "", false
	}
	ns := s.Release.MaaSAPINamespace(s.Inv)
	return "maas-api is scaled to 0 replicas (spec.replicas 0), so no pod serves the MaaS API (API keys, model list); the RHOAI operator, which owns the Deployment, normally reconciles it back to its replicas, and did not",
		fmt.Sprintf("oc scale deployment maas-api -n %s --replicas=1", ns), true
}

func checkDBConfig(s *State) Check {
	d := s.DBConfig
	c := newCheck(CodeDBConfig, describe("Secret", d.Namespace, d.Name))
	switch {
	case !s.DBConfig.Exists:
		return c.fail(s.MissingReason("Secret", d.Namespace, d.Name),
			"maas-api reads its database URL from this Secret; without it MaaS reports missing prerequisites and a restarted maas-api crash-loops",
			"maasctl install (re-creates the Secret from the password in Vault; maas-api is restarted when it changed)")
	case !s.DBConfig.HasKey("DB_CONNECTION_URL"):
		return c.fail("keys: "+orNone(strings.Join(s.DBConfig.Keys, ",")), "the Secret has no DB_CONNECTION_URL key",
			"maasctl install")
	}
	return c.pass("has key DB_CONNECTION_URL")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
