package steps

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// PreflightReport is the outcome of every check.
type PreflightReport struct {
	// Findings in check order.
	Findings []Finding `json:"findings"`
	// Passed names the checks without findings.
	Passed []string `json:"passed"`
}

// Errors returns the findings that stop an install (not ignored).
func (r *PreflightReport) Errors() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == SeverityError && !f.Ignored {
			out = append(out, f)
		}
	}
	return out
}

// Warnings returns warnings and ignored errors.
func (r *PreflightReport) Warnings() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == SeverityWarning || f.Ignored {
			out = append(out, f)
		}
	}
	return out
}

// Err is a *PreflightError when an error is not ignored, else nil.
func (r *PreflightReport) Err() error {
	if errs := r.Errors(); len(errs) > 0 {
		return &PreflightError{Findings: errs}
	}
	return nil
}

// PreflightError lists every failed check at once.
type PreflightError struct {
	Findings []Finding
}

// Error lists every failed check with its fix.
func (e *PreflightError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "preflight failed (%d problem(s); nothing was changed):", len(e.Findings))
	for _, f := range e.Findings {
		b.WriteString("\n  - " + f.String())
	}
	b.WriteString("\n  to proceed anyway, re-run with --ignore-preflight CHECK (or all)")
	return b.String()
}

// WriteText renders the report for people: one line per check (PASS, WARN,
// FAIL or IGNORED) with its fix, then a summary line.
func (r *PreflightReport) WriteText(w io.Writer) error {
	byCheck := map[string][]Finding{}
	for _, f := range r.Findings {
		byCheck[f.Check] = append(byCheck[f.Check], f)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range PreflightChecks() {
		fs := byCheck[c.Name]
		if len(fs) == 0 {
			fmt.Fprintf(tw, "PASS\t%s\t%s\n", c.Name, c.Title)
			continue
		}
		for _, f := range fs {
			tag := "WARN"
			switch {
			case f.Ignored:
				tag = "IGNORED"
			case f.Severity == SeverityError:
				tag = "FAIL"
			}
			msg := f.Message
			if f.Code != "" {
				msg = "[" + f.Code + "] " + msg
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", tag, c.Name, msg)
			if f.Fix != "" {
				fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "preflight: %d error(s), %d warning(s), %d check(s) passed\n", len(r.Errors()), len(r.Warnings()), len(r.Passed))
	return err
}
