package dataplane

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/maasctl/maasctl/inventory"
)

// TestSelectSubscription: maas-api's /internal/v1/subscriptions/select as
// the gateway AuthPolicy's subscription-info call reads it, on the healthy
// fixture (subscription llama-coder-default: owner group
// system:authenticated, model llm-coding-assistant/qwen35-9b-coder).
func TestSelectSubscription(t *testing.T) {
	s := &Server{o: Options{Reader: healthy(t)}, inv: inventory.Default()}
	for _, tc := range []struct {
		name, body        string
		wantName, wantErr string
	}{
		{"the caller's only subscription", `{"username":"alice","groups":["system:authenticated"],"requestedModel":"llm-coding-assistant/qwen35-9b-coder"}`, "llama-coder-default", ""},
		{"the key's bound subscription", `{"username":"alice","groups":["system:authenticated"],"requestedSubscription":"llama-coder-default"}`, "llama-coder-default", ""},
		{"not an owner", `{"username":"mallory","groups":["outsiders"],"requestedSubscription":"llama-coder-default"}`, "", "access_denied"},
		{"no subscription of the caller's", `{"username":"mallory","groups":["outsiders"]}`, "", "not_found"},
		{"unknown subscription", `{"username":"alice","groups":["system:authenticated"],"requestedSubscription":"gold"}`, "", "not_found"},
		{"model outside the subscription", `{"username":"alice","groups":["system:authenticated"],"requestedSubscription":"llama-coder-default","requestedModel":"other/model"}`, "", "not_found"},
		{"no username", `{"groups":["system:authenticated"]}`, "", "bad_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			s.selectSubscription(w, httptest.NewRequest(http.MethodPost, "/internal/v1/subscriptions/select", strings.NewReader(tc.body)))
			if w.Code != http.StatusOK {
				t.Fatalf("status %d, want 200 (maas-api answers every verdict with 200)", w.Code)
			}
			var got selectResponse
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.wantName || got.Error != tc.wantErr {
				t.Errorf("got name %q error %q (%s), want name %q error %q", got.Name, got.Error, got.Message, tc.wantName, tc.wantErr)
			}
			if tc.wantName != "" && (got.Namespace != "models-as-a-service" || got.Phase != "Active") {
				t.Errorf("selected %+v, want namespace models-as-a-service phase Active (the subscription-valid rule reads both)", got)
			}
		})
	}
}
