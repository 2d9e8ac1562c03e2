package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/waiters"
)

// TestKuadrantStalledComponentReconciled: the real Kuadrant operator does
// not retry a reconcile that failed (policy-machinery v0.8.0 logs it and
// waits for the next event), so a Limitador create that fails once leaves
// Kuadrant Ready=False (LimitadorNotReady) until the Kuadrant CR changes;
// seen for 10 minutes in TestRecreatedObjectRecordedAfterKill, where a
// concurrent task's conflict cancelled the apply. Here a
// ValidatingAdmissionPolicy of the real kube-apiserver denies the create
// until Kuadrant reports the stall (Ready=False, or no Ready condition when
// the denied create was in its only reconcile: a failed task skips the
// status update, seen in CI under load); once the policy is gone, the install must
// still finish: after 45 s of the stall maasctl sets the operator's own
// reconcile trigger annotations on the Kuadrant CR (any other change of
// the CR but its generation starts no reconcile), the operator reconciles
// and creates the Limitador. The denial
// lasts until the CR has been quiet for 10 s, so that no change of its
// own starts the reconcile instead.
func TestKuadrantStalledComponentReconciled(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const name = "e2e-deny-limitador"
	denyAdmission(ctx, t, c, name, admissionv1.Create, "limitador.kuadrant.io", "limitadors")

	done := make(chan run, 1)
	go func() { done <- c.install(t, "--only", kuadrantSteps) }()

	kq := lobj{"kuadrant.io/v1beta1", "Kuadrant", "kuadrant-system", "kuadrant"}
	limitador := lobj{"limitador.kuadrant.io/v1alpha1", "Limitador", "kuadrant-system", "limitador"}
	// The denial stays until the Kuadrant CR has not changed for 10 s: its
	// own changes (finalizers, status) are events that start reconciles,
	// and one of them after the denial would create the Limitador.
	// Kuadrant reports the stall as Ready=False (LimitadorNotReady) when a
	// later reconcile, one without the Limitador task, wrote its status;
	// when the denied create was in the only reconcile, it reports
	// nothing (a failed task skips the status update). Either way the
	// API server must have denied a create first.
	var rv, reported string
	var since time.Time
	denied := false
	poll(t, ctx, "a Limitador create denied, then Kuadrant Ready=False (LimitadorNotReady) or without a Ready condition, and unchanged for 10 s", func() (bool, string) {
		if denied = denied || denials(ctx, t, c, name) > 0; !denied {
			return false, "no Limitador create denied yet"
		}
		u := c.live(t, kq)
		if u == nil {
			return false, "no Kuadrant CR"
		}
		if u.GetResourceVersion() != rv {
			rv, since = u.GetResourceVersion(), time.Now()
		}
		cond, _ := waiters.GetCondition(u, "Ready")
		stalled := cond.Status == "False" && cond.Reason == "LimitadorNotReady" || cond.Status == ""
		reported = cond.String()
		return stalled && time.Since(since) > 10*time.Second, cond.String()
	})
	allowAdmission(ctx, t, c, name)
	t.Logf("admission policy removed at %s (Kuadrant: %q); the Limitador exists: %v", time.Now().Format("15:04:05"), reported, c.live(t, limitador) != nil)

	var r run
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the install did not end")
	}
	wantExit(t, r, 0, "install after the Limitador create was denied once")
	p := progress(r, "platform/kuadrant")
	if !strings.Contains(p, "and Limitador kuadrant-system/limitador does not exist: the Kuadrant operator does not retry a failed reconcile, so maasctl sets its reconcile trigger on the Kuadrant CR (extensions.kuadrant.io/trigger-time)") {
		t.Errorf("platform/kuadrant did not report its reconcile request:\n%s", p)
	}
	if c.live(t, limitador) == nil {
		t.Errorf("no Limitador %s/%s after the install", limitador.ns, limitador.name)
	}
	u := c.live(t, kq)
	if a := u.GetAnnotations(); a["extensions.kuadrant.io/trigger-time"] == "" || a["extensions.kuadrant.io/trigger-reason"] != "maasctl: Limitador limitador missing" {
		t.Errorf("Kuadrant CR without maasctl's reconcile trigger: %v", a)
	}
	// The trigger is no drift: a re-run changes nothing.
	again := c.install(t, "--only", kuadrantSteps)
	wantExit(t, again, 0, "re-run")
	if sum := summary(t, again.events); len(sum.Done) != 0 || sum.Writes != 0 {
		t.Errorf("re-run after the reconcile trigger applied %v and wrote %d times; want nothing", sum.Done, sum.Writes)
	}
}

// denials is how many requests the API server of c denied by the
// ValidatingAdmissionPolicy policy (its metric
// apiserver_validating_admission_policy_check_total, k8s.io/apiserver
// pkg/admission/plugin/policy/validating/metrics, with
// enforcement_action="deny"), summed over its bindings and error types.
func denials(ctx context.Context, t *testing.T, c *cluster, policy string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := c.clients.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the API server's metrics: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_validating_admission_policy_check_total{") ||
			!strings.Contains(line, `enforcement_action="deny"`) || !strings.Contains(line, `policy="`+policy+`"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// denyAdmission makes the API server of c deny every op on resource of
// group (a ValidatingAdmissionPolicy named name that always fails, and its
// binding), until allowAdmission removes it.
func denyAdmission(ctx context.Context, t *testing.T, c *cluster, name string, op admissionv1.OperationType, group, resource string) {
	t.Helper()
	adm := c.clients.Kube.AdmissionregistrationV1()
	fail := admissionv1.Fail
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{op},
					Rule:       admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "e2e: " + name}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// allowAdmission removes what denyAdmission made under name.
func allowAdmission(ctx context.Context, t *testing.T, c *cluster, name string) {
	t.Helper()
	adm := c.clients.Kube.AdmissionregistrationV1()
	if err := adm.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := adm.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
