package dataplane

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The API key store of the simulated maas-api. Upstream
// (opendatahub-io/models-as-a-service docs/content/user-guide/
// api-key-management.md): keys are "sk-oai-" plus random characters, the
// plaintext is returned once at creation and only its SHA-256 hash is
// stored; each key records the creator's user name and groups at creation
// time ("group membership snapshots") and is bound to one MaaSSubscription;
// revocation takes effect immediately; every key expires (default: the
// configured maximum, 90 days).

// KeyPrefix starts every API key.
const KeyPrefix = "sk-oai-"

// MaxExpiration is the longest lifetime of a regular key (maas-api's
// default API_KEY_MAX_EXPIRATION_DAYS, 90 days).
const MaxExpiration = 90 * 24 * time.Hour

// Key is the stored record of one API key: never its plaintext.
type Key struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Description  string    `json:"description,omitempty"`
	Username     string    `json:"username"`
	Groups       []string  `json:"-"`
	Subscription string    `json:"subscription"`
	Created      time.Time `json:"creationDate"`
	Expires      time.Time `json:"expirationDate"`
	LastUsed     time.Time `json:"lastUsedAt,omitzero"`
	Revoked      bool      `json:"-"`
	Status       string    `json:"status"`
	Ephemeral    bool      `json:"ephemeral"`
}

// issuedKeys keeps plaintexts only so leak tests can search outputs for
// them (IssuedKeys); the real maas-api cannot do this.
type issuedKeys struct {
	mu   sync.Mutex
	list []string
}

func hashKey(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:])
}

const keyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func randomString(n int) (string, error) {
	b := make([]byte, n)
	max := big.NewInt(int64(len(keyAlphabet)))
	for i := range b {
		x, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		b[i] = keyAlphabet[x.Int64()]
	}
	return string(b), nil
}

func randomUUID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// The key store is maas-api's table api_keys in the real database (db.go):
// one new connection per call. Errors are *dbError with maas-api's
// public text for the call.

const keyColumns = `id, username, name, coalesce(description, ''), user_groups, subscription, created_at, expires_at, last_used_at, status, ephemeral`

func scanKey(row pgx.Row) (*Key, error) {
	k := &Key{}
	var expires, lastUsed *time.Time
	var status string
	if err := row.Scan(&k.ID, &k.Username, &k.Name, &k.Description, &k.Groups, &k.Subscription, &k.Created, &expires, &lastUsed, &status, &k.Ephemeral); err != nil {
		return nil, err
	}
	k.Created = k.Created.UTC()
	if expires != nil {
		k.Expires = expires.UTC()
	}
	if lastUsed != nil {
		k.LastUsed = lastUsed.UTC()
	}
	k.Revoked = status == "revoked"
	return k, nil
}

// query runs f on a new connection of in; failures become a *dbError
// with public text and are written to maas-api's log.
func (s *Server) query(ctx context.Context, in *maasAPIInstance, public string, f func(c *pgx.Conn) error) error {
	c, err := in.connect(ctx, public)
	if err == nil {
		defer c.Close(context.WithoutCancel(ctx))
		if err = f(c); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			err = &dbError{Public: public, Cause: in.target + ": " + describe(err)}
		}
	}
	var de *dbError
	if errors.As(err, &de) {
		s.api.fail(de)
	}
	return err
}

// mintKey stores a new key for k (ID and times are filled in) and returns
// the plaintext; only its SHA-256 hash is stored.
func (s *Server) mintKey(ctx context.Context, in *maasAPIInstance, k *Key, now time.Time, ttl time.Duration) (string, error) {
	secret, err := randomString(48)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	id, err := randomUUID()
	if err != nil {
		return "", fmt.Errorf("generate key id: %w", err)
	}
	plain := KeyPrefix + secret
	k.ID, k.Created, k.Expires = id, now.UTC(), now.Add(ttl).UTC()
	groups := k.Groups
	if groups == nil {
		groups = []string{}
	}
	err = s.query(ctx, in, "Failed to create API key", func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `INSERT INTO api_keys (id, username, name, description, key_hash, status, user_groups, created_at, expires_at, subscription, ephemeral)
VALUES ($1, $2, $3, $4, $5, 'active', $6, $7, $8, $9, $10)`, k.ID, k.Username, k.Name, k.Description, hashKey(plain), groups, k.Created, k.Expires, k.Subscription, k.Ephemeral)
		return err
	})
	if err != nil {
		return "", err
	}
	s.issued.mu.Lock()
	s.issued.list = append(s.issued.list, plain)
	s.issued.mu.Unlock()
	return plain, nil
}

// lookupKey validates a presented key: known, not revoked, not expired (the
// /internal/v1/api-keys/validate call Authorino makes). A nil key with a
// nil error is an invalid key; why says which.
func (s *Server) lookupKey(ctx context.Context, in *maasAPIInstance, plain string, now time.Time) (k *Key, why string, err error) {
	c, created, err := in.validationConn(ctx)
	if err != nil {
		var de *dbError
		if errors.As(err, &de) {
			s.api.fail(de)
		}
		return nil, "", err
	}
	k, err = scanKey(c.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE key_hash = $1`, hashKey(plain)))
	if err == nil && !k.Revoked && now.Before(k.Expires) {
		_, err = c.Exec(ctx, `UPDATE api_keys SET last_used_at = $2 WHERE id = $1`, k.ID, now.UTC())
	}
	in.release(ctx, c, created, err == nil || errors.Is(err, pgx.ErrNoRows))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, "unknown key", nil
	case err != nil:
		de := &dbError{Public: "validation failed", Cause: in.target + ": " + describe(err)}
		s.api.fail(de)
		return nil, "", de
	case k.Revoked:
		return nil, "revoked", nil
	case !now.Before(k.Expires):
		return nil, "expired", nil
	}
	k.LastUsed = now.UTC()
	return k, "", nil
}

// getKey returns key id with its status computed at now; nil, nil when
// there is none.
func (s *Server) getKey(ctx context.Context, in *maasAPIInstance, id string, now time.Time) (*Key, error) {
	var k *Key
	err := s.query(ctx, in, "Failed to retrieve API key", func(c *pgx.Conn) error {
		var err error
		k, err = scanKey(c.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1`, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return withStatus(*k, now), nil
}

func withStatus(k Key, now time.Time) *Key {
	switch {
	case k.Revoked:
		k.Status = "revoked"
	case !now.Before(k.Expires):
		k.Status = "expired"
	default:
		k.Status = "active"
	}
	return &k
}

func (s *Server) revokeKey(ctx context.Context, in *maasAPIInstance, id string) error {
	return s.query(ctx, in, "Failed to revoke API key", func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `UPDATE api_keys SET status = 'revoked' WHERE id = $1`, id)
		return err
	})
}

// listKeys returns every key (of user, when not empty), newest first.
func (s *Server) listKeys(ctx context.Context, in *maasAPIInstance, user string, now time.Time) ([]*Key, error) {
	var out []*Key
	err := s.query(ctx, in, "Failed to search API keys", func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE $1 = '' OR username = $1 ORDER BY created_at DESC`, user)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			k, err := scanKey(rows)
			if err != nil {
				return err
			}
			out = append(out, withStatus(*k, now))
		}
		return rows.Err()
	})
	return out, err
}

var durationPart = regexp.MustCompile(`(\d+(?:\.\d+)?)([dhms])`)

// parseExpiresIn reads expiresIn as maas-api accepts it: a JSON number of
// seconds, or a string of number+unit parts (d, h, m, s; "1.5d", "2h30m").
func parseExpiresIn(v any) (time.Duration, error) {
	switch x := v.(type) {
	case nil:
		return MaxExpiration, nil
	case float64:
		if x <= 0 {
			return 0, fmt.Errorf("expiresIn must be positive")
		}
		return time.Duration(x * float64(time.Second)), nil
	case string:
		rest := x
		var total float64
		for rest != "" {
			m := durationPart.FindStringSubmatchIndex(rest)
			if m == nil || m[0] != 0 {
				return 0, fmt.Errorf("invalid expiresIn %q", x)
			}
			n, _ := strconv.ParseFloat(rest[m[2]:m[3]], 64)
			unit := map[string]float64{"d": 86400, "h": 3600, "m": 60, "s": 1}[rest[m[4]:m[5]]]
			total += n * unit
			rest = rest[m[1]:]
		}
		if x == "" || total <= 0 {
			return 0, fmt.Errorf("invalid expiresIn %q", x)
		}
		return time.Duration(total * float64(time.Second)), nil
	}
	return 0, fmt.Errorf("invalid expiresIn")
}
