// Package suggest finds the valid name a mistyped one was most likely
// meant to be, for "did you mean" hints in error messages.
package suggest

import "github.com/agnivade/levenshtein"

// Closest returns the candidate nearest to word by edit distance
// (Levenshtein: insertions, deletions and substitutions of runes, from
// github.com/agnivade/levenshtein) when it is near enough to be a typo: at
// most 2 edits, and fewer than half of word's runes. The first of equally
// near candidates wins; ok is false when none is near enough or word is
// itself a candidate.
func Closest(word string, candidates []string) (best string, ok bool) {
	limit := min(2, (len([]rune(word))-1)/2)
	bestD := limit + 1
	for _, c := range candidates {
		if c == word {
			return "", false
		}
		if d := levenshtein.ComputeDistance(word, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD <= limit
}
