package testenv

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ServiceProxy is how a real component in a network namespace of its own
// reaches a cluster Service by its DNS name: an HTTP CONNECT proxy on the
// host's loopback, forwarded into the component's namespace (netns-run
// --forward) and named by its HTTPS_PROXY. A namespace made by netns-run
// has no DNS and no route out; the proxy resolves only the names a test
// registered (RouteService), each to a server on the host's loopback, and
// refuses every other name, so nothing a component dials leaves loopback.
// It stands in for cluster DNS and kube-proxy, which the local control
// plane does not run. Authorino's HTTP metadata and authorization calls
// (github.com/kuadrant/authorino pkg/http: an http.Client on Go's default
// transport, which honours HTTPS_PROXY) go through it.
//
// Only CONNECT is served (the tunnel of an https:// URL); a plain http://
// URL through the proxy gets 405.
type ServiceProxy struct {
	l    net.Listener
	port int

	mu     sync.Mutex
	routes map[string]string // "name:port" → "127.0.0.1:port"
	// routesFile, when set, holds routes other processes registered
	// (AddServiceRoute); it is read when a name has no route in memory.
	routesFile string
	conns      map[net.Conn]struct{}
	closed     bool
}

// startServiceProxy listens on a free port of 127.0.0.1.
func startServiceProxy() (*ServiceProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("service proxy: listen: %w", err)
	}
	p := &ServiceProxy{l: l, port: l.Addr().(*net.TCPAddr).Port, routes: map[string]string{}, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Port is the proxy's port on 127.0.0.1 (the same inside the namespaces it
// is forwarded into).
func (p *ServiceProxy) Port() int { return p.port }

// Route makes hostPort ("maas-api.ns.svc.cluster.local:8443") reach
// target, a "127.0.0.1:PORT" on the host; a later Route of the same name
// replaces it.
func (p *ServiceProxy) Route(hostPort, target string) error {
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		return fmt.Errorf("service proxy: route %q: want name:port: %w", hostPort, err)
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("service proxy: route %s to %q: the target must be a loopback address and port", hostPort, target)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[strings.ToLower(hostPort)] = target
	return nil
}

func (p *ServiceProxy) target(hostPort string) (string, bool) {
	p.mu.Lock()
	t, ok := p.routes[strings.ToLower(hostPort)]
	file := p.routesFile
	p.mu.Unlock()
	if ok || file == "" {
		return t, ok
	}
	routes, err := readServiceRoutes(file)
	if err != nil {
		return "", false
	}
	t, ok = routes[strings.ToLower(hostPort)]
	return t, ok
}

// serviceRoutesFile is where AddServiceRoute records routes for the
// ServiceProxy of the operators run on the control plane of stateDir.
func serviceRoutesFile(stateDir string) string { return filepath.Join(stateDir, "service-routes") }

// AddServiceRoute registers, from another process, a route with the
// ServiceProxy of the real operators run for the control plane of stateDir
// (`testenv-ctl operators`): hostPort ("name:port") reaches target, a
// loopback "127.0.0.1:PORT". A later route of the same name wins.
func AddServiceRoute(stateDir, hostPort, target string) error {
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		return fmt.Errorf("service route %q: want name:port: %w", hostPort, err)
	}
	if host, _, err := net.SplitHostPort(target); err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("service route %s to %q: the target must be a loopback address and port", hostPort, target)
	}
	f, err := os.OpenFile(serviceRoutesFile(stateDir), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "%s %s\n", strings.ToLower(hostPort), target); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// readServiceRoutes reads the lines "name:port target" of file; a later
// line for a name replaces an earlier one, and a target that is not
// loopback is ignored.
func readServiceRoutes(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if host, _, err := net.SplitHostPort(f[1]); err == nil && net.ParseIP(host).IsLoopback() {
			out[f[0]] = f[1]
		}
	}
	return out, nil
}

// Close stops the proxy and its open tunnels.
func (p *ServiceProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	return p.l.Close()
}

func (p *ServiceProxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && p.closed {
		return false
	}
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *ServiceProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

// handle serves one client connection: one CONNECT request, then the
// tunnel.
func (p *ServiceProxy) handle(c net.Conn) {
	if !p.track(c, true) {
		_ = c.Close()
		return
	}
	defer p.track(c, false)
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	reply := func(code int, msg string) {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", code, http.StatusText(code), len(msg), msg)
	}
	if req.Method != http.MethodConnect {
		reply(http.StatusMethodNotAllowed, "the test's service proxy serves CONNECT only (https:// URLs)\n")
		return
	}
	target, ok := p.target(req.Host)
	if !ok {
		reply(http.StatusBadGateway, fmt.Sprintf("no route to %s: the test registered no server for it\n", req.Host))
		return
	}
	u, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		reply(http.StatusBadGateway, fmt.Sprintf("dial %s for %s: %v\n", target, req.Host, err))
		return
	}
	if !p.track(u, true) {
		_ = u.Close()
		return
	}
	defer p.track(u, false)
	defer u.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		// What the client sent after its request, then the rest.
		_, _ = io.Copy(u, br)
		if tc, ok := u.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, u)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	<-done
}

// ServiceCA signs the serving certificates of the servers a test puts
// behind Service names (ServiceProxy.Route), as OpenShift's service CA
// signs those of Services annotated service.beta.openshift.io/serving-cert-secret-name.
// The control plane's is also in a PEM file (File) for other processes of
// the test harness. The real components which call such Services trust it
// only as the installer configures them, as on OpenShift: from a ConfigMap
// the platform publishes (openshift-service-ca.crt, key service-ca.crt)
// mounted in their pod, named by SSL_CERT_FILE (Go reads it in place of the
// system roots). NewCA makes one in memory for other test servers (the
// data-path stand-in's).
type ServiceCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	file string
}

// NewCA makes a CA named commonName (ECDSA P-256, valid 24 h), kept in
// memory: File is "".
func NewCA(commonName string) (*ServiceCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}
	return &ServiceCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// newServiceCA is the control plane's CA, its certificate written to
// dir/service-ca.crt and its key to dir/service-ca.key (0600), so that
// another process serving a Service the operators call can have a
// certificate issued (LoadServiceCA).
func newServiceCA(dir string) (*ServiceCA, error) {
	ca, err := NewCA("maasctl-testenv service CA")
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "service-ca.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	ca.file = filepath.Join(dir, "service-ca.crt")
	if err := os.WriteFile(ca.file, ca.pem, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadServiceCA reads the service CA that the real operators run for the
// control plane of stateDir use (service-ca.crt and service-ca.key, made
// when `testenv-ctl operators` starts).
func LoadServiceCA(stateDir string) (*ServiceCA, error) {
	certPEM, err := os.ReadFile(filepath.Join(stateDir, "service-ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("service CA: %w (are the operators running?)", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(stateDir, "service-ca.key"))
	if err != nil {
		return nil, fmt.Errorf("service CA: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("service CA: no PEM in service-ca.crt or service-ca.key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("service CA: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("service CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("service CA key: not ECDSA")
	}
	return &ServiceCA{cert: cert, key: key, pem: certPEM, file: filepath.Join(stateDir, "service-ca.crt")}, nil
}

// File is the path of the CA's certificate (PEM), "" for one NewCA made.
func (ca *ServiceCA) File() string { return ca.file }

// PEM is the CA's certificate.
func (ca *ServiceCA) PEM() []byte { return append([]byte(nil), ca.pem...) }

// Issue returns a serving certificate signed by the CA (ECDSA P-256, valid
// 24 h) for names: each IP literal ("127.0.0.1", "::1") an IP address of
// the certificate, each other name a DNS name.
func (ca *ServiceCA) Issue(names ...string) (tls.Certificate, error) {
	if len(names) == 0 {
		return tls.Certificate{}, errors.New("service CA: no name to issue for")
	}
	var dns []string
	var ips []net.IP
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, n)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     dns,
		IPAddresses:  ips,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("sign serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}, nil
}
