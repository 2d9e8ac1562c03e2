package sim

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The simulated Leader Worker Set operator (openshift/lws-operator,
// release-4.22, CRD ../shared/crds/lws-operator). LeaderWorkerSetOperator
// "cluster" with managementState Managed makes the operator deploy the LWS
// controller (Deployment lws-controller-manager in openshift-lws-operator)
// and report the OpenShift operator conditions of library-go
// (Available, Progressing, Degraded; reason AsExpected when healthy).
type lwsCtl struct {
	m *manager
	r *reconciler
}

const (
	lwsNamespace  = "openshift-lws-operator"
	lwsController = "lws-controller-manager"
)

func registerLWS(m *manager) {
	l := &lwsCtl{m: m}
	l.r = &reconciler{
		name: "lws/leaderworkersetoperator", delayKey: LWS, primary: gvrLWSOperator,
		watches: []watch{{gvr: gvrDeployment, mapFn: func(u *unstructured.Unstructured) []key {
			if u.GetNamespace() == lwsNamespace {
				return []key{{Name: "cluster"}}
			}
			return nil
		}}, {gvr: gvrNamespace, mapFn: m.allOf(gvrLWSOperator, false)}},
		reconcile: l.reconcile,
	}
	l.r.watches = append(l.r.watches, m.operatorWatches(gvrLWSOperator)...)
	m.add(l.r)
}

func (l *lwsCtl) reconcile(ctx context.Context, k key) error {
	m := l.m
	op := m.get(gvrLWSOperator, "", k.Name)
	if op == nil || op.GetDeletionTimestamp() != nil || !m.operatorRunning("leaderworkersetoperators.operator.openshift.io") {
		return nil
	}
	// The controller Deployment is made at once; the status waits for the
	// LWS delay (hold).
	ctx = m.hold(ctx, l.r, op, "manage")
	gen := op.GetGeneration()
	old := mapOf(op, "status")
	status := map[string]any{"observedGeneration": gen}
	if v, ok := old["latestAvailableRevision"]; ok {
		status["latestAvailableRevision"] = v
	}
	state := str(op, "spec", "managementState")
	if state != "Managed" {
		status["conditions"] = conditions(old["conditions"],
			cond("Available", false, "Unmanaged", fmt.Sprintf("managementState is %q", state)),
			cond("Progressing", false, "AsExpected", ""),
			cond("Degraded", false, "AsExpected", ""))
		return m.updateStatus(ctx, gvrLWSOperator, op, status)
	}
	if m.get(gvrNamespace, "", lwsNamespace) == nil {
		status["conditions"] = conditions(old["conditions"],
			cond("Available", false, "NamespaceMissing", "namespace "+lwsNamespace+" does not exist"),
			cond("Progressing", true, "Deploying", ""),
			cond("Degraded", true, "NamespaceMissing", "namespace "+lwsNamespace+" does not exist"))
		return m.updateStatus(ctx, gvrLWSOperator, op, status)
	}
	dep := m.get(gvrDeployment, lwsNamespace, lwsController)
	if dep == nil {
		lbl := map[string]string{"control-plane": "controller-manager", "app.kubernetes.io/name": "lws"}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: lwsController, Namespace: lwsNamespace, Labels: lbl},
			Spec: appsv1.DeploymentSpec{
				Replicas: new(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: lbl},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "manager", Image: "registry.invalid/maasctl-sim/lws:v0.7",
					}}},
				},
			},
		}
		_, err := m.kube.AppsV1().Deployments(lwsNamespace).Create(ctx, d, metaCreate)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s/%s: %w", lwsNamespace, lwsController, err)
		}
	}
	if !deploymentAvailable(dep) {
		status["readyReplicas"] = int64(0)
		status["conditions"] = conditions(old["conditions"],
			cond("Available", false, "DeploymentUnavailable", "deployment "+lwsController+" is not available"),
			cond("Progressing", true, "Deploying", "waiting for deployment "+lwsController),
			cond("Degraded", false, "AsExpected", ""))
		return m.updateStatus(ctx, gvrLWSOperator, op, status)
	}
	status["readyReplicas"] = int64(1)
	status["conditions"] = conditions(old["conditions"],
		cond("Available", true, "AsExpected", ""),
		cond("Progressing", false, "AsExpected", ""),
		cond("Degraded", false, "AsExpected", ""))
	return m.updateStatus(ctx, gvrLWSOperator, op, status)
}
