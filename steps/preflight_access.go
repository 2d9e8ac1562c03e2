package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/vault"
)

// checkRHOAILayout reports the RHOAI layout maasctl renders for and the
// inventory components that layout does not have.
func checkRHOAILayout(ctx context.Context, e *Env) ([]Finding, error) {
	l := e.Facts.Release
	if !e.ReleaseDetected {
		var err error
		if l, err = detectRelease(ctx, e.Clients, e.Inv); err != nil {
			return nil, err
		}
	}
	var out []Finding
	if release.Minor(l.Version) < 3 {
		out = append(out, errorf("install RHOAI 3.3 or later (operators[rhoai].channel)", "%s has no MaaS subscriptions (MaaSModelRef, MaaSSubscription); maasctl supports RHOAI 3.3 to 3.5", l))
	}
	if un := l.Unserved(e.Inv); len(un) > 0 {
		out = append(out, warnf("remove them from rhoai.managedComponents/removedComponents to silence this",
			"the DataScienceCluster schema of %s has no component(s) %s: they are left out of the DSC", l, strings.Join(un, ", ")))
	}
	return out, nil
}

// checkRHOAIVersion: the RHOAI minor the cluster serves (installed
// rhods-operator CSV, else the DSC CRD schema) is the minor of
// operators[rhoai].channel (case B04). A skew is an error: the channel's
// DataScienceCluster layout would be pruned or rejected by the served
// schema, and the operators/rhoai step would change the Subscription's
// channel, which is an operator upgrade (or a downgrade OLM never does).
// Ignoring the check (--ignore-preflight rhoai-version) lets the step change
// the channel; it then waits until OLM installed a CSV of the new channel.
func checkRHOAIVersion(ctx context.Context, e *Env) ([]Finding, error) {
	skew, err := DetectVersionSkew(ctx, e.Clients, e.Inv)
	if err != nil || skew == nil {
		return nil, err
	}
	return []Finding{errorf(skew.Fix(), "%s", skew.Problem())}, nil
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
	out = append(out, componentFindings(e.Facts.Release.WithDefaults(), e.Inv)...)
	return out, nil
}

// componentFindings checks the inventory's component set for layout l.
func componentFindings(l release.Release, inv *inventory.Inventory) []Finding {
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
			if e.removes(k.gvk, it.GetNamespace(), it.GetName()) {
				continue // this run removes it: the inventory no longer lists it
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
			// The hint is the finding's fix: not in its message too.
			bare := *te
			bare.Hint = ""
			return []Finding{errorf(fix, "the Vault token cannot be used: %v", &bare)}, nil
		}
		var pe *vault.PermissionError
		if errors.As(err, &pe) {
			return []Finding{errorf("grant the token this policy: "+pe.PolicyStanza(),
				"Vault denies reading the database secret %s at API path %s (a KV v2 policy must name the data/ path; a policy on the logical path matches nothing): %v", p, pe.APIPath, err)}, nil
		}
		var de *vault.DeletedError
		if errors.As(err, &de) { // case N11: deleted is not "no password"
			de.Rotate = RotateAdvice(de.Version)
			return []Finding{errorf("undelete the version in Vault, or rotate the password explicitly with `maasctl database rotate-password`", "%v", err)}, nil
		}
		return []Finding{errorf("check database.vaultPath and the Vault mount", "cannot read the database secret %s from Vault: %v", p, err)}, nil
	}
	var out []Finding
	out = append(out, v.tokenTTLFindings(ctx)...)
	loc, err := v.Client.Resolve(ctx, p)
	if err != nil {
		return nil, err
	}
	if loc.KVVersion == 1 && !v.Inv.Database.VaultAllowUnprotectedKVv1 { // case B10: KV v1 has no check-and-set
		out = append(out, errorf("use a KV v2 mount, or set "+vault.KVv1OptIn+": true", "%v", &vault.KVv1Error{Location: loc}))
	} else if loc.KVVersion == 1 {
		out = append(out, warnf("", "Vault mount %s/ is KV v1: the database password at %s has no write protection (no check-and-set)", loc.Mount, p))
	}
	if !found {
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

// engineAccess is what every run does beside its steps: NewEnv reads the
// apps domain (config.openshift.io Ingress cluster, when gateway.hostname
// is not set), and the engine keeps its state: the state namespace
// (created when missing), the run Lease (acquire, renew, release:
// steps/engine/lock.go) and the ConfigMaps of the checkpoints, the run
// record and the installed inventory (server-side apply, read, delete of
// stale record shards and of the last uninstall's mark,
// UninstalledConfigMap).
func engineAccess(inv *inventory.Inventory) []Access {
	ns := StateNamespace
	out := []Access{{"get", "", "namespaces", "", ns}, {"create", "", "namespaces", "", ""}}
	if inv.Gateway.Hostname == "" {
		out = append(out, getAccess("config.openshift.io", "ingresses", "", "cluster")...)
	}
	for _, v := range []string{"get", "create", "update", "delete"} {
		out = append(out, Access{v, "coordination.k8s.io", "leases", ns, ""})
	}
	for _, v := range []string{"get", "list", "watch", "create", "patch", "delete"} {
		out = append(out, Access{v, "", "configmaps", ns, ""})
	}
	return out
}

// objectsRead: the run record reads every object a step writes (its
// Objects) before the step runs, to tell created from adopted.
func objectsRead(e *Env, s *Step, resource func(schema.GroupVersionKind) string) []Access {
	var out []Access
	for _, o := range s.objects(e) {
		out = append(out, Access{"get", o.GroupVersionKind().Group, resource(o.GroupVersionKind()), o.GetNamespace(), ""})
	}
	return out
}

// plannedAccess lists every permission the plan uses: the engine's own
// (engineAccess), the run record's reads (objectsRead) and the union of every step's Access (ObjectAccess
// of its objects and the extra calls it makes).
// An inventory the registry rejects plans nothing (Validate reports it).
func plannedAccess(e *Env, resource func(schema.GroupVersionKind) string) []access {
	reg, err := registryFor(e.Registry, e.Inv)
	if err != nil {
		return nil
	}
	set := map[access]bool{}
	for _, a := range engineAccess(e.Inv) {
		set[a] = true
	}
	for _, s := range reg.Steps {
		for _, a := range append(s.access(e, resource), objectsRead(e, s, resource)...) {
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
		return guessResource(gvk)
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
