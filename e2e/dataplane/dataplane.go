// Package dataplane is a simulated MaaS data plane for maasctl's end-to-end
// tests: one HTTPS server on loopback standing in for the OpenShift Route,
// the Gateway (Istio with Kuadrant's Authorino and Limitador), maas-api and
// the llama.cpp model server behind an ExternalModel.
//
// Like the simulated operators in e2e/sim it is never more lenient than the
// real thing, and it reads every decision live from the API server:
//
//   - /maas-api/health answers 200 only while Deployment maas-api is
//     Available (no healthy upstream otherwise).
//   - /maas-api/v1/api-keys mints sk-oai- keys for a caller authenticated
//     with a Kubernetes TokenReview, bound to a MaaSSubscription the caller
//     owns, recording the caller's user name and groups (keys.go).
//   - /v1/models and /v1/chat/completions need a valid key (401), an Active
//     MaaSAuthPolicy whose subjects include the key's groups or user for the
//     model (403), and the key's MaaSSubscription covering the model with
//     tokens left in the window (429, tiny and fast); the model server must
//     have ready endpoints (503) unless SetModelDown says it refuses
//     connections (503 connection failure).
//   - while Kuadrant is not Ready, authenticated calls fail with 500
//     AUTH_FAILURE (case B01).
//   - an optional body cap answers 413 above a size (case B17).
//
// Upstream behaviour is cited next to the code that mirrors it.
package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// ErrUnauthenticated is returned by an Authenticator for a token the API
// server does not accept.
var ErrUnauthenticated = errors.New("token not authenticated")

// Authenticator turns a bearer token into the caller's identity, as
// Authorino's kubernetesTokenReview does for the maas-api route.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (verify.Identity, error)
}

// TokenReview authenticates with the API server's TokenReview API
// (authentication.k8s.io/v1), the identity source of the maas-api
// AuthPolicy (openshift-identities: kubernetesTokenReview).
type TokenReview struct{ Client kubernetes.Interface }

// Authenticate implements Authenticator.
func (t TokenReview) Authenticate(ctx context.Context, token string) (verify.Identity, error) {
	tr, err := t.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return verify.Identity{}, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return verify.Identity{}, ErrUnauthenticated
	}
	return verify.Identity{User: tr.Status.User.Username, Groups: tr.Status.User.Groups}, nil
}

// StaticTokens maps bearer tokens to identities (unit tests).
type StaticTokens map[string]verify.Identity

// Authenticate implements Authenticator.
func (s StaticTokens) Authenticate(_ context.Context, token string) (verify.Identity, error) {
	id, ok := s[token]
	if !ok {
		return verify.Identity{}, ErrUnauthenticated
	}
	return id, nil
}

// Options configure Start.
type Options struct {
	// Reader reads the live MaaS, Kuadrant and model objects. Required.
	Reader verify.Reader
	// Auth authenticates the bearer tokens that mint and revoke keys.
	// Required.
	Auth Authenticator
	// Inventory names the objects (namespaces, Kuadrant, maas-api).
	// Default inventory.Default().
	Inventory *inventory.Inventory
	// BodyLimit, when > 0, refuses request bodies larger than this many
	// bytes with 413, as an Envoy buffer limit does.
	BodyLimit int
	// Hosts are extra DNS names for the serving certificate.
	Hosts []string
	// DBHosts maps the host:port of maas-api's DB_CONNECTION_URL (for the
	// default inventory maas-postgres-rw.rhoai-maas-db.svc:5432, the CNPG
	// -rw Service) to the loopback address of the PostgreSQL serving it
	// (testenv PostgresServer.Addr). The stand-in resolves no DNS: an
	// unmapped host fails as an unknown name (db.go). Nil (tests with
	// no database of their own, such as internal/verify's): Start runs a
	// private PostgreSQL (testenv.StartPostgres) and, as CNPG's initdb
	// would, creates the role and database that the URL of maas-db-config
	// names when maas-api first starts; Close stops it.
	DBHosts map[string]string
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
	// Authorino, when set, hands every model call's auth decision to a
	// real Authorino through the gateway's Kuadrant Wasm configuration
	// (authorino.go) and serves maas-api's internal endpoints that its
	// AuthConfig calls. Nil: the stand-in decides itself (keyIdentity,
	// authorized), as the generated AuthPolicy would.
	Authorino *AuthorinoOptions
}

// DefaultDBHost is the host:port of the default inventory's
// DB_CONNECTION_URL: the -rw Service of CNPG Cluster maas-postgres in
// namespace rhoai-maas-db. In the tests it is the stand-in's name for the
// test's PostgreSQL; see DBHostsFor.
const DefaultDBHost = "maas-postgres-rw.rhoai-maas-db.svc:5432"

// DBHostsFor is the Options.DBHosts of a test whose PostgreSQL listens on
// addr (testenv PostgresServer.Addr): DefaultDBHost, and its
// .cluster.local form, map to addr. Nothing is resolved through DNS.
func DBHostsFor(addr string) map[string]string {
	return map[string]string{
		DefaultDBHost: addr,
		"maas-postgres-rw.rhoai-maas-db.svc.cluster.local:5432": addr,
	}
}

// ForCluster returns the Reader and TokenReview Authenticator for the
// cluster of cfg.
func ForCluster(cfg *rest.Config) (verify.Reader, Authenticator, error) {
	c, err := kube.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return verify.NewReader(c), TokenReview{Client: c.Kube}, nil
}

// Server is a running data plane.
type Server struct {
	o           Options
	inv         *inventory.Inventory
	url         string
	caPEM       []byte
	srv         *http.Server
	ln          net.Listener
	api         maasAPIState
	ownPG       *testenv.PostgresServer // without Options.DBHosts
	gw          *gateway                // with Options.Authorino
	provisioned sync.Map                // URL hash -> bool (ownPG roles made)
	issued      issuedKeys
	limits      *limiter
	modelDown   atomic.Bool
	bodyLimit   atomic.Int64
	mu          sync.Mutex
	log         []Request
	done        chan struct{}
}

// Request is one request the data plane answered (path without query).
type Request struct {
	Method string
	Path   string
	Status int
}

// Start listens on 127.0.0.1 (a free port) with a new self-signed
// certificate and serves until ctx ends or Close is called.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Reader == nil || o.Auth == nil {
		return nil, errors.New("dataplane: Reader and Auth are required")
	}
	if o.Inventory == nil {
		o.Inventory = inventory.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	cert, caPEM, err := selfSigned(o.Hosts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("dataplane: listen: %w", err)
	}
	s := &Server{
		o: o, inv: o.Inventory, caPEM: caPEM, ln: ln,
		url:    "https://" + ln.Addr().String(),
		limits: newLimiter(), done: make(chan struct{}),
	}
	if o.DBHosts == nil {
		pg, err := testenv.StartPostgres(ctx)
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("dataplane: no DBHosts given and no private PostgreSQL: %w", err)
		}
		s.ownPG = pg
		s.o.DBHosts = DBHostsFor(pg.Addr())
	}
	if o.Authorino != nil {
		if s.gw, err = startGateway(ctx, s, *o.Authorino); err != nil {
			_ = ln.Close()
			if s.ownPG != nil {
				_ = s.ownPG.Stop()
			}
			return nil, err
		}
	}
	s.bodyLimit.Store(int64(o.BodyLimit))
	s.srv = &http.Server{
		Handler:           s,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		defer close(s.done)
		_ = s.srv.ServeTLS(ln, "", "")
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Close()
		case <-s.done:
		}
	}()
	return s, nil
}

// URL is the base URL, https://127.0.0.1:<port>.
func (s *Server) URL() string { return s.url }

// CACertPEM is the CA that signed the serving certificate.
func (s *Server) CACertPEM() []byte { return s.caPEM }

// WriteCAFile writes the CA to dir/dataplane-ca.crt and returns the path.
func (s *Server) WriteCAFile(dir string) (string, error) {
	p := filepath.Join(dir, "dataplane-ca.crt")
	if err := os.WriteFile(p, s.caPEM, 0o600); err != nil {
		return "", fmt.Errorf("write dataplane CA: %w", err)
	}
	return p, nil
}

// Close stops the server at once (open connections are closed, HTTP/2
// clients get no graceful GOAWAY wait) and waits for it.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	if s.gw != nil {
		s.gw.close()
	}
	s.api.closeAll()
	if s.ownPG != nil {
		if perr := s.ownPG.Stop(); err == nil {
			err = perr
		}
	}
	return err
}

// SetModelDown makes every model server refuse connections (true) or
// serve again (false).
func (s *Server) SetModelDown(down bool) { s.modelDown.Store(down) }

// SetBodyLimit changes the body cap in bytes (0 = none).
func (s *Server) SetBodyLimit(n int) { s.bodyLimit.Store(int64(n)) }

// IssuedKeys returns the plaintext of every key minted so far, for tests
// that search outputs and archives for leaked keys.
func (s *Server) IssuedKeys() []string {
	s.issued.mu.Lock()
	defer s.issued.mu.Unlock()
	return append([]string(nil), s.issued.list...)
}

// Keys returns the rows of maas-api's api_keys table, newest first (nil
// when maas-api or its database cannot answer; KeysErr says why).
func (s *Server) Keys() []*Key {
	k, _ := s.KeysErr(context.Background())
	return k
}

// KeysErr is Keys with the error saying why maas-api or its database
// cannot answer.
func (s *Server) KeysErr(ctx context.Context) ([]*Key, error) {
	in, err := s.instance(ctx)
	if err != nil {
		return nil, err
	}
	return s.listKeys(ctx, in, "", s.o.Now())
}

// Requests returns the requests answered so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

func (s *Server) record(r *http.Request, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Status: status})
}
