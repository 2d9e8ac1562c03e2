// Command maasctl-dataplane runs the data-path stand-in (package
// github.com/maasctl/maasctl/e2e/dataplane: maas-api's key endpoints, the
// gateway's API-key auth and token limits, and an OpenAI-compatible model)
// against a cluster, for `make demo`: after `maasctl install`, `maasctl
// verify --endpoint` proves the request path through it. It listens on
// 127.0.0.1 only, writes its URL and CA to files and serves until SIGINT
// or SIGTERM.
//
//	maasctl-dataplane --kubeconfig K --postgres-admin CONN --url-file F --ca-file C
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
)

func main() {
	var kubeconfig, pgAdmin, urlFile, caFile string
	var hosts []string
	pflag.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster whose MaaS objects the stand-in serves")
	pflag.StringVar(&pgAdmin, "postgres-admin", "", "the local control plane's PostgreSQL superuser connection string (STATE/postgres-admin.conn); its port serves maas-api's database")
	pflag.StringVar(&urlFile, "url-file", "", "write the base URL (https://127.0.0.1:PORT) to this file once serving")
	pflag.StringVar(&caFile, "ca-file", "", "write the CA of the serving certificate to this file (PEM)")
	pflag.StringSliceVar(&hosts, "host", nil, "extra DNS names for the serving certificate")
	pflag.Parse()
	if err := run(kubeconfig, pgAdmin, urlFile, caFile, hosts); err != nil {
		fmt.Fprintln(os.Stderr, "maasctl-dataplane:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, pgAdmin, urlFile, caFile string, hosts []string) error {
	if kubeconfig == "" || pgAdmin == "" || urlFile == "" || caFile == "" {
		return fmt.Errorf("--kubeconfig, --postgres-admin, --url-file and --ca-file are required")
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
		DBHosts: dataplane.DBHostsFor(net.JoinHostPort("127.0.0.1", port))})
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
