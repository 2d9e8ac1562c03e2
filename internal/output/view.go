package output

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"charm.land/bubbles/v2/spinner"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/maasctl/maasctl/steps/event"
)

// state is where a step of the live view stands.
type state int

const (
	running state = iota
	done
	unchanged
	failed
	blocked
)

// stepLine is what the view knows of one step: its place, when it
// started, what it waits on now (the last progress message) and, once it
// ended, its outcome and wall time.
type stepLine struct {
	id, title string
	index     int
	state     state
	started   time.Time
	waiting   string
	took      time.Duration
	message   string // the failure or the reason it was not run, in full
	fix       string // what resolves the failure (event.Event.Fix), or ""
}

// viewModel is the bubbletea model of the live view: a renderer of run
// events (package steps/event) and nothing else.
type viewModel struct {
	now     func() time.Time
	spin    spinner.Model
	width   int
	height  int
	begun   time.Time
	header  string
	notes   []string // progress events of no step (a Lease taken over), notices
	steps   map[string]*stepLine
	total   int
	summary *event.Summary
	final   bool // the last frame: left on the screen
}

// eventMsg carries one run event into the bubbletea program.
type eventMsg event.Event

// noticeMsg is a line the command wrote to stderr while the view draws.
type noticeMsg string

// endMsg stops the view when the run ended without a run-done event.
type endMsg struct{}

func newViewModel(now func() time.Time) *viewModel {
	return &viewModel{
		now:   now,
		spin:  spinner.New(spinner.WithSpinner(spinner.MiniDot)),
		width: 80, height: 24,
		begun: now(),
		steps: map[string]*stepLine{},
	}
}

func (m *viewModel) Init() tea.Cmd { return m.spin.Tick }

func (m *viewModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case spinner.TickMsg:
		var cmd tea.Cmd
		m.spin, cmd = m.spin.Update(msg)
		return m, cmd
	case eventMsg:
		m.apply(event.Event(msg))
		if msg.Type == event.RunDone {
			m.final = true
			return m, tea.Quit
		}
	case noticeMsg:
		m.notes = append(m.notes, string(msg))
	case endMsg:
		m.final = true
		return m, tea.Quit
	}
	return m, nil
}

// apply folds one event into the view's state.
func (m *viewModel) apply(ev event.Event) {
	if ev.Total > 0 {
		m.total = ev.Total
	}
	if ev.Step == "" {
		switch ev.Type {
		case event.RunStarted:
			m.header = "maasctl: running " + ev.Message
			if !ev.Time.IsZero() {
				m.begun = ev.Time
			}
		case event.Progress:
			m.notes = append(m.notes, ev.Message)
		case event.RunDone:
			m.summary = ev.Summary
		}
		return
	}
	s := m.steps[ev.Step]
	if s == nil {
		s = &stepLine{id: ev.Step, started: ev.Time}
		if s.started.IsZero() {
			s.started = m.now()
		}
		m.steps[ev.Step] = s
	}
	if ev.Title != "" {
		s.title = ev.Title
	}
	if ev.Index > 0 {
		s.index = ev.Index
	}
	s.took = ev.Duration
	switch ev.Type {
	case event.Started:
		s.state, s.waiting = running, oneLine(ev.Message)
	case event.Progress:
		s.waiting = oneLine(ev.Message)
	case event.Done:
		s.state = done
	case event.Unchanged:
		s.state = unchanged
	case event.Failed:
		s.state, s.message, s.fix = failed, ev.Message, ev.Fix
	case event.Blocked:
		s.state, s.message = blocked, ev.Message
	}
}

var (
	styleRun   = lipgloss.NewStyle().Foreground(lipgloss.Color("6"))
	styleOK    = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	styleFail  = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	styleSkip  = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	styleFaint = lipgloss.NewStyle().Faint(true)
)

// View is the frame to draw. The last one ends with an empty line: the
// renderer clears from the cursor down when the program exits, which
// would erase the footer.
func (m *viewModel) View() tea.View {
	if m.final {
		return tea.NewView(m.render() + "\n")
	}
	return tea.NewView(m.render())
}

// render lays out the header, one line per step in run order and the
// footer, each cut to the terminal's width so that nothing wraps; when
// the lines do not fit the height (one row kept for the cursor), the
// oldest finished steps fold into one line.
func (m *viewModel) render() string {
	var lines []string
	if m.header != "" {
		lines = append(lines, m.header)
	}
	for _, n := range m.notes {
		lines = append(lines, styleFaint.Render(n))
	}
	list, folded := fold(m.ordered(), len(lines)+2, m.height-1)
	if folded > 0 {
		lines = append(lines, styleFaint.Render("… "+Count(folded, "finished step", "finished steps")+" not shown"))
	}
	for _, s := range list {
		lines = append(lines, m.line(s))
	}
	lines = append(lines, m.footer())
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, m.width, "…")
	}
	return strings.Join(lines, "\n")
}

// fold drops the oldest finished steps from list until it fits rows with
// the other lines (extra: the header, notes, the fold line and the footer);
// running steps always stay. It returns what is left and how many it
// dropped.
func fold(list []*stepLine, extra, rows int) ([]*stepLine, int) {
	excess := len(list) + extra - rows
	if excess <= 0 {
		return list, 0
	}
	kept := make([]*stepLine, 0, len(list))
	folded := 0
	for _, s := range list {
		if folded < excess && s.state != running {
			folded++
			continue
		}
		kept = append(kept, s)
	}
	return kept, folded
}

func (m *viewModel) ordered() []*stepLine {
	list := make([]*stepLine, 0, len(m.steps))
	for _, s := range m.steps {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].index != list[j].index {
			return list[i].index < list[j].index
		}
		return list[i].id < list[j].id
	})
	return list
}

// line is one step: a spinner, its elapsed time and what it waits on
// while it runs; one collapsed line with its outcome once it ended.
func (m *viewModel) line(s *stepLine) string {
	pos := fmt.Sprintf("[%2d/%d]", s.index, m.total)
	name := fmt.Sprintf("%-26s", s.id)
	switch s.state {
	case done:
		return fmt.Sprintf("%s %s %s done %s", styleOK.Render("✓"), pos, name, dur(s.took))
	case unchanged:
		return fmt.Sprintf("%s %s %s unchanged %s", styleOK.Render("="), pos, name, dur(s.took))
	case failed:
		return fmt.Sprintf("%s %s %s failed after %s: %s", styleFail.Render("✗"), pos, name, dur(s.took), firstLine(s.message))
	case blocked:
		return fmt.Sprintf("%s %s %s not run: %s", styleSkip.Render("-"), pos, name, firstLine(s.message))
	}
	wait := s.waiting
	if wait == "" {
		wait = s.title
	}
	return fmt.Sprintf("%s %s %s %6s  %s", styleRun.Render(m.spin.View()), pos, name, clock(m.now().Sub(s.started)), styleFaint.Render(wait))
}

// footer counts the steps by state and names the slowest step so far
// (running steps count with their elapsed time).
func (m *viewModel) footer() string {
	var n [blocked + 1]int
	var slowest *stepLine
	var slowTook time.Duration
	for _, s := range m.steps {
		n[s.state]++
		took := s.took
		if s.state == running {
			took = m.now().Sub(s.started)
		}
		if slowest == nil || took > slowTook || (took == slowTook && s.index < slowest.index) {
			slowest, slowTook = s, took
		}
	}
	elapsed := m.now().Sub(m.begun)
	if m.summary != nil {
		elapsed = m.summary.Duration
	}
	f := fmt.Sprintf("%d running · %d done · %d unchanged · %d failed · %d not run", n[running], n[done], n[unchanged], n[failed], n[blocked])
	if waiting := m.total - len(m.steps); waiting > 0 {
		f += fmt.Sprintf(" · %d to go", waiting)
	}
	f += " │ elapsed " + clock(elapsed)
	if slowest != nil {
		f += " │ slowest " + slowest.id + " " + clock(slowTook)
	}
	return styleFaint.Render("─── ") + f
}

// failures is what the view prints below itself when it ends: every
// failed step with its full message and, on its own line, its fix.
func (m *viewModel) failures() string {
	var b strings.Builder
	for _, s := range m.ordered() {
		if s.state == failed {
			fmt.Fprintf(&b, "\n%s %s failed after %s:\n  %s\n", styleFail.Render("✗"), s.id, dur(s.took), strings.ReplaceAll(s.message, "\n", "\n  "))
			if s.fix != "" {
				fmt.Fprintf(&b, "  fix: %s\n", s.fix)
			}
		}
	}
	if m.summary != nil {
		fmt.Fprintf(&b, "maasctl: %d done, %d unchanged, %d failed, %d not run in %s (API requests: %s)\n",
			len(m.summary.Done), len(m.summary.Unchanged), len(m.summary.Failed), len(m.summary.Blocked), dur(m.summary.Duration), m.summary.RequestsText())
	}
	return b.String()
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// clock writes a duration as a person reads a timer: 7s, 1m05s, 1h02m.
// Like a stopwatch it counts whole seconds passed (truncates): rounded, a
// step that failed after 584ms had shown 1s running, more than its result
// said.
func clock(d time.Duration) string {
	d = d.Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// view runs the bubbletea program of the live view on a terminal.
type view struct {
	model   *viewModel
	prog    *tea.Program
	ended   chan struct{}
	w       io.Writer
	restore func() // the terminal's modes before the view (quietTerminal)
}

// termFile lets bubbletea see the terminal behind w (a writer with an Fd
// method, like cmd/maasctl's pipe guard) for its size and SIGWINCH, while
// every byte still goes through w. It is never read: the view takes no
// input, so the terminal stays in its cooked mode and Ctrl-C still sends
// SIGINT to the process group, handled where it was before.
type termFile struct {
	io.Writer
	fd uintptr
}

func (termFile) Read([]byte) (int, error) { return 0, io.EOF }
func (termFile) Close() error             { return nil }
func (t termFile) Fd() uintptr            { return t.fd }

// startView starts the live view on the terminal fd behind w at the first
// event. Its program takes no input and installs no signal handler
// (tea.WithInput(nil), tea.WithoutSignalHandler): SIGINT and SIGTERM
// reach the run's own handler (cancel the run's context, release the
// Lease) and the view keeps drawing the steps as they stop. While it
// draws, the terminal echoes nothing and keeps its queued output on
// Ctrl-C (quietTerminal); close and Abandon put its modes back.
func startView(w io.Writer, fd uintptr, now func() time.Time) *view {
	m := newViewModel(now)
	v := &view{model: m, ended: make(chan struct{}), w: w, restore: quietTerminal(fd)}
	v.prog = tea.NewProgram(m,
		tea.WithOutput(termFile{Writer: w, fd: fd}),
		tea.WithInput(nil),
		tea.WithoutSignalHandler(),
	)
	go func() {
		defer close(v.ended)
		_, _ = v.prog.Run()
	}()
	current.Lock()
	current.v = v
	current.Unlock()
	return v
}

func (v *view) emit(ev event.Event) { v.prog.Send(eventMsg(ev)) }

// close stops the view (drawn one last time, left on the screen) and
// prints the failed steps' full messages below it.
func (v *view) close() {
	current.Lock()
	if current.v == v {
		current.v = nil
	}
	current.Unlock()
	v.prog.Send(endMsg{})
	<-v.ended
	v.restore()
	fmt.Fprint(v.w, v.model.failures())
}
