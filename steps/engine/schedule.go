package engine

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/maasctl/maasctl/steps/event"
)

// NodeState is a node's state in a schedule.
type NodeState int

// Node states.
const (
	NodePending NodeState = iota
	NodeRunning
	// NodeReleased: the node's work succeeded and its dependents may
	// start, while its bookkeeping still runs.
	NodeReleased
	NodeDone
	NodeFailed
	NodeBlocked
)

// Schedule runs a DAG of nodes: forward for install (a node's deps are the
// steps it comes after), backward for uninstall (its deps are the steps
// that depend on it). It is the one loop of both: independent nodes run in
// parallel (one at a time when serial), a node starts once every
// dependency inside the schedule is released or done, and a node whose
// dependency failed or was blocked is blocked without running.
type Schedule struct {
	// IDs are the nodes in priority order: of the nodes free at the same
	// moment, the earlier one starts first (serial: the only one).
	IDs []string
	// Deps are each node's dependencies; IDs outside IDs are ignored.
	Deps map[string][]string
	// Serial runs one node at a time, each with its bookkeeping.
	Serial bool
	// StopOnFailure blocks every node not started yet once one failed.
	StopOnFailure bool
	// Run does one node's work. It calls release once the dependents may
	// start (ignored when serial) and returns the node's result.
	Run func(id string, release func()) (event.Type, error)
	// Blocked is told of each blocked node and the dependency (or the
	// failed node, with stopOnFailure) that blocked it, or Halted's cause.
	Blocked func(id, cause string)
	// Halted, when set and returning a cause ("" while the run goes on),
	// stops the schedule from starting anything more: every node not
	// started yet is blocked with that cause (an interrupted run starts no
	// step after Ctrl-C), while the running ones finish.
	Halted func() string
}

// NodeResult is how a node ended.
type NodeResult struct {
	State NodeState
	// Event is the node's outcome: event.Done, event.Unchanged,
	// event.Failed or event.Blocked.
	Event event.Type
	Err   error
}

// Execute runs the schedule to the end and returns every node's result.
func (sc *Schedule) Execute() map[string]NodeResult {
	x := &execution{sc: sc, in: map[string]bool{}, state: map[string]NodeState{}, results: map[string]NodeResult{},
		finished: make(chan struct{}, len(sc.IDs))}
	for _, id := range sc.IDs {
		x.in[id] = true
	}
	x.mu.Lock()
	for x.launch() {
	}
	for x.running > 0 {
		x.mu.Unlock()
		<-x.finished
		x.mu.Lock()
		x.running--
		for x.launch() {
		}
	}
	x.mu.Unlock()
	// Every node's bookkeeping is over before the schedule ends.
	x.wg.Wait()
	return x.results
}

// execution is one Execute; mu guards everything but sc, in and wg.
type execution struct {
	sc       *Schedule
	in       map[string]bool
	mu       sync.Mutex
	state    map[string]NodeState
	results  map[string]NodeResult
	finished chan struct{}
	wg       sync.WaitGroup
	running  int
	failed   string // the first node that failed
}

// ready says whether id may start now, or which node blocks it.
func (x *execution) ready(id string) (ready bool, cause string) {
	if x.failed != "" && x.sc.StopOnFailure {
		return false, x.failed
	}
	if x.sc.Halted != nil {
		if c := x.sc.Halted(); c != "" {
			return false, c
		}
	}
	ready = true
	for _, d := range x.sc.Deps[id] {
		if !x.in[d] {
			continue
		}
		switch x.state[d] {
		case NodeReleased, NodeDone:
		case NodeFailed, NodeBlocked:
			return false, d
		default:
			ready = false
		}
	}
	return ready, ""
}

// launch starts or blocks what it can; it reports whether anything
// changed, so blocked nodes can block their dependents in turn.
func (x *execution) launch() bool {
	changed := false
	for _, id := range x.sc.IDs {
		if x.state[id] != NodePending {
			continue
		}
		ready, cause := x.ready(id)
		if cause != "" {
			x.state[id] = NodeBlocked
			x.results[id] = NodeResult{State: NodeBlocked, Event: event.Blocked}
			if x.sc.Blocked != nil {
				x.sc.Blocked(id, cause)
			}
			changed = true
			continue
		}
		if !ready {
			continue
		}
		if x.sc.Serial && x.running > 0 {
			return changed
		}
		x.start(id)
		changed = true
	}
	return changed
}

// start runs node id in its own goroutine.
func (x *execution) start(id string) {
	x.state[id] = NodeRunning
	x.running++
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		var once sync.Once
		signal := func(st NodeState) {
			once.Do(func() {
				x.mu.Lock()
				x.state[id] = st
				x.mu.Unlock()
				x.finished <- struct{}{}
			})
		}
		release := func() {
			if !x.sc.Serial {
				signal(NodeReleased)
			}
		}
		ev, err := x.sc.Run(id, release)
		res := NodeResult{State: NodeDone, Event: ev, Err: err}
		if err != nil {
			res.State = NodeFailed
		}
		x.mu.Lock()
		x.results[id] = res
		if err != nil && x.failed == "" {
			x.failed = id
		}
		x.mu.Unlock()
		// A failure after the release (bookkeeping) keeps the node
		// released for scheduling: its dependents already started.
		signal(res.State)
	}()
}

// Emitter stamps events with the time and the run's total and passes them
// to emit one at a time (emit may be nil).
func Emitter(emit func(event.Event), total int) func(event.Event) {
	var mu sync.Mutex
	return func(ev event.Event) {
		ev.Time = time.Now()
		ev.Total = total
		mu.Lock()
		defer mu.Unlock()
		if emit != nil {
			emit(ev)
		}
	}
}

// Summarize sorts the results of ids into a Summary and the RunError of
// the failed and blocked nodes (nil when none).
func Summarize(ids []string, results map[string]NodeResult) (*event.Summary, *RunError) {
	sum := &event.Summary{}
	var runErr RunError
	for _, id := range ids {
		r, ok := results[id]
		if !ok {
			continue
		}
		switch {
		case r.State == NodeBlocked:
			sum.Blocked = append(sum.Blocked, id)
			runErr.Blocked = append(runErr.Blocked, id)
		case r.Err != nil:
			sum.Failed = append(sum.Failed, id)
			runErr.Failed = append(runErr.Failed, &StepError{Step: id, Err: r.Err})
		case r.Event == event.Unchanged:
			sum.Unchanged = append(sum.Unchanged, id)
		default:
			sum.Done = append(sum.Done, id)
		}
	}
	sortStrings(sum.Done, sum.Unchanged, sum.Failed, sum.Blocked)
	if len(runErr.Failed) == 0 && len(runErr.Blocked) == 0 {
		return sum, nil
	}
	return sum, &runErr
}

func sortStrings(lists ...[]string) {
	for _, l := range lists {
		sort.Strings(l)
	}
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
		msg += fmt.Sprintf("\n  not run (a dependency failed, or the run was interrupted): %v", e.Blocked)
	}
	return msg
}
