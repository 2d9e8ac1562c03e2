package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/gather"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/steps"
)

// release detects the installed RHOAI release layout and the live
// DataScienceCluster name (steps.DetectRelease). A cluster that cannot be
// read for it is read as RHOAI 3.5 with the inventory's names, with a
// warning: verify, doctor and gather must still report on a broken cluster.
func (s *Session) release(ctx context.Context, clients *kube.Clients) release.Release {
	r, _ := s.releaseOrUnreachable(ctx, clients)
	return r
}

// releaseOrUnreachable is release, but an API server that cannot be
// reached at all, or that does not accept the credentials (401), is an
// error (ExplainAPIServer names the server, where its address or the
// credentials came from and the fix): verify and doctor then stop at
// their first request instead of failing every check, each with the same
// transport error or "Unauthorized", and doctor giving causes for objects
// it never read.
func (s *Session) releaseOrUnreachable(ctx context.Context, clients *kube.Clients) (release.Release, error) {
	r, err := steps.DetectRelease(ctx, clients, s.Inventory)
	if err != nil {
		var u *UnreachableError
		var ua *UnauthorizedError
		if e := s.ExplainAPIServer(err, ""); errors.As(e, &u) || errors.As(e, &ua) {
			return release.Release{}, err
		}
		fmt.Fprintf(s.opts.Stderr, "maasctl: warning: reading the RHOAI release layout: %v; checking the RHOAI 3.5 layout\n", err)
		return release.Release{}, nil
	}
	return r, nil
}

// dataPath completes the data-path options: the token comes from
// o.Token or the cluster configuration (token or token file) and is never
// printed; a --ca-file that cannot be read is a *UsageError.
func (s *Session) dataPath(ctx context.Context, o DataPathOptions) (DataPathOptions, error) {
	cfg, err := s.Config(ctx)
	if err != nil {
		return o, err
	}
	if o.Token == "" {
		o.Token = cfg.BearerToken
	}
	if o.Token == "" && cfg.BearerTokenFile != "" {
		b, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return DataPathOptions{}, fmt.Errorf("read the kubeconfig token file: %w", err)
		}
		o.Token = strings.TrimSpace(string(b))
	}
	if o.CAFile != "" {
		if _, err := os.Stat(o.CAFile); err != nil {
			return DataPathOptions{}, &UsageError{fmt.Errorf("--ca-file: %w", err)}
		}
	}
	return o, nil
}

// VerifyRequest are verify's inputs beside the session's.
type VerifyRequest struct {
	// Database also asks the database about maas-api's schema.
	Database bool
	// DataPath, when set, also proves the request path; Token may be
	// empty (the cluster configuration's token is used then).
	DataPath *DataPathOptions
	// Settle and Waiting are verify.Options': how long to read again
	// while the only failures are Kuadrant still syncing, and who is told
	// what is pending meanwhile.
	Settle  time.Duration
	Waiting func(pending string)
}

// Verify runs the read-only checks and, with DataPath, the request path.
func (s *Session) Verify(ctx context.Context, o VerifyRequest) (*VerifyReport, error) {
	clients, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	rel, err := s.releaseOrUnreachable(ctx, clients)
	if err != nil {
		return nil, err
	}
	vo := verify.Options{Inventory: s.Inventory, Reader: verify.NewReader(clients), Release: rel, Settle: o.Settle, Waiting: o.Waiting}
	if o.Database {
		vo.Schema = verify.JobSchemaProber{Clients: clients}
	}
	if o.DataPath != nil {
		dp, err := s.dataPath(ctx, *o.DataPath)
		if err != nil {
			return nil, err
		}
		dp.Probes = verify.ClusterProbes{Clients: clients}
		vo.DataPath = &dp
	}
	rep, _, err := verify.Run(ctx, vo)
	if rep != nil {
		// Fixes name the install command that re-applies the inventory
		// verify judged against, as doctor's do.
		cmd := s.InstallCommand()
		for i := range rep.Checks {
			rep.Checks[i].Fix = verify.NameInstallCommand(rep.Checks[i].Fix, cmd)
		}
	}
	return rep, err
}

// DoctorRequest are doctor's inputs beside the session's.
type DoctorRequest struct {
	// APIKey is the user's own MaaS key to test too (never printed).
	APIKey   string
	Database bool
	// DataPath, when set, also probes the endpoint.
	DataPath *DataPathOptions
	// Settle and Waiting are doctor.Options': how long to read again
	// while the only failed checks are Pending, and what to tell meanwhile.
	Settle  time.Duration
	Waiting func(pending string)
}

// Doctor computes the coded findings; its fixes name the install command
// that re-applies the session's inventory.
func (s *Session) Doctor(ctx context.Context, o DoctorRequest) (*DoctorReport, error) {
	clients, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	rel, err := s.releaseOrUnreachable(ctx, clients)
	if err != nil {
		return nil, err
	}
	do := doctor.Options{Inventory: s.Inventory, Reader: verify.NewReader(clients), Release: rel, APIKey: o.APIKey, InstallCommand: s.InstallCommand(),
		Settle: o.Settle, Waiting: o.Waiting}
	if o.Database {
		do.Schema = verify.JobSchemaProber{Clients: clients}
	}
	if o.DataPath != nil {
		dp, err := s.dataPath(ctx, *o.DataPath)
		if err != nil {
			return nil, err
		}
		do.DataPath = &dp
	}
	do.Steps, do.Uninstalled, do.StepsErr = s.stepStates(ctx)
	return doctor.Run(ctx, do)
}

// stepStates is every install step's state as Status computes it, for
// doctor's step findings (MAAS-D030/D031), and the mark of a finished
// uninstall (MAAS-D037).
func (s *Session) stepStates(ctx context.Context) ([]doctor.StepState, *doctor.Uninstalled, error) {
	rep, err := s.Status(ctx)
	if err != nil {
		return nil, nil, err
	}
	var un *doctor.Uninstalled
	if u := rep.Uninstalled; u != nil {
		un = &doctor.Uninstalled{At: u.At, Kept: u.Kept, Where: "ConfigMap " + steps.StateNamespace + "/" + steps.UninstalledConfigMap}
	}
	out := make([]doctor.StepState, 0, len(rep.Steps))
	for _, st := range rep.Steps {
		out = append(out, doctor.StepState{ID: st.ID, Title: st.Title, State: string(st.State), Detail: st.Detail, Reason: st.Reason, Ran: st.LastRun != nil})
	}
	return out, un, nil
}

// GatherRequest are gather's inputs beside the session's.
type GatherRequest struct {
	// Archive is the archive path ("" is ./maasctl-gather-<UTC time>.tar.gz).
	Archive   string
	DebugLogs []string
	TailLines int64
}

// Gather writes the support archive.
func (s *Session) Gather(ctx context.Context, o GatherRequest) (*GatherResult, error) {
	clients, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	return gather.Gather(ctx, gather.Options{
		Inventory: s.Inventory, Reader: verify.NewReader(clients), Release: s.release(ctx, clients), Logs: gather.PodLogs{Client: clients.Kube},
		Output: o.Archive, DebugLogs: o.DebugLogs, TailLines: o.TailLines, ToolVersion: s.opts.ToolVersion,
	})
}
