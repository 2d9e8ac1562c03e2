// Command maasctl-bench runs maasctl's benchmarks (package bench) against
// fresh local control planes with simulated operators, prints every figure
// as a table and writes them as JSON. `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/maasctl/maasctl/e2e/bench"
)

func main() {
	o := bench.Options{Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "bench: "+f+"\n", a...) }}
	var models, figures, jsonPath, cpuProfile string
	stopProfile := func() {}
	flag.StringVar(&o.Maasctl, "maasctl", "bin/maasctl", "maasctl binary to measure")
	flag.StringVar(&o.Dir, "dir", "", "folder for control plane state, logs and Ansible files (default a new temporary folder)")
	flag.Float64Var(&o.Scale, "scale", 100, "divide the realistic operator delays by this")
	flag.StringVar(&models, "models", "1,10,100", "model counts of the scale figure (external models) and the migrate figure (tier-annotated models); 1000 runs long on the real Kuadrant (docs/measurements.md, Benchmarks)")
	flag.StringVar(&o.TierFixtures, "tier-fixtures", "", "the tier-based MaaS fixtures of the migrate figure (default e2e/testdata/tiers of the module the working directory is in)")
	flag.BoolVar(&o.Ansible, "ansible", true, "compare with the Ansible playbook (e2e/bench/ansible)")
	flag.BoolVar(&o.InstallAnsible, "install-ansible", true, "apt-get install ansible and python3-kubernetes when missing (root only)")
	flag.StringVar(&o.Playbook, "playbook", "e2e/bench/ansible/install.yaml", "the Ansible playbook")
	flag.BoolVar(&o.Smoke, "smoke", false, "short mode: one control plane, serial install, no-op re-run, 2 models, no Ansible")
	flag.StringVar(&figures, "figures", "install,slow,serial,ansible,scale,migrate", "figure groups to measure: install (with detection latency and the no-op re-run), slow (the install with 10× longer delays), serial, ansible, scale, migrate (migrate tiers with the -models counts of annotated models)")
	flag.BoolVar(&o.Profile, "profile", false, "scale figure: record requests through the proxy, write maasctl's CPU and heap profiles and print where the time went")
	flag.StringVar(&jsonPath, "json", "e2e/bench/results.json", "write the figures here as JSON")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process itself (the simulated operators run in it) to this file")
	flag.Parse()
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "maasctl-bench: -cpuprofile:", err)
			os.Exit(2)
		}
		stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
	}
	defer stopProfile()
	for _, s := range strings.Split(models, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "maasctl-bench: -models: %q is not a positive count\n", s)
			os.Exit(2)
		}
		o.Models = append(o.Models, n)
	}
	for _, f := range strings.Split(figures, ",") {
		if f = strings.TrimSpace(f); f != "" {
			o.Figures = append(o.Figures, f)
		}
	}
	if o.Smoke {
		o.Models, o.Scale = nil, 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, o)
	if res != nil {
		_ = res.WriteTable(os.Stdout)
		if jsonPath != "" {
			if werr := res.WriteJSON(jsonPath); werr != nil {
				fmt.Fprintln(os.Stderr, "maasctl-bench:", werr)
				stopProfile()
				os.Exit(1)
			}
			fmt.Fprintln(os.Stderr, "bench: figures written to", jsonPath)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "maasctl-bench:", err)
		stopProfile()
		os.Exit(1)
	}
}
