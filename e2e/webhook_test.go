package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// flakyWebhook is an admission webhook on loopback that answers HTTP 500 to
// its first failures requests, the way cert-manager's webhook fails
// ("failed calling webhook \"webhook.cert-manager.io\"") right after the
// operator installed, and allows every request after that
// (cert-manager#3133, #7687; case B13).
type flakyWebhook struct {
	srv      *httptest.Server
	mu       sync.Mutex
	failures int
	seen     []string // "500 CREATE" / "200 UPDATE" per request
}

func newFlakyWebhook(t *testing.T, failures int) *flakyWebhook {
	t.Helper()
	w := &flakyWebhook{failures: failures}
	w.srv = httptest.NewTLSServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *flakyWebhook) serve(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(rw, "bad admission review", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	fail := w.failures > 0
	if fail {
		w.failures--
	}
	code := "200"
	if fail {
		code = "500"
	}
	w.seen = append(w.seen, code+" "+string(review.Request.Operation))
	w.mu.Unlock()
	if fail {
		http.Error(rw, "webhook not serving yet", http.StatusInternalServerError)
		return
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(review)
}

func (w *flakyWebhook) requests() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

// register makes the API server call the webhook for every create and
// update of a cert-manager Certificate (failurePolicy Fail, as
// cert-manager installs it).
func (w *flakyWebhook) register(t *testing.T, c *cluster) {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.srv.Certificate().Raw})
	url := w.srv.URL + "/validate"
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cert-manager-webhook"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "webhook.cert-manager.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"cert-manager.io"}, APIVersions: []string{"v1"}, Resources: []string{"certificates"},
				},
			}},
		}},
	}
	if _, err := c.clients.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook: %v", err)
	}
}
