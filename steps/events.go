package steps

import (
	"time"

	"github.com/maasctl/maasctl/steps/event"
)

// The run events live in package event (imported by the renderers); these
// names keep the API of package steps.
type (
	// EventType is event.Type.
	EventType = event.Type
	// Event is event.Event.
	Event = event.Event
	// Summary is event.Summary.
	Summary = event.Summary
	// Problem is event.Problem: a step error as what is wrong and its fix.
	Problem = event.Problem
)

// Event types (package event).
const (
	EventRunStarted = event.RunStarted
	EventStarted    = event.Started
	EventProgress   = event.Progress
	EventUnchanged  = event.Unchanged
	EventDone       = event.Done
	EventFailed     = event.Failed
	EventBlocked    = event.Blocked
	EventRunDone    = event.RunDone
)

// failedEvent is the failed event of a step (its ID, title and place):
// err's message and, when err is a Problem, its fix apart.
func failedEvent(id, title string, idx int, err error, d time.Duration) Event {
	msg, fix := event.MessageAndFix(err)
	return Event{Type: EventFailed, Step: id, Title: title, Index: idx, Message: msg, Fix: fix, Duration: d}
}
