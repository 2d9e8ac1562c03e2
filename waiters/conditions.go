package waiters

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/steps/event"
)

// Cond is one entry of status.conditions as Kubernetes API conventions
// define it (metav1.Condition shape).
type Cond struct {
	Type, Status, Reason, Message string
	ObservedGeneration            int64
	HasObservedGeneration         bool
}

// GetCondition returns status.conditions[type==typ] of obj.
func GetCondition(obj *unstructured.Unstructured, typ string) (Cond, bool) {
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		c := Cond{Type: typ}
		c.Status, _ = m["status"].(string)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		switch g := m["observedGeneration"].(type) {
		case int64:
			c.ObservedGeneration, c.HasObservedGeneration = g, true
		case float64:
			c.ObservedGeneration, c.HasObservedGeneration = int64(g), true
		}
		return c, true
	}
	return Cond{}, false
}

// String renders a condition as Type=Status (Reason): message.
func (c Cond) String() string {
	s := c.Type + "=" + c.Status
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	if c.Message != "" {
		s += ": " + shorten(c.Message, maxMessageRunes)
	}
	return s
}

// maxMessageRunes bounds a condition message in String: long enough for
// the messages operators write (a Gateway's AddressNotAssigned names the
// address and why it is pending past 160 characters), short enough for a
// progress line.
const maxMessageRunes = 320

// shorten returns msg cut to max runes, with "…" when cut; it never splits
// a UTF-8 sequence.
func shorten(msg string, max int) string {
	n := 0
	for i := range msg {
		if n == max {
			return msg[:i] + "…"
		}
		n++
	}
	return msg
}

// Exists is done as soon as the object exists.
func Exists() Condition {
	return func(*unstructured.Unstructured) Result { return Result{Done: true, Status: "exists"} }
}

// ConditionTrue is done when condition typ is True and, where the condition
// carries observedGeneration, it is not older than metadata.generation (a
// True condition about an older spec does not count).
func ConditionTrue(typ string) Condition {
	return func(obj *unstructured.Unstructured) Result {
		c, ok := GetCondition(obj, typ)
		if !ok {
			return Result{Status: "no " + typ + " condition yet"}
		}
		if c.HasObservedGeneration && c.ObservedGeneration < obj.GetGeneration() {
			return Result{Status: fmt.Sprintf("%s is for generation %d, object is at %d", typ, c.ObservedGeneration, obj.GetGeneration())}
		}
		return Result{Done: c.Status == "True", Status: c.String()}
	}
}

// Phase is done when status.phase is one of phases. A phase in failed ends
// the wait with an error carrying status.message or the conditions.
func Phase(done []string, failed ...string) Condition {
	return func(obj *unstructured.Unstructured) Result {
		p, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		if p == "" {
			return Result{Status: "no phase yet"}
		}
		st := "phase " + p
		if msg := statusMessage(obj); msg != "" {
			st += ": " + msg
		}
		for _, f := range failed {
			if p == f {
				return Result{Status: st, Failed: fmt.Errorf("%s", st)}
			}
		}
		for _, d := range done {
			if p == d {
				return Result{Done: true, Status: st}
			}
		}
		return Result{Status: st}
	}
}

// And is done when every condition is done; it reports the first not done.
func And(conds ...Condition) Condition {
	return func(obj *unstructured.Unstructured) Result {
		var parts []string
		for _, c := range conds {
			r := c(obj)
			if r.Failed != nil {
				return r
			}
			if !r.Done {
				return r
			}
			parts = append(parts, r.Status)
		}
		return Result{Done: true, Status: strings.Join(parts, ", ")}
	}
}

// statusMessage picks a human message from status: status.message, or the
// first False condition.
func statusMessage(obj *unstructured.Unstructured) string {
	if m, _, _ := unstructured.NestedString(obj.Object, "status", "message"); m != "" {
		return m
	}
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, item := range list {
		m, _ := item.(map[string]any)
		if m["status"] == "False" {
			c, _ := GetCondition(obj, fmt.Sprint(m["type"]))
			return c.String()
		}
	}
	return ""
}

// MaaSPhase is Phase for the MaaS policy kinds (MaaSAuthPolicy,
// MaaSSubscription; maas-controller v0.2.1): done at a phase in done, a
// failure at one in failed. Its Status carries the reason the phase alone
// does not: the Ready condition and every entry of status.modelRefStatuses,
// status.tokenRateLimitStatuses and status.authPolicies that is not ready
// ("model ns/name NotFound: ..."). The controller keeps Ready=True
// (Reconciled) at Degraded, so a Degraded object's reason is only in those
// lists. An object without a phase is reported as such: the controller
// writes no status at all for a MaaSSubscription whose models do not exist
// (issue 18), so the wait has nothing else to name. A failed or done
// phase whose Ready condition is for an older generation is waited on.
func MaaSPhase(done []string, failed ...string) Condition {
	return func(obj *unstructured.Unstructured) Result {
		p, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		if p == "" {
			return Result{Status: "no phase yet: the MaaS controller has written no status for it (it is not running or has not reached it; for a MaaSSubscription: a model in spec.modelRefs does not exist)"}
		}
		st := "phase " + p
		if why := MaaSReason(obj); why != "" {
			st += ": " + why
		}
		isFailed, isDone := slices.Contains(failed, p), slices.Contains(done, p)
		// A verdict the controller wrote for an older generation judges a
		// spec that is no longer there (maasctl has just re-applied a
		// changed one; for a MaaSAuthPolicy, its subjects are not yet
		// rendered into the Gateway-level AuthPolicy): wait for its
		// verdict on this one.
		if c, ok := GetCondition(obj, "Ready"); (isFailed || isDone) && ok && c.HasObservedGeneration && c.ObservedGeneration < obj.GetGeneration() {
			return Result{Status: fmt.Sprintf("%s (for generation %d, object is at %d)", st, c.ObservedGeneration, obj.GetGeneration())}
		}
		if isFailed {
			return Result{Status: st, Failed: fmt.Errorf("%s", st)}
		}
		if isDone {
			return Result{Done: true, Status: "phase " + p}
		}
		return Result{Status: st}
	}
}

// MaaSReason renders why a MaaS object is not at its wanted phase: a Ready
// condition that is not True, or its message when it has one, then each
// not-ready entry of the per-model status lists of the MaaS CRDs
// (modelRefStatuses, tokenRateLimitStatuses, authPolicies), joined by "; ".
func MaaSReason(obj *unstructured.Unstructured) string {
	var parts []string
	if c, ok := GetCondition(obj, "Ready"); ok && (c.Status != "True" || c.Message != "") {
		parts = append(parts, c.String())
	}
	for _, f := range []struct{ field, what string }{
		{"modelRefStatuses", "model"}, {"tokenRateLimitStatuses", "TokenRateLimitPolicy"}, {"authPolicies", "AuthPolicy"},
	} {
		l, _, _ := unstructured.NestedSlice(obj.Object, "status", f.field)
		for _, x := range l {
			m, _ := x.(map[string]any)
			if ready, _ := m["ready"].(bool); ready {
				continue
			}
			name, _ := m["name"].(string)
			if ns, _ := m["namespace"].(string); ns != "" {
				name = ns + "/" + name
			}
			e := f.what + " " + name
			if r, _ := m["reason"].(string); r != "" {
				e += " " + r
			}
			if msg, _ := m["message"].(string); msg != "" {
				e += ": " + msg
			}
			parts = append(parts, e)
		}
	}
	return strings.Join(parts, "; ")
}

// DeploymentRolledOut is done when the Deployment controller has rolled
// out the current template: status.observedGeneration caught up with
// metadata.generation, every replica is updated and available, and no
// replica of an older template is left (status.replicas ==
// updatedReplicas). These are the fields `kubectl rollout status` reads
// (k8s.io/kubectl pkg/polymorphichelpers/rollout_status.go). A paused
// Deployment whose template is not rolled out fails at once.
func DeploymentRolledOut(d *unstructured.Unstructured) Result {
	gen := d.GetGeneration()
	obs, _, _ := unstructured.NestedInt64(d.Object, "status", "observedGeneration")
	if obs < gen {
		return Result{Status: fmt.Sprintf("observedGeneration %d of %d", obs, gen)}
	}
	want, found, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	if !found {
		want = 1
	}
	updated, _, _ := unstructured.NestedInt64(d.Object, "status", "updatedReplicas")
	total, _, _ := unstructured.NestedInt64(d.Object, "status", "replicas")
	avail, _, _ := unstructured.NestedInt64(d.Object, "status", "availableReplicas")
	// While spec.paused is true the Deployment controller makes no
	// ReplicaSet for a new template, so the rollout cannot go on: waiting
	// would only time out.
	if paused, _, _ := unstructured.NestedBool(d.Object, "spec", "paused"); paused && (updated < want || total > updated) {
		return Result{Status: "paused", Failed: &event.Problem{
			Message: fmt.Sprintf("Deployment %s/%s is paused (spec.paused: true), so its current template is not rolled out (%d of %d replicas updated)", d.GetNamespace(), d.GetName(), updated, want),
			Fix:     fmt.Sprintf("resume it: oc rollout resume deployment/%s -n %s", d.GetName(), d.GetNamespace())}}
	}
	switch {
	case updated < want:
		return Result{Status: fmt.Sprintf("%d of %d replicas updated", updated, want)}
	case total > updated:
		return Result{Status: fmt.Sprintf("%d old replicas pending termination", total-updated)}
	case avail < updated:
		return Result{Status: fmt.Sprintf("%d of %d updated replicas available", avail, updated)}
	}
	return Result{Done: true, Status: "rolled out"}
}
