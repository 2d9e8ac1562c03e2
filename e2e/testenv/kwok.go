package testenv

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

//go:embed kwok/node.yaml
var kwokNodeYAML []byte

// kwokStageFiles are the kwok stages kwokctl enables by default (node-fast,
// node-heartbeat-with-lease, pod-fast), relative to
// sigs.k8s.io/kwok@<KwokVersion>/kustomize/stage/ in the module cache. kwok
// refuses to start without stages ("no stages found").
var kwokStageFiles = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"pod/fast/pod-ready.yaml",
	"pod/fast/pod-complete.yaml",
	"pod/fast/pod-delete.yaml",
}

// writeKwokStages concatenates the stage files from the module cache into
// stateDir/kwok-stages.yaml (kwok --config). The error wraps ErrNotBuilt
// when the kwok module is not in the cache.
func writeKwokStages(ctx context.Context, stateDir string) (string, error) {
	cache, err := goModCache(ctx)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "sigs.k8s.io", "kwok@"+KwokVersion, "kustomize", "stage")
	var out bytes.Buffer
	for _, f := range kwokStageFiles {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: kwok stage %s not in the module cache (sigs.k8s.io/kwok@%s)", ErrNotBuilt, filepath.Join(dir, f), KwokVersion)
		}
		if err != nil {
			return "", fmt.Errorf("read kwok stage: %w", err)
		}
		if f == "pod/fast/pod-ready.yaml" {
			if b, err = withReadyDelay(b); err != nil {
				return "", err
			}
		}
		out.WriteString("---\n")
		out.Write(b)
		if !bytes.HasSuffix(b, []byte("\n")) {
			out.WriteByte('\n')
		}
	}
	path := filepath.Join(stateDir, "kwok-stages.yaml")
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("write kwok stages: %w", err)
	}
	return path, nil
}

// readyDelayStanza makes the fast pod-ready stage honour
// PodReadyDelayAnnotation the way kwok's general pod-ready stage
// (kustomize/stage/pod/general/pod-ready.yaml) does, without its 1 s
// default and 5 s jitter: a pod without the annotation turns Ready at once.
const readyDelayStanza = `  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["` + PodReadyDelayAnnotation + `"]'
  next:
`

// withReadyDelay inserts readyDelayStanza before the stage's next: block.
func withReadyDelay(stage []byte) ([]byte, error) {
	const next = "\n  next:\n"
	i := bytes.Index(stage, []byte(next))
	if i < 0 || bytes.Contains(stage, []byte("\n  delay:")) {
		return nil, fmt.Errorf("kwok stage pod/fast/pod-ready.yaml of %s: no spec.next or already a spec.delay; cannot add the ready delay", KwokVersion)
	}
	out := append([]byte(nil), stage[:i+1]...)
	out = append(out, readyDelayStanza...)
	return append(out, stage[i+len(next):]...), nil
}
