package steps

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps/engine"
	"github.com/maasctl/maasctl/waiters"
)

// notFoundServer is an API server that serves only the core group: every
// other request is 404, so checkpoints load empty and their writes fail (a
// failed step's checkpoint write is best effort).
func notFoundServer(t *testing.T) *kube.Clients {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"]}`)
			return
		case "/apis":
			fmt.Fprint(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
			return
		case "/api/v1":
			fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[]}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}))
	t.Cleanup(srv.Close)
	c, err := kube.New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// demoRunner runs the steps (phase "demo") against notFoundServer, with
// no checkpoints and a 5 s wait timeout; emit may be nil.
func demoRunner(t *testing.T, emit func(Event), ss ...*Step) *Runner {
	t.Helper()
	reg, err := RegistryOf(ss, []string{"demo"})
	if err != nil {
		t.Fatal(err)
	}
	c := notFoundServer(t)
	cps, err := engine.LoadCheckpoints(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return &Runner{Registry: reg, Env: &Env{Clients: c, Inv: &inventory.Inventory{WaitTimeoutSeconds: 5}}, Checkpoints: cps, Emit: emit}
}

// TestStepFailingWithAProblem: a step whose Apply fails with a Problem
// (wrapped as a wait wraps it) yields a failed event whose Message and Fix
// are apart, while the run's error still reads "message: fix" and keeps
// the cause for errors.Is.
func TestStepFailingWithAProblem(t *testing.T) {
	cause := errors.New("timed out")
	p := &Problem{Message: "Deployment ns/app is paused: " + cause.Error(), Fix: "oc rollout resume deployment/app -n ns", Err: cause}
	step := &Step{ID: "demo/paused", Title: "A paused Deployment", Apply: func(context.Context, *Env, *Step) error {
		return &waiters.FailedError{Object: "Deployment ns/app", Err: p}
	}}
	var failed []Event
	r := demoRunner(t, func(ev Event) {
		if ev.Type == EventFailed {
			failed = append(failed, ev)
		}
	}, step)
	_, err := r.Run(context.Background())
	if len(failed) != 1 {
		t.Fatalf("failed events %v (run error %v)", failed, err)
	}
	ev := failed[0]
	if ev.Message != "Deployment ns/app: Deployment ns/app is paused: timed out" || ev.Fix != p.Fix {
		t.Errorf("failed event message %q fix %q", ev.Message, ev.Fix)
	}
	var runErr *engine.RunError
	if !errors.As(err, &runErr) || len(runErr.Failed) != 1 {
		t.Fatalf("run error %v, want a RunError of one step", err)
	}
	var got *Problem
	if f := runErr.Failed[0]; !errors.As(f, &got) || !errors.Is(f, cause) ||
		!strings.Contains(f.Error(), "is paused: timed out: oc rollout resume deployment/app -n ns") {
		t.Errorf("step error %v: want the Problem, its cause and \"message: fix\"", f)
	}
}

// TestStepTimeoutDuringARequest: a step whose timeout runs out in a request
// (not in a wait) fails with a StepTimeoutError naming the timeout and
// keeping the request's error; a step failing before its timeout does not.
func TestStepTimeoutDuringARequest(t *testing.T) {
	cut := &Step{ID: "demo/cut", Title: "A request cut by the timeout", Timeout: 50 * time.Millisecond,
		Apply: func(ctx context.Context, _ *Env, _ *Step) error {
			<-ctx.Done()
			return fmt.Errorf("unexpected error when reading response body. Please retry. Original error: %w", ctx.Err())
		}}
	early := &Step{ID: "demo/early", Title: "A step that fails at once", Timeout: time.Minute,
		Apply: func(context.Context, *Env, *Step) error { return errors.New("apply: forbidden") }}
	_, err := demoRunner(t, nil, cut, early).Run(context.Background())
	var runErr *engine.RunError
	if !errors.As(err, &runErr) || len(runErr.Failed) != 2 {
		t.Fatalf("run error %v, want a RunError of two steps", err)
	}
	for _, f := range runErr.Failed {
		switch f.Step {
		case cut.ID:
			var st *StepTimeoutError
			if !errors.As(f, &st) || st.Timeout != cut.Timeout || !errors.Is(f, context.DeadlineExceeded) ||
				!strings.Contains(f.Error(), "step timeout (50ms) reached: unexpected error when reading response body") {
				t.Errorf("%s: %v, want a StepTimeoutError of 50ms keeping the request's error", f.Step, f)
			}
		case early.ID:
			if IsStepTimeout(f) {
				t.Errorf("%s: %v counted as a step timeout", f.Step, f)
			}
		}
	}
}

// TestInterruptedWaitIsNotATimeout (CI of stop 45): a step whose wait
// from apimachinery returns wait.ErrWaitTimeout ("timed out waiting for
// the condition") because the run was interrupted fails as interrupted,
// naming the cause, never as a timeout.
func TestInterruptedWaitIsNotATimeout(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	step := &Step{ID: "demo/dsci", Title: "A wait cut by Ctrl-C", Apply: func(context.Context, *Env, *Step) error {
		cancel(errors.New("received interrupt"))
		return wait.ErrorInterrupted(errors.New("timed out waiting for the condition")) // what watchtools.UntilWithSync returns
	}}
	var failed []Event
	_, err := demoRunner(t, func(ev Event) {
		if ev.Type == EventFailed {
			failed = append(failed, ev)
		}
	}, step).Run(ctx)
	if len(failed) != 1 {
		t.Fatalf("failed events %v (run error %v)", failed, err)
	}
	if msg := failed[0].Message; msg != "interrupted (received interrupt)" {
		t.Errorf("failed event message %q, want \"interrupted (received interrupt)\"", msg)
	}
	var runErr *engine.RunError
	if !errors.As(err, &runErr) || len(runErr.Failed) != 1 || !errors.Is(runErr.Failed[0], context.Canceled) || strings.Contains(runErr.Failed[0].Error(), "timed out") {
		t.Errorf("run error %v: want the step interrupted (context.Canceled), not timed out", err)
	}
}

// TestInterruptedWaitDropsTheWrapperAndFix (a new user's trial, session
// 42): a wait cut by Ctrl-C inside a step that wraps it in a Problem
// ("never rolled out", fix "check the Deployments") fails with the
// interruption alone, naming what it waited on, and no fix line.
func TestInterruptedWaitDropsTheWrapperAndFix(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	step := &Step{ID: "demo/rollout", Title: "A rollout cut by Ctrl-C", Apply: func(context.Context, *Env, *Step) error {
		cancel(errors.New("received interrupt"))
		ie := &waiters.InterruptedError{Blocked: []waiters.Blocked{{Object: "Deployment ns/app", Status: "1 of 2 updated"}}, Cause: errors.New("received interrupt")}
		return &Problem{Message: "Deployment ns/app never rolled out: " + ie.Error(), Fix: "check 'oc get deployment app -n ns -o yaml'", Err: ie}
	}}
	var failed []Event
	_, err := demoRunner(t, func(ev Event) {
		if ev.Type == EventFailed {
			failed = append(failed, ev)
		}
	}, step).Run(ctx)
	if len(failed) != 1 {
		t.Fatalf("failed events %v (run error %v)", failed, err)
	}
	if ev := failed[0]; ev.Message != "interrupted (received interrupt) while waiting for Deployment ns/app (1 of 2 updated)" || ev.Fix != "" {
		t.Errorf("failed event message %q fix %q; want the interruption alone and no fix", ev.Message, ev.Fix)
	}
	var runErr *engine.RunError
	if !errors.As(err, &runErr) || len(runErr.Failed) != 1 || !errors.Is(runErr.Failed[0], context.Canceled) {
		t.Errorf("run error %v: want the step's error to be context.Canceled (no failed checkpoint)", err)
	}
}
