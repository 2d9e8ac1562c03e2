package sim

import (
	"context"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
)

// certWebhookPolicy names the ValidatingAdmissionPolicy (and its binding)
// that stands for cert-manager's validating webhook.
const certWebhookPolicy = "sim-cert-manager-webhook"

// certWebhookRules are the admission checks of cert-manager v1.21.1's
// webhook on Certificates that a maasctl-rendered object can meet
// (cert-manager pkg/internal/apis/certmanager/validation/certificate.go,
// ValidateCertificateSpec; measured side by side with the real webhook,
// issue 18): a Certificate must name at least one subject (commonName, a
// literalSubject with a CN, or a SAN of any kind), an RSA key is 2048 to
// 8192 bits (size 0 or unset means 2048; RSA is the default algorithm), an
// ECDSA key 256, 384 or 521, and the duration (default 2160h, 90 days)
// must be longer than renewBefore. The real webhook refuses them at
// admission, before any controller sees the object; so does this policy.
// Its messages name the field and the rule; they are not the webhook's
// exact words.
var certWebhookRules = []admissionv1.Validation{
	{
		Expression: `(has(object.spec.commonName) && object.spec.commonName != '') ||
(has(object.spec.literalSubject) && object.spec.literalSubject.contains('CN=')) ||
(has(object.spec.dnsNames) && size(object.spec.dnsNames) > 0) ||
(has(object.spec.ipAddresses) && size(object.spec.ipAddresses) > 0) ||
(has(object.spec.uris) && size(object.spec.uris) > 0) ||
(has(object.spec.emailAddresses) && size(object.spec.emailAddresses) > 0) ||
(has(object.spec.otherNames) && size(object.spec.otherNames) > 0)`,
		Message: "spec: a Certificate needs at least one of commonName, literalSubject (with a CN), dnsNames, uris, ipAddresses, emailAddresses or otherNames (cert-manager webhook)",
		Reason:  ptrTo(metav1.StatusReasonInvalid),
	},
	{
		Expression: `!has(object.spec.privateKey) || !has(object.spec.privateKey.size) || object.spec.privateKey.size == 0 ||
((!has(object.spec.privateKey.algorithm) || object.spec.privateKey.algorithm == 'RSA') ? (object.spec.privateKey.size >= 2048 && object.spec.privateKey.size <= 8192) :
 (object.spec.privateKey.algorithm == 'ECDSA' ? object.spec.privateKey.size in [256, 384, 521] : true))`,
		Message: "spec.privateKey.size: an RSA key must have 2048 to 8192 bits and an ECDSA key 256, 384 or 521 (cert-manager webhook)",
		Reason:  ptrTo(metav1.StatusReasonInvalid),
	},
	{
		Expression: `!has(object.spec.renewBefore) ||
duration(has(object.spec.duration) ? object.spec.duration : '2160h') > duration(object.spec.renewBefore)`,
		Message: "spec.duration: the certificate duration (default 2160h) must be longer than spec.renewBefore (cert-manager webhook)",
		Reason:  ptrTo(metav1.StatusReasonInvalid),
	},
}

func ptrTo[T any](v T) *T { return &v }

// installCertWebhook creates the ValidatingAdmissionPolicy and binding of
// certWebhookRules (idempotent), then waits until the API server enforces
// them: a dry-run create of a Certificate without any subject is refused.
// When the Certificate CRD is not served yet the wait is skipped (nothing
// can be created that the policy would miss; it applies once it is).
func (m *manager) installCertWebhook(ctx context.Context) error {
	fail := admissionv1.Fail
	pol := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: certWebhookPolicy},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
						Rule: admissionv1.Rule{
							APIGroups: []string{"cert-manager.io"}, APIVersions: []string{"*"}, Resources: []string{"certificates"},
						},
					},
				}},
			},
			Validations: certWebhookRules,
		},
	}
	if _, err := m.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ValidatingAdmissionPolicy %s: %w", certWebhookPolicy, err)
	}
	bind := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: certWebhookPolicy},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        certWebhookPolicy,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	if _, err := m.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ValidatingAdmissionPolicyBinding %s: %w", certWebhookPolicy, err)
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "sim-webhook-probe", "namespace": "default"},
		"spec": map[string]any{
			"secretName": "sim-webhook-probe",
			"issuerRef":  map[string]any{"name": "probe", "kind": "ClusterIssuer"},
		},
	}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := m.dyn.Resource(gvrCertificate).Namespace("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil // the CRD is not served: nothing to enforce yet
		case apierrors.IsInvalid(err):
			return true, nil // refused by the policy
		}
		last = err
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the cert-manager webhook policy %s is not enforced after 20 s (last dry-run create: %v): %w", certWebhookPolicy, last, err)
	}
	return nil
}
