// Package engine is what runs maasctl's steps without knowing any of them:
// the DAG schedule (forward for install, backward for uninstall, typed
// node states), checkpoints, the run Lease and the run's errors. It holds
// no step ID; package steps builds the registry and the phases on it.
package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/names"
)

// StateNamespace holds maasctl's own state: the checkpoints ConfigMap and the
// run Lease.
const (
	StateNamespace       = names.StateNamespace
	CheckpointsConfigMap = names.CheckpointsConfigMap
)

// Checkpoint is what maasctl records after a step succeeded. It is a hint
// only: a step is skipped on a re-run only when the checkpoint matches and
// the live Check passes. It never holds a secret.
type Checkpoint struct {
	Step        string    `json:"step"`
	InputHash   string    `json:"inputHash"`
	ToolVersion string    `json:"toolVersion"`
	Result      string    `json:"result"` // "done", "failed" or "applying" (ResultApplying)
	StartedAt   time.Time `json:"startedAt"`
	DurationMS  int64     `json:"durationMs"`
	// Error is a failed run's error as the run printed it (never a
	// secret: step errors are output), cut to MaxCheckpointError bytes;
	// 'maasctl status' and doctor show it.
	Error string `json:"error,omitempty"`
}

// MaxCheckpointError bounds Checkpoint.Error, in bytes.
const MaxCheckpointError = 2000

// CutError is msg cut to MaxCheckpointError bytes at a rune boundary,
// "…" marking the cut.
func CutError(msg string) string {
	if len(msg) <= MaxCheckpointError {
		return msg
	}
	cut := MaxCheckpointError
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// ResultApplying is the Result of a step whose live state had drifted and
// that a run is applying again. Written before that Apply, it makes the
// next run apply (and record) the step again when the run is killed
// before the step's "done": a converged "done" checkpoint would let the
// next run skip the step and keep the run record's old UID of an object
// the Apply re-created (issue 17: uninstall then kept the Kuadrant CR as
// "re-created by someone else").
const ResultApplying = "applying"

// Checkpoints reads and writes the checkpoints ConfigMap (one data key per
// step, the step ID with "/" replaced by "."), and the checkpoints a
// Carrier stores with the rest of a step's state.
type Checkpoints struct {
	c *kube.Clients
	// mu guards data, carrier, carried and the counters; it is never held
	// during a request, so Get does not wait for a write.
	mu   sync.Mutex
	data map[string]Checkpoint
	// carrier stores the checkpoints it accepts; carried holds the keys of
	// the checkpoints it stores (never written to the ConfigMap).
	carrier Carrier
	carried map[string]bool
	// changes counts Puts; written is the count the last successful write
	// carried. writeMu serialises writes.
	changes, written uint64
	writeMu          sync.Mutex
}

// CheckpointKey is the data key of a step's checkpoint: its ID with "/"
// replaced by ".".
func CheckpointKey(stepID string) string { return strings.ReplaceAll(stepID, "/", ".") }

// Carrier stores the checkpoints of some steps with the rest of their state,
// in the same write: steps.Record keeps a step's checkpoint in the step's
// record shard, so that the bookkeeping after a step is one write, not two
// (issue 16), and a done checkpoint and the record it stands for are
// written at once.
type Carrier interface {
	// CarryCheckpoint stores p and reports whether it did; false with a
	// nil error: it does not store p's step, the checkpoints ConfigMap
	// does.
	CarryCheckpoint(ctx context.Context, p Checkpoint) (bool, error)
}

// SetCarrier makes Put offer each checkpoint to c first.
func (cp *Checkpoints) SetCarrier(c Carrier) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.carrier = c
}

// Merge adds checkpoints a Carrier stored; they replace the ConfigMap's of
// the same steps (a step's checkpoint is carried from the first write of
// a maasctl that carries it; the ConfigMap's is older).
func (cp *Checkpoints) Merge(carried []Checkpoint) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range carried {
		cp.data[CheckpointKey(p.Step)] = p
		cp.carried[CheckpointKey(p.Step)] = true
	}
}

// NewCheckpoints returns the checkpoints held by data, the data of the
// checkpoints ConfigMap (nil: none); undecodable entries are skipped.
func NewCheckpoints(c *kube.Clients, data map[string]string) *Checkpoints {
	cp := &Checkpoints{c: c, data: map[string]Checkpoint{}, carried: map[string]bool{}}
	for k, v := range data {
		var p Checkpoint
		if json.Unmarshal([]byte(v), &p) == nil {
			cp.data[k] = p
		}
	}
	return cp
}

// LoadCheckpoints reads the checkpoints ConfigMap; a missing one is empty.
// It reads no carried checkpoint (Merge adds those).
func LoadCheckpoints(ctx context.Context, c *kube.Clients) (*Checkpoints, error) {
	cm, err := c.Kube.CoreV1().ConfigMaps(StateNamespace).Get(ctx, CheckpointsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return NewCheckpoints(c, nil), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoints %s/%s: %w", StateNamespace, CheckpointsConfigMap, err)
	}
	return NewCheckpoints(c, cm.Data), nil
}

// Get returns the checkpoint of a step.
func (cp *Checkpoints) Get(stepID string) (Checkpoint, bool) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	p, ok := cp.data[CheckpointKey(stepID)]
	return p, ok
}

// All returns a copy of every checkpoint by step ID.
func (cp *Checkpoints) All() map[string]Checkpoint {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := map[string]Checkpoint{}
	for _, p := range cp.data {
		out[p.Step] = p
	}
	return out
}

// Put records p and writes it: through the Carrier when it takes p, else
// to the ConfigMap with server-side apply. When it returns nil, a write
// that carries p (and, for the ConfigMap, every Put before it) succeeded.
// Concurrent Puts to the ConfigMap are coalesced: a Put that waited for
// another's write sends one write with every change made meanwhile, and
// the Puts it carried return without a write of their own.
func (cp *Checkpoints) Put(ctx context.Context, p Checkpoint) error {
	key := CheckpointKey(p.Step)
	cp.mu.Lock()
	cp.data[key] = p
	carrier := cp.carrier
	if carrier != nil {
		// Offered to the carrier: a ConfigMap write meanwhile leaves it
		// out, so the ConfigMap never says what the carrier has not
		// stored yet.
		cp.carried[key] = true
	}
	cp.mu.Unlock()
	if carrier != nil {
		ok, err := carrier.CarryCheckpoint(ctx, p)
		if ok || err != nil {
			return err
		}
	}
	cp.mu.Lock()
	delete(cp.carried, key)
	cp.changes++
	mine := cp.changes
	cp.mu.Unlock()

	cp.writeMu.Lock()
	defer cp.writeMu.Unlock()
	cp.mu.Lock()
	if cp.written >= mine {
		cp.mu.Unlock()
		return nil // a write that started after this Put carried it
	}
	upto := cp.changes
	data := map[string]any{}
	for k, v := range cp.data {
		if cp.carried[k] {
			continue // stored by the Carrier
		}
		b, err := json.Marshal(v)
		if err != nil {
			cp.mu.Unlock()
			return fmt.Errorf("encode checkpoint of %s: %w", v.Step, err)
		}
		data[k] = string(b)
	}
	cp.mu.Unlock()
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": CheckpointsConfigMap, "namespace": StateNamespace,
			"labels": map[string]any{names.ManagedByLabel: names.ManagedByValue},
		},
		"data": data,
	}}
	// Bookkeeping: the run's read view stays open (kube.KeepView).
	if _, err := cp.c.Apply(kube.KeepView(ctx), cm); err != nil {
		return fmt.Errorf("write checkpoint of %s: %w", p.Step, err)
	}
	cp.mu.Lock()
	if upto > cp.written {
		cp.written = upto
	}
	cp.mu.Unlock()
	return nil
}
