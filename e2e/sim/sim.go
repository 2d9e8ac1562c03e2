// Package sim runs simulated operators against a real kube-apiserver, so that
// maasctl's end-to-end tests exercise the same API objects, status fields and
// ordering that the real operators produce on OpenShift.
//
// Every simulator is a small controller built on client-go dynamic informers.
// It reacts to watch events only (a configured delay is a per-object timer,
// never a poll), writes status through the status subresource so that the API
// server validates it against the real upstream CRD schema, and is never more
// lenient than the operator it stands in for. Each behaviour names its
// upstream source in a comment next to the code that mirrors it.
//
// The simulators and the operators they stand in for:
//
//	cnpg          CloudNativePG: postgresql.cnpg.io Cluster
//	cert-manager  cert-manager: Certificate, CertificateRequest
//	service-ca    OpenShift service-ca operator: serving-cert Secrets
//	gateway       OpenShift Gateway API controller (Istio via OSSM 3):
//	              GatewayClass, Gateway, HTTPRoute
//	router        OpenShift router: Route admission
//	lws           Leader Worker Set operator: LeaderWorkerSetOperator
//	dsci, dsc     RHOAI operator: DSCInitialization, DataScienceCluster
//	maas          MaaS controller: ExternalProvider, ExternalModel,
//	              MaaSModelRef, MaaSAuthPolicy, MaaSSubscription
//
// Those names are the keys of Options.Delay. OLM itself is real (e2e/testenv
// runs operator-lifecycle-manager's olm and catalog operators on generated
// catalogs); each simulated operator starts when its real CSV is Succeeded.
// So are Kuadrant and Authorino: kuadrant-operator, authorino-operator,
// limitador-operator and the Authorino server run as processes of the
// control plane (testenv Options.RealKuadrant) and write the Kuadrant CR's
// status, the Authorino CR, the AuthConfigs and every policy status; no
// simulator here writes any of them. Tests that touch Kuadrant objects
// start the control plane with them.
package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"
)

// Controller names: the keys of Options.Delay and the "controller" field of
// every log line.
const (
	CNPG        = "cnpg"
	CertManager = "cert-manager"
	ServiceCA   = "service-ca"
	Gateway     = "gateway"
	Router      = "router"
	LWS         = "lws"
	DSCI        = "dsci"
	DSC         = "dsc"
	MaaS        = "maas"
)

// OLM is the delay key of OLM installs in the delay maps callers keep
// beside the simulators' (bench, e2e): not a simulator, since OLM is real.
// SplitOLMDelay takes it out; testenv.Options.OperatorPodReadyDelay applies
// it.
const OLM = "olm"

// SplitOLMDelay returns delays[OLM] and a copy of delays without it (the
// simulators' Options.Delay).
func SplitOLMDelay(delays map[string]time.Duration) (time.Duration, map[string]time.Duration) {
	out := make(map[string]time.Duration, len(delays))
	for k, v := range delays {
		if k != OLM {
			out[k] = v
		}
	}
	return delays[OLM], out
}

// ControllerNames lists every simulated controller name, sorted.
func ControllerNames() []string {
	n := []string{CNPG, CertManager, ServiceCA, Gateway, Router, LWS, DSCI, DSC, MaaS}
	sort.Strings(n)
	return n
}

// RHOAI versions the simulator knows. Each selects the CRD set under
// opendatahub/rhoai-<version> and that release's behaviour.
const (
	RHOAI33 = "3.3"
	RHOAI34 = "3.4"
	RHOAI35 = "3.5"
)

// Options configures Run and Start. The zero value is usable: every field has
// a default.
type Options struct {
	// CRDDir is the folder holding the upstream CRDs (the layout of
	// ../shared/crds, see its SOURCES.md). Default: env MAASCTL_CRDS, else
	// ../shared/crds relative to the repository root found above the working
	// directory.
	CRDDir string
	// RHOAIVersion is "3.5" (default), "3.4" or "3.3": the RHOAI release
	// whose behaviour and MaaS switch the RHOAI operator simulator has. It
	// should match the rhods-operator channel the install subscribes to
	// (stable-<version>), whose bundle brings the DSC/DSCI CRD set.
	RHOAIVersion string
	// Delay holds a per-controller delay (keys: ControllerNames) applied once
	// per object before the controller first acts on it, measured from when
	// the controller first sees the object in the state that triggers the
	// action. Zero or absent means no delay.
	Delay map[string]time.Duration
	// Faults switches on failure modes; the zero value is the happy path.
	Faults Faults
	// AppsDomain is the OpenShift apps domain used for Route hosts when the
	// config.openshift.io Ingress "cluster" does not exist. Default
	// apps.openshift.example.com.
	AppsDomain string
	// Logger receives the simulators' logs. Default: a no-op logger. Logs
	// never contain Secret data.
	Logger *zap.Logger
	// Postgres is a superuser connection string of the real PostgreSQL
	// server the simulated CNPG Clusters run on (the local control plane's:
	// testenv PostgresServer.AdminConnString). When set, a Cluster's
	// bootstrap creates its owner role and database there (cnpg_db.go).
	// Empty: no database is created (an external cluster, or tests of the
	// Kubernetes side only).
	Postgres string
	// IstioCRDs, when set, is a file of Istio CRDs (testenv.IstioCRDFile)
	// that the simulated OpenShift ingress operator registers, as OSSM
	// does, before it creates istiod: the real Kuadrant operator looks for
	// them (WasmPlugin, EnvoyFilter, PeerAuthentication) when it starts.
	IstioCRDs string
	// ServiceCABundle is more CA certificates (PEM) that the published
	// service CA bundle (ConfigMap openshift-service-ca.crt in every
	// namespace, after the simulated service CA's own) holds: the local
	// control plane's ServiceCA (testenv Env.ServiceCA), which signs the
	// certificates of the servers tests put behind Service names, such as
	// the data-path stand-in's maas-api. OpenShift's bundle holds several
	// CAs while its service CA rotates.
	ServiceCABundle []byte
	// RealCNPG leaves CloudNativePG Clusters to the real operator the
	// local control plane runs (testenv Options.RealCNPG): the CNPG
	// simulator (cnpg.go, cnpg_db.go) does not run. Default false: it
	// does.
	RealCNPG bool
}

// Faults are failure modes a test can switch on. They mirror failures seen in
// the field (../shared/cases/README.md); each says which case it models.
type Faults struct {
	// CertificatePending keeps every CertificateRequest Pending with an ACME
	// "waiting for DNS-01 propagation" message, so Certificates never become
	// Ready (case B13).
	CertificatePending bool
	// DSCReadyHidesMaaS makes the DSC aggregate (phase, Ready) ignore the MaaS
	// sub-component, the upstream bug where the DSC reports Ready while a
	// component failed (case B05, opendatahub-operator#750).
	DSCReadyHidesMaaS bool
	// LegacyMaaSCondition makes the 3.5 operator report MaaS under the
	// 3.3/3.4 condition name ModelsAsServiceReady (True once MaaS runs) and
	// never ModelsAsAServiceReady, while the DSC reports Ready: the state
	// an installer that waits on the wrong name takes for done (case B04;
	// 3.5 renamed the condition, rh-aiservices-bu/rhoai-maas-guide
	// troubleshooting).
	LegacyMaaSCondition bool
	// NoDefaultDSCI stops the RHOAI operator from creating default-dsci at
	// start-up (it does so unless disabled, case B05).
	NoDefaultDSCI bool
	// CRDDelay delays, per CRD name (plural.group), the registration of a
	// CRD the RHOAI operator registers while it reconciles the DSC (MaaS,
	// dashboard, kserve, AI gateway CRDs): it appears that long after the
	// operator first wanted to register it (case B03,
	// rh-aiservices-bu/rhoai-maas-guide PR #108).
	CRDDelay map[string]time.Duration
	// MissingCRDs names CRDs the RHOAI operator never registers, as when the
	// component that ships them never deploys (case B03 variant).
	MissingCRDs []string
	// CNPGInitdbFails keeps every CNPG Cluster in "Setting up primary": its
	// initdb Job <cluster>-1-initdb ends Failed with reason
	// BackoffLimitExceeded, which CNPG never reports in the Cluster status
	// (case B09, cloudnative-pg#11044).
	CNPGInitdbFails bool
	// KuadrantStuckMissingDependency keeps the real Kuadrant operator at
	// Ready=False with reason MissingDependency whatever operator pod runs,
	// as when the dependency is really missing (case B01 variant): the
	// simulated ingress operator never registers Istio's CRDs (istiod
	// still appears).
	KuadrantStuckMissingDependency bool
	// IstioAfterKuadrantOperator holds the install of Istio (istiod) until
	// a Kuadrant operator pod has run for realKuadrantBoot (the real
	// process reads its dependencies when it starts, about a second after
	// its pod is Running on this machine), so the operator certainly starts
	// before its Gateway API provider exists: the trigger state of case
	// B01. Without it the order is a race between the gateway delay and
	// the real OLM installing the RHCL CSV, which under load can finish
	// after Istio exists (then no MissingDependency occurs, as on a
	// cluster where RHCL was installed late). The gateway delay still
	// holds the GatewayClass's Accepted as before.
	IstioAfterKuadrantOperator bool
	// GatewayAuthPolicyRuleInvalid makes the MaaS controller render its
	// Gateway AuthPolicy maas-gateway-auth with an OPA rule
	// (require-group-membership) that does not compile. The real Authorino
	// then refuses the AuthConfig the real kuadrant-operator generates from
	// it (Ready=False, reason Invalid), and the operator keeps the policy
	// Accepted but Enforced=False, reason Unknown, naming the AuthConfig
	// among the components waiting to sync: a Gateway AuthPolicy that is
	// not enforced, as issue 18 measured on maas-controller v0.2.1 (there
	// with another message).
	GatewayAuthPolicyRuleInvalid bool
	// TokenRateLimitPolicyTargetMissing makes the MaaS controller target
	// each TokenRateLimitPolicy at an HTTPRoute that does not exist (the
	// model's route name with the suffix "-missing"). The real
	// kuadrant-operator refuses it: Accepted=False, reason TargetNotFound
	// (v1.5.2 tokenratelimit_policies_validator.go), and the MaaS
	// controller settles the MaaSSubscription at Degraded, as issue 18
	// measured on v0.2.1 (there Kuadrant refused the policy for another
	// reason).
	TokenRateLimitPolicyTargetMissing bool
	// MaaSFailures makes the MaaS controller report an object as failed:
	// keys are "Kind/namespace/name" (e.g. "MaaSModelRef/ns/m"), values the
	// status message. ExternalProvider, ExternalModel and MaaSModelRef get
	// phase Failed, MaaSAuthPolicy and MaaSSubscription phase Invalid, each
	// with Ready=False reason ReconcileFailed.
	MaaSFailures map[string]string
}

// Handle is a running set of simulators. Stop it with Stop; Wait returns
// the error that ended it.
type Handle struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	m      *manager
}

// ReconcileStat is one controller's reconcile work so far: how many
// reconciles ran and their summed wall time (the bench's breakdown).
type ReconcileStat struct {
	Controller string        `json:"controller"`
	Reconciles int64         `json:"reconciles"`
	Total      time.Duration `json:"totalNs"`
}

// ReconcileStats returns each controller's reconcile count and time so
// far, by controller name.
func (h *Handle) ReconcileStats() []ReconcileStat {
	var out []ReconcileStat
	h.m.mu.Lock()
	rs := append([]*reconciler(nil), h.m.reconcilers...)
	h.m.mu.Unlock()
	for _, r := range rs {
		if n := r.reconciles.Load(); n > 0 {
			out = append(out, ReconcileStat{Controller: r.name, Reconciles: n, Total: time.Duration(r.busy.Load())})
		}
	}
	return out
}

// Stop cancels the simulators and waits for them to finish. It returns the
// error they ended with, nil for a clean stop.
func (h *Handle) Stop() error {
	h.cancel()
	return h.Wait()
}

// Wait blocks until the simulators end and returns their error (nil when
// they were stopped through Stop or their context).
func (h *Handle) Wait() error {
	<-h.done
	return h.err
}

// Start validates opts, connects to the API server of cfg and starts every
// simulator in the background. Controllers for kinds whose CRD is not served
// yet start once that CRD is Established. The simulators run until ctx ends
// or Stop is called.
//
// Errors: invalid options, a missing CRD folder, or an unreachable API server.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (*Handle, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newManager(cfg, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	h := &Handle{cancel: cancel, done: make(chan struct{}), m: m}
	if err := m.start(ctx); err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(h.done)
		<-ctx.Done()
		m.wait()
		if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			h.err = err
		}
	}()
	return h, nil
}

// Run starts every simulator (see Start) and blocks until ctx ends. It
// returns nil when ctx was cancelled or timed out, and a start-up error
// otherwise.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	h, err := Start(ctx, cfg, opts)
	if err != nil {
		return err
	}
	return h.Wait()
}

func (o Options) withDefaults() (Options, error) {
	if o.RHOAIVersion == "" {
		o.RHOAIVersion = RHOAI35
	}
	switch o.RHOAIVersion {
	case RHOAI33, RHOAI34, RHOAI35:
	default:
		return o, fmt.Errorf("rhoai version %q: want %s, %s or %s", o.RHOAIVersion, RHOAI33, RHOAI34, RHOAI35)
	}
	known := map[string]bool{}
	for _, n := range ControllerNames() {
		known[n] = true
	}
	for k, d := range o.Delay {
		if !known[k] {
			return o, fmt.Errorf("delay for unknown controller %q (known: %v)", k, ControllerNames())
		}
		if d < 0 {
			return o, fmt.Errorf("delay for %s: negative duration %s", k, d)
		}
	}
	if o.CRDDir == "" {
		dir, err := DefaultCRDDir()
		if err != nil {
			return o, err
		}
		o.CRDDir = dir
	}
	if st, err := os.Stat(filepath.Join(o.CRDDir, "olm")); err != nil || !st.IsDir() {
		return o, fmt.Errorf("crd dir %s: no olm/ folder (is it ../shared/crds?)", o.CRDDir)
	}
	if o.AppsDomain == "" {
		o.AppsDomain = "apps.openshift.example.com"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}

// DefaultCRDDir returns env MAASCTL_CRDS when set, else ../shared/crds
// relative to the repository root (the first folder at or above the working
// directory that holds a go.mod). Errors when neither exists.
func DefaultCRDDir() (string, error) {
	if d := os.Getenv("MAASCTL_CRDS"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find crd dir: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			c := filepath.Join(dir, "..", "shared", "crds")
			if _, err := os.Stat(c); err == nil {
				return filepath.Clean(c), nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find crd dir: set MAASCTL_CRDS; no ../shared/crds beside a go.mod above %s", wd)
		}
	}
}

// ServiceCAPEM is the certificate of the simulated service-ca operator's
// signer: the CA of every serving-cert Secret it issues (Authorino's
// listener certificate among them). OpenShift publishes the same CA in
// the openshift-service-ca.crt ConfigMaps; clients of those Services
// trust it.
func (h *Handle) ServiceCAPEM() []byte { return append([]byte(nil), h.m.ca.kp.CertPEM...) }
