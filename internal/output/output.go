// Package output renders run events for people and machines: a live view
// on a terminal (bubbletea), plain lines for CI logs, and JSON lines.
// What the user reads is kept apart from the debug log, which goes to a file.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/maasctl/maasctl/steps/event"
)

// Format names a renderer: auto, tty, plain or json.
type Format string

// Formats.
const (
	Auto  Format = "auto"
	TTY   Format = "tty"
	Plain Format = "plain"
	JSON  Format = "json"
)

// ParseFormat validates a --output value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Auto, TTY, Plain, JSON:
		return f, nil
	}
	return "", fmt.Errorf("--output %q: use one of auto, tty, plain, json", s)
}

// New returns an event renderer writing to w and a func that ends it,
// to call once the run returned. Auto picks tty when w is a terminal (a
// writer with an Fd method, like *os.File) and plain otherwise, so that a
// pipe or a file gets the plain lines, never terminal controls.
//
// tty on a terminal is the live view (view.go): one line per running step
// with a spinner, its elapsed time and what it waits on, one line per
// finished step and a footer; its end prints the failed steps' full
// messages below it. tty on a writer that is no terminal is the plain
// lines with colour. plain and json write one line per event and end at
// once.
func New(f Format, w io.Writer) (emit func(event.Event), end func()) {
	fd, isTerm := terminal(w)
	if f == Auto {
		f = Plain
		if isTerm {
			f = TTY
		}
	}
	switch {
	case f == JSON:
		enc := json.NewEncoder(w)
		return func(ev event.Event) { _ = enc.Encode(ev) }, func() {}
	case f == TTY && isTerm:
		return live(w, fd, time.Now)
	case f == TTY:
		return (&text{w: w, color: true}).render, func() {}
	default:
		return (&text{w: w}).render, func() {}
	}
}

// terminal reports the file descriptor behind w when it is a terminal.
func terminal(w io.Writer) (uintptr, bool) {
	if file, ok := w.(interface{ Fd() uintptr }); ok && term.IsTerminal(int(file.Fd())) {
		return file.Fd(), true
	}
	return 0, false
}

// live starts the view at the first event, so that a run that stops
// before any (a Lease held by another run) prints only its error.
func live(w io.Writer, fd uintptr, now func() time.Time) (func(event.Event), func()) {
	var mu sync.Mutex
	var v *view
	ended := false
	emit := func(ev event.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		if v == nil {
			v = startView(w, fd, now)
		}
		v.emit(ev)
	}
	end := func() {
		mu.Lock()
		defer mu.Unlock()
		if v != nil && !ended {
			v.close()
		}
		ended = true
	}
	return emit, end
}

// current is the live view drawing now, if any: one per process.
var current struct {
	sync.Mutex
	v *view
}

// Notices returns a writer for what a command says on stderr while a run
// may be drawing its live view (the signal handler's "stopping the running
// steps", a Vault renewal warning). When w is a terminal and a view is
// drawing, each write becomes a line of the view (kept in its last frame),
// since a line written under it would shift the frame and leave stale
// rows; otherwise it goes to w as it is.
func Notices(w io.Writer) io.Writer {
	_, isTerm := terminal(w)
	return &notices{w: w, term: isTerm}
}

// Abandon gives the terminal back when the process is about to exit
// without ending the run (a second Ctrl-C): the view stops being the
// destination of notices, and its cursor, hidden while it draws, shows
// again on a new line, so that the last message reads as a line of its
// own; the terminal's modes are put back. The view's last frame stays as
// it was drawn.
func Abandon() {
	current.Lock()
	defer current.Unlock()
	if v := current.v; v != nil {
		current.v = nil
		_, _ = io.WriteString(v.w, "\r\n\x1b[?25h")
		v.restore()
	}
}

type notices struct {
	w    io.Writer
	term bool
}

func (n *notices) Write(b []byte) (int, error) {
	current.Lock()
	defer current.Unlock()
	if n.term && current.v != nil {
		current.v.prog.Send(noticeMsg(strings.TrimRight(string(b), "\n")))
		return len(b), nil
	}
	return n.w.Write(b)
}

// Fd is the file descriptor behind w, so that a terminal stays visible.
func (n *notices) Fd() uintptr {
	if f, ok := n.w.(interface{ Fd() uintptr }); ok {
		return f.Fd()
	}
	return ^uintptr(0)
}

type text struct {
	w     io.Writer
	color bool
}

func (t *text) paint(code, s string) string {
	if !t.color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func dur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

func (t *text) render(ev event.Event) {
	pos := fmt.Sprintf("[%2d/%d]", ev.Index, ev.Total)
	switch ev.Type {
	case event.RunStarted:
		fmt.Fprintf(t.w, "maasctl: running %s\n", ev.Message)
	case event.Started:
		line := fmt.Sprintf("%s %s %-26s %s", pos, t.paint("36", "▶"), ev.Step, ev.Title)
		if ev.Message != "" {
			line += " (" + ev.Message + ")"
		}
		fmt.Fprintln(t.w, line)
	case event.Progress:
		// One line per progress message: a quoted condition message may
		// hold line breaks (a CEL error), which would start at column 0.
		fmt.Fprintf(t.w, "%s   %-26s %s\n", strings.Repeat(" ", len(pos)), ev.Step, t.paint("2", oneLine(ev.Message)))
	case event.Unchanged:
		fmt.Fprintf(t.w, "%s %s %-26s unchanged %s\n", pos, t.paint("32", "="), ev.Step, dur(ev.Duration))
	case event.Done:
		fmt.Fprintf(t.w, "%s %s %-26s done %s\n", pos, t.paint("32", "✓"), ev.Step, dur(ev.Duration))
	case event.Failed:
		fmt.Fprintf(t.w, "%s %s %-26s failed after %s: %s\n", pos, t.paint("31", "✗"), ev.Step, dur(ev.Duration), ev.Message)
		if ev.Fix != "" {
			// Its own line, named like a progress line, so that a log
			// grep for the step finds it.
			fmt.Fprintf(t.w, "%s   %-26s %s %s\n", strings.Repeat(" ", len(pos)), ev.Step, t.paint("33", "fix:"), ev.Fix)
		}
	case event.Blocked:
		fmt.Fprintf(t.w, "%s %s %-26s not run: %s\n", pos, t.paint("33", "-"), ev.Step, ev.Message)
	case event.RunDone:
		s := ev.Summary
		fmt.Fprintf(t.w, "maasctl: %d done, %d unchanged, %d failed, %d not run in %s (API requests: %s)\n",
			len(s.Done), len(s.Unchanged), len(s.Failed), len(s.Blocked), dur(s.Duration), s.RequestsText())
	}
}

// oneLine is s with each run of white space, line breaks included, made
// one space: a progress message on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Count is n followed by noun in the singular when n is 1 and in the
// plural otherwise: Count(1, "object", "objects") is "1 object",
// Count(0, "object", "objects") is "0 objects".
func Count(n int, singular, plural string) string {
	if n == 1 {
		return "1 " + singular
	}
	return fmt.Sprintf("%d %s", n, plural)
}
