package doctor

import (
	"fmt"
	"strings"
)

// Finding codes for the install steps' own live Checks (issue 17): every
// step of the registry has a rule, even where no verify check reads what
// it installs (the LeaderWorkerSetOperator instance, the DSCInitialization,
// the dashboard config, preflight's checks).
const (
	// CodeStepNotConverged: a step drifted, its last run failed or was
	// interrupted, or it never ran while the steps around it did.
	CodeStepNotConverged = "MAAS-D030"
	// CodeStepUnsure: a step's state cannot be judged (its Check could not
	// run, or the inventory changed since it ran).
	CodeStepUnsure = "MAAS-D031"
)

// StepState is one install step's state as 'maasctl status' computes it
// (steps.Status: its checkpoint checked against its live Check). State is
// done, pending, drifted, failed or unknown; Detail is the Check's message
// (never a secret); Ran says a checkpoint exists.
type StepState struct {
	ID     string
	Title  string
	State  string
	Detail string
	Reason string
	Ran    bool
}

// StepFindings turns the steps that are not done into findings: each
// names the step, what its Check saw and 'maasctl install', which re-runs
// exactly the steps that are not done (and resumes a failed or
// interrupted run). A cluster where no step ever ran gets one finding.
func StepFindings(steps []StepState) []Finding {
	ran := 0
	for _, s := range steps {
		if s.Ran {
			ran++
		}
	}
	if len(steps) > 0 && ran == 0 {
		return []Finding{finding(CodeStepNotConverged, "run record", fmt.Sprintf("none of the %d install steps has a checkpoint", len(steps)),
			"maasctl install has not run on this cluster (or its run record was deleted)",
			"maasctl install   (runs every step; 'maasctl plan' shows them first)")}
	}
	var out []Finding
	for _, s := range steps {
		obj := "step " + s.ID
		what := "what step " + s.ID + " (" + s.Title + ") installs"
		detail := s.Detail
		if detail == "" {
			detail = s.Reason
		}
		switch {
		case s.State == "done":
		case s.State == "drifted":
			out = append(out, finding(CodeStepNotConverged, obj, "drifted: "+detail,
				what+" no longer matches the inventory: it was changed or deleted after the install",
				"maasctl install   (re-applies the steps that are not done, "+s.ID+" among them)"))
		case s.State == "failed":
			out = append(out, finding(CodeStepNotConverged, obj, "last run failed: "+detail,
				"the last install run stopped at this step",
				"maasctl install   (resumes at "+s.ID+"; 'maasctl status' shows the error of the last run)"))
		case s.State == "pending" && s.Ran && strings.HasPrefix(s.Reason, "inputs changed"):
			out = append(out, finding(CodeStepUnsure, obj, s.Reason+": "+s.Detail,
				"the inventory (or the maasctl version) changed since the step ran, so its live state is not judged against what the next install would apply",
				"maasctl plan   (shows what the next maasctl install changes); then maasctl install"))
		case s.State == "pending":
			ev := "never ran: " + detail
			cause := "an install run stopped before this step"
			if s.Ran {
				ev, cause = "interrupted: "+detail, "a run re-applying this step stopped before it finished"
			}
			out = append(out, finding(CodeStepNotConverged, obj, ev, cause,
				"maasctl install   (resumes where the last run stopped)"))
		default:
			out = append(out, finding(CodeStepUnsure, obj, s.State+": "+detail,
				"the step's live Check could not run, so doctor cannot say whether "+what+" is as wanted",
				"fix what the evidence names (often: Vault not reachable or no token), then maasctl status"))
		}
	}
	return out
}
