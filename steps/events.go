package steps

import "time"

// EventType is the kind of a run event.
type EventType string

// Event types in the order a step emits them.
const (
	EventRunStarted EventType = "run-started"
	EventStarted    EventType = "started"   // Apply begins
	EventProgress   EventType = "progress"  // applied an object, waiting on something
	EventSkipped    EventType = "unchanged" // checkpoint matches and live Check passed
	EventDone       EventType = "done"
	EventFailed     EventType = "failed"
	EventBlocked    EventType = "blocked" // a dependency failed
	EventRunDone    EventType = "run-done"
)

// Event is one typed event of a run. It never carries secret values.
type Event struct {
	Time  time.Time `json:"time"`
	Type  EventType `json:"type"`
	Step  string    `json:"step,omitempty"`
	Title string    `json:"title,omitempty"`
	// Index and Total place the step in the run ([Index/Total]).
	Index int `json:"index,omitempty"`
	Total int `json:"total,omitempty"`
	// Message is progress text, the reason a step re-ran, or an error.
	Message string `json:"message,omitempty"`
	// Duration is the step's (or run's) wall time.
	Duration time.Duration `json:"durationNs,omitempty"`
	// Summary is set on run-done.
	Summary *Summary `json:"summary,omitempty"`
}

// Summary describes a finished run.
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
}
