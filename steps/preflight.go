package steps

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/blang/semver/v4"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// PreflightStepID is the install's first step: every other root step
// depends on it, so a failed check stops the run before any write.
const PreflightStepID = "preflight/checks"

// IgnoreAll in Policy.IgnorePreflight ignores every check.
const IgnoreAll = "all"

// MinOpenShift is the oldest OpenShift release the deployment supports
// (reference/DEPLOYMENT.md, "Prerequisites").
const MinOpenShift = "4.19.9"

// Policy holds the run switches that change what steps may do. The zero
// value is the safe default: every preflight error stops the run and no
// InstallPlan is approved.
type Policy struct {
	// IgnorePreflight names preflight checks (PreflightCheckNames) whose
	// errors are reported as warnings instead; IgnoreAll ignores them all
	// (kubeadm's --ignore-preflight-errors).
	IgnorePreflight []string
	// ApproveInstallPlans lets an OLM step approve a Manual InstallPlan, and
	// only one whose CSVs are the expected CSV of the Subscription (its
	// startingCSV, else the channel head OLM resolved) and not below the
	// operator's minVersion (case B02).
	ApproveInstallPlans bool
	// RotateDBPassword lets the database/secret step set Vault's password
	// on the database role when the database refuses it (a "change" Job
	// logging in with the password of the live basic-auth Secret); only
	// `maasctl database rotate-password` sets it. Without it a refusal
	// stops the run (case B08).
	RotateDBPassword bool
}

// ignores reports whether check's errors are downgraded to warnings.
func (p Policy) ignores(check string) bool {
	return slices.Contains(p.IgnorePreflight, IgnoreAll) || slices.Contains(p.IgnorePreflight, check)
}

// Severity ranks a preflight finding.
type Severity string

// Severities: an error stops the install unless ignored; a warning never does.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Finding is one problem a preflight check found. Message and Fix never
// carry secret values.
type Finding struct {
	// Check is the check's name (PreflightCheckNames).
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	// Code, when set, is a stable machine-readable name of the problem
	// (e.g. DEPENDENCY_VERSION_DENIED); it never changes with the wording.
	Code string `json:"code,omitempty"`
	// Message says what is wrong, naming the object.
	Message string `json:"message"`
	// Fix is the command or change that fixes it.
	Fix string `json:"fix,omitempty"`
	// Ignored is true when --ignore-preflight turned this error into a
	// warning.
	Ignored bool `json:"ignored,omitempty"`
}

// String renders the finding as "check: [CODE] message (fix: ...)".
func (f Finding) String() string {
	s := f.Check + ": "
	if f.Code != "" {
		s += "[" + f.Code + "] "
	}
	s += f.Message
	if f.Fix != "" {
		s += " (fix: " + f.Fix + ")"
	}
	return s
}

// PreflightCheck is one named, read-only check.
type PreflightCheck struct {
	// Name is what --ignore-preflight takes.
	Name string
	// Title is a short description.
	Title string
	// Run returns the check's findings; an error means the check could not
	// run (it is reported as an error finding of the check).
	Run func(ctx context.Context, e *Env) ([]Finding, error)
	// Reads lists what Run reads, for the preflight step's Access (and so
	// for the permissions check itself and the in-cluster RBAC).
	Reads func(e *Env) []Access
}

// PreflightChecks returns every check in the order they are reported.
func PreflightChecks() []PreflightCheck {
	olm := "operators.coreos.com"
	return []PreflightCheck{
		{"openshift-version", "OpenShift " + MinOpenShift + " or later (ClusterVersion)", checkOpenShiftVersion,
			func(*Env) []Access { return getAccess("config.openshift.io", "clusterversions", "", "version") }},
		{"gateway-api-crds", "Gateway API CRDs present, v1, the platform's standard " + MinGatewayAPIBundle + " or later (read only)", checkGatewayAPICRDs,
			func(*Env) []Access { return readAccess("apiextensions.k8s.io", "customresourcedefinitions", "") }},
		{"ossm-subscriptions", "no Service Mesh Subscription that blocks the ingress operator's own (OpenShift before " + OSSMConflictFixedIn + ")", checkOSSMSubscriptions,
			func(*Env) []Access { return listAccess(olm, "subscriptions", "") }},
		{"cert-manager", "cert-manager served and the ClusterIssuer Ready", checkCertManager, func(e *Env) []Access {
			if e.Inv.Gateway.CertIssuer == "" {
				return nil
			}
			return getAccess("cert-manager.io", "clusterissuers", "", e.Inv.Gateway.CertIssuer)
		}},
		{"gateway-cert", "a user-supplied Gateway certificate covers only the MaaS host", checkGatewayCert, func(e *Env) []Access {
			if e.Inv.Gateway.CertIssuer != "" {
				return nil
			}
			return getAccess("", "secrets", e.Inv.Gateway.Namespace, e.Inv.Gateway.CertSecret)
		}},
		{"model-secrets", "model namespaces and their API-key Secrets (key api-key)", checkModelSecrets, func(e *Env) []Access {
			var out []Access
			for _, m := range e.Inv.ExternalModels {
				out = append(out, getAccess("", "namespaces", "", m.Namespace)...)
				out = append(out, getAccess("", "secrets", m.Namespace, m.APIKeySecret)...)
			}
			return out
		}},
		{"catalog-sources", "CatalogSources READY and the pinned channels offered", checkCatalogSources, eachOperator(func(op inventory.Operator) []Access {
			return append(append(getAccess(olm, "subscriptions", op.Namespace, op.Package), getAccess(olm, "catalogsources", op.SourceNamespace, op.Source)...),
				getAccess("packages.operators.coreos.com", "packagemanifests", op.SourceNamespace, op.Package)...)
		})},
		{"operator-groups", "at most one compatible OperatorGroup per operator namespace", checkOperatorGroups, eachOperator(func(op inventory.Operator) []Access {
			return append(listAccess(olm, "operatorgroups", op.Namespace), getAccess("", "namespaces", "", op.Namespace)...)
		})},
		{"rhcl-version", "Connectivity Link / Kuadrant installed, pinned or resolved at no denied version", checkRHCLVersion,
			func(*Env) []Access {
				return append(listAccess(olm, "clusterserviceversions", ""), listAccess(olm, "subscriptions", "")...)
			}},
		{"conflicting-operators", "no Open Data Hub or second RHOAI subscription", checkConflictingOperators,
			func(*Env) []Access { return listAccess(olm, "subscriptions", "") }},
		{"orphan-csvs", "no leftover CSV or failed resolution blocks an operator install", checkOrphanCSVs,
			func(*Env) []Access {
				return append(listAccess(olm, "clusterserviceversions", ""), listAccess(olm, "subscriptions", "")...)
			}},
		{"storage-class", "a StorageClass for the CNPG volumes", checkStorageClass,
			func(*Env) []Access { return listAccess("storage.k8s.io", "storageclasses", "") }},
		{"stale-pvcs", "no PVCs of an earlier database without its Cluster", checkStalePVCs,
			func(e *Env) []Access { return listAccess("", "persistentvolumeclaims", e.Inv.Database.Namespace) }},
		{"rhoai-layout", "the DataScienceCluster layout the cluster serves", checkRHOAILayout, layoutReads},
		{"rhoai-version", "the RHOAI minor the cluster runs is the one of operators[rhoai].channel", checkRHOAIVersion, layoutReads},
		{"dsc", "one DSCInitialization and DataScienceCluster, and a component set that runs MaaS", checkDSCSingletons, func(*Env) []Access {
			return append(listAccess("dscinitialization.opendatahub.io", "dscinitializations", ""), listAccess("datasciencecluster.opendatahub.io", "datascienceclusters", "")...)
		}},
		{"access-pairing", "every model in a MaaSSubscription is in a MaaSAuthPolicy and the reverse", checkAccessPairing, func(*Env) []Access {
			return append(listAccess("maas.opendatahub.io", "maassubscriptions", ""), listAccess("maas.opendatahub.io", "maasauthpolicies", "")...)
		}},
		// Vault only; the permissions check sends SelfSubjectAccessReviews,
		// which every authenticated identity may create (the
		// system:basic-user ClusterRole of Kubernetes and OpenShift).
		{"vault", "Vault reachable and the database secret path usable", checkVault, nil},
		{"permissions", "permission for every verb, kind and namespace the install writes", checkPermissions, nil},
	}
}

// getAccess is get on one named object (ns "" for a cluster-scoped one).
func getAccess(group, resource, ns, name string) []Access {
	return []Access{{"get", group, resource, ns, name}}
}

// listAccess is list on a resource in ns ("" cluster-wide).
func listAccess(group, resource, ns string) []Access {
	return []Access{{"list", group, resource, ns, ""}}
}

// eachOperator is the reads of f for every operator the plan may
// subscribe to (the database operator too: it is planned when CNPG is not
// served yet).
func eachOperator(f func(op inventory.Operator) []Access) func(*Env) []Access {
	return func(e *Env) []Access {
		out := f(e.Inv.Database.Operator)
		for _, op := range e.Inv.Operators {
			out = append(out, f(op)...)
		}
		return out
	}
}

// layoutReads is what DetectLayout and DetectVersionSkew read: the DSC
// CRD, the rhoai Subscription and its installed CSV.
func layoutReads(e *Env) []Access {
	out := getAccess("apiextensions.k8s.io", "customresourcedefinitions", "", DSCCRD)
	if op := e.Inv.Operator("rhoai"); op != nil {
		out = append(out, getAccess("operators.coreos.com", "subscriptions", op.Namespace, op.Package)...)
		out = append(out, Access{"get", "operators.coreos.com", "clusterserviceversions", op.Namespace, ""})
	}
	return out
}

// preflightReads is the union of the checks' Reads.
func preflightReads(e *Env) []Access {
	var out []Access
	for _, c := range PreflightChecks() {
		if c.Reads != nil {
			out = append(out, c.Reads(e)...)
		}
	}
	return out
}

// PreflightCheckNames lists the check names, in report order.
func PreflightCheckNames() []string {
	var out []string
	for _, c := range PreflightChecks() {
		out = append(out, c.Name)
	}
	return out
}

// ValidateIgnore checks --ignore-preflight values against the known check
// names; errors name the unknown value and list the known ones.
func ValidateIgnore(names []string) error {
	known := append(PreflightCheckNames(), IgnoreAll)
	for _, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("--ignore-preflight %q: unknown check; known checks: %s", n, strings.Join(known, ", "))
		}
	}
	return nil
}

// PreflightReport is the outcome of every check.
type PreflightReport struct {
	// Findings in check order.
	Findings []Finding `json:"findings"`
	// Passed names the checks without findings.
	Passed []string `json:"passed"`
}

// Errors returns the findings that stop an install (not ignored).
func (r *PreflightReport) Errors() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == SeverityError && !f.Ignored {
			out = append(out, f)
		}
	}
	return out
}

// Warnings returns warnings and ignored errors.
func (r *PreflightReport) Warnings() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == SeverityWarning || f.Ignored {
			out = append(out, f)
		}
	}
	return out
}

// Err is a *PreflightError when an error is not ignored, else nil.
func (r *PreflightReport) Err() error {
	if errs := r.Errors(); len(errs) > 0 {
		return &PreflightError{Findings: errs}
	}
	return nil
}

// PreflightError lists every failed check at once.
type PreflightError struct {
	Findings []Finding
}

// Error lists every failed check with its fix.
func (e *PreflightError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "preflight failed (%d problem(s); nothing was changed):", len(e.Findings))
	for _, f := range e.Findings {
		b.WriteString("\n  - " + f.String())
	}
	b.WriteString("\n  to proceed anyway, re-run with --ignore-preflight CHECK (or all)")
	return b.String()
}

// WriteText renders the report for people: one line per check (PASS, WARN,
// FAIL or IGNORED) with its fix, then a summary line.
func (r *PreflightReport) WriteText(w io.Writer) error {
	byCheck := map[string][]Finding{}
	for _, f := range r.Findings {
		byCheck[f.Check] = append(byCheck[f.Check], f)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range PreflightChecks() {
		fs := byCheck[c.Name]
		if len(fs) == 0 {
			fmt.Fprintf(tw, "PASS\t%s\t%s\n", c.Name, c.Title)
			continue
		}
		for _, f := range fs {
			tag := "WARN"
			switch {
			case f.Ignored:
				tag = "IGNORED"
			case f.Severity == SeverityError:
				tag = "FAIL"
			}
			msg := f.Message
			if f.Code != "" {
				msg = "[" + f.Code + "] " + msg
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", tag, c.Name, msg)
			if f.Fix != "" {
				fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "preflight: %d error(s), %d warning(s), %d check(s) passed\n", len(r.Errors()), len(r.Warnings()), len(r.Passed))
	return err
}

// UnavailableSecrets stands in for Secrets when no secret store client
// could be built (no VAULT_ADDR, no token): DBPassword fails with err and
// the vault preflight check reports it.
func UnavailableSecrets(err error) Secrets { return unavailableSecrets{err} }

type unavailableSecrets struct{ err error }

func (u unavailableSecrets) DBPassword(context.Context) (string, error) { return "", u.err }

func (u unavailableSecrets) PreflightVault(context.Context) ([]Finding, error) {
	return []Finding{errorf("set VAULT_ADDR (or vault.address, --vault-addr) and VAULT_TOKEN (or vault login)", "no Vault client: %v", u.err)}, nil
}

// IsPreflightFailed reports whether err is a *PreflightError.
func IsPreflightFailed(err error) bool {
	var pe *PreflightError
	return errors.As(err, &pe)
}

// Preflight runs every check, never stopping at the first problem, and
// applies e.Policy.IgnorePreflight. It only reads (SelfSubjectAccessReviews
// are sent with dryRun).
func Preflight(ctx context.Context, e *Env) *PreflightReport {
	checks := PreflightChecks()
	results := make([][]Finding, len(checks))
	ctx = withReadMemo(ctx)
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			fs, err := c.Run(ctx, e)
			if e.Log != nil {
				e.Log.Debug("preflight check", zap.String("check", c.Name), zap.Duration("took", time.Since(t0)), zap.Int("findings", len(fs)))
			}
			if err != nil {
				fs = append(fs, Finding{Severity: SeverityError, Message: "check could not run: " + err.Error()})
			}
			for j := range fs {
				fs[j].Check = c.Name
				if fs[j].Severity == SeverityError && e.Policy.ignores(c.Name) {
					fs[j].Ignored = true
				}
			}
			results[i] = fs
		}()
	}
	wg.Wait()
	rep := &PreflightReport{Findings: []Finding{}, Passed: []string{}}
	for i, c := range checks {
		if len(results[i]) == 0 {
			rep.Passed = append(rep.Passed, c.Name)
		}
		rep.Findings = append(rep.Findings, results[i]...)
	}
	return rep
}

func preflightSteps(*inventory.Inventory) []*Step {
	return []*Step{{
		ID: PreflightStepID, Title: "preflight: prerequisites, conflicts and permissions",
		Access: func(e *Env, _ *Step, _ func(schema.GroupVersionKind) string) []Access { return preflightReads(e) },
		Apply: func(ctx context.Context, e *Env, s *Step) error {
			rep := Preflight(ctx, e)
			if ctx.Err() != nil {
				// Checks that could not run because the run was
				// interrupted are not findings.
				return fmt.Errorf("preflight stopped before its checks finished: %w (%v)", ctx.Err(), context.Cause(ctx))
			}
			for _, w := range rep.Warnings() {
				kind := "warning"
				if w.Ignored {
					kind = "ignored error"
				}
				e.progress(s.ID, "%s %s", kind, w)
			}
			return rep.Err()
		},
		Check: func(ctx context.Context, e *Env, _ *Step) (bool, string, error) {
			if err := Preflight(ctx, e).Err(); err != nil {
				return false, err.Error(), nil
			}
			return true, "", nil
		},
		HashExtra: func(e *Env) string { return "ignore:" + strings.Join(e.Policy.IgnorePreflight, ",") },
		// Its checks and warnings are the point of a re-run after an
		// inventory or cluster change (issue 14, item 9), and it only
		// reads (SelfSubjectAccessReviews are sent with dryRun).
		EveryRun: true,
		ReadOnly: true,
	}}
}

// Kinds the checks read.
var (
	clusterVersionGVK   = schema.GroupVersionKind{Group: "config.openshift.io", Version: "v1", Kind: "ClusterVersion"}
	certificateGVK      = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}
	clusterIssuerGVK    = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "ClusterIssuer"}
	catalogSourceGVK    = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "CatalogSource"}
	packageManifestGVK  = schema.GroupVersionKind{Group: "packages.operators.coreos.com", Version: "v1", Kind: "PackageManifest"}
	cnpgClusterGVK      = schema.GroupVersionKind{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Cluster"}
	dsciGVK             = schema.GroupVersionKind{Group: "dscinitialization.opendatahub.io", Version: "v2", Kind: "DSCInitialization"}
	dscGVK              = schema.GroupVersionKind{Group: "datasciencecluster.opendatahub.io", Version: "v2", Kind: "DataScienceCluster"}
	maasSubscriptionGVK = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSSubscription"}
	maasAuthPolicyGVK   = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSAuthPolicy"}
)

// getOptional returns the object, nil when it does not exist, and
// kube.NotServedError when its kind is not served.
func getOptional(ctx context.Context, c *kube.Clients, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	ri, _, err := c.Resource(gvk, ns)
	if err != nil {
		return nil, err
	}
	obj, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s: %w", gvk.Kind, nsName(ns, name), err)
	}
	return obj, nil
}

// cachedList are the ListOptions of maasctl's one-off LISTs: resourceVersion
// 0 lets the apiserver answer from its watch cache as it is, as every
// controller's informer reads. A LIST without it must be consistent, and
// while other kinds are being written the apiserver holds it until etcd's
// next progress notification (up to 100 ms each, measured on the local
// control plane; apiserver storage/cacher). The cache trails etcd by
// milliseconds; what a step then creates is checked by its own wait.
func cachedList(selector string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"}
}

// listOptional lists a kind (cachedList); a kind that is not served lists
// as empty.
func listOptional(ctx context.Context, c *kube.Clients, gvk schema.GroupVersionKind, ns, selector string) ([]unstructured.Unstructured, error) {
	ri, _, err := c.Resource(gvk, ns)
	if kube.IsNotServed(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l, err := ri.List(ctx, cachedList(selector))
	if err != nil {
		return nil, fmt.Errorf("list %s in %q: %w", gvk.Kind, ns, err)
	}
	return l.Items, nil
}

func nsName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func errorf(fix, format string, args ...any) Finding {
	return Finding{Severity: SeverityError, Message: fmt.Sprintf(format, args...), Fix: fix}
}

func warnf(fix, format string, args ...any) Finding {
	return Finding{Severity: SeverityWarning, Message: fmt.Sprintf(format, args...), Fix: fix}
}

// checkOpenShiftVersion reads ClusterVersion "version": the desired
// version, else the newest Completed history entry.
func checkOpenShiftVersion(ctx context.Context, e *Env) ([]Finding, error) {
	cv, err := getOptional(ctx, e.Clients, clusterVersionGVK, "", "version")
	if kube.IsNotServed(err) {
		return []Finding{warnf("", "config.openshift.io ClusterVersion is not served: this is not an OpenShift cluster, and maasctl only supports OpenShift %s or later", MinOpenShift)}, nil
	}
	if err != nil {
		return nil, err
	}
	if cv == nil {
		return []Finding{warnf("", "ClusterVersion version not found: cannot tell the OpenShift version (%s or later is required)", MinOpenShift)}, nil
	}
	return openShiftVersionFindings(cv), nil
}

func openShiftVersionFindings(cv *unstructured.Unstructured) []Finding {
	v, _, _ := unstructured.NestedString(cv.Object, "status", "desired", "version")
	if v == "" {
		hist, _, _ := unstructured.NestedSlice(cv.Object, "status", "history")
		for _, h := range hist {
			hm, _ := h.(map[string]any)
			if hm["state"] == "Completed" {
				v, _ = hm["version"].(string)
				break
			}
		}
	}
	have, err := semver.ParseTolerant(v)
	if err != nil {
		return []Finding{warnf("", "ClusterVersion version reports no readable version (%q); OpenShift %s or later is required", v, MinOpenShift)}
	}
	if have.LT(semver.MustParse(MinOpenShift)) {
		return []Finding{errorf("upgrade the cluster: oc adm upgrade --to-latest", "OpenShift %s is older than %s, the oldest release with the Gateway API and Service Mesh 3 MaaS needs", have, MinOpenShift)}
	}
	return nil
}

// checkCertManager: the Certificate kind is served and the ClusterIssuer
// the Gateway certificate comes from is Ready (case B13).
func checkCertManager(ctx context.Context, e *Env) ([]Finding, error) {
	iss := e.Inv.Gateway.CertIssuer
	if iss == "" {
		return nil, nil
	}
	if _, err := e.Clients.Mapping(certificateGVK); kube.IsNotServed(err) {
		return []Finding{errorf("install the cert-manager Operator for Red Hat OpenShift (OperatorHub), or set gateway.certIssuer= and supply Secret "+e.Inv.Gateway.CertSecret,
			"cert-manager is not installed: certificates.cert-manager.io is not served")}, nil
	} else if err != nil {
		return nil, err
	}
	ci, err := getOptional(ctx, e.Clients, clusterIssuerGVK, "", iss)
	if err != nil {
		return nil, err
	}
	if ci == nil {
		return []Finding{errorf("create ClusterIssuer "+iss+" (ACME, DNS-01), or set gateway.certIssuer to an existing one",
			"ClusterIssuer %s not found: the Gateway certificate could never be issued", iss)}, nil
	}
	if r := waiters.ConditionTrue("Ready")(ci); !r.Done {
		return []Finding{errorf("oc describe clusterissuer "+iss,
			"ClusterIssuer %s is not Ready (%s): the Gateway certificate would stay pending and the Gateway listener unresolved (InvalidCertificateRef)", iss, r.Status)}, nil
	}
	return nil, nil
}

// checkGatewayCert inspects a user-supplied Gateway certificate (no
// issuer): it must exist and, behind a passthrough Route, name only the
// MaaS host. Browsers reuse an HTTP/2 connection for every host a
// certificate covers, and the router sends passthrough traffic by SNI, so a
// wildcard misroutes requests to other *.apps routes (case B14,
// keycloak/keycloak#50602, openshift/router PR #589).
func checkGatewayCert(ctx context.Context, e *Env) ([]Finding, error) {
	g := e.Inv.Gateway
	if g.CertIssuer != "" {
		return nil, nil
	}
	s, err := e.Clients.Kube.CoreV1().Secrets(g.Namespace).Get(ctx, g.CertSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return []Finding{errorf(fmt.Sprintf("oc create secret tls %s -n %s --cert=maas.crt --key=maas.key (a certificate for %s only)", g.CertSecret, g.Namespace, e.Facts.Host),
			"gateway.certIssuer is empty, so the Gateway needs the TLS Secret %s/%s, which does not exist (the listener would report InvalidCertificateRef)", g.Namespace, g.CertSecret)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Secret %s/%s: %w", g.Namespace, g.CertSecret, err)
	}
	return certFindings(s.Data["tls.crt"], e.Facts.Host, g.CreateRoute, g.Namespace+"/"+g.CertSecret), nil
}

// certFindings checks a PEM certificate chain's leaf against host.
func certFindings(pemData []byte, host string, passthrough bool, name string) []Finding {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return []Finding{errorf("store a PEM certificate under key tls.crt", "Secret %s has no PEM certificate in tls.crt", name)}
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return []Finding{errorf("store a valid X.509 certificate under key tls.crt", "Secret %s: tls.crt does not parse: %v", name, err)}
	}
	var out []Finding
	if err := leaf.VerifyHostname(host); err != nil {
		out = append(out, errorf("issue a certificate for "+host, "the certificate in Secret %s does not cover %s: %v", name, host, err))
	}
	var wide []string
	for _, n := range leaf.DNSNames {
		if n != host {
			wide = append(wide, n)
		}
	}
	if passthrough && len(wide) > 0 {
		out = append(out, errorf("issue a certificate for "+host+" only (or set gateway.certIssuer to let cert-manager issue one); --ignore-preflight gateway-cert accepts the risk",
			"the certificate in Secret %s also covers %s; behind the passthrough Route, HTTP/2 connection coalescing makes browsers send requests for those hosts to the MaaS Gateway (and MaaS requests to the router), which answers 404/503",
			name, strings.Join(wide, ", ")))
	}
	return out
}

// checkModelSecrets: each model's namespace and API-key Secret exist, the
// Secret holds key api-key. The role only labels the Secret
// (reference/DEPLOYMENT.md, "Rules for model entries").
func checkModelSecrets(ctx context.Context, e *Env) ([]Finding, error) {
	var out []Finding
	seenNS := map[string]bool{}
	for i, m := range e.Inv.ExternalModels {
		if !seenNS[m.Namespace] {
			seenNS[m.Namespace] = true
			_, err := e.Clients.Kube.CoreV1().Namespaces().Get(ctx, m.Namespace, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				out = append(out, errorf("deploy the model server first, or fix externalModels["+fmt.Sprint(i)+"].namespace",
					"model namespace %s does not exist (externalModels[%d] %s)", m.Namespace, i, m.Name))
				continue
			}
			if err != nil && !apierrors.IsForbidden(err) {
				return nil, fmt.Errorf("get Namespace %s: %w", m.Namespace, err)
			}
		}
		s, err := e.Clients.Kube.CoreV1().Secrets(m.Namespace).Get(ctx, m.APIKeySecret, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, errorf(fmt.Sprintf("oc create secret generic %s -n %s --from-literal=api-key=<provider key>", m.APIKeySecret, m.Namespace),
				"API-key Secret %s/%s of model %s not found", m.Namespace, m.APIKeySecret, m.Name))
		case err != nil:
			return nil, fmt.Errorf("get Secret %s/%s: %w", m.Namespace, m.APIKeySecret, err)
		case len(s.Data["api-key"]) == 0:
			out = append(out, errorf(fmt.Sprintf("oc set data secret/%s -n %s api-key=<provider key>", m.APIKeySecret, m.Namespace),
				"Secret %s/%s has no key api-key; the model's provider reads exactly that key", m.Namespace, m.APIKeySecret))
		}
	}
	return out, nil
}

// checkStorageClass: the CNPG PVCs need the named StorageClass or a default
// one, else they stay Pending and the primary is never set up (case B09).
func checkStorageClass(ctx context.Context, e *Env) ([]Finding, error) {
	d := e.Inv.Database
	if cl, err := getShared(ctx, e, cnpgClusterGVK, d.Namespace, d.ClusterName); err == nil && cl != nil && waiters.ConditionTrue("Ready")(cl).Done {
		return nil, nil // the database already runs
	}
	scs, err := e.Clients.Kube.StorageV1().StorageClasses().List(ctx, cachedList(""))
	if err != nil {
		return nil, fmt.Errorf("list StorageClasses: %w", err)
	}
	var names []string
	for _, sc := range scs.Items {
		names = append(names, sc.Name)
		if d.StorageClass == "" && sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return nil, nil
		}
	}
	if d.StorageClass != "" {
		if slices.Contains(names, d.StorageClass) {
			return nil, nil
		}
		return []Finding{errorf("set database.storageClass to one of: "+strings.Join(names, ", "),
			"StorageClass %s (database.storageClass) does not exist: the database PVC would stay Pending", d.StorageClass)}, nil
	}
	fix := "mark one default: oc annotate storageclass NAME storageclass.kubernetes.io/is-default-class=true"
	if len(names) > 0 {
		fix += ", or set database.storageClass to one of: " + strings.Join(names, ", ")
	}
	return []Finding{errorf(fix, "no default StorageClass and database.storageClass is empty: the database PVC would stay Pending and CNPG would never set up the primary")}, nil
}

// checkStalePVCs refuses to create the CNPG Cluster over PVCs of an earlier
// one: CNPG then refuses to bootstrap ("refusing to create the primary
// instance while the latest generated serial is not zero",
// cloudnative-pg#3309, case B09).
func checkStalePVCs(ctx context.Context, e *Env) ([]Finding, error) {
	d := e.Inv.Database
	cl, err := getShared(ctx, e, cnpgClusterGVK, d.Namespace, d.ClusterName)
	if err != nil && !kube.IsNotServed(err) {
		return nil, err
	}
	if cl != nil {
		return nil, nil
	}
	sel := "cnpg.io/cluster=" + d.ClusterName
	pvcs, err := e.Clients.Kube.CoreV1().PersistentVolumeClaims(d.Namespace).List(ctx, cachedList(sel))
	if err != nil {
		return nil, fmt.Errorf("list PVCs %s in %s: %w", sel, d.Namespace, err)
	}
	if len(pvcs.Items) == 0 {
		return nil, nil
	}
	var names []string
	for _, p := range pvcs.Items {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return []Finding{errorf(fmt.Sprintf("delete them to start with an empty database: oc delete pvc -l %s -n %s (the API keys stored there are lost)", sel, d.Namespace),
		"PVC(s) %s in %s belong to an earlier CNPG Cluster %s that no longer exists; CNPG refuses to bootstrap over them and the Cluster would stay in \"Setting up primary\"",
		strings.Join(names, ", "), d.Namespace, d.ClusterName)}, nil
}
