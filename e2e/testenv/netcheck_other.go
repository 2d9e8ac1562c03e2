//go:build !linux

package testenv

import "errors"

// Connection is one TCP socket of a control plane process (Linux only).
type Connection struct {
	Component, Program, Local, Remote, State, NetNS string
	PID                                             int
}

// Connections needs /proc (Linux).
func (e *Env) Connections() ([]Connection, error) {
	return nil, errors.New("listing the control plane's sockets needs Linux /proc")
}

// LeavesLoopback is always true off Linux (nothing was checked).
func (c Connection) LeavesLoopback() bool { return true }
