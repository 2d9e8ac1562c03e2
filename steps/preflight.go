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
	authv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/vault"
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
	// Message says what is wrong, naming the object.
	Message string `json:"message"`
	// Fix is the command or change that fixes it.
	Fix string `json:"fix,omitempty"`
	// Ignored is true when --ignore-preflight turned this error into a
	// warning.
	Ignored bool `json:"ignored,omitempty"`
}

// String renders the finding as "check: message (fix: ...)".
func (f Finding) String() string {
	s := f.Check + ": " + f.Message
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
}

// PreflightChecks returns every check in the order they are reported.
func PreflightChecks() []PreflightCheck {
	return []PreflightCheck{
		{"openshift-version", "OpenShift " + MinOpenShift + " or later (ClusterVersion)", checkOpenShiftVersion},
		{"cert-manager", "cert-manager served and the ClusterIssuer Ready", checkCertManager},
		{"gateway-cert", "a user-supplied Gateway certificate covers only the MaaS host", checkGatewayCert},
		{"model-secrets", "model namespaces and their API-key Secrets (key api-key)", checkModelSecrets},
		{"catalog-sources", "CatalogSources READY and the pinned channels offered", checkCatalogSources},
		{"operator-groups", "at most one compatible OperatorGroup per operator namespace", checkOperatorGroups},
		{"rhcl-version", "Red Hat Connectivity Link not at a version with a known auth bypass", checkRHCLVersion},
		{"conflicting-operators", "no Open Data Hub or second RHOAI subscription", checkConflictingOperators},
		{"orphan-csvs", "no leftover CSV or failed resolution blocks an operator install", checkOrphanCSVs},
		{"storage-class", "a StorageClass for the CNPG volumes", checkStorageClass},
		{"stale-pvcs", "no PVCs of an earlier database without its Cluster", checkStalePVCs},
		{"rhoai-layout", "the DataScienceCluster layout the cluster serves", checkRHOAILayout},
		{"dsc", "one DSCInitialization and DataScienceCluster, and a component set that runs MaaS", checkDSCSingletons},
		{"access-pairing", "every model in a MaaSSubscription is in a MaaSAuthPolicy and the reverse", checkAccessPairing},
		{"vault", "Vault reachable and the database secret path usable", checkVault},
		{"permissions", "permission for every verb, kind and namespace the install writes", checkPermissions},
	}
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
			fmt.Fprintf(tw, "%s\t%s\t%s\n", tag, c.Name, f.Message)
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
		Apply: func(ctx context.Context, e *Env, s *Step) error {
			rep := Preflight(ctx, e)
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

// plannedOperators are the OLM operators this install subscribes, the CNPG
// operator only when postgresql.cnpg.io is not served yet.
func plannedOperators(ctx context.Context, e *Env) ([]inventory.Operator, error) {
	ops := slices.Clone(e.Inv.Operators)
	served, err := crdEstablishedShared(ctx, e, cnpgCRD)
	if err != nil {
		return nil, err
	}
	if !served {
		ops = append([]inventory.Operator{e.Inv.Database.Operator}, ops...)
	}
	return ops, nil
}

// operatorInstalled reports whether op's Subscription already installed a
// CSV (the catalog then matters only for updates).
func operatorInstalled(ctx context.Context, e *Env, op inventory.Operator) (*unstructured.Unstructured, error) {
	sub, err := getOptional(ctx, e.Clients, subscriptionGVK, op.Namespace, op.Package)
	if kube.IsNotServed(err) {
		return nil, nil
	}
	return sub, err
}

// checkCatalogSources: each CatalogSource the plan subscribes from is
// READY, and where the packages.operators.coreos.com API is served its
// PackageManifest offers the pinned channel.
func checkCatalogSources(ctx context.Context, e *Env) ([]Finding, error) {
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return nil, err
	}
	out, err := eachConcurrently(ops, func(op inventory.Operator) ([]Finding, error) {
		var out []Finding
		sub, err := operatorInstalled(ctx, e, op)
		if err != nil {
			return nil, err
		}
		installed := false
		if sub != nil {
			csv, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
			installed = csv != ""
		}
		sev := errorf
		if installed {
			sev = warnf // already installed: only updates need the catalog
		}
		cs, err := getShared(ctx, e, catalogSourceGVK, op.SourceNamespace, op.Source)
		if kube.IsNotServed(err) {
			return nil, errOLMNotServed
		}
		if err != nil {
			return nil, err
		}
		if cs == nil {
			out = append(out, sev("oc get catalogsource -n "+op.SourceNamespace+"; fix operators["+op.ID+"].source",
				"CatalogSource %s/%s (for %s) not found", op.SourceNamespace, op.Source, op.Package))
			return out, nil
		}
		if st, _, _ := unstructured.NestedString(cs.Object, "status", "connectionState", "lastObservedState"); st != "READY" {
			if st == "" {
				st = "no state yet"
			}
			out = append(out, sev(fmt.Sprintf("oc get catalogsource %s -n %s -o yaml; oc get pods -n %s -l olm.catalogSource=%s", op.Source, op.SourceNamespace, op.SourceNamespace, op.Source),
				"CatalogSource %s/%s (for %s) is %s, not READY: OLM cannot resolve %s from it", op.SourceNamespace, op.Source, op.Package, st, op.Package))
			return out, nil
		}
		pm, err := getOptional(ctx, e.Clients, packageManifestGVK, op.SourceNamespace, op.Package)
		if kube.IsNotServed(err) {
			return out, nil // not on every cluster (an aggregated API of OLM's package server)
		}
		if err != nil {
			return nil, err
		}
		if pm == nil {
			out = append(out, sev("oc get packagemanifests -n "+op.SourceNamespace+" | grep "+op.Package, "package %s is not in any catalog (PackageManifest %s/%s not found)", op.Package, op.SourceNamespace, op.Package))
			return out, nil
		}
		chans := packageChannels(pm)
		if !slices.Contains(chans, op.Channel) {
			out = append(out, sev("set operators["+op.ID+"].channel to one of: "+strings.Join(chans, ", "),
				"package %s offers no channel %s (channels: %s)", op.Package, op.Channel, strings.Join(chans, ", ")))
		}
		return out, nil
	})
	if errors.Is(err, errOLMNotServed) {
		return []Finding{errorf("install on OpenShift (OLM serves operators.coreos.com)", "OLM is not available: operators.coreos.com CatalogSource is not served")}, nil
	}
	return out, err
}

// errOLMNotServed ends checkCatalogSources and checkOperatorGroups early:
// OLM's kinds are not served.
var errOLMNotServed = errors.New("operators.coreos.com is not served")

// eachConcurrently runs fn for every item at the same time and returns
// their findings in the items' order, or the error of the first item (in
// that order) that failed. Preflight checks that read per operator use it:
// their reads are independent, and preflight is on every run's critical
// path.
func eachConcurrently[T any](items []T, fn func(T) ([]Finding, error)) ([]Finding, error) {
	fs := make([][]Finding, len(items))
	errs := make([]error, len(items))
	inParallel(len(items), len(items), func(i int) { fs[i], errs[i] = fn(items[i]) })
	var out []Finding
	for i := range items {
		if errs[i] != nil {
			return nil, errs[i]
		}
		out = append(out, fs[i]...)
	}
	return out, nil
}

// packageChannels returns status.channels[].name of a PackageManifest.
func packageChannels(pm *unstructured.Unstructured) []string {
	var out []string
	l, _, _ := unstructured.NestedSlice(pm.Object, "status", "channels")
	for _, c := range l {
		if m, ok := c.(map[string]any); ok {
			if n, _ := m["name"].(string); n != "" {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// channelHead returns status.channels[name].currentCSV of a PackageManifest.
func channelHead(pm *unstructured.Unstructured, channel string) string {
	l, _, _ := unstructured.NestedSlice(pm.Object, "status", "channels")
	for _, c := range l {
		if m, ok := c.(map[string]any); ok && m["name"] == channel {
			s, _ := m["currentCSV"].(string)
			return s
		}
	}
	return ""
}

// checkOperatorGroups: an existing operator namespace has at most one
// OperatorGroup, compatible with the operator (case B02 c: OLM fails the
// CSV with TooManyOperatorGroups otherwise).
func checkOperatorGroups(ctx context.Context, e *Env) ([]Finding, error) {
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return nil, err
	}
	var first []inventory.Operator // the first operator of each namespace
	seen := map[string]bool{}
	for _, op := range ops {
		if !seen[op.Namespace] {
			seen[op.Namespace] = true
			first = append(first, op)
		}
	}
	out, err := eachConcurrently(first, func(op inventory.Operator) ([]Finding, error) {
		if _, err := pickOperatorGroup(ctx, e, op); err != nil {
			if kube.IsNotServed(err) {
				return nil, errOLMNotServed
			}
			return []Finding{errorf("", "%v", err)}, nil
		}
		return nil, nil
	})
	if errors.Is(err, errOLMNotServed) {
		return nil, nil
	}
	return out, err
}

// rhclBadVersions are RHCL releases with a known AuthPolicy bypass.
var rhclBadVersions = []string{"1.4.0"}

// checkRHCLVersion refuses an installed or pinned RHCL 1.4.0 (or anything
// below the operator's minVersion).
func checkRHCLVersion(ctx context.Context, e *Env) ([]Finding, error) {
	op := e.Inv.Operator("rhcl")
	if op == nil {
		return nil, nil
	}
	var out []Finding
	if op.StartingCSV != "" {
		if v := versionFromCSVName(op.StartingCSV); v != "" && badRHCL(v, op.MinVersion) {
			out = append(out, errorf("set operators[rhcl].startingCSV to 1.4.1 or later, or clear it",
				"operators[rhcl].startingCSV pins %s, version %s, which has a known AuthPolicy bypass", op.StartingCSV, v))
		}
	}
	csvs, err := listOptional(ctx, e.Clients, csvGVK, op.Namespace, "")
	if err != nil {
		return nil, err
	}
	for _, csv := range csvs {
		if !strings.HasPrefix(csv.GetName(), op.Package+".") || csv.GetLabels()["olm.copiedFrom"] != "" {
			continue
		}
		v, _, _ := unstructured.NestedString(csv.Object, "spec", "version")
		if badRHCL(v, op.MinVersion) {
			out = append(out, errorf(fmt.Sprintf("approve the update to 1.4.1 or later on Subscription %s/%s (oc get installplan -n %s)", op.Namespace, op.Package, op.Namespace),
				"CSV %s/%s is Red Hat Connectivity Link %s, which has a known AuthPolicy bypass; at least %s is required", op.Namespace, csv.GetName(), v, op.MinVersion))
		}
	}
	return out, nil
}

func badRHCL(v, minVersion string) bool {
	have, err := semver.ParseTolerant(v)
	if err != nil {
		return false
	}
	for _, b := range rhclBadVersions {
		if have.Equals(semver.MustParse(b)) {
			return true
		}
	}
	if min, err := semver.ParseTolerant(minVersion); err == nil && have.LT(min) {
		return true
	}
	return false
}

// versionFromCSVName returns the version part of a CSV name such as
// rhcl-operator.v1.4.0 or rhods-operator.3.5.0.
func versionFromCSVName(name string) string {
	_, v, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	return strings.TrimPrefix(v, "v")
}

// conflictingPackages are operators that manage the same CRDs as RHOAI.
var conflictingPackages = map[string]string{
	"opendatahub-operator": "Open Data Hub manages the same DataScienceCluster and DSCInitialization CRDs as RHOAI",
}

// checkConflictingOperators refuses an Open Data Hub Subscription and a
// Subscription to one of the planned packages in another namespace.
func checkConflictingOperators(ctx context.Context, e *Env) ([]Finding, error) {
	subs, err := listOptional(ctx, e.Clients, subscriptionGVK, "", "")
	if err != nil {
		return nil, err
	}
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, s := range subs {
		pkg, _, _ := unstructured.NestedString(s.Object, "spec", "name")
		if why, bad := conflictingPackages[pkg]; bad {
			out = append(out, errorf(fmt.Sprintf("uninstall it first: oc delete subscription %s -n %s, then its CSV", s.GetName(), s.GetNamespace()),
				"Subscription %s/%s installs %s: %s", s.GetNamespace(), s.GetName(), pkg, why))
			continue
		}
		for _, op := range ops {
			if pkg == op.Package && s.GetNamespace() != op.Namespace {
				out = append(out, errorf(fmt.Sprintf("remove it (oc delete subscription %s -n %s) or set operators[%s].namespace=%s", s.GetName(), s.GetNamespace(), op.ID, s.GetNamespace()),
					"Subscription %s/%s already installs %s in another namespace than %s; two copies of one operator fight over the same CRDs", s.GetNamespace(), s.GetName(), pkg, op.Namespace))
			}
		}
	}
	return out, nil
}

// checkOrphanCSVs finds, in each operator namespace, CSVs of a planned
// package that no Subscription references (left by an uninstall that
// deleted the Subscription only; OLM then fails the new Subscription with
// ResolutionFailed / ConstraintsNotSatisfiable, case B20), and planned
// Subscriptions whose resolution already failed.
func checkOrphanCSVs(ctx context.Context, e *Env) ([]Finding, error) {
	ops, err := plannedOperators(ctx, e)
	if err != nil {
		return nil, err
	}
	return eachConcurrently(ops, func(op inventory.Operator) ([]Finding, error) {
		csvs, err := listOptional(ctx, e.Clients, csvGVK, op.Namespace, "")
		if err != nil {
			return nil, err
		}
		subs, err := listOptional(ctx, e.Clients, subscriptionGVK, op.Namespace, "")
		if err != nil {
			return nil, err
		}
		return orphanFindings(op, csvs, subs), nil
	})
}

// orphanFindings is checkOrphanCSVs for one operator over listed objects.
func orphanFindings(op inventory.Operator, csvs, subs []unstructured.Unstructured) []Finding {
	var out []Finding
	referenced := map[string]bool{}
	for _, s := range subs {
		for _, f := range []string{"installedCSV", "currentCSV"} {
			if n, _, _ := unstructured.NestedString(s.Object, "status", f); n != "" {
				referenced[n] = true
			}
		}
		pkg, _, _ := unstructured.NestedString(s.Object, "spec", "name")
		if pkg != op.Package {
			continue
		}
		if c, ok := waiters.GetCondition(&s, "ResolutionFailed"); ok && c.Status == "True" {
			out = append(out, errorf(fmt.Sprintf("oc describe subscription %s -n %s; remove the CSV or Subscription it names, then re-run", s.GetName(), s.GetNamespace()),
				"Subscription %s/%s cannot be resolved: %s", s.GetNamespace(), s.GetName(), c))
		}
	}
	for _, csv := range csvs {
		if !strings.HasPrefix(csv.GetName(), op.Package+".") || csv.GetLabels()["olm.copiedFrom"] != "" || referenced[csv.GetName()] {
			continue
		}
		out = append(out, errorf(fmt.Sprintf("oc delete csv %s -n %s (its operator is no longer subscribed), then re-run", csv.GetName(), op.Namespace),
			"CSV %s/%s of %s exists but no Subscription references it; OLM refuses to install %s again (ResolutionFailed: constraints not satisfiable, CSV exists and is not referenced by a subscription)",
			op.Namespace, csv.GetName(), op.Package, op.Package))
	}
	return out
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

// checkRHOAILayout reports the RHOAI layout maasctl renders for and the
// inventory components that layout does not have.
func checkRHOAILayout(ctx context.Context, e *Env) ([]Finding, error) {
	var l Layout
	if e.Layout != nil {
		l = *e.Layout // read by NewEnv moments ago
	} else {
		var err error
		if l, err = DetectLayout(ctx, e.Clients, e.Inv); err != nil {
			return nil, err
		}
	}
	var out []Finding
	if minorOf(l.Version) < 3 {
		out = append(out, errorf("install RHOAI 3.3 or later (operators[rhoai].channel)", "%s has no MaaS subscriptions (MaaSModelRef, MaaSSubscription); maasctl supports RHOAI 3.3 to 3.5", l))
	}
	if op := e.Inv.Operator("rhoai"); op != nil {
		if cv := versionFromChannel(op.Channel); cv != "" && cv != l.Version && !strings.HasPrefix(l.Source, "channel") {
			out = append(out, warnf("set operators[rhoai].channel=stable-"+l.Version+" to match, or upgrade RHOAI",
				"the cluster serves %s but operators[rhoai].channel is %s; maasctl writes the %s layout (%s)", l, op.Channel, l.Version, l.MaaSField()))
		}
	}
	if un := l.Unserved(e.Inv); len(un) > 0 {
		out = append(out, warnf("remove them from rhoai.managedComponents/removedComponents to silence this",
			"the DataScienceCluster schema of %s has no component(s) %s: they are left out of the DSC", l, strings.Join(un, ", ")))
	}
	return out, nil
}

// checkDSCSingletons: DSCInitialization and DataScienceCluster are singletons (a
// second one sends the operator into an error loop,
// opendatahub-operator#755), and the component set must let MaaS deploy:
// on 3.5 ogx with llamastackoperator Managed aborts the provisioning batch
// (rh-aiservices-bu/rhoai-maas-guide PR #160), the dashboard must run
// (models-as-a-service#893), and on 3.3/3.4 kserve must be Managed (case B05).
func checkDSCSingletons(ctx context.Context, e *Env) ([]Finding, error) {
	var out []Finding
	for _, k := range []struct {
		gvk  schema.GroupVersionKind
		kind string
	}{{dsciGVK, "DSCInitialization"}, {dscGVK, "DataScienceCluster"}} {
		items, err := listOptional(ctx, e.Clients, k.gvk, "", "")
		if err != nil {
			return nil, err
		}
		if len(items) > 1 {
			var names []string
			for _, it := range items {
				names = append(names, it.GetName())
			}
			out = append(out, errorf(fmt.Sprintf("delete all but one (oc delete %s NAME), then re-run; maasctl adopts the one left", strings.ToLower(k.kind)),
				"%d %s objects exist (%s); the RHOAI operator allows exactly one", len(items), k.kind, strings.Join(names, ", ")))
		}
	}
	out = append(out, componentFindings(LayoutOf(e.Facts), e.Inv)...)
	return out, nil
}

// componentFindings checks the inventory's component set for layout l.
func componentFindings(l Layout, inv *inventory.Inventory) []Finding {
	var out []Finding
	managed := func(c string) bool { return slices.Contains(inv.RHOAI.ManagedComponents, c) }
	if !l.KServeMaaS() && managed("ogx") && managed("llamastackoperator") {
		out = append(out, errorf("move llamastackoperator to rhoai.removedComponents (--set rhoai.managedComponents=... )",
			"ogx and llamastackoperator are both Managed: RHOAI %s rejects ogx and aborts the whole provisioning batch, so maas-api and the MaaS CRDs never appear although the DSC says MaaS is Managed", l.Version))
	}
	if !managed("dashboard") {
		out = append(out, errorf("add dashboard to rhoai.managedComponents", "the dashboard component is not Managed: the MaaS install depends on it (models-as-a-service#893)"))
	}
	if l.KServeMaaS() && !managed("kserve") {
		out = append(out, errorf("add kserve to rhoai.managedComponents", "RHOAI %s enables MaaS under kserve (%s), but kserve is not Managed", l.Version, l.MaaSField()))
	}
	return out
}

// checkAccessPairing: a model is served only when a MaaSAuthPolicy and a
// MaaSSubscription both reference it; a model in only one stays Pending
// ("No active governance pairing found", case B17,
// rh-aiservices-bu/rhoai-maas-guide#116). The inventory's objects replace
// live ones of the same name; other live objects in the cluster count too.
func checkAccessPairing(ctx context.Context, e *Env) ([]Finding, error) {
	type owner struct{ kind, name string }
	inSub := map[string][]owner{}
	inPol := map[string][]owner{}
	ours := map[string]bool{}
	for _, s := range e.Inv.Subscriptions {
		ours["MaaSSubscription/"+s.Name] = true
		for _, m := range s.ModelRefs {
			k := m.Namespace + "/" + m.Name
			inSub[k] = append(inSub[k], owner{"MaaSSubscription", s.Name})
		}
	}
	for _, p := range e.Inv.AuthPolicies {
		ours["MaaSAuthPolicy/"+p.Name] = true
		for _, m := range p.ModelRefs {
			k := m.Namespace + "/" + m.Name
			inPol[k] = append(inPol[k], owner{"MaaSAuthPolicy", p.Name})
		}
	}
	for _, k := range []struct {
		gvk  schema.GroupVersionKind
		into map[string][]owner
	}{{maasSubscriptionGVK, inSub}, {maasAuthPolicyGVK, inPol}} {
		items, err := listOptional(ctx, e.Clients, k.gvk, "", "")
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if it.GetNamespace() == e.Inv.RHOAI.MaaSNamespace && ours[k.gvk.Kind+"/"+it.GetName()] {
				continue
			}
			refs, _, _ := unstructured.NestedSlice(it.Object, "spec", "modelRefs")
			for _, r := range refs {
				rm, _ := r.(map[string]any)
				name, _ := rm["name"].(string)
				ns, _ := rm["namespace"].(string)
				if ns == "" {
					ns = it.GetNamespace()
				}
				key := ns + "/" + name
				k.into[key] = append(k.into[key], owner{k.gvk.Kind, it.GetNamespace() + "/" + it.GetName()})
			}
		}
	}
	var out []Finding
	keys := func(m map[string][]owner) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	for _, k := range keys(inSub) {
		if len(inPol[k]) == 0 {
			o := inSub[k][0]
			out = append(out, errorf("add the model to the modelRefs of a MaaSAuthPolicy (inventory authPolicies)",
				"model %s is in %s %s but in no MaaSAuthPolicy: MaaS leaves it Pending (\"No active governance pairing found\") and nobody can call it", k, o.kind, o.name))
		}
	}
	for _, k := range keys(inPol) {
		if len(inSub[k]) == 0 {
			o := inPol[k][0]
			out = append(out, errorf("add the model with its tokenRateLimits to a MaaSSubscription (inventory subscriptions)",
				"model %s is in %s %s but in no MaaSSubscription: MaaS leaves it Pending (\"No active governance pairing found\") and callers get 429", k, o.kind, o.name))
		}
	}
	// One chat completion can use a whole small budget (troubleshooting
	// issue 9: the default 1000 tokens/hour).
	for _, s := range e.Inv.Subscriptions {
		for _, m := range s.ModelRefs {
			for _, l := range m.TokenRateLimits {
				if l.Limit < inventory.MinUsefulTokenLimit {
					out = append(out, warnf("raise subscriptions[].modelRefs[].tokenRateLimits[].limit",
						"MaaSSubscription %s allows %d tokens per %s for %s/%s: a single chat completion can use that up, and callers then get 429", s.Name, l.Limit, l.Window, m.Namespace, m.Name))
				}
			}
		}
	}
	return out, nil
}

// VaultPreflighter is implemented by Secrets that can check, without
// writing, that their store is reachable and the secret usable.
type VaultPreflighter interface {
	// PreflightVault returns findings (never secret values); an error
	// means the check could not run.
	PreflightVault(ctx context.Context) ([]Finding, error)
}

func checkVault(ctx context.Context, e *Env) ([]Finding, error) {
	vp, ok := e.Secrets.(VaultPreflighter)
	if !ok {
		return nil, nil
	}
	return vp.PreflightVault(ctx)
}

// PreflightVault checks that Vault answers and that the token may read the
// database secret (a KV v2 policy must name <mount>/data/<path>, case B11),
// and, when the secret does not exist yet, that it may create it where
// Vault can tell (sys/capabilities-self). Nothing is written; no value is
// returned.
func (v *VaultSecrets) PreflightVault(ctx context.Context) ([]Finding, error) {
	p := v.Inv.Database.VaultPath
	if err := v.Client.Ping(ctx); err != nil {
		return []Finding{errorf("check VAULT_ADDR (or --vault-addr) and that Vault is unsealed", "Vault is not usable: %v", err)}, nil
	}
	_, found, err := v.Client.ReadSecret(ctx, p)
	if err != nil {
		// An expired or revoked token also carries the refused request
		// (TokenError.Denied): test it first, so that the fix is to log in
		// again, not to change a policy.
		var te *vault.TokenError
		if errors.As(err, &te) {
			fix := te.Hint
			if fix == "" {
				fix = "log in to Vault again (vault login) and pass the new token (VAULT_TOKEN), or check the auth method's credentials"
			}
			return []Finding{errorf(fix, "the Vault token cannot be used: %v", err)}, nil
		}
		var pe *vault.PermissionError
		if errors.As(err, &pe) {
			return []Finding{errorf("grant the token this policy: "+pe.PolicyStanza(),
				"Vault denies reading the database secret %s at API path %s (a KV v2 policy must name the data/ path; a policy on the logical path matches nothing): %v", p, pe.APIPath, err)}, nil
		}
		return []Finding{errorf("check database.vaultPath and the Vault mount", "cannot read the database secret %s from Vault: %v", p, err)}, nil
	}
	var out []Finding
	out = append(out, v.tokenTTLFindings(ctx)...)
	if !found {
		loc, err := v.Client.Resolve(ctx, p)
		if err != nil {
			return nil, err
		}
		caps, err := v.Client.API().Sys().CapabilitiesSelfWithContext(ctx, loc.DataPath())
		switch {
		case err != nil:
			out = append(out, warnf("", "Vault secret %s does not exist yet and Vault cannot tell whether this token may create it (sys/capabilities-self: %v)", p, err))
		case !slices.Contains(caps, "create") && !slices.Contains(caps, "root"):
			out = append(out, errorf(fmt.Sprintf("grant the token: path %q { capabilities = [\"create\", \"read\"] }", loc.DataPath()),
				"Vault secret %s does not exist and the token may not create it on %s (capabilities %v)", p, loc.DataPath(), caps))
		}
	}
	return out, nil
}

// minVaultTokenTTL is the token lifetime a run needs: maasctl reads (or
// creates) the database password in the first step after preflight and
// keeps it in memory for the rest of the run, so only that early step
// needs the token (case B11).
const minVaultTokenTTL = 60 * time.Second

// tokenTTLFindings looks the token up (auth/token/lookup-self) and
// reports a lifetime too short for the run. A token without a TTL (root,
// or periodic) passes; a Vault that cannot answer is not an error here.
func (v *VaultSecrets) tokenTTLFindings(ctx context.Context) []Finding {
	s, err := v.Client.API().Auth().Token().LookupSelfWithContext(ctx)
	if err != nil || s == nil {
		return nil
	}
	ttl, err := s.TokenTTL()
	if err != nil || ttl <= 0 {
		return nil
	}
	if ttl < minVaultTokenTTL {
		return []Finding{errorf("log in again (vault login, or a new VAULT_TOKEN) and re-run",
			"the Vault token expires in %s, before maasctl can read the database secret (it needs %s); renewal cannot extend a token past its max TTL", ttl.Round(time.Second), minVaultTokenTTL)}
	}
	return nil
}

// plannedAccess lists every permission the plan uses: the union of every
// step's Access (ObjectAccess of its objects and the extra calls it makes).
// An inventory the registry rejects plans nothing (Validate reports it).
func plannedAccess(e *Env, resource func(schema.GroupVersionKind) string) []access {
	reg, err := registryFor(e.Registry, e.Inv)
	if err != nil {
		return nil
	}
	set := map[access]bool{}
	for _, s := range reg.Steps {
		for _, a := range s.access(e, resource) {
			set[a] = true
		}
	}
	out := make([]access, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// checkPermissions asks the apiserver, with one SelfSubjectAccessReview per
// permission (sent as dry runs), whether the caller may do everything the
// plan does; every denial is one finding, so all are named at once. An
// identity with every verb on every resource (cluster-admin) is answered
// by one review. A
// forbidden call mid-run would otherwise surface late, or be swallowed
// (case B12, odh-gitops PR #153).
func checkPermissions(ctx context.Context, e *Env) ([]Finding, error) {
	resource := func(gvk schema.GroupVersionKind) string {
		if m, err := e.Clients.Mapping(gvk); err == nil {
			return m.Resource.Resource
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		return plural.Resource
	}
	// An identity allowed every verb on every resource cluster-wide (RBAC
	// matches a requested "*" only with a "*" rule: cluster-admin) may do
	// everything below: one review instead of one per permission.
	all := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
		Verb: "*", Group: "*", Resource: "*",
	}}}
	got, err := e.Clients.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, all, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, fmt.Errorf("SelfSubjectAccessReview * *.* (cluster-wide): %w", err)
	}
	if got.Status.Allowed {
		return nil, nil
	}
	list := plannedAccess(e, resource)
	type result struct {
		a       access
		allowed bool
		reason  string
		err     error
	}
	results := make([]result, len(list))
	inParallel(len(list), 16, func(i int) {
		a := list[i]
		r := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
			Verb: a.Verb, Group: a.Group, Resource: a.Resource, Namespace: a.Namespace, Name: a.Name,
		}}}
		got, err := e.Clients.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, r, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			results[i] = result{a: a, err: err}
			return
		}
		results[i] = result{a: a, allowed: got.Status.Allowed, reason: got.Status.Reason}
	})
	var out []Finding
	for _, r := range results {
		switch {
		case r.err != nil:
			return nil, fmt.Errorf("SelfSubjectAccessReview %s: %w", r.a, r.err)
		case !r.allowed:
			out = append(out, errorf("grant it to the identity running maasctl (a Role or ClusterRole bound to it), then re-run",
				"permission denied: cannot %s", r.a))
		}
	}
	return out, nil
}
