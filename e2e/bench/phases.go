package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/maasctl/maasctl/e2e/faultproxy"
)

// ApplyPhase is maasctl's server-side applies of one resource in a scale
// run, read from its debug log (--log-file): when the first and the last
// were sent, in seconds since the log's first line, and how long it was
// from the last one to the first apply of the next phase (or to the end
// of the log): the wait for these objects' owners, which on a 2-CPU
// machine is where a scale run's time goes (one simulated controller, one
// worker like the real one, works through the objects one by one).
type ApplyPhase struct {
	Resource string  `json:"resource"`
	Applies  int     `json:"applies"`
	First    float64 `json:"firstSeconds"`
	Last     float64 `json:"lastSeconds"`
	Until    float64 `json:"untilNextSeconds"`
}

// applyPhases reads a maasctl debug log (JSON lines; the "api request"
// entries of internal/kube carry method and path, ts is Unix seconds) and
// returns, in order of their first apply, the resources maasctl sent at
// least atLeast PATCH requests to (its server-side applies; checkpoint
// and run-record ConfigMaps are PATCHes too, hence the floor). Lines that
// are not JSON are skipped; an empty log gives no phases.
func applyPhases(r io.Reader, atLeast int) ([]ApplyPhase, error) {
	type line struct {
		Msg    string  `json:"msg"`
		TS     float64 `json:"ts"`
		Method string  `json:"method"`
		Path   string  `json:"path"`
	}
	by := map[string]*ApplyPhase{}
	var start, end float64
	seen := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l line
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.TS == 0 {
			continue
		}
		if !seen {
			start, seen = l.TS, true
		}
		end = l.TS
		if l.Msg != "api request" || l.Method != "PATCH" {
			continue
		}
		_, res := verbResource(faultproxy.Request{Method: l.Method, Path: l.Path})
		t := l.TS - start
		p := by[res]
		if p == nil {
			p = &ApplyPhase{Resource: res, First: t}
			by[res] = p
		}
		p.Applies++
		p.Last = t
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read maasctl log: %w", err)
	}
	var out []ApplyPhase
	for _, p := range by {
		if p.Applies >= atLeast {
			out = append(out, *p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
	for i := range out {
		next := end - start
		if i+1 < len(out) {
			next = out[i+1].First
		}
		out[i].Until = max(next-out[i].Last, 0)
	}
	return out, nil
}

// applyPhasesOf is applyPhases of the log file at path; nil when it
// cannot be read (the figure is then printed without phases).
func applyPhasesOf(path string, atLeast int) []ApplyPhase {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	ps, err := applyPhases(f, atLeast)
	if err != nil {
		return nil
	}
	return ps
}

// phasesText is ps on one line: each resource's applies, their span and
// the wait after them.
func phasesText(ps []ApplyPhase) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %d applies %.1f–%.1f s, then %.1f s", p.Resource, p.Applies, p.First, p.Last, p.Until))
	}
	return strings.Join(parts, "; ")
}
