package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// TestServiceProxy: a name the test routed is reached over https through
// the proxy, with a certificate of the ServiceCA that a client trusting
// only that CA accepts; an unrouted name gets 502 and reaches nothing;
// a plain http:// request gets 405; a route to a non-loopback target is
// refused.
func TestServiceProxy(t *testing.T) {
	p, err := startServiceProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ca, err := newServiceCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const name = "maas-api.redhat-ai-gateway-infra.svc.cluster.local"
	srv := serviceServer(t, ca, name, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from "+r.Host)
	})
	if err := p.Route(name+":8443", srv.Listener.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := p.Route("elsewhere.svc:443", "10.0.0.1:443"); err == nil {
		t.Error("a route to 10.0.0.1:443 was accepted; want only loopback targets")
	}

	client := proxiedClient(t, p, ca.PEM())

	resp, err := client.Get("https://" + name + ":8443/x")
	if err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if want := "hello from " + name + ":8443"; string(b) != want {
		t.Errorf("answer %q, want %q", b, want)
	}

	if _, err := client.Get("https://unrouted.example.svc.cluster.local:8443/"); err == nil || !strings.Contains(err.Error(), "Bad Gateway") {
		t.Errorf("GET of an unrouted name: %v, want the proxy's 502 Bad Gateway", err)
	}
	plain, err := client.Get("http://" + name + ":8443/")
	if err != nil {
		t.Fatal(err)
	}
	_ = plain.Body.Close()
	if plain.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("plain http:// through the proxy: %d, want 405", plain.StatusCode)
	}
}

// TestServiceRoutesFromAnotherProcess: what `make demo`'s data-path
// stand-in does from its own process. A route recorded with
// AddServiceRoute in the state folder reaches its server through the
// proxy of the operators run there; a certificate issued by the CA loaded
// with LoadServiceCA is trusted by a client of the original CA; a
// non-loopback target is refused before anything is written.
func TestServiceRoutesFromAnotherProcess(t *testing.T) {
	state := t.TempDir()
	p, err := startServiceProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.routesFile = serviceRoutesFile(state)
	orig, err := newServiceCA(state)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadServiceCA(state)
	if err != nil {
		t.Fatal(err)
	}
	const name = "maas-api.redhat-ai-gateway-infra.svc.cluster.local"
	srv := serviceServer(t, ca, name, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	if err := AddServiceRoute(state, "other.svc:443", "10.0.0.1:443"); err == nil {
		t.Error("AddServiceRoute accepted the target 10.0.0.1:443; want only loopback")
	}
	if err := AddServiceRoute(state, name+":8443", srv.Listener.Addr().String()); err != nil {
		t.Fatal(err)
	}
	resp, err := proxiedClient(t, p, orig.PEM()).Get("https://" + name + ":8443/")
	if err != nil {
		t.Fatalf("GET through the proxy by a route from the file: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(b) != "ok" {
		t.Errorf("answer %q, want ok", b)
	}
}

// proxiedClient is an https client that goes through p and trusts only
// the CA caPEM.
func proxiedClient(t *testing.T, p *ServiceProxy, caPEM []byte) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the CA's PEM does not parse")
	}
	proxyURL, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(p.Port()))
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// serviceServer starts an https server on loopback for Service name, with
// a certificate ca issued for it; it stops with the test.
func serviceServer(t *testing.T, ca *ServiceCA, name string, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	cert, err := ca.Issue(name)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
