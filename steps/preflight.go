package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
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

// layoutReads is what detectRelease and DetectVersionSkew read: the DSC
// CRD, the rhoai Subscription and its installed CSV.
func layoutReads(e *Env) []Access {
	out := getAccess("apiextensions.k8s.io", "customresourcedefinitions", "", release.DSCCRD)
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
