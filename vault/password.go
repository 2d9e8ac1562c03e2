package vault

import (
	"crypto/rand"
	"fmt"
	"io"
)

// PasswordAlphabet is the character set of GeneratePassword: ASCII letters and
// digits only, so a password never needs quoting in a shell, escaping in a
// URL or libpq connection string, or breaks a pgpass line (case B07;
// cloudnative-pg/cloudnative-pg#3712 for ':' in pgpass).
const PasswordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

const (
	// MinPasswordLength is the shortest password GeneratePassword makes:
	// 32 characters of a 62-letter alphabet are about 190 bits.
	MinPasswordLength = 32
	// MaxPasswordLength bounds GeneratePassword's length argument.
	MaxPasswordLength = 1024
)

// GeneratePassword returns length characters drawn uniformly from
// PasswordAlphabet using crypto/rand. Bytes at or above the largest multiple
// of the alphabet size are discarded (rejection sampling), so there is no
// modulo bias. The result has no whitespace and no trailing newline.
//
// Errors: length outside [MinPasswordLength, MaxPasswordLength], or a failure
// of the system random source.
func GeneratePassword(length int) (string, error) {
	return generatePassword(rand.Reader, length)
}

func generatePassword(r io.Reader, length int) (string, error) {
	if length < MinPasswordLength || length > MaxPasswordLength {
		return "", fmt.Errorf("password length %d out of range [%d, %d]", length, MinPasswordLength, MaxPasswordLength)
	}
	const n = len(PasswordAlphabet)
	const limit = 256 - 256%n // 248: accepted bytes map 4:1 onto the alphabet
	out := make([]byte, 0, length)
	buf := make([]byte, length+length/4+8)
	for len(out) < length {
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("read random bytes: %w", err)
		}
		for _, b := range buf {
			if int(b) >= limit {
				continue
			}
			out = append(out, PasswordAlphabet[int(b)%n])
			if len(out) == length {
				break
			}
		}
	}
	return string(out), nil
}
