// Command testenv runs maasctl's local control plane (package
// github.com/maasctl/maasctl/e2e/testenv) outside of tests, for `make demo`
// and for poking at it by hand:
//
//	testenv up --state DIR      start detached; prints `export KUBECONFIG=DIR/kubeconfig`
//	testenv status --state DIR  components, pids and readiness; exit 1 unless all run
//	testenv down --state DIR    stop in order (kwok … kube-apiserver, then etcd) and wait
//	testenv operators --state DIR  run the real Kuadrant operators of an `up --real-kuadrant` until SIGTERM
//
// Exit codes: 0 success, 1 failure (the message says what to run next).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/maasctl/maasctl/e2e/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "testenv",
		Short:         "Run maasctl's local control plane (etcd, kube-apiserver, kcm, scheduler, kwok)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newUpCommand(stdout, stderr), newDownCommand(stderr), newStatusCommand(stdout), newOperatorsCommand(stderr))
	return root
}

func defaultStateDir() string { return filepath.Join(os.TempDir(), "maasctl-testenv") }

func newUpCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		o           testenv.Options
		controllers bool
		modelServer bool
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the local control plane detached and print the KUBECONFIG export",
		Long: `Start etcd, kube-apiserver and (unless --controllers=false) kube-controller-manager,
kube-scheduler, kwok with one Ready fake node and PostgreSQL (TLS; its superuser
connection string in STATE/postgres-admin.conn), all on 127.0.0.1 on free ports, in
their own session so they outlive this command. Installs the platform CRDs and (unless
--no-fixture) the fresh-OpenShift fixture. Pids and logs go to STATE/*.pid and
STATE/*.log. Returns 0 once ready and prints: export KUBECONFIG=STATE/kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.NoControllers = !controllers
			o.Detach = true
			o.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, "testenv: "+format+"\n", args...) }
			abs, err := filepath.Abs(o.StateDir)
			if err != nil {
				return err
			}
			o.StateDir = abs
			env, err := testenv.Start(cmd.Context(), o)
			if err != nil {
				if errors.Is(err, testenv.ErrNotBuilt) {
					return fmt.Errorf("%w\nnext: run `make testenv`, then retry", err)
				}
				if logs, _ := filepath.Glob(filepath.Join(abs, "*.log")); len(logs) > 0 {
					return fmt.Errorf("%w\nnext: read the logs in %s, then `testenv down --state %s`", err, abs, abs)
				}
				return err
			}
			if modelServer {
				if err := runModelServer(cmd.Context(), env); err != nil {
					return fmt.Errorf("%w\nnext: read the logs in %s, then `testenv down --state %s`", err, abs, abs)
				}
			}
			fmt.Fprintf(stdout, "export KUBECONFIG=%s\n", env.Kubeconfig())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.StateDir, "state", defaultStateDir(), "state folder: etcd data, certificates, kubeconfig, *.log, *.pid")
	f.StringVar(&o.BinDir, "bin", "", "folder with the binaries (default $"+testenv.EnvBinDir+", else <repo>/bin/testenv)")
	f.StringVar(&o.CRDDir, "crds", "", "CRD tree (default $"+testenv.EnvCRDDir+", else <repo>/../shared/crds)")
	f.BoolVar(&o.NoFixture, "no-fixture", false, "install the platform CRDs only, not the fresh-OpenShift fixture")
	f.BoolVar(&controllers, "controllers", true, "also run kube-controller-manager, kube-scheduler and kwok (one fake node)")
	f.DurationVar(&o.StartTimeout, "timeout", testenv.DefaultStartTimeout, "give up if not ready within this time")
	f.BoolVar(&o.RealKuadrant, "real-kuadrant", false, "prepare for the real Kuadrant, Authorino and Limitador operators (GRPCRoute CRD, their binaries); 'testenv-ctl operators' runs them")
	f.BoolVar(&modelServer, "model-server", false, "also run the model server the fixture's Service llm-coding-assistant/llama-coder selects (a Deployment whose kwok pod becomes its ready endpoint), as on a cluster where llama.cpp already serves")
	return cmd
}

// runModelServer creates Deployment llm-coding-assistant/llama-coder (one
// replica; kwok runs its pod, no image is pulled) behind the fixture's
// Service and waits until the Service has a ready endpoint (EndpointSlice
// controller of kube-controller-manager), at most a minute.
func runModelServer(ctx context.Context, env *testenv.Env) error {
	kc, err := kubernetes.NewForConfig(env.RESTConfig())
	if err != nil {
		return err
	}
	const ns, name = "llm-coding-assistant", "llama-coder"
	lbl := map[string]string{"app": name}
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "llama-server", Image: "registry.invalid/llama.cpp/server:latest",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}}},
			},
		},
	}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Deployment %s/%s: %w", ns, name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := kc.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + name})
		if err != nil {
			return false, nil
		}
		for _, es := range l.Items {
			for _, e := range es.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					return true, nil
				}
			}
		}
		return false, nil
	})
}

func newDownCommand(stderr io.Writer) *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local control plane started by `testenv up` and wait until it is gone",
		Long: `Stop kwok, kube-scheduler, kube-controller-manager, then kube-apiserver (waiting until
it exited), then etcd: SIGTERM, SIGKILL after 10 s. Pids come from STATE/*.pid; a pid
that no longer runs the recorded binary is skipped. The state folder is kept.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := testenv.Load(state)
			if err != nil {
				return err
			}
			t0 := time.Now()
			if err := env.Stop(); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "testenv: stopped in %d ms (state kept in %s)\n", time.Since(t0).Milliseconds(), env.StateDir())
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultStateDir(), "state folder given to 'testenv-ctl up'")
	return cmd
}

func newOperatorsCommand(stderr io.Writer) *cobra.Command {
	var state, bin string
	cmd := &cobra.Command{
		Use:   "operators",
		Short: "Run the real Kuadrant, Authorino and Limitador operators of an `up --real-kuadrant` until SIGTERM or SIGINT",
		Long: `Run the real kuadrant-operator, authorino-operator, limitador-operator and the Authorino
server for their pods (once the RHCL CSV is Succeeded), each in a network namespace of its
own, as the e2e tests do; a deleted pod restarts its process. They run as long as this
command does (the control plane of ` + "`testenv up`" + ` outlives the command that started it, the
operators follow its pods): stop it with SIGTERM or SIGINT, which stops them. Logs go to
STATE/<operator>.log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := testenv.Load(state)
			if err != nil {
				return err
			}
			logf := func(format string, args ...any) { fmt.Fprintf(stderr, "testenv: "+format+"\n", args...) }
			err = env.RunOperators(cmd.Context(), bin, logf)
			if errors.Is(err, testenv.ErrNotBuilt) {
				return fmt.Errorf("%w\nnext: run `make testenv`, then retry", err)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultStateDir(), "state folder given to 'testenv-ctl up --real-kuadrant'")
	cmd.Flags().StringVar(&bin, "bin", "", "folder with the binaries (default $"+testenv.EnvBinDir+", else <repo>/bin/testenv)")
	return cmd
}

func newStatusCommand(stdout io.Writer) *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the components recorded in the state folder and whether the apiserver is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := testenv.Load(state)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "COMPONENT\tPID\tSTATE\tRESTARTS\tLOG")
			problems, recorded := 0, 0
			for _, c := range env.Components() {
				st, pid := "not started", "-"
				if _, err := os.Stat(c.Log); err == nil {
					st = "stopped"
				}
				if c.PID > 0 {
					recorded++
					pid = fmt.Sprint(c.PID)
					st = "running"
					if !c.Running {
						st = "exited"
						problems++
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", c.Name, pid, st, c.Restarts, c.Log)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if recorded == 0 {
				return fmt.Errorf("local control plane in %s is not running; next: `testenv up --state %s`", env.StateDir(), env.StateDir())
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			if err := env.Ready(ctx); err != nil {
				fmt.Fprintf(stdout, "kube-apiserver: not ready: %v\n", err)
				problems++
			} else {
				fmt.Fprintf(stdout, "kube-apiserver: ready\nexport KUBECONFIG=%s\n", env.Kubeconfig())
			}
			if problems > 0 {
				return fmt.Errorf("local control plane in %s is not healthy; next: `testenv down --state %s` and `testenv up --state %s`", env.StateDir(), env.StateDir(), env.StateDir())
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultStateDir(), "state folder given to 'testenv-ctl up'")
	return cmd
}
