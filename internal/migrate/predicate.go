package migrate

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// tierSet is a set of tier names within the universe of the tiers the
// ConfigMap defines.
type tierSet map[string]bool

func allTiers(tiers []Tier) tierSet {
	s := tierSet{}
	for _, t := range tiers {
		s[t.Name] = true
	}
	return s
}

func (s tierSet) intersect(o tierSet) tierSet {
	out := tierSet{}
	for k := range s {
		if o[k] {
			out[k] = true
		}
	}
	return out
}

func (s tierSet) union(o tierSet) tierSet {
	out := tierSet{}
	for k := range s {
		out[k] = true
	}
	for k := range o {
		out[k] = true
	}
	return out
}

func (s tierSet) minus(o tierSet) tierSet {
	out := tierSet{}
	for k := range s {
		if !o[k] {
			out[k] = true
		}
	}
	return out
}

func (s tierSet) sorted() []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A plain tier comparison is one CEL expression comparing the identity's
// tier with string literals and nothing else:
//
//	auth.identity.tier == "free"     "free" == auth.identity.tier
//	auth.identity.tier != ""         auth.identity.tier in ["a", "b"]
//
// Quotes may be single or double, and the whole may be in parentheses.
// Anything else (other attributes, && or ||, functions) is not a plain tier
// comparison: the subscription model has no equivalent to translate it to.
var (
	literal  = `("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')`
	attr     = `auth\.identity\.tier`
	reLeft   = regexp.MustCompile(`^` + attr + `\s*(==|!=)\s*` + literal + `$`)
	reRight  = regexp.MustCompile(`^` + literal + `\s*(==|!=)\s*` + attr + `$`)
	reIn     = regexp.MustCompile(`^` + attr + `\s+in\s+\[\s*(` + literal + `(?:\s*,\s*` + literal + `)*)?\s*,?\s*\]$`)
	reLitAll = regexp.MustCompile(literal)
)

// errNotTierComparison says a predicate is not a plain tier comparison.
type errNotTierComparison struct{ predicate string }

func (e *errNotTierComparison) Error() string {
	return fmt.Sprintf("predicate %q is not a plain comparison of %s with string literals", e.predicate, tierAttribute)
}

// parseTierPredicate returns the tiers of universe for which the CEL
// predicate p is true, or an *errNotTierComparison.
func parseTierPredicate(p string, universe tierSet) (tierSet, error) {
	s := strings.TrimSpace(p)
	for strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") && balanced(s[1:len(s)-1]) {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	var op, lit string
	switch {
	case reLeft.MatchString(s):
		m := reLeft.FindStringSubmatch(s)
		op, lit = m[1], m[2]
	case reRight.MatchString(s):
		m := reRight.FindStringSubmatch(s)
		lit, op = m[1], m[2]
	case reIn.MatchString(s):
		m := reIn.FindStringSubmatch(s)
		out := tierSet{}
		for _, l := range reLitAll.FindAllString(m[1], -1) {
			v, err := unquote(l)
			if err != nil {
				return nil, &errNotTierComparison{p}
			}
			if universe[v] {
				out[v] = true
			}
		}
		return out, nil
	default:
		return nil, &errNotTierComparison{p}
	}
	v, err := unquote(lit)
	if err != nil {
		return nil, &errNotTierComparison{p}
	}
	return compareTier(op, v, universe), nil
}

// compareTier returns the tiers t of universe with (t op v) true; op is ==
// or != (Authorino pattern operators eq and neq map to these).
func compareTier(op, v string, universe tierSet) tierSet {
	eq := tierSet{}
	if universe[v] {
		eq[v] = true
	}
	if op == "==" {
		return eq
	}
	return universe.minus(eq)
}

// unquote decodes a CEL string literal in single or double quotes.
func unquote(l string) (string, error) {
	if strings.HasPrefix(l, "'") {
		inner := l[1 : len(l)-1]
		l = `"` + strings.ReplaceAll(strings.ReplaceAll(inner, `\'`, `'`), `"`, `\"`) + `"`
	}
	return strconv.Unquote(l)
}

// balanced reports whether the parentheses of s pair up, so that stripping
// an outer pair keeps the expression intact ("(a) == (b)" is not wrapped).
func balanced(s string) bool {
	depth := 0
	for _, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return false
			}
		}
	}
	return depth == 0
}

func sortedStrings(l []string) []string {
	out := append([]string(nil), l...)
	sort.Strings(out)
	return out
}
