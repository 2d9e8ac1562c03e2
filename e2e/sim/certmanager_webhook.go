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
	"k8s.io/client-go/util/retry"
)

// certWebhookPolicy names the ValidatingAdmissionPolicy and the
// MutatingAdmissionPolicy (and their bindings) that stand for
// cert-manager's webhook.
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
// exact words. The rules on CertificateRequests are the identity plugin's
// (see certIdentityPatch): created with the requester's identity,
// unchanged by any update.
var certWebhookRules = []admissionv1.Validation{
	{
		Expression: `request.resource.resource != 'certificates' ||
(has(object.spec.commonName) && object.spec.commonName != '') ||
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
		Expression: `request.resource.resource != 'certificates' ||
!has(object.spec.privateKey) || !has(object.spec.privateKey.size) || object.spec.privateKey.size == 0 ||
((!has(object.spec.privateKey.algorithm) || object.spec.privateKey.algorithm == 'RSA') ? (object.spec.privateKey.size >= 2048 && object.spec.privateKey.size <= 8192) :
 (object.spec.privateKey.algorithm == 'ECDSA' ? object.spec.privateKey.size in [256, 384, 521] : true))`,
		Message: "spec.privateKey.size: an RSA key must have 2048 to 8192 bits and an ECDSA key 256, 384 or 521 (cert-manager webhook)",
		Reason:  ptrTo(metav1.StatusReasonInvalid),
	},
	{
		Expression: `request.resource.resource != 'certificates' ||
!has(object.spec.renewBefore) ||
duration(has(object.spec.duration) ? object.spec.duration : '2160h') > duration(object.spec.renewBefore)`,
		Message: "spec.duration: the certificate duration (default 2160h) must be longer than spec.renewBefore (cert-manager webhook)",
		Reason:  ptrTo(metav1.StatusReasonInvalid),
	},
	// certificaterequest_identity.go's validateCreate and validateUpdate: on
	// CREATE a CertificateRequest's identity is the requester's (the
	// mutation below has written it), on UPDATE it never changes.
	{
		Expression: `request.resource.resource != 'certificaterequests' ||
(request.operation == 'CREATE' ?
  variables.username == request.userInfo.username && variables.uid == variables.reqUID :
  variables.username == (has(oldObject.spec.username) ? oldObject.spec.username : '') &&
  variables.uid == (has(oldObject.spec.uid) ? oldObject.spec.uid : ''))`,
		MessageExpression: `request.operation == 'CREATE' ?
'spec.username, spec.uid: a CertificateRequest records the identity of the user who creates it (cert-manager webhook)' :
'spec.username, spec.uid: the identity of a CertificateRequest cannot change once set (cert-manager webhook)'`,
		Reason: ptrTo(metav1.StatusReasonInvalid),
	},
	{
		Expression: `request.resource.resource != 'certificaterequests' ||
(request.operation == 'CREATE' ?
  size(variables.groups) == size(variables.reqGroups) && variables.groups.all(g, g in variables.reqGroups) && variables.reqGroups.all(g, g in variables.groups) :
  size(variables.groups) == size(variables.oldGroups) && variables.groups.all(g, g in variables.oldGroups) && variables.oldGroups.all(g, g in variables.groups))`,
		MessageExpression: `request.operation == 'CREATE' ?
'spec.groups: a CertificateRequest records the groups of the user who creates it (cert-manager webhook)' :
'spec.groups: the groups of a CertificateRequest cannot change once set (cert-manager webhook)'`,
		Reason: ptrTo(metav1.StatusReasonInvalid),
	},
	{
		Expression: `request.resource.resource != 'certificaterequests' ||
(request.operation == 'CREATE' ?
  size(variables.extra) == size(variables.reqExtra) && variables.extra.all(k, k in variables.reqExtra &&
    size(variables.extra[k]) == size(variables.reqExtra[k]) && variables.extra[k].all(v, v in variables.reqExtra[k])) :
  variables.extra == variables.oldExtra)`,
		MessageExpression: `request.operation == 'CREATE' ?
'spec.extra: a CertificateRequest records the extra user info of the user who creates it (cert-manager webhook)' :
'spec.extra: the extra user info of a CertificateRequest cannot change once set (cert-manager webhook)'`,
		Reason: ptrTo(metav1.StatusReasonInvalid),
	},
}

func ptrTo[T any](v T) *T { return &v }

// certWebhookVariables are the identity fields the CertificateRequest
// rules compare, each defaulted where the object or the user info leaves
// it out.
var certWebhookVariables = []admissionv1.Variable{
	{Name: "username", Expression: `has(object.spec.username) ? object.spec.username : ''`},
	{Name: "uid", Expression: `has(object.spec.uid) ? object.spec.uid : ''`},
	{Name: "groups", Expression: `has(object.spec.groups) ? dyn(object.spec.groups) : dyn([])`},
	{Name: "extra", Expression: `has(object.spec.extra) ? dyn(object.spec.extra) : dyn({})`},
	{Name: "reqUID", Expression: `has(request.userInfo.uid) ? request.userInfo.uid : ''`},
	{Name: "reqGroups", Expression: `has(request.userInfo.groups) ? dyn(request.userInfo.groups) : dyn([])`},
	{Name: "reqExtra", Expression: `has(request.userInfo.extra) ? dyn(request.userInfo.extra) : dyn({})`},
	{Name: "oldGroups", Expression: `oldObject != null && has(oldObject.spec.groups) ? dyn(oldObject.spec.groups) : dyn([])`},
	{Name: "oldExtra", Expression: `oldObject != null && has(oldObject.spec.extra) ? dyn(oldObject.spec.extra) : dyn({})`},
}

// certIdentityPatch is the identity plugin's Mutate
// (internal/webhook/admission/certificaterequest/identity/certificaterequest_identity.go):
// on CREATE of a CertificateRequest, spec.uid, username and groups are set
// to the requester's, and spec.extra is replaced by the requester's extra
// (removed when that is empty), whatever the creator wrote. The user
// info's lists are copied element by element (.map(v, v)): kube-apiserver
// 1.37 refuses to marshal them as patch values directly ("type conversion
// error from 'list(dyn)'"), and extra is written key by key for the same
// reason.
const certIdentityPatch = `[
  JSONPatch{op: "add", path: "/spec/username", value: request.userInfo.username},
  JSONPatch{op: "add", path: "/spec/uid", value: has(request.userInfo.uid) ? request.userInfo.uid : ""},
  JSONPatch{op: "add", path: "/spec/groups", value: has(request.userInfo.groups) ? request.userInfo.groups.map(g, g) : []}
] +
(has(object.spec.extra) ? [JSONPatch{op: "remove", path: "/spec/extra"}] : []) +
(has(request.userInfo.extra) && size(request.userInfo.extra) > 0 ?
  [JSONPatch{op: "add", path: "/spec/extra", value: {}}] +
  request.userInfo.extra.map(k, JSONPatch{op: "add", path: "/spec/extra/" + jsonpatch.escapeKey(k), value: request.userInfo.extra[k].map(v, v)}) : [])`

// installCertWebhook creates the admission policies that stand for
// cert-manager's webhook (idempotent; an existing one is brought up to
// date): the ValidatingAdmissionPolicy of certWebhookRules on Certificates
// and CertificateRequests, and the MutatingAdmissionPolicy that writes a
// CertificateRequest's identity. It then waits until the API server
// enforces both: a dry-run create of a Certificate without any subject is
// refused, and a dry-run create of a CertificateRequest comes back with
// the creator's username. When the kinds are not served yet the wait is
// skipped (nothing can be created that the policies would miss; they apply
// once they are).
func (m *manager) installCertWebhook(ctx context.Context) error {
	fail := admissionv1.Fail
	match := func(ops ...admissionv1.OperationType) *admissionv1.MatchResources {
		return &admissionv1.MatchResources{
			ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: ops,
					Rule: admissionv1.Rule{
						APIGroups: []string{"cert-manager.io"}, APIVersions: []string{"*"}, Resources: []string{"certificates", "certificaterequests"},
					},
				},
			}},
		}
	}
	adm := m.kube.AdmissionregistrationV1()
	vap := admissionv1.ValidatingAdmissionPolicySpec{
		FailurePolicy:    &fail,
		MatchConstraints: match(admissionv1.Create, admissionv1.Update),
		Variables:        certWebhookVariables,
		Validations:      certWebhookRules,
	}
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: certWebhookPolicy}, Spec: vap}, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			live, err := adm.ValidatingAdmissionPolicies().Get(ctx, certWebhookPolicy, metav1.GetOptions{})
			if err != nil {
				return err
			}
			live.Spec = vap
			_, err = adm.ValidatingAdmissionPolicies().Update(ctx, live, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("update ValidatingAdmissionPolicy %s: %w", certWebhookPolicy, err)
		}
	} else if err != nil {
		return fmt.Errorf("create ValidatingAdmissionPolicy %s: %w", certWebhookPolicy, err)
	}
	bind := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: certWebhookPolicy},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        certWebhookPolicy,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ValidatingAdmissionPolicyBinding %s: %w", certWebhookPolicy, err)
	}
	mapSpec := admissionv1.MutatingAdmissionPolicySpec{
		FailurePolicy: &fail,
		MatchConstraints: &admissionv1.MatchResources{
			ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule: admissionv1.Rule{
						APIGroups: []string{"cert-manager.io"}, APIVersions: []string{"*"}, Resources: []string{"certificaterequests"},
					},
				},
			}},
		},
		Mutations: []admissionv1.Mutation{{
			PatchType: admissionv1.PatchTypeJSONPatch,
			JSONPatch: &admissionv1.JSONPatch{Expression: certIdentityPatch},
		}},
		ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
	}
	if _, err := adm.MutatingAdmissionPolicies().Create(ctx, &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: certWebhookPolicy}, Spec: mapSpec}, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			live, err := adm.MutatingAdmissionPolicies().Get(ctx, certWebhookPolicy, metav1.GetOptions{})
			if err != nil {
				return err
			}
			live.Spec = mapSpec
			_, err = adm.MutatingAdmissionPolicies().Update(ctx, live, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("update MutatingAdmissionPolicy %s: %w", certWebhookPolicy, err)
		}
	} else if err != nil {
		return fmt.Errorf("create MutatingAdmissionPolicy %s: %w", certWebhookPolicy, err)
	}
	if _, err := adm.MutatingAdmissionPolicyBindings().Create(ctx, &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: certWebhookPolicy},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: certWebhookPolicy},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create MutatingAdmissionPolicyBinding %s: %w", certWebhookPolicy, err)
	}

	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "sim-webhook-probe", "namespace": "default"},
		"spec": map[string]any{
			"secretName": "sim-webhook-probe",
			"issuerRef":  map[string]any{"name": "probe", "kind": "ClusterIssuer"},
		},
	}}
	crProbe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "CertificateRequest",
		"metadata": map[string]any{"name": "sim-webhook-probe", "namespace": "default"},
		"spec": map[string]any{
			"request":   "cHJvYmU=",
			"issuerRef": map[string]any{"name": "probe", "kind": "ClusterIssuer"},
		},
	}}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := m.dyn.Resource(gvrCertificate).Namespace("default").Create(ctx, probe, dry)
		if ctx.Err() != nil {
			return false, nil // keep the last answer of the API server
		}
		switch {
		case apierrors.IsNotFound(err): // the CRD is not served: nothing to enforce yet
		case apierrors.IsInvalid(err): // refused by the policy
		default:
			last = fmt.Errorf("certificate: %v", err)
			return false, nil
		}
		out, err := m.dyn.Resource(gvrCertificateRequest).Namespace("default").Create(ctx, crProbe, dry)
		if ctx.Err() != nil {
			return false, nil
		}
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			last = fmt.Errorf("certificaterequest: %w", err)
			return false, nil
		case str(out, "spec", "username") == "":
			last = fmt.Errorf("certificaterequest: no spec.username written")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the cert-manager webhook policies %s are not enforced after 20 s (last dry-run create: %v): %w", certWebhookPolicy, last, err)
	}
	return nil
}
