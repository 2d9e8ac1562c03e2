package output

import "golang.org/x/sys/unix"

// quietTerminal stops the terminal behind fd from writing into the live
// view behind its back while it draws, and returns what puts the
// terminal's modes back. The view takes no input, so the terminal stays
// in its cooked mode and Ctrl-C still sends SIGINT (ISIG is kept); two of
// that mode's habits are turned off (termios(3), Linux n_tty):
//
//   - ECHO: a key typed during the run, and the "^C" echoed for Ctrl-C
//     (ECHOCTL), would be written at the cursor, into a row of the view.
//   - flushing on a signal character (NOFLSH set): without it the line
//     discipline discards the output queued and not yet read by the
//     terminal when Ctrl-C is typed, so part of a frame never reaches the
//     screen while the renderer, which draws each frame as a difference
//     from the last one with relative cursor moves, believes it did; every
//     later frame is then drawn off by the lost rows (seen as the view's
//     header overwritten by the interrupt notice).
//
// A terminal whose modes cannot be read is left alone.
func quietTerminal(fd uintptr) (restore func()) {
	old, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	if err != nil {
		return func() {}
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.NOFLSH
	if err := unix.IoctlSetTermios(int(fd), unix.TCSETS, &quiet); err != nil {
		return func() {}
	}
	return func() { _ = unix.IoctlSetTermios(int(fd), unix.TCSETS, old) }
}
