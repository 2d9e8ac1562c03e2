package session

import (
	"errors"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// UnauthorizedError is a command's error when the API server answered a
// request with 401 Unauthorized: it does not accept the credentials the
// session sent (a token that expired or was revoked, a wrong user). It
// names the server, where the credentials came from and the fix ('oc
// login' again, or the flags that choose them), instead of the request
// that happened to be first ("read the installed inventory ...:
// Unauthorized"). It never holds a credential. It wraps the command's
// error, so the exit code is the same (1). A 403 Forbidden (an RBAC
// denial of an accepted user) is not one.
type UnauthorizedError struct {
	// Server is the API server URL the request went to.
	Server string
	// From says where the credentials came from: the kubeconfig file,
	// context and user; the token in Vault (--kube-token-from-vault,
	// vault.kubeTokenPath); or the in-cluster configuration.
	From string
	// Fix is how to get credentials the server accepts.
	Fix string
	// Rerun is the command to run again once fixed ("maasctl install").
	Rerun string
	// Err is the command's error.
	Err error
}

func (e *UnauthorizedError) Error() string {
	fix := "fix: " + e.Fix
	if e.Rerun != "" {
		fix += "; then run '" + e.Rerun + "' again"
	}
	return fmt.Sprintf("the Kubernetes API server %s answered 401 Unauthorized: it does not accept the credentials %s; they are expired, revoked or wrong\n%s", e.Server, e.From, fix)
}

func (e *UnauthorizedError) Unwrap() error { return e.Err }

// ExplainUnauthorized returns err as an *UnauthorizedError when its tree
// (Unwrap, errors.Join) holds an API answer of 401 Unauthorized
// (apierrors.IsUnauthorized: a Kubernetes Status of reason Unauthorized
// or code 401, which only the session's clients of its API server
// return), and err unchanged otherwise: other errors (403 Forbidden
// included), or a session that never built its cluster configuration.
// rerun is the command line to run again after the fix.
func (s *Session) ExplainUnauthorized(err error, rerun string) error {
	if err == nil || s == nil || s.cfg == nil {
		return err
	}
	var already *UnauthorizedError
	if errors.As(err, &already) {
		return err
	}
	if findErr(err, isUnauthorizedStatus) == nil {
		return err
	}
	from, fix := s.credentialSource()
	return &UnauthorizedError{Server: s.cfg.Host, From: from, Fix: fix, Rerun: rerun, Err: err}
}

// ExplainAPIServer is ExplainUnreachable, else ExplainUnauthorized: the
// error of a command whose API server could not be reached, or did not
// accept its credentials, names the server, where the address or the
// credentials came from and the fix; other errors are unchanged.
func (s *Session) ExplainAPIServer(err error, rerun string) error {
	if e := s.ExplainUnreachable(err, rerun); e != err {
		return e
	}
	return s.ExplainUnauthorized(err, rerun)
}

// isUnauthorizedStatus: err itself (not what it wraps) is an API status
// of 401 Unauthorized.
func isUnauthorizedStatus(err error) bool {
	_, ok := err.(apierrors.APIStatus)
	return ok && apierrors.IsUnauthorized(err)
}

// credentialSource says where the session's cluster credentials come
// from, and how to replace them: the token in Vault of
// --kube-token-from-vault or vault.kubeTokenPath, else the kubeconfig
// user of the context (--context or the current one) and the file that
// defines it, else the in-cluster configuration. It names no credential.
func (s *Session) credentialSource() (from, fix string) {
	server := s.cfg.Host
	if spec := s.tokenSpec(); spec != "" {
		return fmt.Sprintf("of the token from Vault %s (--kube-token-from-vault or the inventory's vault.kubeTokenPath)", spec),
			fmt.Sprintf("store a current token there, e.g. `vault kv put ... token=$(oc create token <serviceaccount> -n <namespace> --duration=24h)`, or check that --kube-token-from-vault and --server (or the kubeconfig's cluster) name the cluster that token is for (%s)", server)
	}
	f := s.opts.Kube
	relogin := fmt.Sprintf("log in again with 'oc login %s' (it writes a new token to the kubeconfig), or check that --kubeconfig and --context name the user you mean ('oc config get-contexts' lists the contexts)", server)
	if raw, err := f.ClientConfig().RawConfig(); err == nil {
		name, how := f.Context, " (--context)"
		if name == "" {
			name, how = raw.CurrentContext, " (its current-context)"
		}
		if kctx := raw.Contexts[name]; kctx != nil {
			file := kctx.LocationOfOrigin
			if u := raw.AuthInfos[kctx.AuthInfo]; u != nil && u.LocationOfOrigin != "" {
				file = u.LocationOfOrigin
			}
			return fmt.Sprintf("from kubeconfig %s, context %q%s, user %q", file, name, how, kctx.AuthInfo), relogin
		}
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return "of the in-cluster configuration (the pod's service account token)",
			"check that the pod's ServiceAccount still exists and its token is mounted, or give --kubeconfig with a user the API server accepts"
	}
	return "from the kubeconfig (--kubeconfig, KUBECONFIG or ~/.kube/config)", relogin
}
