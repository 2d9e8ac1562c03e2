package steps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/maasctl/maasctl/assets"
)

// Runner executes a Registry: independent steps run in parallel, each step
// starts when its dependencies are done. A step whose checkpoint matches its
// input hash and whose live Check passes is reported unchanged and not
// applied. A failed step blocks its dependents; other steps go on, so a
// re-run continues from where things stand.
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
	// Serial runs one step at a time, in dependency order; environment
	// variable MAASCTL_SERIAL=1 sets it too. Benchmarks use it to show what
	// running independent steps in parallel saves.
	Serial bool
}

// StepError is a step's failure.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("step %s: %v", e.Step, e.Err) }
func (e *StepError) Unwrap() error { return e.Err }

// RunError lists the steps that failed or were blocked.
type RunError struct {
	Failed  []*StepError
	Blocked []string
}

func (e *RunError) Error() string {
	msg := fmt.Sprintf("%d step(s) failed", len(e.Failed))
	for _, f := range e.Failed {
		msg += "\n  " + f.Error()
	}
	if len(e.Blocked) > 0 {
		msg += fmt.Sprintf("\n  not run because a dependency failed: %v", e.Blocked)
	}
	return msg
}

// InputHash is the hash of a step's inputs: tool version, the step's
// rendered objects and its HashExtra. It never covers a secret value.
func (r *Runner) InputHash(s *Step) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", r.ToolVersion, s.ID)
	if b, err := assets.YAML(r.Env.objects(s.ID)); err == nil {
		h.Write(b)
	}
	if s.HashExtra != nil {
		fmt.Fprintln(h, s.HashExtra(r.Env))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

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
	if r.Record != nil {
		if err := r.Record.Snapshot(ctx, r.Env, r.Registry); err != nil {
			return nil, err
		}
	}
	serial := r.Serial || os.Getenv("MAASCTL_SERIAL") == "1"
	var emitMu sync.Mutex
	emit := func(ev Event) {
		ev.Time = time.Now()
		ev.Total = len(selected)
		emitMu.Lock()
		defer emitMu.Unlock()
		if r.Emit != nil {
			r.Emit(ev)
		}
	}
	index := map[string]int{}
	for i, s := range selected {
		index[s.ID] = i + 1
	}
	title := map[string]string{}
	for _, s := range selected {
		title[s.ID] = s.Title
	}
	r.Env.Progress = func(id, msg string) {
		emit(Event{Type: EventProgress, Step: id, Title: title[id], Index: index[id], Message: msg})
	}
	emit(Event{Type: EventRunStarted, Message: fmt.Sprintf("%d steps", len(selected))})
	reads0, writes0 := r.Env.Clients.Requests.Reads(), r.Env.Clients.Requests.Writes()

	sum := &Summary{}
	var mu sync.Mutex
	state := map[string]string{} // done | failed | blocked
	finished := make(chan string, len(selected))
	running := 0
	started := map[string]bool{}
	var runErr RunError

	depsState := func(s *Step) (ready, blocked bool) {
		for _, d := range s.After {
			if len(r.Steps) > 0 && !r.Steps[d] {
				continue // not part of this run: --only was checked by the caller
			}
			switch state[d] {
			case "done":
			case "failed", "blocked":
				return false, true
			default:
				return false, false
			}
		}
		return true, false
	}
	launch := func() {
		for _, s := range selected {
			if started[s.ID] {
				continue
			}
			ready, blocked := depsState(s)
			if blocked {
				started[s.ID] = true
				state[s.ID] = "blocked"
				sum.Blocked = append(sum.Blocked, s.ID)
				runErr.Blocked = append(runErr.Blocked, s.ID)
				emit(Event{Type: EventBlocked, Step: s.ID, Title: s.Title, Index: index[s.ID], Message: "a dependency failed"})
				continue
			}
			if !ready {
				continue
			}
			if serial && running > 0 {
				return
			}
			started[s.ID] = true
			running++
			go func(s *Step) {
				res, err := r.runStep(ctx, s, index[s.ID], emit)
				mu.Lock()
				if err != nil {
					state[s.ID] = "failed"
					sum.Failed = append(sum.Failed, s.ID)
					runErr.Failed = append(runErr.Failed, &StepError{Step: s.ID, Err: err})
				} else {
					state[s.ID] = "done"
					if res == EventSkipped {
						sum.Unchanged = append(sum.Unchanged, s.ID)
					} else {
						sum.Done = append(sum.Done, s.ID)
					}
				}
				mu.Unlock()
				finished <- s.ID
			}(s)
		}
	}
	mu.Lock()
	launch()
	for running > 0 {
		mu.Unlock()
		<-finished
		mu.Lock()
		running--
		// Blocked steps may unblock others' blocked state: loop until stable.
		for {
			before := len(started)
			launch()
			if len(started) == before {
				break
			}
		}
	}
	mu.Unlock()
	sort.Strings(sum.Done)
	sort.Strings(sum.Unchanged)
	sort.Strings(sum.Failed)
	sort.Strings(sum.Blocked)
	sum.Duration = time.Since(start)
	sum.Reads = r.Env.Clients.Requests.Reads() - reads0
	sum.Writes = r.Env.Clients.Requests.Writes() - writes0
	emit(Event{Type: EventRunDone, Duration: sum.Duration, Summary: sum})
	if len(runErr.Failed) > 0 || len(runErr.Blocked) > 0 {
		return sum, &runErr
	}
	return sum, nil
}

func (r *Runner) runStep(ctx context.Context, s *Step, idx int, emit func(Event)) (EventType, error) {
	hash := r.InputHash(s)
	if cp, ok := r.Checkpoints.Get(s.ID); ok && cp.InputHash == hash && cp.Result == "done" {
		t0 := time.Now()
		live, msg, err := s.Check(ctx, r.Env)
		if err == nil && live {
			emit(Event{Type: EventSkipped, Step: s.ID, Title: s.Title, Index: idx, Duration: time.Since(t0)})
			return EventSkipped, nil
		}
		if err != nil {
			msg = "check failed: " + err.Error()
		}
		emit(Event{Type: EventStarted, Step: s.ID, Title: s.Title, Index: idx, Message: "re-applying: " + msg})
	} else if ok && cp.InputHash != hash {
		emit(Event{Type: EventStarted, Step: s.ID, Title: s.Title, Index: idx, Message: "inputs changed"})
	} else {
		emit(Event{Type: EventStarted, Step: s.ID, Title: s.Title, Index: idx})
	}
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout(s, r.Env))
	err := s.Apply(sctx, r.Env)
	cancel()
	d := time.Since(t0)
	if r.Record != nil && ctx.Err() == nil {
		// Also after a failure: what the step created must be recorded.
		if rerr := r.Record.Observe(ctx, r.Env, s.ID); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", err)
		} else {
			// status reports the step as failed until a run succeeds.
			_ = r.Checkpoints.Put(ctx, Checkpoint{Step: s.ID, InputHash: hash, ToolVersion: r.ToolVersion, Result: "failed", StartedAt: t0.UTC(), DurationMS: d.Milliseconds()})
		}
		emit(Event{Type: EventFailed, Step: s.ID, Title: s.Title, Index: idx, Message: err.Error(), Duration: d})
		return EventFailed, err
	}
	cp := Checkpoint{Step: s.ID, InputHash: hash, ToolVersion: r.ToolVersion, Result: "done", StartedAt: t0.UTC(), DurationMS: d.Milliseconds()}
	if err := r.Checkpoints.Put(ctx, cp); err != nil {
		emit(Event{Type: EventFailed, Step: s.ID, Title: s.Title, Index: idx, Message: err.Error(), Duration: d})
		return EventFailed, err
	}
	emit(Event{Type: EventDone, Step: s.ID, Title: s.Title, Index: idx, Duration: d})
	return EventDone, nil
}
