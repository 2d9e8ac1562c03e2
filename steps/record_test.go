package steps

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps/engine"
)

// TestRecordShardName: every shard name is a valid ConfigMap name, the
// registry's IDs map readably, and no two (step, chunk) pairs share a name.
func TestRecordShardName(t *testing.T) {
	tests := []struct {
		name string
		id   string
		n    int
		want string // "" when only validity and uniqueness are checked
	}{
		{name: "plain", id: "models/provider", want: "maasctl-inventory.models.provider"},
		{name: "chunk", id: "models/model", n: 2, want: "maasctl-inventory.models.model.2"},
		{name: "hyphen", id: "dbsecret/maas-db-config", want: "maasctl-inventory.dbsecret.maas-db-config"},
		{name: "numeric last segment", id: "models/model/1"},
		{name: "upper case and underscore", id: "Models/Provider_X"},
		{name: "leading hyphen", id: "-x/y-"},
		{name: "empty", id: ""},
		{name: "long", id: strings.Repeat("abcdefghij/", 40), n: 12},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RecordShardName(tt.id, tt.n)
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("RecordShardName(%q, %d) = %q: not a valid ConfigMap name: %v", tt.id, tt.n, got, errs)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("RecordShardName(%q, %d) = %q, want %q", tt.id, tt.n, got, tt.want)
			}
			key := fmt.Sprintf("%q/%d", tt.id, tt.n)
			if other, ok := seen[got]; ok && other != key {
				t.Errorf("%s and %s share the shard name %q", other, key, got)
			}
			seen[got] = key
		})
	}
	// A chunk suffix never collides with a step whose last segment is a
	// number, and every registry step maps without a hash.
	if a, b := RecordShardName("models/model", 1), RecordShardName("models/model/1", 0); a == b {
		t.Errorf("chunk 1 of models/model and step models/model/1 share %q", a)
	}
	reg, err := NewRegistry(inventory.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range reg.Steps {
		if got, want := RecordShardName(s.ID, 0), RecordConfigMap+"."+strings.ReplaceAll(s.ID, "/", "."); got != want {
			t.Errorf("step %s: shard %q, want %q", s.ID, got, want)
		}
	}
}

func testEntries(step string, n int) []RecordEntry {
	out := make([]RecordEntry, n)
	for i := range out {
		out[i] = RecordEntry{
			APIVersion: "maas.opendatahub.io/v1alpha1", Kind: "ExternalModel", Namespace: "llm-coding-assistant",
			Name: fmt.Sprintf("model-%04d", i), Step: step, Order: i, Origin: OriginCreated,
			UID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i), Since: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		}
	}
	return out
}

// TestRecordChunks: chunks stay within the limit (an oversized entry alone
// in its chunk) and decode, in order, to exactly the entries.
func TestRecordChunks(t *testing.T) {
	oneChunk, err := recordChunks(testEntries("s", 1), 1<<20)
	if err != nil || len(oneChunk) != 1 {
		t.Fatalf("one entry: %d chunks, %v", len(oneChunk), err)
	}
	one := oneChunk[0] // "[\n" entry "\n]\n"; two entries take 2*len(one)-3
	tests := []struct {
		name       string
		entries    []RecordEntry
		limit      int
		wantChunks int
	}{
		{name: "none", entries: nil, limit: 1000, wantChunks: 0},
		{name: "one chunk", entries: testEntries("s", 3), limit: 100 * len(one), wantChunks: 1},
		{name: "two per chunk", entries: testEntries("s", 5), limit: 2*len(one) - 3, wantChunks: 3},
		{name: "entry over the limit", entries: testEntries("s", 2), limit: 10, wantChunks: 2},
		// 1,000 external models: their ExternalModels and MaaSModelRefs
		// alone exceed what one shard holds.
		{name: "scale", entries: testEntries("models/model", 2000), limit: RecordShardBytes, wantChunks: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks, err := recordChunks(tt.entries, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(chunks) != tt.wantChunks {
				t.Errorf("%d chunks, want %d", len(chunks), tt.wantChunks)
			}
			var got []RecordEntry
			for i, c := range chunks {
				if len(c) > tt.limit && strings.Count(c, ",\n") > 0 {
					t.Errorf("chunk %d has %d bytes and several entries; limit %d", i, len(c), tt.limit)
				}
				if len(c) >= 1<<20 {
					t.Errorf("chunk %d has %d bytes, over the 1 MiB object limit", i, len(c))
				}
				list, err := decodeRecordList(c)
				if err != nil {
					t.Fatalf("chunk %d does not decode: %v", i, err)
				}
				got = append(got, list...)
				// An older maasctl reads the record with sigs.k8s.io/yaml.
				var old []RecordEntry
				if err := yaml.Unmarshal([]byte(c), &old); err != nil || !cmp.Equal(list, old) {
					t.Errorf("chunk %d as an older maasctl reads it (YAML): %v, %d entries, want %d", i, err, len(old), len(list))
				}
			}
			if diff := cmp.Diff(tt.entries, got); diff != "" {
				t.Errorf("chunks decode to other entries (-want +got):\n%s", diff)
			}
		})
	}
}

func recordCM(t *testing.T, name string, shard bool, step string, entries []RecordEntry) corev1.ConfigMap {
	t.Helper()
	b, err := yaml.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	cm := corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: StateNamespace, Labels: map[string]string{assets.ManagedByLabel: assets.ManagedByValue}},
		Data:       map[string]string{recordKey: string(b)},
	}
	if shard {
		cm.Labels[RecordLabel] = RecordLabelValue
		cm.Annotations = map[string]string{RecordStepAnnotation: step}
	}
	return cm
}

// TestDecodeRecord: LoadRecord's decoding of the listed ConfigMaps: shards,
// the single ConfigMap of older versions (migrated: its steps are dirty),
// shards winning over it, other ConfigMaps ignored.
func TestDecodeRecord(t *testing.T) {
	a := testEntries("a/x", 2)
	b := testEntries("b/y", 1)
	b[0].Name = "other"
	newer := a[1]
	newer.Origin, newer.UID = OriginAdopted, "new-uid"
	checkpoints := corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: CheckpointsConfigMap, Labels: map[string]string{assets.ManagedByLabel: assets.ManagedByValue}},
		Data:       map[string]string{"a.x": `{"step":"a/x"}`},
	}
	tests := []struct {
		name       string
		cms        []corev1.ConfigMap
		want       []RecordEntry
		wantLegacy bool
		wantDirty  []string
		wantShards map[string]string
		wantErr    string
	}{
		{name: "empty", want: []RecordEntry{}, wantShards: map[string]string{}},
		{
			name: "legacy only",
			cms:  []corev1.ConfigMap{checkpoints, recordCM(t, RecordConfigMap, false, "", append(append([]RecordEntry{}, a...), b...))},
			want: append(append([]RecordEntry{}, a...), b...), wantLegacy: true, wantDirty: []string{"a/x", "b/y"}, wantShards: map[string]string{},
		},
		{
			name: "shards",
			cms: []corev1.ConfigMap{
				checkpoints,
				recordCM(t, RecordShardName("a/x", 0), true, "a/x", a[:1]),
				recordCM(t, RecordShardName("a/x", 1), true, "a/x", a[1:]),
				recordCM(t, RecordShardName("b/y", 0), true, "b/y", b),
			},
			want: append(append([]RecordEntry{}, a...), b...),
			wantShards: map[string]string{
				RecordShardName("a/x", 0): "a/x", RecordShardName("a/x", 1): "a/x", RecordShardName("b/y", 0): "b/y",
			},
		},
		{
			name: "migration cut short: shards win over the legacy record",
			cms: []corev1.ConfigMap{
				recordCM(t, RecordConfigMap, false, "", append(append([]RecordEntry{}, a...), b...)),
				recordCM(t, RecordShardName("a/x", 0), true, "a/x", []RecordEntry{a[0], newer}),
			},
			want:       []RecordEntry{a[0], newer, b[0]},
			wantLegacy: true, wantDirty: []string{"a/x", "b/y"},
			wantShards: map[string]string{RecordShardName("a/x", 0): "a/x"},
		},
		{
			name:    "undecodable",
			cms:     []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: RecordConfigMap}, Data: map[string]string{recordKey: "{not a list"}}},
			wantErr: "key objects.yaml",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := decodeRecord(tt.cms)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, r.Entries()); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if r.legacy != tt.wantLegacy {
				t.Errorf("legacy = %v, want %v", r.legacy, tt.wantLegacy)
			}
			var dirty []string
			for s := range r.dirty {
				dirty = append(dirty, s)
			}
			if diff := cmp.Diff(tt.wantDirty, dirty, cmpSorted); diff != "" {
				t.Errorf("dirty steps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantShards, r.shards); diff != "" {
				t.Errorf("shards (-want +got):\n%s", diff)
			}
		})
	}
}

var cmpSorted = cmpopts.SortSlices(func(a, b string) bool { return a < b })

// TestRecordDirtyTracking: set and Forget mark the shard of the step that
// owns the entry (the first step that wrote the object), not the caller's.
func TestRecordDirtyTracking(t *testing.T) {
	r, err := decodeRecord(nil)
	if err != nil {
		t.Fatal(err)
	}
	e := testEntries("a/x", 1)[0]
	r.set(e.Object(), "a/x", 0, OriginAbsent, "")
	r.dirty = map[string]bool{}
	r.set(e.Object(), "b/y", 3, OriginCreated, "uid")
	got, _ := r.Lookup(e.Object())
	if got.Step != "a/x" || got.Order != 0 || got.Origin != OriginCreated {
		t.Errorf("entry after a later step observed it: %+v; want step a/x, order 0, created", got)
	}
	if !r.dirty["a/x"] || r.dirty["b/y"] {
		t.Errorf("dirty = %v, want only a/x", r.dirty)
	}
	r.dirty = map[string]bool{}
	r.Forget(RecordEntry{APIVersion: "maas.opendatahub.io/v1", Kind: e.Kind, Namespace: e.Namespace, Name: e.Name})
	if r.Len() != 0 || !r.dirty["a/x"] {
		t.Errorf("after Forget (other API version of the same group): %d entries, dirty %v; want 0 and a/x", r.Len(), r.dirty)
	}
	r.dirty = map[string]bool{}
	r.Forget(e)
	if len(r.dirty) != 0 {
		t.Errorf("forgetting an unknown entry marked %v dirty", r.dirty)
	}
}

// TestDecodeRecordPending: the pending shard's entries count only for
// steps without a shard of their own (a step's shard is written after the
// pending one, so it is newer), and its chunks are known for the next
// write.
func TestDecodeRecordPending(t *testing.T) {
	a := testEntries("a/x", 2)
	b := testEntries("b/y", 1)
	b[0].Name = "other"
	observed := a[0]
	observed.Origin, observed.UID = OriginCreated, "uid-1"
	pendingA := recordCM(t, RecordPendingConfigMap, true, "", []RecordEntry{a[0], a[1]})
	pendingA.Annotations = nil
	pendingB := recordCM(t, RecordPendingConfigMap+".1", true, "", b)
	pendingB.Annotations = nil
	tests := []struct {
		name             string
		cms              []corev1.ConfigMap
		want             []RecordEntry
		wantPendingSteps []string
	}{
		{
			name:             "only pending: a first install cut short after its snapshot",
			cms:              []corev1.ConfigMap{pendingA, pendingB},
			want:             []RecordEntry{a[0], a[1], b[0]},
			wantPendingSteps: []string{"a/x", "b/y"},
		},
		{
			name: "a step's own shard replaces its pending entries",
			cms: []corev1.ConfigMap{
				pendingA, pendingB,
				recordCM(t, RecordShardName("a/x", 0), true, "a/x", []RecordEntry{observed}),
			},
			// a[1] is pending only, but a/x has a shard: its shard
			// holds every entry of the step, so a[1] is gone.
			want:             []RecordEntry{observed, b[0]},
			wantPendingSteps: []string{"b/y"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := decodeRecord(tt.cms)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, r.Entries()); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			var steps []string
			for s := range r.pendingSteps {
				steps = append(steps, s)
			}
			if diff := cmp.Diff(tt.wantPendingSteps, steps, cmpSorted); diff != "" {
				t.Errorf("pending steps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{RecordPendingConfigMap, RecordPendingConfigMap + ".1"}, r.pending); diff != "" {
				t.Errorf("pending chunks (-want +got):\n%s", diff)
			}
			if len(r.dirty) != 0 {
				t.Errorf("dirty = %v, want none (the pending shard holds them)", r.dirty)
			}
			if isPendingName(RecordShardName("pending", 0)) || !isPendingName(RecordPendingConfigMap+".3") {
				t.Error("isPendingName confuses a step shard and a pending chunk")
			}
		})
	}
}

// TestRecordCarriesCheckpoints: a shard's checkpoint.json is its step's
// carried checkpoint (one of another step is ignored), the checkpoints
// ConfigMap the record's LIST held is kept for the checkpoints, a step
// without entries is not carried, and a carried checkpoint replaces the
// ConfigMap's of the same step.
func TestRecordCarriesCheckpoints(t *testing.T) {
	a := testEntries("a/x", 1)
	b := testEntries("b/y", 1)
	b[0].Name = "other"
	shardA := recordCM(t, RecordShardName("a/x", 0), true, "a/x", a)
	shardA.Data[recordCheckpointKey] = `{"step":"a/x","inputHash":"h2","result":"done"}`
	shardB := recordCM(t, RecordShardName("b/y", 0), true, "b/y", b)
	shardB.Data[recordCheckpointKey] = `{"step":"a/x","inputHash":"wrong step","result":"done"}`
	cpCM := corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: CheckpointsConfigMap, Labels: map[string]string{assets.ManagedByLabel: assets.ManagedByValue}},
		Data: map[string]string{
			"a.x":              `{"step":"a/x","inputHash":"h1","result":"done"}`,
			"preflight.checks": `{"step":"preflight/checks","inputHash":"p","result":"done"}`,
		},
	}
	r, err := decodeRecord([]corev1.ConfigMap{cpCM, shardA, shardB})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Checkpoints()
	if len(got) != 1 || got[0].Step != "a/x" || got[0].InputHash != "h2" {
		t.Fatalf("carried checkpoints = %+v, want only a/x with input hash h2", got)
	}
	if diff := cmp.Diff(cpCM.Data, r.cpData); diff != "" {
		t.Errorf("checkpoints ConfigMap data (-want +got):\n%s", diff)
	}
	cps := engine.NewCheckpoints(nil, r.cpData)
	cps.Merge(r.Checkpoints())
	if p, _ := cps.Get("a/x"); p.InputHash != "h2" {
		t.Errorf("merged checkpoint of a/x has input hash %q, want the carried h2", p.InputHash)
	}
	if p, ok := cps.Get("preflight/checks"); !ok || p.InputHash != "p" {
		t.Errorf("checkpoint of preflight/checks = %+v, %v; want the ConfigMap's", p, ok)
	}
	carried, err := r.CarryCheckpoint(context.Background(), Checkpoint{Step: "preflight/checks", Result: "done"})
	if carried || err != nil {
		t.Errorf("CarryCheckpoint of a step without entries = %v, %v; want false, nil (the ConfigMap holds it)", carried, err)
	}
	r.DropCheckpoint("a/x")
	if len(r.Checkpoints()) != 0 || !r.dirty["a/x"] {
		t.Errorf("after DropCheckpoint: carried %v, dirty %v; want none carried and a/x dirty", r.Checkpoints(), r.dirty)
	}
}

// TestDecodeRecordFirstShardCut: a run killed while writing a step's first
// shard of several chunks (chunk 0, written last, is missing) keeps the
// step's entries: those of the stored chunk, the rest from the pending
// shard; the step is dirty, so the next Save writes its shard whole.
func TestDecodeRecordFirstShardCut(t *testing.T) {
	a := testEntries("a/x", 3)
	observed := a[2]
	observed.Origin, observed.UID = OriginCreated, "uid-2"
	pending := recordCM(t, RecordPendingConfigMap, true, "", a)
	pending.Annotations = nil
	r, err := decodeRecord([]corev1.ConfigMap{pending, recordCM(t, RecordShardName("a/x", 1), true, "a/x", []RecordEntry{observed})})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]RecordEntry{a[0], a[1], observed}, r.Entries()); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if !r.dirty["a/x"] || !r.pendingSteps["a/x"] {
		t.Errorf("dirty %v, pending steps %v; want a/x in both", r.dirty, r.pendingSteps)
	}
}
