package tagpolicy

import (
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	paketo := []string{"latest", "4", "4.2", "4.2.9", "4.3.0", "4.3.1", "4.10.0-rc.1", "5.0.0", "sha256-abc.sig", "20240115", "4567"}
	for _, tc := range []struct {
		name                     string
		semver, pattern, extract string
		tags                     []string
		want                     string // "": no choice
		version                  string
	}{
		{name: "highest in range", semver: ">=4.0.0 <5", tags: paketo, want: "4.3.1", version: "4.3.1"},
		{name: "numeric, not lexical", semver: ">=1", tags: []string{"1.9.0", "1.10.0", "1.2.0"}, want: "1.10.0", version: "1.10.0"},
		{name: "prereleases only when the range names one", semver: ">=4.10.0-rc.0 <5", tags: paketo, want: "4.10.0-rc.1", version: "4.10.0-rc.1"},
		{name: "range above every tag", semver: ">=6", tags: paketo, want: ""},
		{name: "no tags", semver: "*", tags: nil, want: ""},
		{name: "dates, build numbers and shas are not versions", semver: "*", tags: paketo, want: "5.0.0", version: "5.0.0"},
		{name: "partial versions are not versions", semver: "~4.2.0", tags: []string{"4.2", "4"}, want: ""},
		{name: "leading zeros are not versions", semver: "*", tags: []string{"01.2.3", "1.2.0"}, want: "1.2.0", version: "1.2.0"},
		{name: "equal versions: the longer tag", semver: "~4.2.0", tags: []string{"4.2.0", "v4.2.0"}, want: "v4.2.0", version: "4.2.0"},
		{name: "equal versions, either order", semver: "~4.2.0", tags: []string{"v4.2.0", "4.2.0"}, want: "v4.2.0", version: "4.2.0"},
		{
			name: "a prerelease out of an extract", semver: ">=2.0.0-rc.0", pattern: `^(?P<v>.*)-jammy$`, extract: "$v",
			tags: []string{"1.9.0-jammy", "2.0.0-rc.1-jammy", "2.0.0-rc.2-noble"}, want: "2.0.0-rc.1-jammy", version: "2.0.0-rc.1",
		},
		{
			name: "an extract making too long a version", semver: "*", pattern: `^(?P<v>.*)$`, extract: strings.Repeat("$v", 30),
			tags: []string{"1.0.0"}, want: "",
		},
		{name: "a v prefix reads", semver: "^1.2", tags: []string{"v1.2.3", "v1.3.0", "v2.0.0"}, want: "v1.3.0", version: "1.3.0"},
		{
			name: "pattern with a named group", semver: ">=0.20", pattern: `^(?P<version>[0-9.]+)-jammy$`, extract: "$version",
			tags: []string{"0.20.1-jammy", "0.21.0-noble", "0.20.3-jammy", "0.30.0"}, want: "0.20.3-jammy", version: "0.20.3",
		},
		{
			name: "pattern with a numbered group", semver: "*", pattern: `^build-(\d+\.\d+\.\d+)$`, extract: "${1}",
			tags: []string{"build-1.0.0", "build-1.1.0", "run-9.0.0"}, want: "build-1.1.0", version: "1.1.0",
		},
		{name: "pattern alone: the match is the version", semver: "*", pattern: `\d+\.\d+\.\d+`, tags: []string{"x-1.0.0-y", "2.0"}, want: "x-1.0.0-y", version: "1.0.0"},
		{
			name: "what is not a tag is skipped", semver: "*",
			tags: []string{"9.9.9/../x", strings.Repeat("9", 129), "-1.0.0", "1.0.0"}, want: "1.0.0", version: "1.0.0",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.semver, tc.pattern, tc.extract)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := p.Choose(tc.tags)
			if ok != (tc.want != "") || got.Tag != tc.want || got.Version != tc.version {
				t.Errorf("Choose = %+v, %v; want tag %q version %q", got, ok, tc.want, tc.version)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		semver, pattern, extract string
		says                     string
	}{
		{name: "bad range", semver: ">=one", says: `semver range ">=one"`},
		{name: "long range", semver: strings.Repeat(" ", MaxRangeLength+1), says: "more than 256"},
		{name: "bad pattern", semver: "*", pattern: "(", says: `pattern "("`},
		{name: "long pattern", semver: "*", pattern: strings.Repeat("a", MaxPatternLength+1), says: "more than 256"},
		{name: "costly pattern", semver: "*", pattern: strings.Repeat(".{0,1000}", 28), says: "instructions, more than 512"},
		{name: "extract without pattern", semver: "*", extract: "$v", says: "needs a pattern"},
		{name: "extract names no group", semver: "*", pattern: `^(?P<version>.*)$`, extract: "$verison", says: "$verison"},
		{name: "extract numbers no group", semver: "*", pattern: `^(.*)$`, extract: "$2", says: "$2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.semver, tc.pattern, tc.extract)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("New = %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

func TestString(t *testing.T) {
	p, err := New(">=1 <2", `^v(?P<v>.*)$`, "$v")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.String(), `semver ">=1 <2" of tags matching "^v(?P<v>.*)$"`; got != want {
		t.Errorf("String = %s, want %s", got, want)
	}
}
