package steps

import (
	"sort"
	"sync"
	"time"
)

// nodeState is a node's state in a schedule.
type nodeState int

const (
	nodePending nodeState = iota
	nodeRunning
	// nodeReleased: the node's work succeeded and its dependents may
	// start, while its bookkeeping still runs.
	nodeReleased
	nodeDone
	nodeFailed
	nodeBlocked
)

// schedule runs a DAG of nodes: forward for install (a node's deps are the
// steps it comes after), backward for uninstall (its deps are the steps
// that depend on it). It is the one loop of both: independent nodes run in
// parallel (one at a time when serial), a node starts once every
// dependency inside the schedule is released or done, and a node whose
// dependency failed or was blocked is blocked without running.
type schedule struct {
	// ids are the nodes in priority order: of the nodes free at the same
	// moment, the earlier one starts first (serial: the only one).
	ids []string
	// deps are each node's dependencies; IDs outside ids are ignored.
	deps map[string][]string
	// serial runs one node at a time, each with its bookkeeping.
	serial bool
	// stopOnFailure blocks every node not started yet once one failed.
	stopOnFailure bool
	// run does one node's work. It calls release once the dependents may
	// start (ignored when serial) and returns the node's result.
	run func(id string, release func()) (EventType, error)
	// blocked is told of each blocked node and the dependency (or the
	// failed node, with stopOnFailure) that blocked it.
	blocked func(id, cause string)
}

// nodeResult is how a node ended.
type nodeResult struct {
	state nodeState
	event EventType // EventDone, EventUnchanged, EventFailed or EventBlocked
	err   error
}

// execute runs the schedule to the end and returns every node's result.
func (sc *schedule) execute() map[string]nodeResult {
	in := map[string]bool{}
	for _, id := range sc.ids {
		in[id] = true
	}
	var (
		mu       sync.Mutex
		state    = map[string]nodeState{}
		results  = map[string]nodeResult{}
		finished = make(chan struct{}, len(sc.ids))
		wg       sync.WaitGroup
		running  int
		failed   string
	)
	// depsOf says whether id may start now, or which dependency blocks it.
	depsOf := func(id string) (ready bool, cause string) {
		if failed != "" && sc.stopOnFailure {
			return false, failed
		}
		ready = true
		for _, d := range sc.deps[id] {
			if !in[d] {
				continue
			}
			switch state[d] {
			case nodeReleased, nodeDone:
			case nodeFailed, nodeBlocked:
				return false, d
			default:
				ready = false
			}
		}
		return ready, ""
	}
	start := func(id string) {
		state[id] = nodeRunning
		running++
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			signal := func(st nodeState) {
				once.Do(func() {
					mu.Lock()
					state[id] = st
					mu.Unlock()
					finished <- struct{}{}
				})
			}
			release := func() {
				if !sc.serial {
					signal(nodeReleased)
				}
			}
			ev, err := sc.run(id, release)
			res := nodeResult{state: nodeDone, event: ev, err: err}
			if err != nil {
				res.state = nodeFailed
			}
			mu.Lock()
			results[id] = res
			if err != nil && failed == "" {
				failed = id
			}
			mu.Unlock()
			// A failure after the release (bookkeeping) keeps the node
			// released for scheduling: its dependents already started.
			signal(res.state)
		}()
	}
	// launch starts or blocks what it can; it reports whether anything
	// changed, so blocked nodes can block their dependents in turn.
	launch := func() bool {
		changed := false
		for _, id := range sc.ids {
			if state[id] != nodePending {
				continue
			}
			ready, cause := depsOf(id)
			if cause != "" {
				state[id] = nodeBlocked
				results[id] = nodeResult{state: nodeBlocked, event: EventBlocked}
				if sc.blocked != nil {
					sc.blocked(id, cause)
				}
				changed = true
				continue
			}
			if !ready {
				continue
			}
			if sc.serial && running > 0 {
				return changed
			}
			start(id)
			changed = true
		}
		return changed
	}
	mu.Lock()
	for launch() {
	}
	for running > 0 {
		mu.Unlock()
		<-finished
		mu.Lock()
		running--
		for launch() {
		}
	}
	mu.Unlock()
	// Every node's bookkeeping is over before the schedule ends.
	wg.Wait()
	return results
}

// emitter stamps events with the time and the run's total and passes them
// to emit one at a time (emit may be nil).
func emitter(emit func(Event), total int) func(Event) {
	var mu sync.Mutex
	return func(ev Event) {
		ev.Time = time.Now()
		ev.Total = total
		mu.Lock()
		defer mu.Unlock()
		if emit != nil {
			emit(ev)
		}
	}
}

// summarize sorts the results of ids into a Summary and the RunError of
// the failed and blocked nodes (nil when none).
func summarize(ids []string, results map[string]nodeResult) (*Summary, *RunError) {
	sum := &Summary{}
	var runErr RunError
	for _, id := range ids {
		r, ok := results[id]
		if !ok {
			continue
		}
		switch {
		case r.state == nodeBlocked:
			sum.Blocked = append(sum.Blocked, id)
			runErr.Blocked = append(runErr.Blocked, id)
		case r.err != nil:
			sum.Failed = append(sum.Failed, id)
			runErr.Failed = append(runErr.Failed, &StepError{Step: id, Err: r.err})
		case r.event == EventUnchanged:
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
