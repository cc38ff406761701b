package attest

import (
	"strings"
)

// declaredLicense is the SPDX licenseDeclared of a module whose
// buildpack.toml gives licenses: each an SPDX license expression, all of
// them holding (AND). A type that is no well-formed expression (free text,
// or one made to change the meaning of its neighbours) makes the whole
// NOASSERTION: a module's licenses come from its package's labels, which
// whoever publishes it writes.
func declaredLicense(licenses []string) string {
	if len(licenses) == 0 {
		return noAssertion
	}
	parts := make([]string, len(licenses))
	for i, l := range licenses {
		tokens := licenseTokens(l)
		if !isLicenseExpression(tokens) {
			return noAssertion
		}
		// Written from its tokens, one space apart: what separated them
		// (tabs, other spaces) is the label's, not the document's.
		parts[i] = strings.NewReplacer("( ", "(", " )", ")").Replace(strings.Join(tokens, " "))
		if len(licenses) > 1 && len(tokens) > 1 {
			parts[i] = "(" + parts[i] + ")" // "A OR B" keeps its meaning beside another
		}
	}
	return strings.Join(parts, " AND ")
}

// isLicenseExpression reports whether tokens (licenseTokens) make an SPDX
// 2.3 license expression (Annex D): identifiers joined by AND, OR and
// WITH, grouped by parentheses. It checks the grammar, not that the
// identifiers are on the SPDX list: a buildpack may name a license the
// list does not have.
func isLicenseExpression(tokens []string) bool {
	p := licenseParser{tokens: tokens}
	return p.expression(0) && p.pos == len(p.tokens)
}

// licenseTokens splits s into parentheses and words (strings.Fields: at
// any white space, Unicode's included).
func licenseTokens(s string) []string {
	s = strings.NewReplacer("(", " ( ", ")", " ) ").Replace(s)
	return strings.Fields(s)
}

// maxLicenseNesting bounds the parentheses the parser follows (its
// recursion).
const maxLicenseNesting = 8

type licenseParser struct {
	tokens []string
	pos    int
}

// expression := term ((AND | OR) term)*
func (p *licenseParser) expression(depth int) bool {
	if !p.term(depth) {
		return false
	}
	for p.pos < len(p.tokens) && (p.tokens[p.pos] == "AND" || p.tokens[p.pos] == "OR") {
		p.pos++
		if !p.term(depth) {
			return false
		}
	}
	return true
}

// term := "(" expression ")" | identifier [WITH identifier]
func (p *licenseParser) term(depth int) bool {
	if p.pos == len(p.tokens) {
		return false
	}
	if p.tokens[p.pos] == "(" {
		if depth == maxLicenseNesting {
			return false
		}
		p.pos++
		if !p.expression(depth+1) || p.pos == len(p.tokens) || p.tokens[p.pos] != ")" {
			return false
		}
		p.pos++
		return true
	}
	if !isLicenseID(p.tokens[p.pos]) {
		return false
	}
	p.pos++
	if p.pos < len(p.tokens) && p.tokens[p.pos] == "WITH" {
		p.pos++
		if p.pos == len(p.tokens) || !isLicenseID(p.tokens[p.pos]) {
			return false
		}
		p.pos++
	}
	return true
}

// isLicenseID: a license or exception identifier, an optional "+" after
// it. Not a user-defined one (LicenseRef-, DocumentRef-): an SPDX document
// must define those it uses, and a buildpack.toml gives no text to define
// them with.
func isLicenseID(s string) bool {
	if s == "AND" || s == "OR" || s == "WITH" || strings.HasPrefix(s, "LicenseRef-") || strings.HasPrefix(s, "DocumentRef-") {
		return false
	}
	return isIDString(strings.TrimSuffix(s, "+"))
}

// isIDString: SPDX's idstring, letters, digits, "." and "-".
func isIDString(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
