// Package doctor explains why a MaaS deployment does not work. Every row
// of the deployment README's troubleshooting table
// (../shared/reference/DEPLOYMENT.md, "Troubleshooting") is a rule that
// computes a coded finding from live state: the object it is about, the
// evidence read from the cluster (or from a data-path probe), the cause and
// the command that fixes it. Rules are pure functions of a verify.State and
// the data-path checks, so they are unit-tested without a cluster.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// Severity ranks a finding.
type Severity string

// Severities. Only error findings make doctor exit non-zero.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
	Info    Severity = "info"
)

// Finding is one diagnosed problem. No field ever holds a secret.
type Finding struct {
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	// Symptom is the troubleshooting table's symptom.
	Symptom string `json:"symptom"`
	// Object is the object the finding is about (Kind namespace/name).
	Object string `json:"object"`
	// Evidence is what was read from the cluster or the data path.
	Evidence string `json:"evidence"`
	Cause    string `json:"cause"`
	// Fix is the command (or change) that fixes it.
	Fix string `json:"fix"`
}

// Rule describes one finding code of the catalogue.
type Rule struct {
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	Symptom  string   `json:"symptom"`
}

// Finding codes. They are stable: a code is never reused.
const (
	CodeMaaSNotEnabled       = "MAAS-D001"
	CodeKuadrantMissingDep   = "MAAS-D002"
	CodeGatewayNotProgrammed = "MAAS-D003"
	CodeGatewayLBHarmless    = "MAAS-D004"
	CodeMaaSAPIMissing       = "MAAS-D005"
	CodeDBConfigMissing      = "MAAS-D006"
	CodeMonitoringOff        = "MAAS-D007"
	Code401                  = "MAAS-D008"
	Code403                  = "MAAS-D009"
	Code429                  = "MAAS-D010"
	CodeTokenLimitTooSmall   = "MAAS-D011"
	CodeProviderSecret       = "MAAS-D012"
	CodeProviderSecretKey    = "MAAS-D013"
	CodeProviderSecretLabel  = "MAAS-D014"
	CodeProviderNotReady     = "MAAS-D015"
	CodeServiceMeshOld       = "MAAS-D016"
	CodeModelNotServing      = "MAAS-D017"
	CodeGovernanceGap        = "MAAS-D018"
	CodeAuthService          = "MAAS-D019"
	CodeKuadrantNotReady     = "MAAS-D020"
	CodeGatewayAuth          = "MAAS-D021"
)

// Rules is the catalogue, in the order of the troubleshooting table.
var Rules = []Rule{
	{CodeMaaSNotEnabled, Error, "MaaS CRDs never appear; DSC shows ModelsAsAServiceReady=False … Removed"},
	{CodeKuadrantMissingDep, Error, "Kuadrant shows MissingDependency"},
	{CodeKuadrantNotReady, Error, "Kuadrant not Ready"},
	{CodeGatewayNotProgrammed, Error, "Gateway not Programmed"},
	{CodeGatewayLBHarmless, Info, "Gateway shows LoadBalancerPending or DNSReady=False"},
	{CodeMaaSAPIMissing, Error, "maas-api never appears or is not available"},
	{CodeDBConfigMissing, Error, "maas-db-config missing in the maas-api namespace"},
	{CodeMonitoringOff, Warning, "DSC shows Degraded, mentioning monitoring"},
	{Code401, Error, "401 from /v1/..."},
	{Code403, Error, "403 from /v1/..."},
	{Code429, Error, "429 from /v1/..."},
	{CodeTokenLimitTooSmall, Warning, "429 after one or two requests"},
	{CodeProviderSecret, Error, "ExternalProvider not Ready: API-key Secret missing"},
	{CodeProviderSecretKey, Error, "ExternalProvider not Ready: Secret has no key api-key"},
	{CodeProviderSecretLabel, Error, "ExternalProvider not Ready: Secret lacks the ipp-managed label"},
	{CodeProviderNotReady, Error, "ExternalProvider not Ready"},
	{CodeServiceMeshOld, Warning, "Long prompts fail or are cut off"},
	{CodeModelNotServing, Error, "Model requests fail with 503 / timeouts: the model server is not serving"},
	{CodeGovernanceGap, Error, "MaaSModelRef stays Pending: no governance pairing"},
	{CodeAuthService, Error, "Model and key calls fail with 500 AUTH_FAILURE"},
	{CodeGatewayAuth, Error, "MaaS Gateway AuthPolicy maas-gateway-auth missing, not accepted or not enforced"},
	{CodeObjectMissing, Error, "An object maasctl install creates is missing"},
	{CodeNotReady, Error, "An object maasctl install manages is not Ready, Active or Enforced"},
	{CodeKuadrantOperatorDown, Error, "Kuadrant operator not running"},
	{CodeOperatorEnv, Error, "RHCL operator env missing, or not in the running operator pod"},
	{CodeEndpointUnreachable, Error, "The MaaS endpoint does not answer, or answers not found"},
	{CodeAuthBypass, Error, "Requests without a valid API key are served"},
	{CodeNotInGroups, Info, "You are not in the groups the installed inventory grants (intended)"},
	{CodeDataPathFailed, Error, "A request-path check failed"},
	{CodeStepNotConverged, Error, "An install step's live state does not match the inventory (maasctl status: drifted, failed or not run)"},
	{CodeStepUnsure, Warning, "An install step's state cannot be judged, or the inventory changed since it ran"},
	{CodeNotInstalled, Error, "MaaS is not installed: maasctl uninstall removed it"},
	{CodeDBNotOwner, Error, "maas-api crash-loops: its database role does not own the MaaS tables (must be owner)"},
	{CodeDBDirty, Error, "maas-api crash-loops: Dirty database version N (an interrupted schema migration)"},
	{CodeDBIndexInvalid, Error, "A MaaS index is INVALID after an interrupted CREATE INDEX CONCURRENTLY (nothing reports it)"},
	{CodeSharedPriority, Warning, "MaaSSubscription shows SpecPriorityDuplicate=True: another subscription has the same priority"},
	{CodeAuthorinoTrust, Error, "Every model call with a valid API key gets 401/403: Authorino does not trust the service CA that signs maas-api's certificate"},
}

func rule(code string) Rule {
	for _, r := range Rules {
		if r.Code == code {
			return r
		}
	}
	return Rule{Code: code, Severity: Error, Symptom: code}
}

func finding(code, object, evidence, cause, fix string) Finding {
	r := rule(code)
	return Finding{Code: code, Severity: r.Severity, Symptom: r.Symptom, Object: object, Evidence: evidence, Cause: cause, Fix: fix}
}

// Options configure Run.
type Options struct {
	Inventory *inventory.Inventory
	Reader    verify.Reader
	// DataPath, when set, probes the MaaS endpoint (mint, list, chat, no
	// key; the minted key is revoked) so 401/403/429 causes are observed,
	// not only inferred. ProbeQuota is ignored.
	DataPath *verify.DataPathOptions
	// Release is where the installed RHOAI release keeps MaaS (zero: 3.5
	// with the inventory's names).
	Release release.Release
	// Schema, when set, asks the database about maas-api's schema
	// (verify.JobSchemaProber); nil leaves the database unasked.
	Schema verify.SchemaProber
	// APIKey, when set, is a user's own sk-oai- key to test for 401
	// (never printed).
	APIKey string
	// InstallCommand is the command that re-applies Inventory ("maasctl
	// install -f site.yaml"); every fix that says "maasctl install" names
	// it instead, so that the fix, run as printed, converges to the
	// inventory doctor judged against (a plain install on a cluster
	// installed from a file stops without writing). Empty means "maasctl
	// install".
	InstallCommand string
	// Steps is every install step's state (steps.Status), so that doctor
	// covers each step's live Check, not only the verify checks; nil
	// leaves the step findings out. StepsErr, when set, says why the
	// states could not be read (a warning finding).
	Steps    []StepState
	StepsErr error
	// Uninstalled is the mark of a finished maasctl uninstall, nil when
	// there is none: doctor then reports that MaaS was uninstalled
	// (MAAS-D037) and nothing else.
	Uninstalled *Uninstalled
	// Settle and Waiting are verify.Options': while every failed live
	// check is Pending (a Kuadrant policy Kuadrant is still syncing, right
	// after an install, say), the cluster is read again every 2 s for up
	// to Settle before the findings are computed (verify.SettledSnapshot);
	// 0 analyses the first read.
	Settle  time.Duration
	Waiting func(pending string)
}

// Report is the outcome of one doctor run.
type Report struct {
	Endpoint string    `json:"endpoint,omitempty"`
	Findings []Finding `json:"findings"`
	// DataPath lists the data-path checks doctor ran (empty without an
	// endpoint).
	DataPath []verify.Check `json:"dataPath,omitempty"`
}

// Errors returns the error-severity findings.
func (r *Report) Errors() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == Error {
			out = append(out, f)
		}
	}
	return out
}

// Codes returns the finding codes in report order.
func (r *Report) Codes() []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Code)
	}
	return out
}

// Run snapshots the cluster (settled for up to o.Settle), probes the data
// path when asked and returns the findings. It fails only when the
// cluster cannot be read at all.
func Run(ctx context.Context, o Options) (*Report, error) {
	// Uninstalled: one finding; no read of what is gone, no schema Job,
	// no request to an endpoint that is gone.
	if f := notInstalled(o.Uninstalled); f != nil {
		if o.InstallCommand != "" {
			f.Fix = verify.NameInstallCommand(f.Fix, o.InstallCommand)
		}
		return &Report{Findings: []Finding{*f}}, nil
	}
	s, err := verify.SettledSnapshot(ctx, verify.Options{Inventory: o.Inventory, Reader: o.Reader, Release: o.Release, Settle: o.Settle, Waiting: o.Waiting})
	if err != nil {
		return nil, err
	}
	if o.Schema != nil {
		p := o.Schema.ProbeSchema(ctx, o.Inventory)
		s.Schema = &p
	}
	rep := &Report{}
	if o.DataPath != nil {
		dp := *o.DataPath
		dp.ProbeQuota, dp.ProbeBodySize = false, 0
		ep, err := verify.ResolveEndpoint(s, dp.Endpoint)
		if err != nil {
			// Not dropped: the failed check becomes a MAAS-D026 finding.
			rep.DataPath = append(rep.DataPath, verify.Check{Code: verify.CodeHealth, Title: verify.TitleOf(verify.CodeHealth), Object: "endpoint",
				Result: verify.Fail, Detail: err.Error(), Cause: "no MaaS endpoint is known"})
		} else {
			dp.Endpoint = ep
			rep.Endpoint = ep
			for _, c := range verify.DataPath(ctx, s, dp) {
				if c.Result != verify.Skip {
					rep.DataPath = append(rep.DataPath, c)
				}
			}
			if o.APIKey != "" {
				rep.DataPath = append(rep.DataPath, userKeyCheck(ctx, dp, o.APIKey))
			}
		}
	}
	rep.Findings = Analyze(s, rep.DataPath)
	if o.StepsErr != nil {
		rep.Findings = append(rep.Findings, finding(CodeStepUnsure, "run record", "the install steps' states could not be read: "+o.StepsErr.Error(),
			"doctor judged the live objects only, not each step's own Check", "maasctl status   (shows the error in full)"))
	}
	rep.Findings = sortFindings(append(rep.Findings, StepFindings(o.Steps)...))
	if o.InstallCommand != "" {
		for i := range rep.Findings {
			rep.Findings[i].Fix = verify.NameInstallCommand(rep.Findings[i].Fix, o.InstallCommand)
		}
	}
	return rep, nil
}

// userKeyCheck tests the user's own key with GET /v1/models.
func userKeyCheck(ctx context.Context, dp verify.DataPathOptions, key string) verify.Check {
	c := verify.Check{Code: verify.CodeListModels, Title: "your API key ($MAAS_API_KEY) is accepted", Object: dp.Endpoint + "/v1/models"}
	if !strings.HasPrefix(key, "sk-oai-") {
		c.Result, c.Class = verify.Fail, string(verify.ClassUnauth)
		c.Detail = "the key does not start with sk-oai- (an OpenShift token?)"
		return c
	}
	hc, err := verify.HTTPClient(dp)
	if err != nil {
		c.Result, c.Detail = verify.Fail, err.Error()
		return c
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(dp.Endpoint, "/")+"/v1/models", nil)
	if err != nil {
		c.Result, c.Detail = verify.Fail, err.Error()
		return c
	}
	req.Header.Set("Authorization", "Bearer "+key)
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		c.Result, c.Detail = verify.Fail, verify.Scrub(err.Error(), key)
		return c
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, verify.MaxBody))
	dg := verify.Classify(verify.Response{Status: resp.StatusCode, Body: b, Latency: time.Since(t0)})
	if dg.Class == verify.ClassOK {
		c.Result, c.Detail = verify.Pass, "HTTP 200"
		return c
	}
	c.Result, c.Class, c.Detail, c.Cause, c.Fix = verify.Fail, string(dg.Class), fmt.Sprintf("HTTP %d", resp.StatusCode), dg.Cause, dg.Fix
	return c
}

// Analyze computes the findings of a snapshot and the data-path checks
// (nil when none ran). The result is sorted by code, then object.
func Analyze(s *verify.State, dataPath []verify.Check) []Finding {
	var out []Finding
	for _, r := range []func(*verify.State) []Finding{
		maasNotEnabled, kuadrant, gateway, maasAPI, dbConfig, monitoring,
		providers, serviceMesh, modelServing, governance, access, tokenLimits, gatewayAuth,
		missingObjects, kuadrantOperator, authService, schemaFindings, sharedPriority, authorinoTrust,
	} {
		out = append(out, r(s)...)
	}
	out = append(out, fromDataPath(s, dataPath)...)
	out = append(out, fromChecks(s, out)...)
	return sortFindings(merge(out))
}

// sortFindings orders findings by code, then object.
func sortFindings(out []Finding) []Finding {
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Code != out[j].Code {
			return out[i].Code < out[j].Code
		}
		return out[i].Object < out[j].Object
	})
	return out
}

// merge joins findings with the same code and object, keeping every
// distinct piece of evidence.
func merge(in []Finding) []Finding {
	idx := map[string]int{}
	var out []Finding
	for _, f := range in {
		k := f.Code + "|" + f.Object
		if i, ok := idx[k]; ok {
			if !strings.Contains(out[i].Evidence, f.Evidence) {
				out[i].Evidence += "; " + f.Evidence
			}
			continue
		}
		idx[k] = len(out)
		out = append(out, f)
	}
	return out
}

// WriteText renders the findings, one block each.
func (r *Report) WriteText(w io.Writer) error {
	if len(r.Findings) == 0 {
		_, err := fmt.Fprintln(w, "doctor: no problems found")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Code, strings.ToUpper(string(f.Severity)), cell(f.Symptom))
		fmt.Fprintf(tw, "\tobject:\t%s\n", cell(f.Object))
		fmt.Fprintf(tw, "\tevidence:\t%s\n", cell(f.Evidence))
		fmt.Fprintf(tw, "\tcause:\t%s\n", cell(f.Cause))
		fmt.Fprintf(tw, "\tfix:\t%s\n", cell(f.Fix))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "doctor: %d finding(s), %d error(s): %s\n", len(r.Findings), len(r.Errors()), strings.Join(r.Codes(), ", "))
	return err
}

// cell keeps a multi-line value (a step Check's message, an operator's
// condition text) in the value column: each further line starts with two
// empty cells, so tabwriter aligns it under the first.
func cell(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n\t\t")
}

// WriteJSON renders the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
