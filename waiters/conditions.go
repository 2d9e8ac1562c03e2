package waiters

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
		msg := c.Message
		if len(msg) > 160 {
			msg = msg[:160] + "…"
		}
		s += ": " + msg
	}
	return s
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
