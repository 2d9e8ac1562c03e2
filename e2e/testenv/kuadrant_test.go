package testenv

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

const (
	testCAMount = "/etc/ssl/certs/openshift-service-ca"
	testCAFile  = testCAMount + "/service-ca-bundle.crt"
	testCAPEM   = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
)

// fakeSupervisor is an operatorSupervisor whose API server is a fake
// clientset holding objs and whose StateDir is a temporary folder.
func fakeSupervisor(t *testing.T, objs ...runtime.Object) (*operatorSupervisor, *fake.Clientset) {
	t.Helper()
	kube := fake.NewClientset(objs...)
	return &operatorSupervisor{o: &resolved{Options: Options{StateDir: t.TempDir()}}, kube: kube}, kube
}

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kuadrant-system"}, Data: data}
}

func optional() *bool { b := true; return &b }

// authorinoPod is a pod as the authorino-operator makes it for an
// Authorino CR with spec.volumes.items of the service CA ConfigMap and
// listener TLS, and as an installer patches its Deployment
// (SSL_CERT_FILE), plus volumes of the other kinds podVolumes handles.
func authorinoPod(vols ...corev1.Volume) (*corev1.Pod, corev1.Container) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "authorino-1", Namespace: "kuadrant-system", UID: "uid-1"}}
	c := corev1.Container{Name: "authorino",
		Args: []string{"--tls-cert=/etc/ssl/certs/tls.crt", "--tls-cert-key=/etc/ssl/private/tls.key"},
		Env: []corev1.EnvVar{
			{Name: "SSL_CERT_FILE", Value: testCAFile},
			{Name: "REQUESTS_CA_BUNDLE", Value: testCAFile},
			{Name: "LOG_LEVEL", Value: "info"},
		},
	}
	for _, v := range vols {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/mnt/" + v.Name})
	}
	pod.Spec.Containers = []corev1.Container{c}
	return pod, c
}

// serviceCAVolume is the projected volume the authorino-operator makes of
// spec.volumes.items[] (one ConfigMap source with items per ConfigMap).
func serviceCAVolume() corev1.Volume {
	return corev1.Volume{Name: "openshift-service-ca", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: "openshift-service-ca.crt"},
			Items:                []corev1.KeyToPath{{Key: "service-ca.crt", Path: "service-ca-bundle.crt"}},
		}}},
	}}}
}

func readFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPodVolumesServiceCA: the projected volume of the service CA
// ConfigMap (with items) becomes the file service-ca-bundle.crt holding the
// ConfigMap's key, the Secret volume's subPath mounts name its files, and
// the container's SSL_CERT_FILE (a path under the mountPath) and args
// are rewritten to the files written; an env value under no mountPath is
// left as it is.
func TestPodVolumesServiceCA(t *testing.T) {
	s, _ := fakeSupervisor(t,
		configMap("openshift-service-ca.crt", map[string]string{"service-ca.crt": testCAPEM, "other": "x"}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "authorino-server-cert", Namespace: "kuadrant-system"},
			Data: map[string][]byte{"tls.crt": []byte("CRT"), "tls.key": []byte("KEY"), "ca.crt": []byte("CA")}})
	pod, _ := authorinoPod()
	pod.Spec.Volumes = []corev1.Volume{serviceCAVolume(), {Name: "authorino-tls", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: "authorino-server-cert"}}}}
	c := pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: "openshift-service-ca", MountPath: testCAMount},
		{Name: "authorino-tls", MountPath: "/etc/ssl/certs/tls.crt", SubPath: "tls.crt"},
		{Name: "authorino-tls", MountPath: "/etc/ssl/private/tls.key", SubPath: "tls.key"},
	}
	mounts, err := s.podVolumes(context.Background(), pod, c)
	if err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(s.o.StateDir, "pods", "uid-1", "openshift-service-ca")
	if got := readFiles(t, caDir); len(got) != 1 || got["service-ca-bundle.crt"] != testCAPEM {
		t.Errorf("files of the projected volume: %q, want only service-ca-bundle.crt with the CA", got)
	}
	if got := readFiles(t, filepath.Join(s.o.StateDir, "pods", "uid-1", "authorino-tls")); len(got) != 3 || got["tls.key"] != "KEY" {
		t.Errorf("files of the Secret volume: %q, want its 3 keys", got)
	}
	if got, want := mounts[testCAMount], caDir; got != want {
		t.Errorf("mount %s is %q, want %q", testCAMount, got, want)
	}

	env := podEnv(pod, c, mounts)
	caFile := filepath.Join(caDir, "service-ca-bundle.crt")
	for _, kv := range []string{"SSL_CERT_FILE=" + caFile, "REQUESTS_CA_BUNDLE=" + caFile, "LOG_LEVEL=info"} {
		if !slices.Contains(env, kv) {
			t.Errorf("env %q lacks %s", env, kv)
		}
	}
	if b, err := os.ReadFile(caFile); err != nil || string(b) != testCAPEM {
		t.Errorf("SSL_CERT_FILE %s: %q, %v; want the CA", caFile, b, err)
	}
	tlsDir := filepath.Join(s.o.StateDir, "pods", "uid-1", "authorino-tls")
	for arg, want := range map[string]string{
		"--tls-cert=/etc/ssl/certs/tls.crt":       "--tls-cert=" + filepath.Join(tlsDir, "tls.crt"),
		"--tls-cert-key=/etc/ssl/private/tls.key": "--tls-cert-key=" + filepath.Join(tlsDir, "tls.key"),
	} {
		if got := mounts.rewrite(arg); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", arg, got, want)
		}
	}

	// A later start for the same pod writes the volume afresh: a key gone
	// from the ConfigMap is gone from the folder.
	if _, err := s.kube.CoreV1().ConfigMaps("kuadrant-system").Update(context.Background(),
		configMap("openshift-service-ca.crt", map[string]string{"service-ca.crt": "NEW"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Items = nil
	if _, err := s.podVolumes(context.Background(), pod, c); err != nil {
		t.Fatal(err)
	}
	if got := readFiles(t, caDir); len(got) != 1 || got["service-ca.crt"] != "NEW" {
		t.Errorf("files after the second start: %q, want only service-ca.crt NEW", got)
	}
}

// TestPodVolumesKinds: a ConfigMap volume without items gives every key
// of data and binaryData; a projected volume merges its ConfigMap and
// Secret sources, skipping an optional source that is missing and an
// optional item whose key is missing; an optional ConfigMap volume that
// is missing is an empty folder; kinds podVolumes leaves out get no mount.
func TestPodVolumesKinds(t *testing.T) {
	bin := configMap("bin", map[string]string{"a": "A"})
	bin.BinaryData = map[string][]byte{"b": {0, 1}}
	s, _ := fakeSupervisor(t, bin, configMap("cm", map[string]string{"k": "V"}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec", Namespace: "kuadrant-system"}, Data: map[string][]byte{"s": []byte("S")}})
	pod, c := authorinoPod(
		corev1.Volume{Name: "all", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "bin"}}}},
		corev1.Volume{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: optional()}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Optional: optional(),
				Items: []corev1.KeyToPath{{Key: "k", Path: "sub/k.txt"}, {Key: "nokey", Path: "nokey"}}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: optional()}},
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		}}}},
		corev1.Volume{Name: "maybe", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: optional()}}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	mounts, err := s.podVolumes(context.Background(), pod, c)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.o.StateDir, "pods", "uid-1")
	for vol, want := range map[string]map[string]string{
		"all":   {"a": "A", "b": "\x00\x01"},
		"proj":  {filepath.Join("sub", "k.txt"): "V", "s": "S"},
		"maybe": {},
	} {
		got := readFiles(t, filepath.Join(dir, vol))
		if len(got) != len(want) {
			t.Errorf("volume %s: files %q, want %q", vol, got, want)
			continue
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("volume %s: files %q, want %q", vol, got, want)
				break
			}
		}
		if mounts["/mnt/"+vol] != filepath.Join(dir, vol) {
			t.Errorf("mount /mnt/%s is %q", vol, mounts["/mnt/"+vol])
		}
	}
	if m, ok := mounts["/mnt/scratch"]; ok {
		t.Errorf("the emptyDir volume got a mount: %s", m)
	}
}

// TestPodVolumesMissing: a ConfigMap or Secret that is missing (or lacks
// an item's key) and is not optional is an error naming it, as a kubelet
// keeps the pod ContainerCreating; once it exists the next call succeeds.
func TestPodVolumesMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		vol  corev1.Volume
		want string
	}{
		{"projected ConfigMap", serviceCAVolume(), `"openshift-service-ca.crt" not found`},
		{"ConfigMap volume", corev1.Volume{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "openshift-service-ca.crt"}}}}, `"openshift-service-ca.crt" not found`},
		{"projected Secret", corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "openshift-service-ca.crt"}}}}}}}, `"openshift-service-ca.crt" not found`},
		{"missing key", corev1.Volume{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "openshift-service-ca.crt"},
			Items:                []corev1.KeyToPath{{Key: "nokey", Path: "x"}}}}}, `has no key "nokey"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.name == "missing key" {
				objs = append(objs, configMap("openshift-service-ca.crt", map[string]string{"service-ca.crt": testCAPEM}))
			}
			s, kube := fakeSupervisor(t, objs...)
			pod, c := authorinoPod(tc.vol)
			_, err := s.podVolumes(context.Background(), pod, c)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "volume "+tc.vol.Name) {
				t.Fatalf("podVolumes: %v, want an error of volume %s with %s", err, tc.vol.Name, tc.want)
			}
			if tc.name == "missing key" {
				return
			}
			if tc.name == "projected Secret" {
				_, err = kube.CoreV1().Secrets("kuadrant-system").Create(context.Background(), &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: "openshift-service-ca.crt", Namespace: "kuadrant-system"}}, metav1.CreateOptions{})
			} else {
				_, err = kube.CoreV1().ConfigMaps("kuadrant-system").Create(context.Background(),
					configMap("openshift-service-ca.crt", map[string]string{"service-ca.crt": testCAPEM}), metav1.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.podVolumes(context.Background(), pod, c); err != nil {
				t.Errorf("podVolumes once the object exists: %v", err)
			}
		})
	}
}

// TestVolumeDirsRewriteEnvValue: an env value that is exactly a path
// under a mountPath, or the mountPath itself, names the written file or
// folder; a value that only shares a prefix with a mountPath, or names no
// mount, is kept.
func TestVolumeDirsRewriteEnvValue(t *testing.T) {
	v := volumeDirs{testCAMount: "/state/pods/u/openshift-service-ca", "/etc/ssl/certs/tls.crt": "/state/pods/u/tls/tls.crt"}
	for in, want := range map[string]string{
		testCAFile:                              "/state/pods/u/openshift-service-ca/service-ca-bundle.crt",
		testCAMount:                             "/state/pods/u/openshift-service-ca",
		"/etc/ssl/certs/tls.crt":                "/state/pods/u/tls/tls.crt",
		"/etc/ssl/certs/openshift-service-ca-x": "/etc/ssl/certs/openshift-service-ca-x",
		"/etc/ssl/certs/ca-bundle.crt":          "/etc/ssl/certs/ca-bundle.crt",
		"info":                                  "info",
		"":                                      "",
	} {
		if got := v.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}
