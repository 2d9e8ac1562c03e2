// Command vault-test-server serves the in-memory Vault API stand-in
// (package e2e/vaultserver) on a loopback address until SIGTERM or SIGINT,
// for end-to-end runs of the maasctl binary.
//
//	VAULT_TEST_SERVER_TOKEN=root vault-test-server --listen 127.0.0.1:0 --addr-file /tmp/vault.addr
//	export VAULT_ADDR=$(cat /tmp/vault.addr) VAULT_TOKEN=root
//
// Tokens are taken from the environment (or flags, which other users of the
// machine can see in the process list) and are never printed.
//
// ACL policies (--policy NAME=FILE, Vault's HCL syntax, for example the
// output of `maasctl vault policy`) and auth methods (--auth PATH=approle or
// PATH=kubernetes) can be set up at start; everything else (roles, tokens,
// the Kubernetes method's config) through the Vault API with the root
// token, as on a real Vault.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/maasctl/maasctl/e2e/vaultserver"
)

// Environment variables read when the matching flag is not given.
const (
	envToken         = "VAULT_TEST_SERVER_TOKEN"
	envReadOnlyToken = "VAULT_TEST_SERVER_READONLY_TOKEN"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "vault-test-server:", err)
		os.Exit(1)
	}
}

// mountFlags collects repeated --mount PATH=VERSION flags.
type mountFlags []vaultserver.Mount

func (m *mountFlags) String() string {
	parts := make([]string, len(*m))
	for i, x := range *m {
		parts[i] = fmt.Sprintf("%s=%d", x.Path, x.Version)
	}
	return strings.Join(parts, ",")
}

func (m *mountFlags) Set(v string) error {
	path, ver, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(ver)
	if !ok || strings.Trim(path, "/") == "" || err != nil || (n != 1 && n != 2) {
		return fmt.Errorf("want PATH=1 or PATH=2, got %q", v)
	}
	path = strings.Trim(path, "/")
	for _, x := range *m {
		if x.Path == path {
			return fmt.Errorf("mount %q given twice", path)
		}
	}
	*m = append(*m, vaultserver.Mount{Path: path, Version: n})
	return nil
}

// pairFlags collects repeated NAME=VALUE flags in order.
type pairFlags [][2]string

func (p *pairFlags) String() string {
	parts := make([]string, len(*p))
	for i, x := range *p {
		parts[i] = x[0] + "=" + x[1]
	}
	return strings.Join(parts, ",")
}

func (p *pairFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" || value == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", v)
	}
	for _, x := range *p {
		if x[0] == name {
			return fmt.Errorf("%q given twice", name)
		}
	}
	*p = append(*p, [2]string{name, value})
	return nil
}

// run parses args, serves until ctx is done, and calls ready (if not nil)
// with the bound address once the server listens.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("vault-test-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8200", "loopback `address` to listen on (port 0 picks a free port)")
	token := fs.String("token", "", "root `token` (default $"+envToken+")")
	readOnly := fs.String("read-only-token", "", "optional `token` that may only read (default $"+envReadOnlyToken+")")
	addrFile := fs.String("addr-file", "", "write the bound http://127.0.0.1:PORT address to this `file`")
	var mounts mountFlags
	fs.Var(&mounts, "mount", "KV mount as `PATH=VERSION`, repeatable (default kv=2)")
	var policies, auths pairFlags
	fs.Var(&policies, "policy", "ACL policy as `NAME=FILE` (Vault HCL), repeatable")
	fs.Var(&auths, "auth", "auth method as `PATH=TYPE` (approle or kubernetes), repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *token == "" {
		*token = getenv(envToken)
	}
	if *readOnly == "" {
		*readOnly = getenv(envReadOnlyToken)
	}
	if *token == "" {
		return errors.New("no root token: set " + envToken + " or pass --token")
	}
	if *readOnly == *token {
		return errors.New("the read-only token must differ from the root token")
	}

	policyText := map[string]string{}
	for _, p := range policies {
		b, err := os.ReadFile(p[1])
		if err != nil {
			return fmt.Errorf("policy %s: %w", p[0], err)
		}
		if _, err := vaultserver.ParsePolicy(string(b)); err != nil {
			return fmt.Errorf("policy %s (%s): %w", p[0], p[1], err)
		}
		policyText[p[0]] = string(b)
	}
	authMounts := map[string]string{}
	for _, a := range auths {
		if a[1] != "approle" && a[1] != "kubernetes" {
			return fmt.Errorf("--auth %s=%s: the type must be approle or kubernetes", a[0], a[1])
		}
		authMounts[strings.Trim(a[0], "/")] = a[1]
	}

	srv := vaultserver.New(vaultserver.Options{
		Addr:          *listen,
		RootToken:     *token,
		ReadOnlyToken: *readOnly,
		Mounts:        mounts,
		Policies:      policyText,
		AuthMounts:    authMounts,
	})
	addr, err := srv.Start(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	if *addrFile != "" {
		if err := writeAtomic(*addrFile, addr+"\n"); err != nil {
			return fmt.Errorf("write address file: %w", err)
		}
	}
	fmt.Fprintf(stderr, "vault-test-server: serving the Vault API on %s (mounts %s)\n", addr, describeMounts(mounts))
	if ready != nil {
		ready(addr)
	}
	<-ctx.Done()
	fmt.Fprintln(stderr, "vault-test-server: stopping")
	return nil
}

func describeMounts(m mountFlags) string {
	if len(m) == 0 {
		return "kv=2"
	}
	return m.String()
}

// writeAtomic writes through a temporary file and a rename, so a reader
// polling for the file never sees it half written.
func writeAtomic(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".vault-addr-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
