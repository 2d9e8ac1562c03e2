package sim

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The cert-manager controller creates its CertificateRequests with its own
// in-cluster credentials, the ServiceAccount cert-manager/cert-manager of
// the cert-manager Operator for Red Hat OpenShift's operand, and the
// webhook's identity plugin
// (internal/webhook/admission/certificaterequest/identity/certificaterequest_identity.go
// in cert-manager v1.21.1) overwrites spec.username, uid, groups and extra
// with the requester's user info on CREATE. So the simulator, too, creates
// its requests as that ServiceAccount (a TokenRequest token, so the API
// server authenticates it and RBAC authorizes it), and the identity is
// written by admission (certmanager_webhook.go), never by the simulator.
// The real controller's token is bound to its pod, so its extra also holds
// the pod's and node's name and uid; no cert-manager pod runs here, so the
// simulated request's extra holds the token's credential id only.

// certManagerControllerRole names the ClusterRole and binding that grant
// the simulated controller's ServiceAccount what the create of a
// CertificateRequest needs (cert-manager's cert-manager-controller-certificates
// ClusterRole grants it, among much else).
const certManagerControllerRole = "sim-cert-manager-controller"

// controllerTokenTTL is the lifetime asked for the ServiceAccount token; it
// is renewed when less than half of it is left.
const controllerTokenTTL = time.Hour

// controllerClient returns a dynamic client authenticated as cert-manager's
// controller ServiceAccount, creating the namespace, ServiceAccount and RBAC
// on first use and renewing the token when half of its life has passed.
func (c *certManager) controllerClient(ctx context.Context) (dynamic.Interface, error) {
	c.saMu.Lock()
	defer c.saMu.Unlock()
	if c.saDyn != nil && time.Now().Before(c.saRenew) {
		return c.saDyn, nil
	}
	if err := c.ensureControllerAccount(ctx); err != nil {
		return nil, err
	}
	ttl := int64(controllerTokenTTL / time.Second)
	tr, err := c.m.kube.CoreV1().ServiceAccounts(clusterResourceNamespace).CreateToken(ctx, certManagerSA,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for ServiceAccount %s/%s: %w", clusterResourceNamespace, certManagerSA, err)
	}
	cfg := rest.AnonymousClientConfig(c.m.cfg)
	cfg.BearerToken = tr.Status.Token
	cfg.UserAgent = "maasctl-sim/cert-manager"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller client: %w", err)
	}
	// The RBAC authorizer sees a new binding from its informer: wait until
	// it allows the create, so the first request is not refused.
	review := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
		Group: "cert-manager.io", Resource: "certificaterequests", Verb: "create",
	}}}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.Allowed, nil
	}); err != nil {
		return nil, fmt.Errorf("ServiceAccount %s/%s may not create certificaterequests: %w", clusterResourceNamespace, certManagerSA, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller client: %w", err)
	}
	c.saDyn, c.saRenew = dyn, time.Now().Add(controllerTokenTTL/2)
	return dyn, nil
}

// ensureControllerAccount creates the operand namespace, the controller's
// ServiceAccount and its RBAC when missing.
func (c *certManager) ensureControllerAccount(ctx context.Context) error {
	k := c.m.kube
	if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clusterResourceNamespace}}, metaCreate); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", clusterResourceNamespace, err)
	}
	if _, err := k.CoreV1().ServiceAccounts(clusterResourceNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: certManagerSA, Namespace: clusterResourceNamespace},
	}, metaCreate); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s: %w", clusterResourceNamespace, certManagerSA, err)
	}
	if _, err := k.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: certManagerControllerRole},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"},
			Verbs: []string{"create", "delete", "get", "list", "watch"},
		}, {
			// blockOwnerDeletion on the request's owner reference needs it
			// where OwnerReferencesPermissionEnforcement runs (OpenShift).
			APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificates/finalizers"},
			Verbs: []string{"update"},
		}},
	}, metaCreate); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", certManagerControllerRole, err)
	}
	if _, err := k.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: certManagerControllerRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: certManagerControllerRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: certManagerSA, Namespace: clusterResourceNamespace}},
	}, metaCreate); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", certManagerControllerRole, err)
	}
	return nil
}

// createRequest creates CertificateRequest cr as the controller's
// ServiceAccount (an existing one of that name is returned as it is).
func (c *certManager) createRequest(ctx context.Context, cr *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	m := c.m
	dyn, err := c.controllerClient(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.waitCreateWindow(ctx, gvrCertificateRequest); err != nil {
		return nil, err
	}
	rc := dyn.Resource(gvrCertificateRequest).Namespace(cr.GetNamespace())
	out, err := rc.Create(ctx, cr, metaCreate)
	if apierrors.IsAlreadyExists(err) {
		return m.dyn.Resource(gvrCertificateRequest).Namespace(cr.GetNamespace()).Get(ctx, cr.GetName(), metaGet)
	}
	if err != nil {
		return nil, fmt.Errorf("create certificaterequests %s: %w", keyOf(cr), err)
	}
	m.log.Info("created", zap.String("resource", gvrCertificateRequest.Resource), zap.String("namespace", out.GetNamespace()), zap.String("name", out.GetName()))
	return out, nil
}
