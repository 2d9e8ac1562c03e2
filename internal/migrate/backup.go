package migrate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// Files of a backup directory.
const (
	ManifestFile = "manifest.json"
	StateFile    = "pre-upgrade-state.txt"
	JournalFile  = "journal.jsonl"
	PlanFile     = "plan.yaml"
	objectsDir   = "objects"
)

// Role says why an object is in a backup and what rollback does with it.
type Role string

// Roles.
const (
	// RoleTierConfig is a tier-to-group-mapping ConfigMap: deleted by the
	// migration, re-created by rollback.
	RoleTierConfig Role = "tier-config"
	// RoleOldPolicy is a tier-based gateway policy: deleted by the
	// migration, re-created by rollback.
	RoleOldPolicy Role = "old-policy"
	// RoleModel is an annotated LLMInferenceService: the migration removes
	// its tier annotation, rollback puts it back.
	RoleModel Role = "model"
	// RoleReference is backed up for the record (the guide backs it up) and
	// never changed.
	RoleReference Role = "reference"
)

// BackupEntry is one backed-up object.
type BackupEntry struct {
	File string    `json:"file"`
	Ref  ObjectRef `json:"ref"`
	Role Role      `json:"role"`
}

// Manifest indexes a backup directory (manifest.json).
type Manifest struct {
	// ID names the migration; created objects carry it in BackupAnnotation.
	ID            string        `json:"id"`
	Created       time.Time     `json:"created"`
	Gateway       string        `json:"gateway"`
	MaaSNamespace string        `json:"maasNamespace"`
	Entries       []BackupEntry `json:"entries"`
}

// Backup is an open backup directory.
type Backup struct {
	Dir      string
	Manifest Manifest
}

// WriteBackup creates dir (it must not exist, or be empty) and writes every
// object of st the guide backs up (Phase 2) as YAML, one file per object
// under objects/, the index manifest.json and the state summary
// pre-upgrade-state.txt. Objects are written as read, without
// managedFields. It writes only to the local file system.
func WriteBackup(dir, id string, st *State, now time.Time) (*Backup, error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("backup directory %s exists and is not empty; choose another --backup-dir", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, objectsDir), 0o700); err != nil {
		return nil, fmt.Errorf("create backup directory: %w", err)
	}
	b := &Backup{Dir: dir, Manifest: Manifest{
		ID: id, Created: now.UTC(), MaaSNamespace: st.MaaSNamespace,
		Gateway: st.Gateway.Namespace + "/" + st.Gateway.Name,
	}}
	add := func(u *unstructured.Unstructured, role Role) error {
		for _, e := range b.Manifest.Entries {
			if e.Ref.String() == key(u) {
				return nil
			}
		}
		name := strings.ToLower(u.GetKind())
		if u.GetNamespace() != "" {
			name += "_" + u.GetNamespace()
		}
		name += "_" + u.GetName() + ".yaml"
		c := u.DeepCopy()
		c.SetManagedFields(nil)
		data, err := yaml.Marshal(c.Object)
		if err != nil {
			return fmt.Errorf("encode %s: %w", key(u), err)
		}
		rel := filepath.Join(objectsDir, name)
		if err := writeFileSync(filepath.Join(dir, rel), data); err != nil {
			return err
		}
		b.Manifest.Entries = append(b.Manifest.Entries, BackupEntry{File: rel, Ref: refOf(u), Role: role})
		return nil
	}
	for _, u := range st.TierConfigMaps {
		if err := add(u, RoleTierConfig); err != nil {
			return nil, err
		}
	}
	for _, u := range st.OldPolicies() {
		if err := add(u, RoleOldPolicy); err != nil {
			return nil, err
		}
	}
	for _, u := range st.Models {
		if err := add(u, RoleModel); err != nil {
			return nil, err
		}
	}
	var refs []*unstructured.Unstructured
	for _, gp := range st.Policies {
		refs = append(refs, gp.Object)
	}
	refs = append(refs, st.GatewayNamespaceTRLPs...)
	refs = append(refs, st.OtherModels...)
	if st.ModelsAsService != nil {
		refs = append(refs, st.ModelsAsService)
	}
	for _, u := range refs {
		if err := add(u, RoleReference); err != nil {
			return nil, err
		}
	}
	if err := b.writeManifest(); err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(dir, StateFile), stateSummary(st, now)); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Backup) writeManifest() error {
	data, err := json.MarshalIndent(b.Manifest, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	return writeFileSync(filepath.Join(b.Dir, ManifestFile), append(data, '\n'))
}

// OpenBackup reads the manifest of a backup directory.
func OpenBackup(dir string) (*Backup, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("open backup %s: %w", dir, err)
	}
	b := &Backup{Dir: dir}
	if err := json.Unmarshal(data, &b.Manifest); err != nil {
		return nil, fmt.Errorf("open backup %s: %s: %w", dir, ManifestFile, err)
	}
	return b, nil
}

// Object reads one backed-up object. Integers stay int64, as the API
// machinery decodes them.
func (b *Backup) Object(e BackupEntry) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(filepath.Join(b.Dir, e.File))
	if err != nil {
		return nil, fmt.Errorf("read backup of %s: %w", e.Ref, err)
	}
	return decodeObject(data, e.File)
}

// decodeObject decodes one YAML or JSON object.
func decodeObject(data []byte, source string) (*unstructured.Unstructured, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s: empty document", source)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// WritePlan writes the objects the plan creates to plan.yaml.
func (b *Backup) WritePlan(p *Plan) error {
	data, err := PlanYAML(p)
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(b.Dir, PlanFile), data)
}

// JournalEntry is one change the migration or a rollback made, appended to
// journal.jsonl before the next change starts.
type JournalEntry struct {
	Time   time.Time `json:"time"`
	Action string    `json:"action"`
	Object ObjectRef `json:"object"`
	// Created is true for an apply that created the object (rollback
	// removes those).
	Created bool   `json:"created,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// Journal actions.
const (
	ActionApplied           = "applied"
	ActionDeleted           = "deleted"
	ActionAnnotationRemoved = "annotation-removed"
	ActionRestored          = "restored"
	ActionUnchanged         = "unchanged"
	ActionRemoved           = "removed"
)

// Record appends e to the journal and syncs it to disk.
func (b *Backup) Record(e JournalEntry) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode journal entry: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(b.Dir, JournalFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		_ = f.Close()
		return fmt.Errorf("write journal: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync journal: %w", err)
	}
	return f.Close()
}

// Journal reads every journal entry, oldest first (none when the
// migration made no change).
func (b *Backup) Journal() ([]JournalEntry, error) {
	f, err := os.Open(filepath.Join(b.Dir, JournalFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	defer f.Close()
	var out []JournalEntry
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var e JournalEntry
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				return nil, fmt.Errorf("journal line %d: %w", len(out)+1, jerr)
			}
			out = append(out, e)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read journal: %w", err)
		}
	}
}

// stateSummary is the guide's pre-upgrade snapshot: the date, the gateway
// policies, the TokenRateLimitPolicies of the Gateway's namespace, the tier
// ConfigMaps, the annotated models and the MaaS objects present.
func stateSummary(st *State, now time.Time) []byte {
	var buf bytes.Buffer
	fmt.Fprintln(&buf, "=== Pre-migration snapshot ===")
	fmt.Fprintf(&buf, "Date: %s\n", now.UTC().Format(time.RFC3339))
	fmt.Fprintf(&buf, "Gateway: %s/%s\n\n", st.Gateway.Namespace, st.Gateway.Name)
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tCLASS\tRESOURCEVERSION")
	for _, gp := range st.Policies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", gp.Object.GetKind(), gp.Object.GetNamespace(), gp.Object.GetName(), gp.Class, gp.Object.GetResourceVersion())
	}
	for _, u := range st.GatewayNamespaceTRLPs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.GetKind(), u.GetNamespace(), u.GetName(), "(in the gateway namespace)", u.GetResourceVersion())
	}
	for _, u := range st.TierConfigMaps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.GetKind(), u.GetNamespace(), u.GetName(), "tier mapping", u.GetResourceVersion())
	}
	for _, u := range st.Models {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.GetKind(), u.GetNamespace(), u.GetName(), "tiers "+u.GetAnnotations()[TierAnnotation], u.GetResourceVersion())
	}
	if st.ModelsAsService != nil {
		fmt.Fprintf(tw, "%s\t\t%s\t%s\t%s\n", st.ModelsAsService.GetKind(), st.ModelsAsService.GetName(), "platform settings", st.ModelsAsService.GetResourceVersion())
	}
	var existing []string
	for k := range st.Existing {
		existing = append(existing, k)
	}
	_ = tw.Flush()
	fmt.Fprintf(&buf, "\nMaaS objects already present: %s\n", orNone(sortedStrings(existing)))
	return buf.Bytes()
}

// writeFileSync writes data to path (mode 0600) and syncs it.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}
