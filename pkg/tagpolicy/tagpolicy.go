// Package tagpolicy chooses one of a repository's tags by a policy: the
// highest semantic version within a range, among the tags a pattern lets
// through (the policy of Flux's ImagePolicy, for the sources a builder reads).
//
// Tags come from a registry, which may be a tenant's: they are bounded by
// the caller (how many are listed), and here each is checked to be a tag
// (the OCI distribution grammar, 128 characters at most) before the
// pattern, whose matching is linear in the tag (RE2), sees it.
package tagpolicy

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Bounds on what an object's spec may ask of a policy: both appear in
// status messages, and a pattern runs over every tag of a repository (up
// to --registry-max-tags of up to 128 characters) on every reconcile. RE2's
// matching is linear in the tag, but its constant is the program's size:
// 256 characters of `.{0,1000}` compile to tens of thousands of
// instructions, which the instruction bound refuses (real patterns take
// tens).
const (
	MaxRangeLength         = 256
	MaxPatternLength       = 256
	MaxPatternInstructions = 512
	// MaxVersionLength bounds the version an extract makes of a tag
	// ("$v$v$v…" would make kilobytes of one).
	MaxVersionLength = 128
)

// tagGrammar is the OCI distribution spec's tag: 128 characters at most.
var tagGrammar = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// Policy chooses tags. The zero Policy is not usable: make one with New.
type Policy struct {
	constraint *semver.Constraints
	pattern    *regexp.Regexp // nil: every tag
	extract    string         // a template of pattern's groups; "": the whole match
	text       string         // how messages name the policy
}

// New makes the policy of a semver range (e.g. ">=10.2.0 <11"), and an
// optional pattern a tag must match, with extract naming the version in it
// from the pattern's groups ("$version", "${1}"); empty extract: the tag
// itself is the version.
func New(semverRange, pattern, extract string) (*Policy, error) {
	if len(semverRange) > MaxRangeLength {
		return nil, fmt.Errorf("semver range is %d characters, more than %d", len(semverRange), MaxRangeLength)
	}
	constraint, err := semver.NewConstraint(semverRange)
	if err != nil {
		return nil, fmt.Errorf("semver range %q: %v", semverRange, err)
	}
	p := &Policy{constraint: constraint, text: fmt.Sprintf("semver %q", semverRange)}
	if pattern == "" {
		if extract != "" {
			return nil, fmt.Errorf("extract %q needs a pattern to take groups from", extract)
		}
		return p, nil
	}
	if len(pattern) > MaxPatternLength {
		return nil, fmt.Errorf("pattern is %d characters, more than %d", len(pattern), MaxPatternLength)
	}
	if err := checkSize(pattern); err != nil {
		return nil, err
	}
	if p.pattern, err = regexp.Compile(pattern); err != nil {
		return nil, fmt.Errorf("pattern %q: %v", pattern, err)
	}
	if err := checkGroups(p.pattern, extract); err != nil {
		return nil, err
	}
	p.extract = extract
	p.text += fmt.Sprintf(" of tags matching %q", pattern)
	return p, nil
}

// checkSize fails a pattern whose program is over MaxPatternInstructions.
func checkSize(pattern string) error {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return fmt.Errorf("pattern %q: %v", pattern, err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return fmt.Errorf("pattern %q: %v", pattern, err)
	}
	if n := len(prog.Inst); n > MaxPatternInstructions {
		return fmt.Errorf("pattern %q compiles to %d instructions, more than %d: match less", pattern, n, MaxPatternInstructions)
	}
	return nil
}

// checkGroups fails when extract names a group pattern does not have: a
// typo would otherwise extract "" from every tag and match nothing, with a
// message that does not say why.
func checkGroups(pattern *regexp.Regexp, extract string) error {
	var missing []string
	probe := regexp.MustCompile(`\$(\{[^}]*\}|[a-zA-Z0-9_]+)`)
	for _, ref := range probe.FindAllStringSubmatch(extract, -1) {
		group := strings.Trim(ref[1], "{}")
		if pattern.SubexpIndex(group) >= 0 {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(group, "%d", &n); err == nil && fmt.Sprint(n) == group && n <= pattern.NumSubexp() {
			continue
		}
		missing = append(missing, "$"+ref[1])
	}
	if len(missing) > 0 {
		return fmt.Errorf("extract %q names %s, which the pattern %q has no group for", extract, strings.Join(missing, ", "), pattern)
	}
	return nil
}

// String names the policy in messages.
func (p *Policy) String() string { return p.text }

// Choice is the tag a policy chose and the version it read in it.
type Choice struct {
	Tag     string
	Version string
}

// Choose returns the tag whose version is the highest within the range, of
// the tags that are tags and match the pattern; ok is false when none is.
// A version is MAJOR.MINOR.PATCH, with a prerelease and build metadata if
// any, after an optional "v" (strict semver): "4.3" (a tag that moves), a
// date (20240115) or a build number would otherwise read as N.0.0 and win
// an open range. Tags of one version ("4.0.0", "v4.0.0", "4.0.0+1") are
// told apart by their text, so that the same list always gives the same
// tag: the longer, then the lexically greater.
func (p *Policy) Choose(tags []string) (choice Choice, ok bool) {
	var best *semver.Version
	for _, tag := range tags {
		if !tagGrammar.MatchString(tag) {
			continue
		}
		text, matched := p.versionText(tag)
		if !matched || len(text) > MaxVersionLength {
			continue
		}
		v, err := semver.StrictNewVersion(strings.TrimPrefix(text, "v"))
		if err != nil || !p.constraint.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) || v.Equal(best) && later(tag, choice.Tag) {
			best, choice = v, Choice{Tag: tag, Version: v.String()}
		}
	}
	return choice, best != nil
}

// versionText is the part of tag that holds its version.
func (p *Policy) versionText(tag string) (string, bool) {
	if p.pattern == nil {
		return tag, true
	}
	match := p.pattern.FindStringSubmatchIndex(tag)
	if match == nil {
		return "", false
	}
	if p.extract == "" {
		return tag[match[0]:match[1]], true
	}
	return string(p.pattern.ExpandString(nil, p.extract, tag, match)), true
}

// later orders tags of one version: the longer, then the greater.
func later(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}
