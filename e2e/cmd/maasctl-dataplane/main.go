// Command maasctl-dataplane runs the data-path stand-in (package
// github.com/maasctl/maasctl/e2e/dataplane: maas-api's key endpoints, the
// gateway's API-key auth and token limits, and an OpenAI-compatible model)
// against a cluster, for `make demo`: after `maasctl install`, `maasctl
// verify --endpoint` proves the request path through it. It listens on
// 127.0.0.1 only, writes its URL and CA to files and serves until SIGINT
// or SIGTERM.
//
//	maasctl-dataplane --kubeconfig K --postgres-admin CONN --url-file F --ca-file C \
//	    [--testenv-state DIR --service-ca-file S]
//
// With --testenv-state (the state folder of a control plane whose real
// Kuadrant operators `testenv-ctl operators` runs) every call's auth
// decision is the real Authorino's (dataplane.AuthorinoOptions): its
// ext_authz address is read from DIR, maas-api's internal endpoints get a
// certificate of DIR's service CA and a route through its Service proxy,
// and S (maasctl-sim --service-ca-file) is the CA of Authorino's listener.
//
// Exit codes: 0 stopped by a signal, 1 could not start.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maasctl/maasctl/e2e/dataplane"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/inventory"
)

func main() {
	var kubeconfig, pgAdmin, urlFile, caFile string
	var hosts []string
	pflag.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster whose MaaS objects the stand-in serves")
	pflag.StringVar(&pgAdmin, "postgres-admin", "", "the local control plane's PostgreSQL superuser connection string (STATE/postgres-admin.conn); its port serves maas-api's database")
	pflag.StringVar(&urlFile, "url-file", "", "write the base URL (https://127.0.0.1:PORT) to this file once serving")
	pflag.StringVar(&caFile, "ca-file", "", "write the CA of the serving certificate to this file (PEM)")
	pflag.StringSliceVar(&hosts, "host", nil, "extra DNS names for the serving certificate")
	var state, serviceCA string
	pflag.StringVar(&state, "testenv-state", "", "state folder of the local control plane whose real Kuadrant operators run (testenv-ctl operators): ask its Authorino for every auth decision")
	pflag.StringVar(&serviceCA, "service-ca-file", "", "with --testenv-state: the CA of Authorino's listener certificate (maasctl-sim --service-ca-file)")
	pflag.Parse()
	if err := run(kubeconfig, pgAdmin, urlFile, caFile, hosts, state, serviceCA); err != nil {
		fmt.Fprintln(os.Stderr, "maasctl-dataplane:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, pgAdmin, urlFile, caFile string, hosts []string, state, serviceCA string) error {
	if kubeconfig == "" || pgAdmin == "" || urlFile == "" || caFile == "" {
		return fmt.Errorf("--kubeconfig, --postgres-admin, --url-file and --ca-file are required")
	}
	var az *dataplane.AuthorinoOptions
	if state != "" {
		var err error
		if az, err = authorinoFrom(state, serviceCA); err != nil {
			return err
		}
	}
	port := ""
	for _, kv := range strings.Fields(pgAdmin) {
		if v, ok := strings.CutPrefix(kv, "port="); ok {
			port = v
		}
	}
	if port == "" {
		return fmt.Errorf("--postgres-admin %q names no port=", pgAdmin)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, auth, err := dataplane.ForCluster(cfg)
	if err != nil {
		return err
	}
	s, err := dataplane.Start(ctx, dataplane.Options{Reader: r, Auth: auth, Hosts: hosts,
		DBHosts: dataplane.DBHostsFor(net.JoinHostPort("127.0.0.1", port)), Authorino: az})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := os.WriteFile(caFile, s.CACertPEM(), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", caFile, err)
	}
	// The URL file is written last and renamed into place: a reader that
	// sees it can connect.
	tmp := filepath.Join(filepath.Dir(urlFile), "."+filepath.Base(urlFile)+".tmp")
	if err := os.WriteFile(tmp, []byte(s.URL()+"\n"), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", urlFile, err)
	}
	if err := os.Rename(tmp, urlFile); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "maasctl-dataplane: serving", s.URL())
	<-ctx.Done()
	return nil
}

// authorinoFrom is the stand-in's link to the real Authorino of the
// control plane in state: its ext_authz address as last started, maas-api's
// certificate from the control plane's service CA and its route through
// the operators' Service proxy.
func authorinoFrom(state, serviceCAFile string) (*dataplane.AuthorinoOptions, error) {
	if serviceCAFile == "" {
		return nil, fmt.Errorf("--testenv-state needs --service-ca-file (maasctl-sim --service-ca-file)")
	}
	listenerCA, err := os.ReadFile(serviceCAFile)
	if err != nil {
		return nil, fmt.Errorf("--service-ca-file: %w", err)
	}
	ca, err := testenv.LoadServiceCA(state)
	if err != nil {
		return nil, err
	}
	svc := "maas-api." + inventory.Default().RHOAI.MaaSAPINamespace + ".svc"
	cert, err := ca.Issue(svc+".cluster.local", svc)
	if err != nil {
		return nil, err
	}
	return &dataplane.AuthorinoOptions{
		Addr:        func() (string, bool) { return testenv.ReadExposedAddr(state, testenv.AuthorinoServer) },
		ServiceCA:   listenerCA,
		MaaSAPICert: cert,
		Route:       func(hostPort, target string) error { return testenv.AddServiceRoute(state, hostPort, target) },
	}, nil
}
