// Command maasctl-sim runs maasctl's simulated operators (package
// github.com/maasctl/maasctl/e2e/sim) against the API server of a
// kubeconfig until it receives SIGTERM or SIGINT. Logs go to stderr.
//
// Usage:
//
//	maasctl-sim [--kubeconfig FILE] [--crds DIR] [--rhoai-version 3.5] [--delay dsc=20s ...] [--postgres-admin CONNSTRING] [--service-ca-file FILE] [--service-ca-bundle-file FILE] [-v]
//
// The Kuadrant, Authorino and Limitador operators are not simulated: run
// them with `testenv-ctl up --real-kuadrant` and `testenv-ctl operators`
// (as make demo does). maasctl-sim registers Istio's CRDs for them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/e2e/testenv"
)

// delayFlag collects repeatable name=duration values.
type delayFlag map[string]time.Duration

func (d delayFlag) String() string {
	var parts []string
	for k, v := range d {
		parts = append(parts, k+"="+v.String())
	}
	return strings.Join(parts, ",")
}

func (d delayFlag) Set(s string) error {
	name, dur, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want name=duration, got %q", s)
	}
	v, err := time.ParseDuration(dur)
	if err != nil {
		return fmt.Errorf("delay %s: %w", name, err)
	}
	d[name] = v
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "maasctl-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("maasctl-sim", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server to simulate operators on")
	crds := fs.String("crds", "", "folder of upstream CRDs (default $MAASCTL_CRDS or ../shared/crds beside the repository)")
	version := fs.String("rhoai-version", sim.RHOAI35, "simulated RHOAI release: 3.3, 3.4 or 3.5")
	verbose := fs.Bool("v", false, "debug logging")
	postgres := fs.String("postgres-admin", "", "superuser connection string of the PostgreSQL the simulated CNPG Clusters run on (testenv writes it to STATE/postgres-admin.conn); empty: no database is created")
	caFile := fs.String("service-ca-file", "", "write the simulated service-ca operator's CA (PEM) to this file once started: the CA of Authorino's listener certificate, which the data-path stand-in checks")
	bundleFile := fs.String("service-ca-bundle-file", "", "a PEM file of more CAs the published service CA bundle (ConfigMap openshift-service-ca.crt in every namespace) holds: the control plane's ServiceCA (testenv writes STATE/service-ca.crt when its operators start)")
	delays := delayFlag{}
	fs.Var(delays, "delay", "per-controller delay name=duration, repeatable; names: "+strings.Join(sim.ControllerNames(), ", "))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: *kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	level := zapcore.InfoLevel
	if *verbose {
		level = zapcore.DebugLevel
	}
	zcfg := zap.NewDevelopmentConfig()
	zcfg.Level = zap.NewAtomicLevelAt(level)
	zcfg.OutputPaths, zcfg.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	log, err := zcfg.Build()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer func() { _ = log.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Info("starting simulated operators", zap.String("rhoai", *version), zap.Any("delays", map[string]time.Duration(delays)))
	so := sim.Options{CRDDir: *crds, RHOAIVersion: *version, Delay: delays, Logger: log, Postgres: *postgres}
	if so.IstioCRDs, err = testenv.IstioCRDFile(ctx); err != nil {
		return err
	}
	if *bundleFile != "" {
		if so.ServiceCABundle, err = os.ReadFile(*bundleFile); err != nil {
			return fmt.Errorf("--service-ca-bundle-file: %w", err)
		}
	}
	h, err := sim.Start(ctx, cfg, so)
	if err != nil {
		return err
	}
	if *caFile != "" {
		if err := os.WriteFile(*caFile, h.ServiceCAPEM(), 0o644); err != nil {
			_ = h.Stop()
			return fmt.Errorf("write %s: %w", *caFile, err)
		}
	}
	err = h.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("stopped")
	return nil
}
