package dataplane

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"
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
	hash         string
}

type keyStore struct {
	mu     sync.Mutex
	byHash map[string]*Key
	byID   map[string]*Key
	// issued keeps plaintexts only so leak tests can search outputs for
	// them (IssuedKeys); the real maas-api cannot do this.
	issued []string
}

func newKeyStore() *keyStore {
	return &keyStore{byHash: map[string]*Key{}, byID: map[string]*Key{}}
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

// mint stores a new key for k (ID, hash and times are filled in) and
// returns the plaintext.
func (s *keyStore) mint(k *Key, now time.Time, ttl time.Duration) (string, error) {
	secret, err := randomString(48)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	id, err := randomUUID()
	if err != nil {
		return "", fmt.Errorf("generate key id: %w", err)
	}
	plain := KeyPrefix + secret
	k.ID, k.hash, k.Created, k.Expires = id, hashKey(plain), now, now.Add(ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byHash[k.hash] = k
	s.byID[k.ID] = k
	s.issued = append(s.issued, plain)
	return plain, nil
}

// lookup validates a presented key: known, not revoked, not expired (the
// /internal/v1/api-keys/validate call Authorino makes).
func (s *keyStore) lookup(plain string, now time.Time) (*Key, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.byHash[hashKey(plain)]
	switch {
	case k == nil:
		return nil, "unknown key"
	case k.Revoked:
		return nil, "revoked"
	case !now.Before(k.Expires):
		return nil, "expired"
	}
	k.LastUsed = now
	c := *k
	return &c, ""
}

// snapshot returns a copy of key id with its status computed at now.
func (s *keyStore) get(id string, now time.Time) *Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.byID[id]
	if k == nil {
		return nil
	}
	return withStatus(*k, now)
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

func (s *keyStore) revoke(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.byID[id]
	if k == nil {
		return false
	}
	k.Revoked = true
	return true
}

// list returns copies of every key (of user, when not empty), newest first.
func (s *keyStore) list(user string, now time.Time) []*Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Key
	for _, k := range s.byID {
		if user == "" || k.Username == user {
			out = append(out, withStatus(*k, now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out
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
