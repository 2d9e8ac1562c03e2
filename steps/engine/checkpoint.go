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
// step, the step ID with "/" replaced by ".").
type Checkpoints struct {
	c *kube.Clients
	// mu guards data and the counters; it is never held during a request,
	// so Get does not wait for a write.
	mu   sync.Mutex
	data map[string]Checkpoint
	// changes counts Puts; written is the count the last successful write
	// carried. writeMu serialises writes.
	changes, written uint64
	writeMu          sync.Mutex
}

// CheckpointKey is the data key of a step's checkpoint: its ID with "/"
// replaced by ".".
func CheckpointKey(stepID string) string { return strings.ReplaceAll(stepID, "/", ".") }

// LoadCheckpoints reads the checkpoints; a missing ConfigMap is empty.
func LoadCheckpoints(ctx context.Context, c *kube.Clients) (*Checkpoints, error) {
	cp := &Checkpoints{c: c, data: map[string]Checkpoint{}}
	cm, err := c.Kube.CoreV1().ConfigMaps(StateNamespace).Get(ctx, CheckpointsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return cp, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoints %s/%s: %w", StateNamespace, CheckpointsConfigMap, err)
	}
	for k, v := range cm.Data {
		var p Checkpoint
		if json.Unmarshal([]byte(v), &p) == nil {
			cp.data[k] = p
		}
	}
	return cp, nil
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

// Put records p and writes the ConfigMap with server-side apply. When it
// returns nil, a write that carries p (and every Put before it) succeeded.
// Concurrent Puts are coalesced: a Put that waited for another's write
// sends one write with every change made meanwhile, and the Puts it
// carried return without a write of their own.
func (cp *Checkpoints) Put(ctx context.Context, p Checkpoint) error {
	cp.mu.Lock()
	cp.data[CheckpointKey(p.Step)] = p
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
