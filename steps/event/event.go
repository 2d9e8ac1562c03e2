// Package event holds the typed events of a maasctl run and its summary:
// what the engine (package steps) emits and the renderers
// (internal/output) read, as cli-utils keeps its apply events apart from
// the applier. It imports nothing of maasctl.
package event

import (
	"fmt"
	"time"
)

// Type is the kind of a run event.
type Type string

// Event types in the order a step emits them.
const (
	RunStarted Type = "run-started"
	Started    Type = "started"   // Apply begins (or, in uninstall, the removal)
	Progress   Type = "progress"  // applied an object, waiting on something
	Unchanged  Type = "unchanged" // checkpoint matches and live Check passed; nothing to remove
	Done       Type = "done"
	Failed     Type = "failed"
	Blocked    Type = "blocked" // a dependency failed
	RunDone    Type = "run-done"
)

// Event is one typed event of a run. It never carries secret values.
type Event struct {
	Time  time.Time `json:"time"`
	Type  Type      `json:"type"`
	Step  string    `json:"step,omitempty"`
	Title string    `json:"title,omitempty"`
	// Index and Total place the step in the run ([Index/Total]).
	Index int `json:"index,omitempty"`
	Total int `json:"total,omitempty"`
	// Message is progress text, the reason a step re-ran, or an error.
	Message string `json:"message,omitempty"`
	// Fix is, on a failed event, the command or setting that resolves the
	// failure, when its error is a Problem; "" otherwise.
	Fix string `json:"fix,omitempty"`
	// Duration is the step's (or run's) wall time.
	Duration time.Duration `json:"durationNs,omitempty"`
	// Summary is set on run-done.
	Summary *Summary `json:"summary,omitempty"`
}

// Summary describes a finished run: the step IDs by outcome, sorted.
type Summary struct {
	Done      []string      `json:"done"`
	Unchanged []string      `json:"unchanged"`
	Failed    []string      `json:"failed"`
	Blocked   []string      `json:"blocked"`
	Duration  time.Duration `json:"durationNs"`
	// Reads and Writes count API requests to managed objects (lock renewals
	// are counted apart in LockWrites).
	Reads      int64 `json:"reads"`
	Writes     int64 `json:"writes"`
	LockWrites int64 `json:"lockWrites"`
	// Shared counts the reads the run's read view (kube.ReadView)
	// answered from the run's earlier reads, without a request.
	Shared int64 `json:"sharedReads,omitempty"`
}

// RequestsText is the API request counts of s as the run's last line
// says them: "40 reads (83 more answered from the run's earlier reads), 0
// writes to managed objects".
func (s *Summary) RequestsText() string {
	reads := count(s.Reads, "read")
	if s.Shared > 0 {
		reads += fmt.Sprintf(" (%d more answered from the run's earlier reads)", s.Shared)
	}
	return fmt.Sprintf("%s, %s to managed objects", reads, count(s.Writes, "write"))
}

// count is "1 write", "0 writes", "2 writes".
func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
