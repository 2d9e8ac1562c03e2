package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The simulated Authorino operator (Kuadrant/authorino-operator v0.2x,
// controllers/authorino_controller.go and controllers/constants.go).
// installationPreflightCheck runs first: for the listener and the OIDC
// server, TLS counts as enabled unless tls.enabled is false; an enabled TLS
// without certSecretRef, or naming a Secret that does not exist, sets
// Ready=False with reason TlsSecretNotProvided and stops before any Service
// or Deployment is created or updated (upstream uses that reason for both
// cases; TlsSecretNotFound is declared but unused). Then it creates the
// Services <name>-authorino-authorization (grpc 50051, http 5001),
// <name>-authorino-oidc (8083) and <name>-controller-metrics (8080) and the
// Deployment <name>; Ready=True reason Provisioned once the Deployment is
// ready, else Ready=False reason DeploymentNotReady. The Deployment's
// replicas follow spec.replicas only when the CR sets it.
type authorinoCtl struct {
	m *manager
	r *reconciler
}

const authorinoResourceLabel = "authorino-resource"

func registerAuthorino(m *manager) {
	a := &authorinoCtl{m: m}
	a.r = &reconciler{
		name: "authorino/authorino", delayKey: Authorino, primary: gvrAuthorino,
		// Upstream watches only Authorino CRs and the Deployments it owns
		// (SetupWithManager): a deleted Service or Secret starts no
		// reconcile, so an Authorino that reported Ready stays Ready with
		// its Service gone. A failed preflight returns an error, which
		// controller-runtime requeues with backoff; the Secret watch below
		// stands for that retry and wakes only Authorinos whose last
		// reconcile failed so.
		watches: []watch{
			{gvr: gvrSecret, mapFn: a.waitingForSecret},
			{gvr: gvrDeployment, mapFn: ownerKeys("Authorino")},
		},
		reconcile: a.reconcile,
	}
	a.r.watches = append(a.r.watches, m.operatorWatches(gvrAuthorino)...)
	m.add(a.r)
}

// waitingForSecret maps a Secret event to the Authorinos of its namespace
// whose last reconcile stopped at the TLS preflight (Ready=False
// TlsSecretNotProvided): the ones upstream would requeue.
func (a *authorinoCtl) waitingForSecret(u *unstructured.Unstructured) []key {
	var out []key
	for _, az := range a.m.list(gvrAuthorino, u.GetNamespace()) {
		if c := findCondition(az, "Ready"); c != nil && c["reason"] == "TlsSecretNotProvided" {
			out = append(out, keyOf(az))
		}
	}
	return out
}

func (a *authorinoCtl) reconcile(ctx context.Context, k key) error {
	m := a.m
	az := m.get(gvrAuthorino, k.Namespace, k.Name)
	if az == nil || az.GetDeletionTimestamp() != nil || !m.operatorRunning("authorinos.operator.authorino.kuadrant.io") {
		return nil
	}
	setReady := func(ok bool, reason, msg string) error {
		c := cond("Ready", ok, reason, msg)
		c.LastUpdatedTime = "now"
		return m.updateStatus(ctx, gvrAuthorino, az, map[string]any{"conditions": conditions(statusConditions(az), c)})
	}
	var tlsSecrets []string
	for _, server := range []struct{ field, name string }{{"listener", "listener"}, {"oidcServer", "oidc"}} {
		enabled, found, _ := unstructured.NestedBool(az.Object, "spec", server.field, "tls", "enabled")
		if found && !enabled {
			continue
		}
		secret := str(az, "spec", server.field, "tls", "certSecretRef", "name")
		if secret == "" {
			return setReady(false, "TlsSecretNotProvided", server.name+" secret with tls cert not provided")
		}
		if m.get(gvrSecret, k.Namespace, secret) == nil {
			return setReady(false, "TlsSecretNotProvided",
				fmt.Sprintf("%s secret name %s not found, err: secrets %q not found", server.name, secret, secret))
		}
		tlsSecrets = append(tlsSecrets, secret)
	}
	// Services and the Deployment are made at once; the Ready condition
	// waits for the Authorino delay (hold).
	ctx = m.hold(ctx, a.r, az, "provision")
	if err := a.ensureServices(ctx, az); err != nil {
		return setReady(false, "UnableToCreateServices", err.Error())
	}
	dep, err := a.ensureDeployment(ctx, az, tlsSecrets)
	if err != nil {
		return setReady(false, "UnableToCreateDeployment", err.Error())
	}
	if !deploymentAvailable(dep) {
		return setReady(false, "DeploymentNotReady", "Authorino Deployment resource not ready")
	}
	return setReady(true, "Provisioned", "")
}

func authorinoOwner(az *unstructured.Unstructured) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: "operator.authorino.kuadrant.io/v1beta1", Kind: "Authorino", Name: az.GetName(), UID: az.GetUID(),
		Controller: new(true),
	}}
}

func (a *authorinoCtl) ensureServices(ctx context.Context, az *unstructured.Unstructured) error {
	sel := map[string]string{authorinoResourceLabel: az.GetName(), "control-plane": "controller-manager"}
	port := func(name string, p int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: p, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(p)}
	}
	for _, s := range []struct {
		suffix string
		ports  []corev1.ServicePort
	}{
		{"-authorino-authorization", []corev1.ServicePort{port("grpc", 50051), port("http", 5001)}},
		{"-authorino-oidc", []corev1.ServicePort{port("http", 8083)}},
		{"-controller-metrics", []corev1.ServicePort{port("http", 8080)}},
	} {
		name := az.GetName() + s.suffix
		if a.m.get(gvrService, az.GetNamespace(), name) != nil {
			continue
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: az.GetNamespace(),
				Labels:          map[string]string{authorinoResourceLabel: az.GetName()},
				OwnerReferences: authorinoOwner(az),
			},
			Spec: corev1.ServiceSpec{Selector: sel, Ports: s.ports},
		}
		_, err := a.m.kube.CoreV1().Services(az.GetNamespace()).Create(ctx, svc, metaCreate)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create service %s/%s: %w", az.GetNamespace(), name, err)
		}
	}
	return nil
}

// ensureDeployment creates the Authorino Deployment, or updates its pod
// template when the TLS configuration changed (which rolls the pods, as the
// real operator's deployment update does).
func (a *authorinoCtl) ensureDeployment(ctx context.Context, az *unstructured.Unstructured, tlsSecrets []string) (*unstructured.Unstructured, error) {
	lbl := map[string]string{authorinoResourceLabel: az.GetName(), "control-plane": "controller-manager"}
	replicas, found, _ := unstructured.NestedInt64(az.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}
	pod := corev1.PodSpec{Containers: []corev1.Container{{
		Name: "authorino", Image: "registry.invalid/maasctl-sim/authorino:v0.2x",
		Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 50051}, {Name: "http", ContainerPort: 5001}},
	}}}
	for _, s := range tlsSecrets {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: s, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s}}})
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, corev1.VolumeMount{Name: s, MountPath: "/etc/ssl/" + s, ReadOnly: true})
	}
	b, _ := json.Marshal(pod)
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:8])
	deps := a.m.kube.AppsV1().Deployments(az.GetNamespace())
	live, err := deps.Get(ctx, az.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: az.GetName(), Namespace: az.GetNamespace(), Labels: lbl, OwnerReferences: authorinoOwner(az)},
			Spec: appsv1.DeploymentSpec{
				Replicas: new(int32(replicas)),
				Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: lbl, Annotations: map[string]string{"maasctl-sim/spec-hash": hash}},
					Spec:       pod,
				},
			},
		}
		if _, err := deps.Create(ctx, dep, metaCreate); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create deployment %s/%s: %w", az.GetNamespace(), az.GetName(), err)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get deployment %s/%s: %w", az.GetNamespace(), az.GetName(), err)
	}
	// The replicas of a live Deployment are restored only when the CR sets
	// spec.replicas (authorino-operator v0.21.0
	// pkg/reconcilers/authorino_reconciler.go adds its replicas mutator
	// only then): a Deployment scaled to 0 under a CR without it stays at 0.
	if live.Spec.Template.Annotations["maasctl-sim/spec-hash"] != hash || (found && *live.Spec.Replicas != int32(replicas)) {
		if found {
			live.Spec.Replicas = new(int32(replicas))
		}
		live.Spec.Template.Spec = pod
		if live.Spec.Template.Annotations == nil {
			live.Spec.Template.Annotations = map[string]string{}
		}
		live.Spec.Template.Annotations["maasctl-sim/spec-hash"] = hash
		if _, err := deps.Update(ctx, live, metaUpdate); err != nil {
			return nil, fmt.Errorf("update deployment %s/%s: %w", az.GetNamespace(), az.GetName(), err)
		}
		return nil, nil
	}
	return a.m.get(gvrDeployment, az.GetNamespace(), az.GetName()), nil
}
