package sim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The simulated OpenShift service-ca operator (openshift/service-ca-operator,
// pkg/controller/servingcert). A Service annotated with
// service.beta.openshift.io/serving-cert-secret-name (or the older
// service.alpha.openshift.io form) gets a kubernetes.io/tls Secret of that
// name, signed by the service CA for <svc>.<ns>.svc and
// <svc>.<ns>.svc.cluster.local, owned by the Service and annotated with the
// originating Service. See also the OpenShift docs "Securing service traffic
// using service serving certificate secrets".
type serviceCA struct {
	m *manager
	r *reconciler
}

const (
	servingCertAnnotation      = "service.beta.openshift.io/serving-cert-secret-name"
	servingCertAlphaAnnotation = "service.alpha.openshift.io/serving-cert-secret-name"
)

func registerServiceCA(m *manager) {
	s := &serviceCA{m: m}
	s.r = &reconciler{
		name: "service-ca/serving-cert", delayKey: ServiceCA, primary: gvrService,
		watches:   []watch{{gvr: gvrSecret, mapFn: ownerKeys("Service")}},
		reconcile: s.reconcile,
	}
	m.add(s.r)
}

func (s *serviceCA) reconcile(ctx context.Context, k key) error {
	m := s.m
	svc := m.get(gvrService, k.Namespace, k.Name)
	if svc == nil || svc.GetDeletionTimestamp() != nil {
		return nil
	}
	name := svc.GetAnnotations()[servingCertAnnotation]
	if name == "" {
		name = svc.GetAnnotations()[servingCertAlphaAnnotation]
	}
	if name == "" {
		return nil
	}
	if existing := m.get(gvrSecret, k.Namespace, name); existing != nil {
		return nil
	}
	// The delay runs from when the annotation (with this secret name) is
	// first seen (case B12: the Secret appears some time after annotating).
	if m.delayed(s.r, svc, "annotation="+name) {
		return nil
	}
	key, err := newKey("RSA", 2048)
	if err != nil {
		return err
	}
	host := fmt.Sprintf("%s.%s.svc", k.Name, k.Namespace)
	kp, err := issue(key, host, []string{host, host + ".cluster.local"}, 2*365*24*time.Hour, m.ca.kp, m.ca.key)
	if err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: k.Namespace,
			Annotations: map[string]string{
				"service.beta.openshift.io/originating-service-name": k.Name,
				"service.beta.openshift.io/originating-service-uid":  string(svc.GetUID()),
				"service.beta.openshift.io/expiry":                   kp.Cert.NotAfter.UTC().Format(time.RFC3339),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: k.Name, UID: svc.GetUID(),
			}},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: kp.CertPEM, corev1.TLSPrivateKeyKey: kp.KeyPEM},
	}
	_, err = m.kube.CoreV1().Secrets(k.Namespace).Create(ctx, sec, metaCreate)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create serving cert secret %s/%s: %w", k.Namespace, name, err)
	}
	return nil
}

// ServiceCABundleConfigMap is the ConfigMap OpenShift publishes in every
// namespace with the service CA bundle under ServiceCABundleKey (the
// kube-controller-manager's service-CA publisher creates it, annotated
// service.beta.openshift.io/inject-cabundle, and the service-ca operator's
// CA bundle injector writes the bundle; OpenShift docs "Securing service
// traffic using service serving certificate secrets"). A client of a
// service-CA-signed Service trusts the bundle only when it is given the
// file: Authorino's calls to maas-api need the installer to mount it.
const (
	ServiceCABundleConfigMap = "openshift-service-ca.crt"
	ServiceCABundleKey       = "service-ca.crt"
	injectCABundleAnnotation = "service.beta.openshift.io/inject-cabundle"
)

// registerServiceCABundle runs the simulated publisher of
// ServiceCABundleConfigMap: every namespace gets it, holding the
// simulated service CA followed by Options.ServiceCABundle; a changed or
// deleted one is written again.
func registerServiceCABundle(m *manager) {
	s := &serviceCA{m: m}
	s.r = &reconciler{
		name: "service-ca/cabundle-publisher", delayKey: ServiceCA, primary: gvrNamespace,
		watches: []watch{{gvr: gvrConfigMap, mapFn: func(u *unstructured.Unstructured) []key {
			if u.GetName() != ServiceCABundleConfigMap {
				return nil
			}
			return []key{{Name: u.GetNamespace()}}
		}}},
		reconcile: s.publishBundle,
	}
	m.add(s.r)
}

// bundle is the PEM ServiceCABundleConfigMap holds.
func (m *manager) bundle() string {
	return string(m.ca.kp.CertPEM) + string(m.opts.ServiceCABundle)
}

func (s *serviceCA) publishBundle(ctx context.Context, k key) error {
	m := s.m
	ns := m.get(gvrNamespace, "", k.Name)
	if ns == nil || ns.GetDeletionTimestamp() != nil {
		return nil
	}
	want := m.bundle()
	cm := m.get(gvrConfigMap, k.Name, ServiceCABundleConfigMap)
	if cm == nil {
		obj := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: ServiceCABundleConfigMap, Namespace: k.Name,
				Annotations: map[string]string{injectCABundleAnnotation: "true"}},
			Data: map[string]string{ServiceCABundleKey: want},
		}
		_, err := m.kube.CoreV1().ConfigMaps(k.Name).Create(ctx, obj, metaCreate)
		if err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
			// Forbidden: the namespace is being deleted.
			return fmt.Errorf("publish %s/%s: %w", k.Name, ServiceCABundleConfigMap, err)
		}
		return nil
	}
	if got, _, _ := unstructured.NestedString(cm.Object, "data", ServiceCABundleKey); got == want {
		return nil
	}
	u := cm.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, want, "data", ServiceCABundleKey); err != nil {
		return err
	}
	_, err := m.dyn.Resource(gvrConfigMap).Namespace(k.Name).Update(ctx, u, metaUpdate)
	return err
}
