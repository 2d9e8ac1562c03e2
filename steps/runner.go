package steps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/steps/engine"
	"github.com/maasctl/maasctl/waiters"
)

// Runner executes a Registry: independent steps run in parallel, each step
// starts when its dependencies are done. A step whose checkpoint matches its
// input hash and whose live Check passes is reported unchanged and not
// applied, unless it runs on every run (Step.EveryRun). A failed step blocks its dependents; other steps go on, so a
// re-run continues from where things stand.
//
// Dependents start as soon as a step's Apply (or, for an unchanged step,
// its Check) succeeded; the step's bookkeeping (Record.Note, then
// Checkpoints.Put, one write of the step's record shard) runs meanwhile in
// the step's goroutine, and Run returns only after every step's
// bookkeeping finished. See runStep for the events and for what a kill in
// between leaves.
type Runner struct {
	Registry    *Registry
	Env         *Env
	Checkpoints *Checkpoints
	// Emit receives every event; it is called from several goroutines, one
	// call at a time.
	Emit func(Event)
	// ToolVersion is recorded in checkpoints; a new version re-checks steps.
	ToolVersion string
	// Steps limits the run to these step IDs (all when empty); see
	// Selection. Dependencies outside it must be done already.
	Steps map[string]bool
	// Record, when set, records which objects the run created and which it
	// found (created versus adopted), for uninstall.
	Record *Record
	// Serial runs one step at a time, in dependency order, each with its
	// bookkeeping; environment variable MAASCTL_SERIAL=1 sets it too.
	// Benchmarks use it to show what running independent steps in
	// parallel saves.
	Serial bool
}

// InputHash is the hash of a step's inputs: tool version, the step's
// rendered objects and its HashExtra, as 16 hex digits. It never covers a
// secret value. The objects are hashed as JSON (encoding/json sorts map
// keys, so the bytes are canonical), streamed into the hash one object at
// a time: hashing them as YAML went through sigs.k8s.io/yaml's JSON-to-YAML
// conversion and allocated about 100 KB per object (415 MB of 2.3 GB for
// 1,000 models, issue 16). The format is part of the hash's first line
// (hashFormat), so a hash of another format never matches; a new tool
// version re-applies every step anyway.
func (r *Runner) InputHash(s *Step) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n%s\n", hashFormat, r.ToolVersion, s.ID)
	enc := json.NewEncoder(h)
	for _, o := range r.Env.objects(s.ID) {
		if err := enc.Encode(o.Object); err != nil {
			fmt.Fprintf(h, "unencodable %s %s/%s: %v\n", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	if s.HashExtra != nil {
		fmt.Fprintln(h, s.HashExtra(r.Env))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// hashFormat names how InputHash encodes the objects: "json1", one
// encoding/json document per object. (Hashes of before it had no format
// and encoded YAML.)
const hashFormat = "json1"

// snapshotNode is the schedule node of Record.Snapshot: every step that
// is not ReadOnly depends on it.
const snapshotNode = ""

// Run executes the steps and returns a summary; the error is a *RunError
// when any step failed.
func (r *Runner) Run(ctx context.Context) (*Summary, error) {
	start := time.Now()
	order, err := r.Registry.TopoOrder()
	if err != nil {
		return nil, err
	}
	var selected []*Step
	for _, s := range order {
		if len(r.Steps) == 0 || r.Steps[s.ID] {
			selected = append(selected, s)
		}
	}
	if err := r.checkDependencies(ctx, selected); err != nil {
		return nil, err
	}
	emit := engine.Emitter(r.Emit, len(selected))
	index, title := map[string]int{}, map[string]string{}
	for i, s := range selected {
		index[s.ID], title[s.ID] = i+1, s.Title
	}
	r.Env.Progress = func(id, msg string) {
		emit(Event{Type: EventProgress, Step: id, Title: title[id], Index: index[id], Message: msg})
	}
	emit(Event{Type: EventRunStarted, Message: runStartedMessage(len(selected), r.Env)})
	reads0, writes0, shared0 := r.Env.Clients.Requests.Reads(), r.Env.Clients.Requests.Writes(), r.Env.Clients.ViewAnswered()

	sc := r.forward(ctx, selected, emit, index)
	results := sc.Execute()
	if r.Record != nil && ctx.Err() == nil {
		// Also after a failed step: the pending shard keeps only the
		// entries of steps without a shard of their own. A failure here
		// changes nothing: LoadRecord reads none of the entries a
		// step's own shard replaced.
		if err := r.Record.CompactPending(kube.WithRequestTag(ctx, "record")); err != nil && r.Env.Log != nil {
			r.Env.Log.Debug("record: pending shard not compacted", zap.Error(err))
		}
	}
	var ids []string
	for _, s := range selected {
		ids = append(ids, s.ID)
	}
	sum, runErr := engine.Summarize(ids, results)
	sum.Duration = time.Since(start)
	sum.Reads = r.Env.Clients.Requests.Reads() - reads0
	sum.Writes = r.Env.Clients.Requests.Writes() - writes0
	sum.Shared = r.Env.Clients.ViewAnswered() - shared0
	emit(Event{Type: EventRunDone, Duration: sum.Duration, Summary: sum})
	if snap, ok := results[snapshotNode]; ok && snap.Err != nil {
		return sum, snap.Err
	}
	if runErr != nil {
		return sum, runErr
	}
	return sum, nil
}

// forward is the install schedule of the selected steps: the DAG run
// forward. The record's snapshot of what exists before the run
// (Record.Snapshot) must be saved before any step writes; a ReadOnly step
// (preflight) only reads, so it runs meanwhile and every other step waits
// for the snapshot too (the snapshot node). The snapshot reads through the
// run's read view, which its own write (kube.KeepView) leaves open: it and
// preflight read the objects both need once.
func (r *Runner) forward(ctx context.Context, selected []*Step, emit func(Event), index map[string]int) *engine.Schedule {
	sc := &engine.Schedule{Deps: map[string][]string{}, Serial: r.Serial || os.Getenv("MAASCTL_SERIAL") == "1"}
	if r.Record != nil {
		sc.IDs = append(sc.IDs, snapshotNode)
	}
	for _, s := range selected {
		sc.IDs = append(sc.IDs, s.ID)
		sc.Deps[s.ID] = s.After
		if !s.ReadOnly && r.Record != nil {
			sc.Deps[s.ID] = append(slices.Clone(s.After), snapshotNode)
		}
	}
	sc.Halted = halted(ctx)
	var snapFailed atomic.Bool
	sc.Run = func(id string, release func()) (EventType, error) {
		if id == snapshotNode {
			if err := r.Record.Snapshot(kube.ViewReads(kube.WithRequestTag(ctx, "record")), r.Env, r.Registry); err != nil {
				snapFailed.Store(true)
				return EventFailed, fmt.Errorf("record the objects that exist before the run: %w", err)
			}
			return EventDone, nil
		}
		return r.runStep(kube.WithRequestTag(ctx, id), r.Registry.Get(id), index[id], emit, release)
	}
	sc.Blocked = func(id, cause string) {
		s := r.Registry.Get(id)
		msg := "a dependency failed"
		switch {
		case cause == sc.Halted():
			msg = cause
		case cause == snapshotNode || snapFailed.Load():
			msg = "the record of the objects that exist before the run could not be saved"
		}
		emit(Event{Type: EventBlocked, Step: id, Title: s.Title, Index: index[id], Message: msg})
	}
	return sc
}

// interruptedError is a step's error when the run was interrupted outside
// a wait (a wait's is a waiters.InterruptedError): msg says where; it
// unwraps to context.Canceled and the cause, so the run exits 130.
type interruptedError struct {
	msg   string
	cause error
}

func (e *interruptedError) Error() string   { return e.msg }
func (e *interruptedError) Unwrap() []error { return []error{context.Canceled, e.cause} }

// interrupted reports whether the run's ctx was cancelled (a signal,
// stdout closed), not merely past a deadline.
func interrupted(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

// interruption is the error of a step cut by the run's interruption (err
// is context.Canceled or a wait's error, wait.Interrupted): the
// interruption alone, since a wrapper's wording ("never rolled out") and
// fix (a Problem's) were written for a wait that ran out, not for Ctrl-C.
// A wait's InterruptedError names what it was blocked on. apimachinery's
// waits (watchtools.UntilWithSync, wait.Poll*) report an ended context as
// wait.ErrWaitTimeout, "timed out waiting for the condition", which must
// not read as a timeout.
func interruption(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	var already *interruptedError
	var ie *waiters.InterruptedError
	switch {
	case errors.As(err, &already):
		return already
	case errors.As(err, &ie):
		return ie
	case !errors.Is(err, context.Canceled):
		return &waiters.InterruptedError{Cause: cause}
	default:
		return &interruptedError{msg: fmt.Sprintf("interrupted (%v): %v", cause, err), cause: cause}
	}
}

// halted is a Schedule's Halted for a run on ctx: once ctx is cancelled
// (a signal, stdout closed) no step starts any more, and each one not
// started says why ("the run was interrupted (received interrupt)").
func halted(ctx context.Context) func() string {
	return func() string {
		if !interrupted(ctx) {
			return ""
		}
		return fmt.Sprintf("the run was interrupted (%v) before it started", context.Cause(ctx))
	}
}

// runStep checks or applies step s. Once the step succeeded (its Check
// passed on a matching checkpoint, or its Apply returned nil) it calls
// applied, so that the Runner can start the dependents, and then does the
// step's bookkeeping: Record.Note (ObserveAbsent for a skipped step with
// objects still recorded absent) and then, for an applied step,
// Checkpoints.Put, which writes the noted entries and the checkpoint in
// one write of the step's record shard (Record.CarryCheckpoint). A "done"
// checkpoint therefore always means the record was observed after the
// Apply it stands for; a SIGKILL before the Put
// leaves no done checkpoint, so the next run applies the step again (server-
// side apply of the same objects: no object changes) and observes it.
// EventDone (EventUnchanged) is emitted only after the bookkeeping, so a done
// event also means the checkpoint is written; a bookkeeping error makes
// the step failed (EventFailed instead) although its dependents may be
// running already. An EveryRun step is applied even on a matching
// checkpoint; when that Apply succeeds it is reported unchanged and its
// checkpoint is left as it is (no write).
func (r *Runner) runStep(ctx context.Context, s *Step, idx int, emit func(Event), applied func()) (EventType, error) {
	hash := r.InputHash(s)
	cp, ok := r.Checkpoints.Get(s.ID)
	converged := ok && cp.InputHash == hash && cp.Result == "done"
	if converged && s.EveryRun {
		emit(Event{Type: EventStarted, Step: s.ID, Title: s.Title, Index: idx, Message: "runs on every run"})
	} else if converged {
		if ev, end, err := r.recheck(ctx, s, idx, hash, emit, applied); end {
			return ev, err
		}
	} else if ok && cp.InputHash != hash {
		emit(Event{Type: EventStarted, Step: s.ID, Title: s.Title, Index: idx, Message: "inputs changed"})
	} else {
		emit(Event{Type: EventStarted, Step: s.ID, Title: s.Title, Index: idx})
	}
	t0 := time.Now()
	fail := func(err error, d time.Duration) (EventType, error) {
		emit(failedEvent(s.ID, s.Title, idx, err, d))
		return EventFailed, err
	}
	if !s.ReadOnly && r.Record != nil {
		// The first step that applies stores the run's inventory as the
		// installed one (InstalledInventoryConfigMap), when it changed.
		if err := r.Record.SaveInstalled(ctx); err != nil {
			return fail(err, time.Since(t0))
		}
	}
	d, err := r.applyStep(ctx, s, t0, applied)
	if err == nil {
		if err = r.prune(ctx, s); err != nil {
			d = time.Since(t0)
		}
	}
	if err != nil {
		if interrupted(ctx) && wait.Interrupted(err) {
			err = interruption(ctx, err)
		} else {
			// status reports the step as failed until a run succeeds.
			_ = r.Checkpoints.Put(kube.WithRequestTag(ctx, "checkpoint"), Checkpoint{Step: s.ID, InputHash: hash, ToolVersion: r.ToolVersion, Result: "failed", StartedAt: t0.UTC(), DurationMS: d.Milliseconds(), Error: engine.CutError(err.Error())})
		}
		_ = r.saveRecord(ctx) // the step's error is the one to report
		return fail(err, d)
	}
	if converged && s.EveryRun {
		// An EveryRun step that succeeded again on the same inputs: its
		// checkpoint already says so, and a converged re-run writes
		// nothing.
		if err := r.saveRecord(ctx); err != nil {
			return fail(stateWriteErr(ctx, "record objects", err), d)
		}
		emit(Event{Type: EventUnchanged, Step: s.ID, Title: s.Title, Index: idx, Duration: d})
		return EventUnchanged, nil
	}
	cp = Checkpoint{Step: s.ID, InputHash: hash, ToolVersion: r.ToolVersion, Result: "done", StartedAt: t0.UTC(), DurationMS: d.Milliseconds()}
	if err := r.Checkpoints.Put(kube.WithRequestTag(ctx, "checkpoint"), cp); err != nil {
		return fail(stateWriteErr(ctx, "checkpoint", err), d)
	}
	if err := r.saveRecord(ctx); err != nil {
		return fail(stateWriteErr(ctx, "record objects", err), d)
	}
	emit(Event{Type: EventDone, Step: s.ID, Title: s.Title, Index: idx, Duration: d})
	return EventDone, nil
}

// recheck is runStep for a step whose checkpoint matches its inputs: its
// live Check decides. Still as wanted, it ends the step (end) unchanged,
// after recording objects still recorded absent. Otherwise it emits the
// step's start with why it is re-applied and marks the checkpoint
// applying; end is then false, unless that mark fails.
func (r *Runner) recheck(ctx context.Context, s *Step, idx int, hash string, emit func(Event), applied func()) (ev EventType, end bool, err error) {
	t0 := time.Now()
	fail := func(err error) (EventType, bool, error) {
		emit(failedEvent(s.ID, s.Title, idx, err, time.Since(t0)))
		return EventFailed, true, err
	}
	live, msg, err := s.check(kube.ViewReads(ctx), r.Env)
	if (err != nil || !live) && r.Env.Clients.ViewOpen() {
		// The run's read view answers as of the run's first reads; a
		// cluster still settling (operators reconciling after a killed
		// run) may have moved on since. A step is re-applied only on a
		// verdict read now.
		live, msg, err = s.check(ctx, r.Env)
	}
	if err == nil && live {
		// What an earlier run created and the inventory no longer lists
		// is not the end state either (Removal.Prune).
		if m := r.droppedMessage(s); m != "" {
			live, msg = false, m
		}
	}
	if err == nil && live {
		applied()
		// Objects still recorded absent: a kill between Apply and the
		// record's note, or an operator that created them later. Reads only
		// those; none (the usual no-op re-run): no request.
		if r.Record != nil && r.Record.HasAbsent(r.Env, s) {
			if err := r.Record.ObserveAbsent(ctx, r.Env, s); err != nil {
				return fail(fmt.Errorf("record objects: %w", err))
			}
		}
		emit(Event{Type: EventUnchanged, Step: s.ID, Title: s.Title, Index: idx, Duration: time.Since(t0)})
		return EventUnchanged, true, nil
	}
	if interrupted(ctx) {
		// A Check cut by the interruption says nothing of the live state:
		// never a reason to re-apply; the checkpoint stays as it was.
		return fail(&interruptedError{msg: fmt.Sprintf("interrupted (%v) while its live Check ran; its checkpoint is unchanged", context.Cause(ctx)), cause: context.Cause(ctx)})
	}
	if err != nil {
		msg = "check failed: " + err.Error()
	}
	emit(Event{Type: EventStarted, Step: s.ID, Title: s.Title, Index: idx, Message: "re-applying: " + msg})
	// Until this Apply is observed, the step is not done (see
	// engine.ResultApplying); no record entry may outlive a kill here.
	if err := r.Checkpoints.Put(ctx, Checkpoint{Step: s.ID, InputHash: hash, ToolVersion: r.ToolVersion, Result: engine.ResultApplying, StartedAt: time.Now().UTC()}); err != nil {
		return fail(stateWriteErr(ctx, "checkpoint", err))
	}
	return "", false, nil
}

// stateWriteErr is the step's error when a write of maasctl's own state
// (what, a checkpoint or the record of its objects) failed with err. When
// the run was interrupted (a signal, stdout closed) it says only that: the
// record store returns the joined errors of every pending shard write, so
// each step would otherwise repeat every other step's "context canceled".
func stateWriteErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted (%v) before its %s was written: run again to finish it", context.Cause(ctx), what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// saveRecord writes what Record.Note changed that no checkpoint carried
// (a step without a checkpoint write, or whose checkpoint the ConfigMap
// holds). Nothing changed: no request.
func (r *Runner) saveRecord(ctx context.Context) error {
	if r.Record == nil {
		return nil
	}
	return r.Record.Save(kube.WithRequestTag(ctx, "record"))
}

// StepTimeoutError is a step's error when its timeout (the inventory's
// waitTimeoutSeconds, or --timeout) ran out during an API request or other
// work rather than inside a wait, which returns a waiters.TimeoutError
// instead. Err is what the step got: client-go words a request cut by the
// deadline as "unexpected error when reading response body. Please retry.
// Original error: context deadline exceeded" (k8s.io/client-go/rest,
// Request.transformResponse). It counts as a timeout, as a wait's does
// (IsStepTimeout; maasctl's exit code 4).
type StepTimeoutError struct {
	Timeout time.Duration
	Err     error
}

func (e *StepTimeoutError) Error() string {
	return fmt.Sprintf("step timeout (%s) reached: %v", e.Timeout, e.Err)
}

func (e *StepTimeoutError) Unwrap() error { return e.Err }

// IsStepTimeout reports whether err is, or wraps, a StepTimeoutError.
func IsStepTimeout(err error) bool {
	var t *StepTimeoutError
	return errors.As(err, &t)
}

// applyStep runs the step's Apply within its timeout and records the
// objects it created (also after a failure). d is how long the Apply took
// since t0.
func (r *Runner) applyStep(ctx context.Context, s *Step, t0 time.Time, applied func()) (d time.Duration, err error) {
	sctx, cancel := context.WithTimeout(ctx, stepTimeout(s, r.Env))
	if s.ReadOnly {
		// A read-only step (preflight) judges the cluster as the checks
		// do: through the run's read view while it is open.
		sctx = kube.ViewReads(sctx)
	}
	err = s.apply(sctx, r.Env)
	if err != nil && !waiters.IsTimeout(err) && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
		err = &StepTimeoutError{Timeout: stepTimeout(s, r.Env), Err: err}
	}
	cancel()
	d = time.Since(t0)
	if err == nil {
		applied()
	}
	if r.Record != nil && ctx.Err() == nil {
		// Also after a failure: what the step created must be recorded.
		// Noted here, written with the step's checkpoint (its shard
		// carries it, Record.CarryCheckpoint) or, without one, by
		// runStep's Save.
		if rerr := r.Record.Note(kube.WithRequestTag(ctx, "record"), r.Env, s); rerr != nil && err == nil {
			err = fmt.Errorf("record objects: %w", rerr)
		}
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("record objects: %w", ctx.Err())
	}
	return d, err
}

// runStartedMessage says how many steps run and for which Gateway host,
// and where that host came from when the inventory leaves it unset (an
// empty gateway.hostname, --set gateway.hostname= included, means
// maas.<the cluster's apps domain>, GatewayHost).
func runStartedMessage(n int, e *Env) string {
	msg := fmt.Sprintf("%d steps", n)
	if e == nil || e.Facts.Host == "" {
		return msg
	}
	msg += " for Gateway host " + e.Facts.Host
	if e.Inv != nil && e.Inv.Gateway.Hostname == "" {
		msg += " (maas.<the cluster's apps domain>; set gateway.hostname to choose another)"
	}
	return msg
}
