//go:build !linux

package output

// quietTerminal is a no-op where maasctl does not set terminal modes
// (tty_linux.go says why it does on Linux).
func quietTerminal(uintptr) (restore func()) { return func() {} }
