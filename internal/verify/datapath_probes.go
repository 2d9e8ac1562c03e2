package verify

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
)

// BogusKeyPrefix starts the API key of the bogus-key probe: the sk-oai-
// shape of a real maas-api key, so the gateway must look it up and refuse
// it, never a key maas-api issued.
const BogusKeyPrefix = "sk-oai-maasctl-verify-bogus-"

// negativeProbes are the data-path checks that must be refused (case N04):
// a chat completion without credentials, and one with a bogus API key.
// Each passes on 401 or 403. A 2xx on either is an AUTH_BYPASS
// (ClassAuthBypass), whatever the control-plane checks say: RHCL 1.4.0
// serves inference without calling Authorino while every AuthPolicy
// reports Enforced (opendatahub-io/models-as-a-service#1248).
func (d *dataPath) negativeProbes(ctx context.Context, models []inventory.ExternalModel) []Check {
	bogus := BogusKeyPrefix + randomSuffix() + randomSuffix() + randomSuffix()
	return []Check{
		d.mustRefuse(ctx, CodeNoKey401, "no credentials", "", models),
		d.mustRefuse(ctx, CodeBogusKey, "bogus API key", bogus, models),
	}
}

// mustRefuse sends the probe named probe (bearer "" = no Authorization
// header) and expects 401 or 403.
func (d *dataPath) mustRefuse(ctx context.Context, code, probe, bearer string, models []inventory.ExternalModel) Check {
	c := newCheck(code, d.base+"/v1/chat/completions")
	model := "verify"
	if len(models) > 0 {
		model = models[0].Name
	}
	r, err := d.do(ctx, http.MethodPost, "/v1/chat/completions", bearer, chatRequest(model, 1, 0))
	if err != nil {
		return c.fail(d.scrub(err.Error()), "the MaaS endpoint is unreachable", "check --endpoint")
	}
	if r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden {
		return c.pass(fmt.Sprintf("probe %q: HTTP %d", probe, r.Status))
	}
	detail := fmt.Sprintf("probe %q: HTTP %d: %s", probe, r.Status, snippet(r.Body, 120))
	if r.Status >= 200 && r.Status < 300 {
		c = c.fail(detail,
			fmt.Sprintf("%s (critical): the gateway served a chat completion to the %q probe: authentication is not enforced on the inference route, so model %s is open to anyone who can reach the Route, even though the AuthPolicies may all report Enforced (RHCL 1.4.0 does this: upgrade to >= 1.4.1)", AuthBypass, probe, model),
			"oc get csv -A | grep -e rhcl-operator -e kuadrant-operator (upgrade RHCL to >= 1.4.1); maasctl doctor; oc get authpolicy -A")
		c.Class = string(ClassAuthBypass)
		return c
	}
	dg := Classify(r)
	dg.Cause = fmt.Sprintf("expected 401 or 403 for the %q probe: %s", probe, dg.Cause)
	return c.failDiag(detail, dg)
}

func (d *dataPath) bodySize(ctx context.Context, key string, m inventory.ExternalModel) Check {
	c := newCheck(CodeBodySize, d.base+"/v1/chat/completions model="+m.Name)
	small := chatRequest(m.Name, 1, 1024)
	r, err := d.do(ctx, http.MethodPost, "/v1/chat/completions", key, small)
	if err != nil || r.Status != http.StatusOK {
		return c.skip(fmt.Sprintf("a %d-byte request did not pass (HTTP %d), so the size limit cannot be measured", len(small), r.Status))
	}
	large := chatRequest(m.Name, 1, d.o.ProbeBodySize)
	r, err = d.do(ctx, http.MethodPost, "/v1/chat/completions", key, large)
	if err != nil {
		return c.fail(d.scrub(err.Error()), "the gateway dropped the connection on a large request (body cap)", "raise the gateway's request buffer limit")
	}
	if r.Status == http.StatusOK {
		return c.pass(fmt.Sprintf("%d-byte and %d-byte requests passed", len(small), len(large)))
	}
	dg := ClassifyLarge(r, len(small))
	return c.failDiag(fmt.Sprintf("HTTP %d for %d bytes: %s", r.Status, len(large), snippet(r.Body, 120)), dg)
}

// ProbeSubscriptionPrefix starts the name of every probe MaaSSubscription
// verify creates.
const ProbeSubscriptionPrefix = "maasctl-verify-probe-"

// ProbeLimit is the probe subscription's token limit per window: one
// request of any size uses it up, so the next one must get 429.
const ProbeLimit = 1

// probeCleanupTimeout bounds the deletion of the probe subscription and
// the wait for its model's TokenRateLimitPolicy to be in force again
// (ClusterProbes.Delete).
const probeCleanupTimeout = time.Minute

func (d *dataPath) probeQuota(ctx context.Context, models []inventory.ExternalModel) (out Check) {
	c := newCheck(CodeQuota429, d.base+"/v1/chat/completions")
	switch {
	case len(models) == 0:
		return c.skip("no model to probe")
	case d.s.Caller.User == "":
		return c.skip("caller identity unknown (" + orNone(d.s.CallerErr) + "), so no probe subscription can name it")
	case d.o.Probes == nil:
		return c.skip("no cluster access to create the probe subscription")
	case d.o.Token == "":
		return c.skip("no bearer token to mint a probe key")
	}
	m := models[0]
	ns := d.s.Inv.RHOAI.MaaSNamespace
	name := ProbeSubscriptionPrefix + randomSuffix()
	c.Object = describe("MaaSSubscription", ns, name)
	sub := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": MaaSSubscriptionGVK.GroupVersion().String(), "kind": "MaaSSubscription",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"app.kubernetes.io/managed-by": "maasctl-verify"}},
		"spec": map[string]any{
			// Lowest priority: never chosen for a key minted without an
			// explicit subscription while the probe exists.
			"priority": int64(-1000),
			"owner":    map[string]any{"users": []any{d.s.Caller.User}},
			"modelRefs": []any{map[string]any{
				"name": m.Name, "namespace": m.Namespace,
				"tokenRateLimits": []any{map[string]any{"limit": int64(ProbeLimit), "window": "1m"}},
			}},
		},
	}}
	pctx, cancel := context.WithTimeout(ctx, d.o.ProbeTimeout)
	defer cancel()
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), probeCleanupTimeout)
		defer dcancel()
		err := d.o.Probes.Delete(dctx, ns, name)
		if err == nil {
			return
		}
		detail := out.Detail + "; probe cleanup: " + d.scrub(err.Error())
		if out.Result != Pass {
			out.Detail = detail
			return
		}
		out = out.fail(detail, fmt.Sprintf("the probe subscription was not removed, or the TokenRateLimitPolicy of model %s was not in force again within %s of its removal (Kuadrant writes Limitador's limits anew)", m.Name, probeCleanupTimeout),
			"oc get maassubscription -n "+ns+" "+name+"; oc describe tokenratelimitpolicy -n "+m.Namespace+"; maasctl doctor")
	}()
	if err := d.o.Probes.Create(pctx, sub); err != nil {
		return c.fail(d.scrub(err.Error()), "the probe MaaSSubscription did not become Active", "oc describe maassubscription "+name+" -n "+ns)
	}
	key, mint := d.mint(ctx, name, "maasctl-verify-probe")
	if key == "" {
		return c.fail("probe key: "+mint.Detail, mint.Cause, mint.Fix)
	}
	var statuses []string
	for i := 0; i < 4; i++ {
		r, err := d.do(ctx, http.MethodPost, "/v1/chat/completions", key, chatRequest(m.Name, d.o.MaxTokens, 0))
		if err != nil {
			return c.fail(d.scrub(err.Error()), "the MaaS endpoint is unreachable", "check --endpoint")
		}
		statuses = append(statuses, fmt.Sprint(r.Status))
		if r.Status == http.StatusOK {
			continue
		}
		dg := Classify(r)
		if dg.Class == ClassQuota {
			return c.pass(fmt.Sprintf("HTTP %s: limit %d token per 1m enforced (%d-byte answer in %s)", strings.Join(statuses, ", "), ProbeLimit, len(r.Body), r.Latency.Round(time.Millisecond)))
		}
		dg.Cause = "expected the gateway's 429: " + dg.Cause
		return c.failDiag("HTTP "+strings.Join(statuses, ", ")+": "+snippet(r.Body, 120), dg)
	}
	return c.fail("HTTP "+strings.Join(statuses, ", "), "token limits are not enforced: requests over a 1-token limit still pass (TokenRateLimitPolicy not enforced, or the model server returns no usage)",
		"oc get tokenratelimitpolicy -A; maasctl doctor")
}
