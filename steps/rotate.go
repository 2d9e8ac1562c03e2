package steps

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps/engine"
	"github.com/maasctl/maasctl/vault"
)

// RotatingAnnotation, on the basic-auth Secret, names the Vault KV version
// a `maasctl database rotate-password` run is rotating to. It is set
// before the new version is written to Vault and removed when the
// rotation is done; while it names Vault's current version, an install
// (not only a rotate) may set that version's password on the database. It
// carries a version number only.
const RotatingAnnotation = "maasctl.io/rotating-to-version"

// RotateOptions are the inputs of RotateDBPassword.
type RotateOptions struct {
	Clients   *kube.Clients
	Inventory *inventory.Inventory
	Vault     *vault.Client
	Log       *zap.Logger
	// Progress reports each phase and wait (never a value).
	Progress func(stepID, msg string)
	// Emit, when set, gets the run's events as install emits them
	// (run-started, started, progress, done or failed, run-done with the
	// summary) for step RotateStepID; Progress is then also sent as
	// progress events.
	Emit func(Event)
	// LeaseDuration is how long the run Lease of a killed rotation blocks
	// others (the Lease install takes: a rotation never runs beside an
	// install). Default 60s.
	LeaseDuration time.Duration
}

// RotateResult is what RotateDBPassword did.
type RotateResult struct {
	// Version is the Vault KV v2 version now in use everywhere (0 on KV v1).
	Version int `json:"version"`
	// Resumed is true when the run went on with a password an earlier,
	// interrupted rotation (or an install) had already stored in Vault,
	// instead of generating one.
	Resumed bool `json:"resumed"`
}

// RotateDBPassword rotates the database owner's password, in this order
// (each phase only once the one before it holds):
//
//  1. Vault: a new generated password is written as the next KV v2
//     version with check-and-set on the version read (also over a
//     soft-deleted or destroyed latest version, which is this command's
//     explicit choice, case N11); a KV v1 mount needs
//     database.vaultAllowUnprotectedKVv1;
//  2. the database: the new password is proven on the live database as
//     the owner, and set on the role first if the database refuses it (a
//     "change" Job logging in with the password of the live basic-auth
//     Secret; dbproof.go says why a Job and why maasctl and not CNPG);
//  3. the basic-auth Secret CNPG's initdb reads (so a later primary start
//     sets the same password);
//  4. every maas-db-config copy, then maas-api is restarted and its
//     rollout waited for.
//
// It is resumable: when Vault's current password is not yet in the
// basic-auth Secret or in every maas-db-config copy, or maas-api's restart
// is still owed, the run goes on with that password instead of generating
// another, so a run killed at any point and run again never makes a third
// password, and maas-api only ever gets a password the database accepted.
//
// Errors: no installed database (Cluster not Ready or the basic-auth
// Secret missing: run install first); Vault errors (*vault.CASConflictError
// when another writer stored a version meanwhile, *vault.KVv1Error); a
// refusal naming the Vault version, path and role. No value appears in an
// error, the progress or the log.
func RotateDBPassword(ctx context.Context, o RotateOptions) (RotateResult, error) {
	if o.Emit == nil {
		return rotateDBPassword(ctx, o)
	}
	emit := engine.Emitter(o.Emit, 1)
	progress := o.Progress
	o.Progress = func(id, msg string) {
		// Every progress belongs to the one step of the run; the part
		// that reported it (the proof Job's database/secret, ...) leads
		// the message.
		text := msg
		if id != RotateStepID {
			text = id + ": " + msg
		}
		emit(Event{Type: EventProgress, Step: RotateStepID, Title: rotateTitle, Index: 1, Message: text})
		if progress != nil {
			progress(id, msg)
		}
	}
	var reads0, writes0 int64
	if o.Clients != nil && o.Clients.Requests != nil {
		reads0, writes0 = o.Clients.Requests.Reads(), o.Clients.Requests.Writes()
	}
	start := time.Now()
	emit(Event{Type: EventRunStarted, Message: "rotate the database password in 1 step"})
	emit(Event{Type: EventStarted, Step: RotateStepID, Title: rotateTitle, Index: 1})
	res, err := rotateDBPassword(ctx, o)
	sum := &Summary{Done: []string{}, Unchanged: []string{}, Failed: []string{}, Blocked: []string{}, Duration: time.Since(start)}
	if o.Clients != nil && o.Clients.Requests != nil {
		sum.Reads, sum.Writes = o.Clients.Requests.Reads()-reads0, o.Clients.Requests.Writes()-writes0
	}
	if err != nil {
		sum.Failed = []string{RotateStepID}
		emit(failedEvent(RotateStepID, rotateTitle, 1, err, sum.Duration))
	} else {
		sum.Done = []string{RotateStepID}
		emit(Event{Type: EventDone, Step: RotateStepID, Title: rotateTitle, Index: 1,
			Message: fmt.Sprintf("version %d of %s (resumed: %v)", res.Version, o.Inventory.Database.VaultPath, res.Resumed), Duration: sum.Duration})
	}
	emit(Event{Type: EventRunDone, Duration: sum.Duration, Summary: sum})
	return res, err
}

// RotateStepID is the step ID of the rotation's events and progress.
const RotateStepID = "database/rotate-password"

const rotateTitle = "Rotate the database owner's password"

func rotateDBPassword(ctx context.Context, o RotateOptions) (RotateResult, error) {
	var res RotateResult
	inv := o.Inventory
	d := inv.Database
	env, err := NewEnv(ctx, o.Clients, inv, nil, o.Log)
	if err != nil {
		return res, err
	}
	env.Progress = o.Progress
	env.Policy.RotateDBPassword = true
	const id = RotateStepID
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 60 * time.Second
	}
	lock, err := AcquireLock(ctx, o.Clients.Kube, Identity(), o.LeaseDuration)
	if err != nil {
		return res, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = lock.Release(rctx)
	}()

	livePW, err := installedPassword(ctx, env)
	if err != nil {
		return res, err
	}

	pw, version, resumed, err := rotateVault(ctx, env, o.Vault, livePW)
	if err != nil {
		return res, err
	}
	res.Resumed = resumed
	res.Version = version
	env.Secrets = fixedSecret{pw: pw, version: version}

	if err := rotateRollOut(ctx, env); err != nil {
		return res, err
	}
	env.progress(id, "phase done: version %d is in Vault, the database, Secret %s/%s and %s", version, d.Namespace, d.SecretName, inv.DBConfig.Name)
	return res, nil
}

// rotationOwed reports whether Vault's password pw has not reached every
// place yet (the basic-auth Secret holding secretPw, a maas-db-config
// copy, or maas-api's restart), and which.
func rotationOwed(ctx context.Context, e *Env, pw, secretPw string) (bool, string, error) {
	d := e.Inv.Database
	if secretPw != pw {
		return true, fmt.Sprintf("Secret %s/%s does not hold it yet", d.Namespace, d.SecretName), nil
	}
	want, err := dbConfigSecretsFor(e, pw)
	if err != nil {
		return false, "", err
	}
	for _, s := range want {
		same, _, pending, err := secretState(ctx, e, s)
		if err != nil {
			return false, "", err
		}
		if !same || pending {
			return true, fmt.Sprintf("Secret %s/%s or maas-api's restart is not done yet", s.GetNamespace(), s.GetName()), nil
		}
	}
	return false, "", nil
}

// setRotating sets RotatingAnnotation on the basic-auth Secret to version,
// or removes it when version is "".
func setRotating(ctx context.Context, e *Env, version string) error {
	d := e.Inv.Database
	v := "null"
	if version != "" {
		v = strconv.Quote(version)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, RotatingAnnotation, v)
	_, err := e.Clients.Kube.CoreV1().Secrets(d.Namespace).Patch(ctx, d.SecretName, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: kube.FieldManager + "-rotate"})
	if err != nil {
		return fmt.Errorf("mark Secret %s/%s with %s: %w", d.Namespace, d.SecretName, RotatingAnnotation, err)
	}
	return nil
}

// fixedSecret is the Secrets of a rotation: the password it stored or
// resumed with.
type fixedSecret struct {
	pw      string
	version int
}

func (f fixedSecret) DBPassword(context.Context) (string, error) {
	if f.pw == "" {
		return "", errors.New("no password")
	}
	return f.pw, nil
}

func (f fixedSecret) DBPasswordVersion() int { return f.version }

// RotateAdvice is the way out of a deleted or destroyed latest version n
// that the messages name (vault.DeletedError.Rotate).
func RotateAdvice(n int) string {
	return fmt.Sprintf("rotate the password on purpose with `maasctl database rotate-password`, which writes version %d with check-and-set %d and sets it on the database before the Secret or maas-db-config change", n+1, n)
}

// installedPassword is the password of the installed database's Secret;
// a database that is not installed and Ready, or a Secret without a
// password, is an error naming what to run.
func installedPassword(ctx context.Context, env *Env) (string, error) {
	d := env.Inv.Database
	ready, err := dbLive(ctx, env)
	if err != nil {
		return "", err
	}
	live, err := env.Clients.Kube.CoreV1().Secrets(d.Namespace).Get(ctx, d.SecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !ready):
		return "", &Problem{
			Message: fmt.Sprintf("no installed database to rotate the password of: CNPG Cluster %s/%s must be Ready and Secret %s/%s must exist", d.Namespace, d.ClusterName, d.Namespace, d.SecretName),
			Fix:     "run `maasctl install` first"}
	case err != nil:
		return "", fmt.Errorf("read Secret %s/%s: %w", d.Namespace, d.SecretName, err)
	}
	if string(live.Data["password"]) == "" {
		return "", fmt.Errorf("Secret %s/%s has no password: run `maasctl install` to write it from Vault %s first", d.Namespace, d.SecretName, d.VaultPath)
	}
	return string(live.Data["password"]), nil
}

// rotateVault is the vault phase: the password to roll out and its
// version, which is the one Vault already holds when an earlier rotation
// stopped before the database, Secrets and maas-api all had it (resumed),
// else a new generated one written as the next version.
func rotateVault(ctx context.Context, env *Env, vc *vault.Client, livePW string) (pw string, version int, resumed bool, err error) {
	const id = RotateStepID
	d := env.Inv.Database
	st, err := vc.Inspect(ctx, d.VaultPath)
	if err != nil {
		return "", 0, false, err
	}
	if !st.Found && !st.Gone() {
		return "", 0, false, fmt.Errorf("Vault %s holds no password yet: run `maasctl install`, which creates it", d.VaultPath)
	}
	pw, version = "", st.Version
	if st.Found {
		pw = st.Data["password"]
		behind, why, err := rotationOwed(ctx, env, pw, livePW)
		if err != nil {
			return "", 0, false, err
		}
		if behind {
			resumed = true
			env.progress(id, "going on with the password Vault already holds (version %d): %s", version, why)
		} else {
			pw = ""
		}
	}
	if pw == "" {
		if st.Gone() {
			env.progress(id, "Vault's latest version %d of %s is deleted: writing a new password as version %d, as asked", st.Version, d.VaultPath, st.Version+1)
		}
		next := strconv.Itoa(st.Version + 1)
		if err := setRotating(ctx, env, next); err != nil {
			return "", 0, false, err
		}
		gen, err := vault.GeneratePassword(d.PasswordLength)
		if err != nil {
			return "", 0, false, err
		}
		version, err = vc.ReplaceSecret(ctx, d.VaultPath, st.Version, map[string]string{"username": d.Owner, "password": gen},
			vault.WriteOptions{AllowKVv1: d.VaultAllowUnprotectedKVv1})
		if err != nil {
			return "", 0, false, err
		}
		pw = gen
		env.progress(id, "phase vault: stored a new password as version %d of %s", version, d.VaultPath)
	} else if err := setRotating(ctx, env, strconv.Itoa(version)); err != nil {
		return "", 0, false, err
	}
	return pw, version, resumed, nil
}

// rotateRollOut gives the password of env.Secrets to the database (proved
// first), its Secret and maas-db-config, and ends the rotation mark.
func rotateRollOut(ctx context.Context, env *Env) error {
	const id = RotateStepID
	d, inv := env.Inv.Database, env.Inv
	env.progress(id, "phase database: proving the new password on the database as role %s", d.Owner)
	if err := proveBeforeSecret(ctx, env); err != nil {
		return err
	}
	env.progress(id, "phase secret: writing Secret %s/%s", d.Namespace, d.SecretName)
	sec, err := dbSecret(ctx, env)
	if err != nil {
		return err
	}
	if _, err := env.Clients.Apply(ctx, sec); err != nil {
		return err
	}
	env.progress(id, "phase maas-db-config: writing %s and restarting maas-api", inv.DBConfig.Name)
	if err := applyDBConfig(ctx, env, &Step{ID: "dbsecret/maas-db-config"}); err != nil {
		return err
	}
	if err := setRotating(ctx, env, ""); err != nil {
		return err
	}
	return nil
}
