package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// EnvSeed set to "off", "0" or "false" turns the etcd seed off: every
// Start then creates the platform CRDs in an empty etcd. Unset or any
// other value, Start uses the seed (the default since 2026-12-05: per
// test it was faster, and two of the three tests that failed in the one
// whole-package run with it failed in the next CI run without it as well;
// see docs/measurements.md, "The etcd seed").
const EnvSeed = "MAASCTL_TESTENV_SEED"

// seedFormat is part of every seed key; raise it when what a seed holds
// or how it is made changes.
const seedFormat = "1"

// seedsDir is the folder under BinDir that holds the seeds, one folder
// per key (an etcd data folder).
const seedsDir = "seeds"

// The etcd seed.
//
// Without the seed, a control plane begins with an empty etcd: kube-apiserver
// then creates the platform and OLM CRDs one by one (schema validation,
// CEL compilation, the Established and NamesAccepted status writes, an
// OpenAPI rebuild each). Measured on this 2-core machine (2026-12-05):
// about 4 s of wall time and about 5 CPU seconds of kube-apiserver per
// start, paid by every test. A seed is the etcd data folder of a control
// plane that has done this once and stopped cleanly: no certificates,
// keys or tokens (those live in the state folder and are made anew each
// start), no controllers, no fixture. Start copies it as the new etcd's
// data folder; kube-apiserver then serves the CRDs from storage at start
// and Start only waits for them to be Established.
//
// A seed is keyed by everything its content depends on: the etcd and
// kube-apiserver binaries (path, size, modification time), the content
// of every CRD file it holds and seedFormat. A seed that cannot be made
// or read is not an error: Start logs why and creates the CRDs itself.
//
// The copy is sparse: etcd preallocates its 64 MiB WAL segment, which is
// almost all zeros, so a copy stores a few MiB.

// seedKey returns the hex SHA-256 of what a seed of o depends on.
func seedKey(o *resolved) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "format %s\n", seedFormat)
	for _, b := range []string{Etcd, KubeAPIServer} {
		p := filepath.Join(o.BinDir, b)
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "bin %s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
	}
	for _, f := range o.crdFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "crd %s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ensureSeed returns the etcd data folder of the seed for o, making it
// first when it does not exist yet (one control plane start of etcd and
// kube-apiserver only, about 10 s). It returns "" without an error when
// the seed is turned off (EnvSeed). Concurrent callers may each make the
// seed; the first rename wins and the others discard theirs.
func ensureSeed(ctx context.Context, o *resolved) (string, error) {
	if v := strings.ToLower(os.Getenv(EnvSeed)); v == "off" || v == "0" || v == "false" {
		return "", nil
	}
	key, err := seedKey(o)
	if err != nil {
		return "", fmt.Errorf("etcd seed key: %w", err)
	}
	dir := filepath.Join(o.BinDir, seedsDir, key)
	if fi, err := os.Stat(filepath.Join(dir, "member")); err == nil && fi.IsDir() {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("etcd seed: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "making-")
	if err != nil {
		return "", fmt.Errorf("etcd seed: %w", err)
	}
	defer os.RemoveAll(tmp)
	t0 := time.Now()
	sub := *o
	sub.StateDir = tmp
	sub.removeState = false
	sub.NoControllers, sub.NoPostgres, sub.NoFixture, sub.NoOLM, sub.RealKuadrant = true, true, true, true, false
	sub.Detach = false
	sub.seed = "" // this start makes the seed
	sub.Logf = nil
	env, err := startOnce(ctx, &sub, "")
	if err != nil {
		return "", fmt.Errorf("etcd seed: start etcd and kube-apiserver: %w", err)
	}
	if err := env.Stop(); err != nil {
		return "", fmt.Errorf("etcd seed: %w", err)
	}
	// The seed is kept sparse (etcd preallocated its WAL segment).
	sparse := filepath.Join(tmp, "seed")
	if err := copySparse(filepath.Join(tmp, "etcd"), sparse); err != nil {
		return "", fmt.Errorf("etcd seed: %w", err)
	}
	if err := os.Rename(sparse, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "member")); serr == nil {
			return dir, nil // made meanwhile by another Start
		}
		return "", fmt.Errorf("etcd seed: %w", err)
	}
	o.logf("etcd seed made in %d ms (%d CRDs): %s", time.Since(t0).Milliseconds(), len(o.crdFiles), dir)
	return dir, nil
}

// copySparse copies the folder tree src to dst (which must not exist),
// files with their modes, skipping runs of zeros so that preallocated
// files stay sparse.
func copySparse(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copyFileSparse(p, target, info)
		default:
			return fmt.Errorf("copy %s: not a regular file or folder", p)
		}
	})
}

func copyFileSparse(src, dst string, info fs.FileInfo) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			if allZero(buf[:n]) {
				if _, err := out.Seek(int64(n), io.SeekCurrent); err != nil {
					return err
				}
			} else if _, err := out.Write(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	// A trailing run of zeros was skipped: the size comes from Truncate.
	return out.Truncate(info.Size())
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
