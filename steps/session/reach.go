package session

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// UnreachableError is a command's error when a request to the API server
// failed before any answer came (connection refused, no route, a name
// that does not resolve, a certificate that cannot be verified, retries
// of a dropped connection exhausted): it names the server, where its
// address came from and the fix, instead of the request that happened to
// be first ("read Namespace maasctl: ... connection refused"). It wraps
// the command's error, so the exit code is the same (1).
type UnreachableError struct {
	// Server is the API server URL the request went to.
	Server string
	// From says where that URL came from: --server, or the cluster of a
	// kubeconfig context and the file that defines it, or the in-cluster
	// configuration.
	From string
	// Cause is the transport error, e.g. "dial tcp 127.0.0.1:1: connect:
	// connection refused".
	Cause string
	// Rerun is the command to run again once fixed ("maasctl install").
	Rerun string
	// Err is the command's error.
	Err error
}

func (e *UnreachableError) Error() string {
	fix := "fix: check that the API server is up and reachable from here, and that --kubeconfig, --context or --server name the cluster you mean ('oc config get-contexts' lists the contexts); if the cluster's address or your login changed, log in again with 'oc login <API server URL>'"
	if strings.Contains(e.Cause, "x509:") || strings.Contains(e.Cause, "tls:") {
		fix += "; for a certificate error, give the CA of the API server with --certificate-authority"
	}
	if e.Rerun != "" {
		fix += "; then run '" + e.Rerun + "' again"
	}
	return fmt.Sprintf("cannot reach the Kubernetes API server %s (%s): %s\n%s", e.Server, e.From, e.Cause, fix)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ExplainUnreachable returns err as an *UnreachableError when it holds a
// request to the session's API server that got no answer (a *url.Error
// for its host), and err unchanged otherwise: other errors, a session
// that never built its cluster configuration, a request to another host
// (Vault, the MaaS endpoint), or an interrupted or timed-out request.
// rerun is the command line to run again after the fix.
func (s *Session) ExplainUnreachable(err error, rerun string) error {
	if err == nil || s == nil || s.cfg == nil {
		return err
	}
	var already *UnreachableError
	if errors.As(err, &already) {
		return err
	}
	server := s.cfg.Host
	host := hostOf(server)
	if host == "" {
		return err
	}
	ue := findURLError(err, func(ue *url.Error) bool {
		if errors.Is(ue, context.Canceled) || errors.Is(ue, context.DeadlineExceeded) {
			return false
		}
		return hostOf(ue.URL) == host
	})
	if ue == nil {
		return err
	}
	return &UnreachableError{Server: server, From: s.opts.Kube.serverSource(), Cause: ue.Err.Error(), Rerun: rerun, Err: err}
}

// findURLError walks err's tree (Unwrap, errors.Join) depth first and
// returns the first *url.Error that match accepts.
func findURLError(err error, match func(*url.Error) bool) *url.Error {
	found := findErr(err, func(e error) bool {
		ue, ok := e.(*url.Error)
		return ok && match(ue)
	})
	ue, _ := found.(*url.Error)
	return ue
}

// findErr walks err's tree (Unwrap, errors.Join) depth first and returns
// the first error that match accepts, or nil.
func findErr(err error, match func(error) bool) error {
	if err == nil {
		return nil
	}
	if match(err) {
		return err
	}
	switch x := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if found := findErr(e, match); found != nil {
				return found
			}
		}
	case interface{ Unwrap() error }:
		return findErr(x.Unwrap(), match)
	}
	return nil
}

// hostOf is the host:port of a URL or of a bare host[:port].
func hostOf(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		u, err = url.Parse("https://" + s)
		if err != nil {
			return ""
		}
	}
	return u.Host
}

// serverSource says where the API server's address comes from: --server,
// the cluster of the kubeconfig context (--context or the current one)
// and the file that defines it, or the in-cluster configuration.
func (f *KubeFlags) serverSource() string {
	if f.APIServer != "" {
		return "from --server"
	}
	raw, err := f.ClientConfig().RawConfig()
	if err == nil {
		name, how := f.Context, " (--context)"
		if name == "" {
			name, how = raw.CurrentContext, " (its current-context)"
		}
		if kctx := raw.Contexts[name]; kctx != nil {
			file := kctx.LocationOfOrigin
			if cl := raw.Clusters[kctx.Cluster]; cl != nil && cl.LocationOfOrigin != "" {
				file = cl.LocationOfOrigin
			}
			return fmt.Sprintf("from kubeconfig %s, context %q%s, cluster %q", file, name, how, kctx.Cluster)
		}
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return "the in-cluster configuration (KUBERNETES_SERVICE_HOST, the pod's service account)"
	}
	return "the kubeconfig (--kubeconfig, KUBECONFIG or ~/.kube/config)"
}
