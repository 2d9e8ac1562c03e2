package dataplane

import (
	"crypto/tls"

	"github.com/maasctl/maasctl/e2e/testenv"
)

// selfSigned makes a throwaway CA and a serving certificate it signs for
// 127.0.0.1, ::1, localhost and hosts, like the test certificate a lab
// gateway serves before Let's Encrypt issues the real one. It returns the
// server's TLS certificate and the CA in PEM.
func selfSigned(hosts []string) (tls.Certificate, []byte, error) {
	ca, err := testenv.NewCA("maasctl dataplane test CA")
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := ca.Issue(append([]string{"127.0.0.1", "::1", "localhost"}, hosts...)...)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return cert, ca.PEM(), nil
}
