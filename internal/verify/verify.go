// Package verify proves that a MaaS deployment works: the control-plane
// checks of the deployment README's "Verify the deployment" list
// (../shared/reference/DEPLOYMENT.md) read from a live snapshot, and the
// data path a user takes: mint an API key, list models, chat, be refused
// without a key, be limited over quota, and revoke the key. Every check has
// a stable code (Catalogue), a result and, on failure, the cause and the
// fix. Responses are classified as case B17 prescribes.
package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// Options configure Run.
type Options struct {
	Inventory *inventory.Inventory
	// Reader reads the live objects.
	Reader Reader
	// Release is where the installed RHOAI release keeps MaaS; the zero
	// value is RHOAI 3.5 with the inventory's names.
	Release release.Release
	// DataPath enables the data-path checks; nil runs only the live
	// checks. When its Endpoint is empty the Route host is used.
	DataPath *DataPathOptions
	// Schema, when set, asks the database about maas-api's schema (the
	// check Job of dbschema.go, MAAS-V016); nil skips that check.
	Schema SchemaProber
	// Settle, when positive, reads again every settleInterval (2 s) the
	// objects of the checks that can be Pending (settleFresh) while every
	// failed live check is Pending (Kuadrant still loading what it
	// generated), for at most this long, and judges the last read (the
	// other checks on the first); the schema probe and the data path run
	// after it, once. A verify right after an install or a policy change
	// then does not fail on seconds of Kuadrant's work. 0 judges the
	// first read.
	Settle time.Duration
	// Waiting, when set, is called during Settle each time the pending
	// checks change, with them on one line ("MAAS-V010 AuthPolicy
	// openshift-ingress/maas-gateway-auth: Enforced=False (Unknown): ...").
	Waiting func(pending string)
}

// settleInterval is how often Options.Settle reads again (a variable for
// the tests).
var settleInterval = 2 * time.Second

// Report is the outcome of one verify run.
type Report struct {
	// Endpoint is the MaaS base URL the data path used ("" when skipped).
	Endpoint string `json:"endpoint,omitempty"`
	// Passed is true when no check failed.
	Passed bool    `json:"passed"`
	Checks []Check `json:"checks"`
}

// Failed returns the failed checks.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Result == Fail {
			out = append(out, c)
		}
	}
	return out
}

// FailedCodes returns the distinct codes of failed checks, in report order.
func (r *Report) FailedCodes() []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range r.Failed() {
		if !seen[c.Code] {
			seen[c.Code] = true
			out = append(out, c.Code)
		}
	}
	return out
}

// Run takes a snapshot, evaluates the live checks and, when requested, the
// data path. It returns an error only when the cluster cannot be read at
// all; failed checks are reported in the Report.
func Run(ctx context.Context, o Options) (*Report, *State, error) {
	s, err := SettledSnapshot(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	if o.Schema != nil {
		p := o.Schema.ProbeSchema(ctx, o.Inventory)
		s.Schema = &p
	}
	rep := &Report{Checks: LiveChecks(s)}
	if o.DataPath != nil {
		dp := *o.DataPath
		ep, err := ResolveEndpoint(s, dp.Endpoint)
		if err != nil {
			rep.Checks = append(rep.Checks, newCheck(CodeHealth, "").fail(err.Error(), "the data path needs the MaaS base URL", "pass --endpoint https://maas.<apps domain>"))
		} else {
			dp.Endpoint = ep
			rep.Endpoint = ep
			rep.Checks = append(rep.Checks, DataPath(ctx, s, dp)...)
		}
	}
	rep.Passed = len(rep.Failed()) == 0
	return rep, s, nil
}

// SettledSnapshot takes a Snapshot through o.Reader and, when o.Settle is
// positive, more every settleInterval (2 s) while every failed live check
// is Pending, for at most o.Settle (settle), reporting each new set of
// pending checks to o.Waiting; it returns the last snapshot. Run judges
// this snapshot; doctor (internal/doctor) analyses it, so that neither
// reports a Kuadrant policy Kuadrant is still syncing. Errors: a read that
// fails, or ctx's.
func SettledSnapshot(ctx context.Context, o Options) (*State, error) {
	var replay *Replay
	if o.Settle > 0 {
		replay = &Replay{Reader: o.Reader, Fresh: settleFresh}
		o.Reader = replay
	}
	s, err := Snapshot(ctx, o.Reader, o.Inventory, o.Release)
	if err != nil || o.Settle <= 0 {
		return s, err
	}
	return settle(ctx, o, replay, s)
}

// settle takes snapshots every settleInterval while every failed live
// check of the last one is Pending, for at most o.Settle, and returns the
// last snapshot; an error when a read fails or ctx ends. After the first
// snapshot, replay answers every kind outside settleFresh from that
// snapshot's reads: the checks that passed are not judged again, and a
// retry on 1,000 models reads only the Kuadrant policies and the MaaS
// objects that list them (as the install's verify step does).
func settle(ctx context.Context, o Options, replay *Replay, s *State) (*State, error) {
	deadline := time.Now().Add(o.Settle)
	replay.Freeze()
	last := ""
	for {
		failed := (&Report{Checks: LiveChecks(s)}).Failed()
		if len(failed) == 0 || !time.Now().Before(deadline) {
			return s, nil
		}
		var pending []string
		for _, c := range failed {
			if !c.Pending {
				return s, nil
			}
			pending = append(pending, c.Brief())
		}
		if len(pending) > 3 {
			pending = append(pending[:3], fmt.Sprintf("and %d more", len(pending)-3))
		}
		if msg := strings.Join(pending, "; "); msg != last && o.Waiting != nil {
			o.Waiting(msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(settleInterval, time.Until(deadline))):
		}
		next, err := Snapshot(ctx, o.Reader, o.Inventory, o.Release)
		if err != nil {
			return nil, err
		}
		s = next
	}
}

// settleFresh selects the kinds a settle retry reads again: those that
// hold the state of the checks that can be Pending (kuadrant.io: the
// gateway AuthPolicy and the generated TokenRateLimitPolicies) and the
// MaaS objects whose status names the generated policies
// (maas.opendatahub.io).
func settleFresh(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "kuadrant.io" || gvk.Group == "maas.opendatahub.io"
}

// Summary is one line: how many checks passed, failed and were skipped.
func (r *Report) Summary() string {
	var p, f, s int
	for _, c := range r.Checks {
		switch c.Result {
		case Pass:
			p++
		case Fail:
			f++
		case Skip:
			s++
		}
	}
	if f == 0 {
		return fmt.Sprintf("verify passed: %d checks passed, %d skipped", p, s)
	}
	return fmt.Sprintf("verify failed: %d of %d checks failed (%s)", f, len(r.Checks), strings.Join(r.FailedCodes(), ", "))
}

// WriteText renders the report as a table with the cause and fix of each
// failure under it.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CODE\tRESULT\tCHECK\tOBJECT\tDETAIL")
	for _, c := range r.Checks {
		res := string(c.Result)
		if c.Result == Fail {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Code, res, c.Title, c.Object, oneLine(c.Detail, 140))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Failed() {
		fmt.Fprintf(w, "\n%s %s (%s)\n  observed: %s\n  cause:    %s\n  fix:      %s\n", c.Code, c.Title, c.Object, c.Detail, c.Cause, c.Fix)
	}
	_, err := fmt.Fprintln(w, "\n"+r.Summary())
	return err
}

// WriteJSON renders the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func oneLine(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) > n {
		return string(r[:n]) + "…"
	}
	return string(r)
}

// ClusterProbes implements ProbeSubscriptions with server-side apply and a
// watch-based wait for phase Active.
type ClusterProbes struct{ Clients *kube.Clients }

// Create implements ProbeSubscriptions.
func (p ClusterProbes) Create(ctx context.Context, sub *unstructured.Unstructured) error {
	if _, err := p.Clients.Apply(ctx, sub); err != nil {
		return err
	}
	_, err := waiters.For(ctx, p.Clients, waiters.Target{
		GVK: MaaSSubscriptionGVK, Namespace: sub.GetNamespace(), Name: sub.GetName(),
		Cond: waiters.Phase([]string{"Active"}, "Failed", "Invalid"),
	})
	if err != nil {
		return fmt.Errorf("wait for probe MaaSSubscription %s/%s: %w", sub.GetNamespace(), sub.GetName(), err)
	}
	return nil
}

// Delete implements ProbeSubscriptions: it deletes the probe subscription
// and waits, within ctx, until it is gone and each TokenRateLimitPolicy
// its status listed (status.tokenRateLimitStatuses) has settled: in force
// again (PolicyInForce) when another MaaSSubscription still lists it, gone
// otherwise. The MaaS controller rebuilds a model's TokenRateLimitPolicy
// without the probe's limit, and Kuadrant then writes Limitador's limits
// anew, which holds the policy at Enforced=False ("waiting for the
// following components to sync: [Limitador]", kuadrant-operator v1.5.2
// tokenratelimitpolicy_status_updater.go) until the Limitador CR is Ready
// again: without the wait, a doctor or verify run right after this one
// would report the model's quota as not enforced.
func (p ClusterProbes) Delete(ctx context.Context, ns, name string) error {
	ri, _, err := p.Clients.Resource(MaaSSubscriptionGVK, ns)
	if err != nil {
		return err
	}
	live, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read probe MaaSSubscription %s/%s: %w", ns, name, err)
	}
	policies := generatedPolicies(live, "tokenRateLimitStatuses")
	err = ri.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(live.GetUID())}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete probe MaaSSubscription %s/%s: %w", ns, name, err)
	}
	if err := waiters.Gone(ctx, p.Clients, MaaSSubscriptionGVK, ns, name); err != nil {
		return fmt.Errorf("probe MaaSSubscription %s/%s: %w", ns, name, err)
	}
	if len(policies) == 0 {
		return nil
	}
	all, _, err := p.Clients.Resource(MaaSSubscriptionGVK, "")
	if err != nil {
		return err
	}
	subs, err := all.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list MaaSSubscriptions: %w", err)
	}
	kept := map[[2]string]bool{}
	for i := range subs.Items {
		for _, ref := range generatedPolicies(&subs.Items[i], "tokenRateLimitStatuses") {
			kept[ref] = true
		}
	}
	var targets []waiters.Target
	for _, ref := range policies {
		if kept[ref] {
			targets = append(targets, waiters.Target{GVK: TokenRateLimitPolicyGVK, Namespace: ref[0], Name: ref[1], Cond: PolicyInForce})
			continue
		}
		if err := waiters.Gone(ctx, p.Clients, TokenRateLimitPolicyGVK, ref[0], ref[1]); err != nil {
			return fmt.Errorf("after the probe: %w", err)
		}
	}
	if err := waiters.All(ctx, p.Clients, targets...); err != nil {
		return fmt.Errorf("after the probe: %w", err)
	}
	return nil
}

// PolicyInForce is done when a Kuadrant policy's status is for its current
// spec (status.observedGeneration equals metadata.generation) and says
// Enforced=True. Kuadrant's policy conditions carry no observedGeneration
// of their own (kuadrant-operator v1.5.2 internal/kuadrant/conditions.go),
// so a condition from before a spec change is told apart only by the
// status's.
func PolicyInForce(obj *unstructured.Unstructured) waiters.Result {
	obs, found, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
	if !found || obs < obj.GetGeneration() {
		return waiters.Result{Status: fmt.Sprintf("status is for generation %d, spec is at %d", obs, obj.GetGeneration())}
	}
	return waiters.ConditionTrue("Enforced")(obj)
}

// DefaultProbeTimeout bounds the wait for the probe subscription.
const DefaultProbeTimeout = 2 * time.Minute
