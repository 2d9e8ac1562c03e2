package steps

import "github.com/maasctl/maasctl/steps/event"

// The run events live in package event (imported by the renderers); these
// names keep the API of package steps.
type (
	// EventType is event.Type.
	EventType = event.Type
	// Event is event.Event.
	Event = event.Event
	// Summary is event.Summary.
	Summary = event.Summary
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
