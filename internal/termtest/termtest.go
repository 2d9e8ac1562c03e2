// Package termtest reads what a program draws on a pseudo-terminal into a
// terminal emulator (github.com/charmbracelet/x/vt), so that tests assert
// on the screen a person would see rather than on the bytes.
package termtest

import (
	"io"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// Screen is an emulated terminal of a fixed size fed from a pty's master.
type Screen struct {
	emu  *vt.SafeEmulator
	mu   sync.Mutex
	raw  strings.Builder
	done chan struct{}
}

// New starts reading master into a cols×rows screen until it reads EOF
// or an error (the pty closed).
func New(master io.Reader, cols, rows int) *Screen {
	s := &Screen{emu: vt.NewSafeEmulator(cols, rows), done: make(chan struct{})}
	go func() { _, _ = io.Copy(io.Discard, s.emu) }() // replies to queries
	go func() {
		defer close(s.done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				s.mu.Lock()
				s.raw.Write(buf[:n])
				s.mu.Unlock()
				_, _ = s.emu.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

// Resize changes the emulated terminal's size (resize the pty too).
func (s *Screen) Resize(cols, rows int) { s.emu.Resize(cols, rows) }

// Lines is the screen's text, one string per row, trailing blanks cut.
func (s *Screen) Lines() []string {
	lines := strings.Split(ansi.Strip(s.emu.Render()), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return lines
}

// Text is the screen's rows joined by newlines.
func (s *Screen) Text() string { return strings.Join(s.Lines(), "\n") }

// Raw is every byte read so far.
func (s *Screen) Raw() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

// WaitFor polls the screen until ok holds or timeout passes; it reports
// whether ok held.
func (s *Screen) WaitFor(timeout time.Duration, ok func(lines []string) bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if ok(s.Lines()) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Closed is closed once the master returned EOF or an error.
func (s *Screen) Closed() <-chan struct{} { return s.done }

// CursorHidden reports whether the program hid the cursor.
func (s *Screen) CursorHidden() bool { return s.emu.CursorHidden() }
