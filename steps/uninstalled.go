package steps

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/kube"
)

// UninstalledConfigMap is the mark a finished 'maasctl uninstall' leaves
// in StateNamespace when it kept objects (the database unless
// --delete-data) and so kept maasctl's state: it says the missing objects
// were removed on purpose, so that status and doctor report one
// uninstalled MaaS instead of every step that no longer ran and every
// object that is gone. It carries the managed-by label, so LoadRecord's
// one LIST reads it; the first step an install applies deletes it
// (Record.SaveInstalled). An uninstall that keeps nothing deletes the
// whole state namespace instead.
const UninstalledConfigMap = "maasctl-uninstalled"

const (
	uninstalledAtKey   = "uninstalledAt"
	uninstalledKeptKey = "kept"
)

// Uninstalled is what UninstalledConfigMap says: when the uninstall ended
// (UTC, whole seconds) and what it kept on purpose, one object per entry
// with why ("Cluster maas-db/maas-db (the database: --delete-data removes
// it)").
type Uninstalled struct {
	At   time.Time `json:"at"`
	Kept []string  `json:"kept,omitempty"`
}

// uninstalledObject is UninstalledConfigMap holding u.
func uninstalledObject(u Uninstalled) *unstructured.Unstructured {
	return stateConfigMap(UninstalledConfigMap,
		"maasctl uninstall removed MaaS from this cluster and kept what is listed under kept; the next maasctl install deletes this ConfigMap",
		map[string]any{
			uninstalledAtKey:   u.At.UTC().Format(time.RFC3339),
			uninstalledKeptKey: strings.Join(u.Kept, "\n"),
		})
}

// decodeUninstalled reads the mark; a time that does not parse is the
// zero time (the mark still stands).
func decodeUninstalled(cm *corev1.ConfigMap) *Uninstalled {
	u := &Uninstalled{}
	u.At, _ = time.Parse(time.RFC3339, cm.Data[uninstalledAtKey])
	if k := strings.TrimSpace(cm.Data[uninstalledKeptKey]); k != "" {
		u.Kept = strings.Split(k, "\n")
	}
	return u
}

// Uninstalled is the mark of a finished uninstall that kept objects
// (UninstalledConfigMap), nil when there is none.
func (r *Record) Uninstalled() *Uninstalled {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.uninstalled
}

// markUninstalled writes UninstalledConfigMap (server-side apply).
func markUninstalled(ctx context.Context, c *kube.Clients, u Uninstalled) error {
	if _, err := c.Apply(kube.KeepView(ctx), uninstalledObject(u)); err != nil {
		return fmt.Errorf("write ConfigMap %s/%s (the uninstall's mark): %w", StateNamespace, UninstalledConfigMap, err)
	}
	return nil
}

// clearUninstalled deletes the mark the record was loaded with, if any:
// an install is applying a step again. No mark: no request.
func (r *Record) clearUninstalled(ctx context.Context) error {
	r.mu.Lock()
	had := r.uninstalled != nil
	r.mu.Unlock()
	if !had {
		return nil
	}
	if err := deleteStateConfigMap(ctx, r.c, UninstalledConfigMap, "the last uninstall's mark"); err != nil {
		return err
	}
	r.mu.Lock()
	r.uninstalled = nil
	r.mu.Unlock()
	return nil
}
