package cnb

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// plat parses "os/arch[/variant]" for tests; "*" is an empty field.
func plat(t *testing.T, s string) Platform {
	t.Helper()
	parts := strings.Split(s, "/")
	for i, p := range parts {
		if p == "*" {
			parts[i] = ""
		}
	}
	p := Platform{OS: parts[0], Arch: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p
}

func plats(t *testing.T, ss ...string) []Platform {
	t.Helper()
	out := []Platform{}
	for _, s := range ss {
		out = append(out, plat(t, s))
	}
	return out
}

func TestPlatformString(t *testing.T) {
	for _, tt := range []struct {
		p    Platform
		want string
	}{
		{Platform{OS: "linux", Arch: "arm64"}, "linux/arm64"},
		{Platform{OS: "linux", Arch: "arm", Variant: "v7"}, "linux/arm/v7"},
		{Platform{OS: "windows", Arch: "amd64"}, "windows/amd64"},
	} {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.p, got, tt.want)
		}
		if back, err := ParsePlatform(tt.want); err != nil || back != tt.p {
			t.Errorf("ParsePlatform(%q) = %#v, %v", tt.want, back, err)
		}
	}
}

func TestParsePlatformRefusesMalformed(t *testing.T) {
	for _, s := range []string{"", "linux", "linux/", "/amd64", "linux/arm/v7/extra"} {
		_, err := ParsePlatform(s)
		if e, ok := failure.As(err); !ok || e.Reason != ReasonInvalidPlatform || e.Class != failure.Permanent {
			t.Errorf("ParsePlatform(%q) = %v, want a permanent %s", s, err, ReasonInvalidPlatform)
		}
	}
}

func TestPlatformV1RoundTrip(t *testing.T) {
	in := v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7", OSVersion: "ignored", Features: []string{"x"}}
	p := PlatformOf(in)
	if want := (Platform{OS: "linux", Arch: "arm", Variant: "v7"}); p != want {
		t.Fatalf("PlatformOf = %#v, want %#v", p, want)
	}
	if diff := cmp.Diff(v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}, p.V1()); diff != "" {
		t.Errorf("V1 (-want +got):\n%s", diff)
	}
}

func TestPlatformMatches(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"linux/amd64", "linux/amd64", true},
		{"linux/amd64", "linux/arm64", false},
		{"linux/amd64", "windows/amd64", false},
		{"linux/arm64", "linux/arm64/v8", true}, // the baseline variant, as containerd normalises
		{"linux/aarch64", "linux/arm64", true},
		{"linux/x86_64", "linux/amd64/v1", true},
		{"linux/arm/v7", "linux/arm/7", true},
		{"linux/arm/v6", "linux/arm/v7", false},
		{"linux/arm", "linux/arm/v7", true}, // no variant says nothing
		{"linux/*", "linux/s390x", true},    // a target naming only the os
		{"*/*", "windows/arm64", true},
	} {
		a, b := plat(t, tt.a), plat(t, tt.b)
		if got := a.Matches(b); got != tt.want {
			t.Errorf("%s matches %s = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := b.Matches(a); got != tt.want {
			t.Errorf("%s matches %s = %v, want %v (not symmetric)", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestSelectPlatforms(t *testing.T) {
	stack := PlatformPart{Name: "stack", Platforms: []Platform{
		{OS: "linux", Arch: "arm64", Variant: "v8"}, {OS: "linux", Arch: "amd64"}}}
	lifecycle := PlatformPart{Name: "lifecycle", Platforms: []Platform{
		{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}, {OS: "linux", Arch: "s390x"}}}
	anywhere := PlatformPart{Name: "buildpack example/script@1.0.0", Platforms: []Platform{{}}}
	linuxOnly := PlatformPart{Name: "buildpack example/go@1.0.0", Platforms: []Platform{{OS: "linux"}}}
	amd64Only := PlatformPart{Name: "buildpack example/hello@1.0.0", Platforms: []Platform{{OS: "linux", Arch: "amd64"}}}
	nothing := PlatformPart{Name: "buildpack example/empty@0.0.1"}

	tests := []struct {
		name    string
		targets []Platform
		parts   []PlatformPart
		want    []Platform
		reason  string
		message []string // substrings of the error message
	}{{
		name:  "intersection, normalised and sorted",
		parts: []PlatformPart{stack, lifecycle, anywhere, linuxOnly},
		want:  plats(t, "linux/amd64", "linux/arm64"),
	}, {
		name:  "part order does not matter",
		parts: []PlatformPart{linuxOnly, lifecycle, anywhere, stack},
		want:  plats(t, "linux/amd64", "linux/arm64"),
	}, {
		name:  "a buildpack narrows the set",
		parts: []PlatformPart{stack, lifecycle, amd64Only},
		want:  plats(t, "linux/amd64"),
	}, {
		name: "the variant is kept where a part names it",
		parts: []PlatformPart{
			{Name: "stack", Platforms: plats(t, "linux/arm/v7", "linux/arm/v6")},
			{Name: "lifecycle", Platforms: plats(t, "linux/arm")},
		},
		want: plats(t, "linux/arm/v6", "linux/arm/v7"),
	}, {
		name:    "no common platform",
		parts:   []PlatformPart{{Name: "stack", Platforms: plats(t, "linux/arm64")}, lifecycle, amd64Only},
		reason:  ReasonNoCommonPlatform,
		message: []string{"stack has linux/arm64", "buildpack example/hello@1.0.0 has linux/amd64", "lifecycle has linux/amd64, linux/arm64, linux/s390x"},
	}, {
		name:    "a part with nothing",
		parts:   []PlatformPart{stack, nothing},
		reason:  ReasonNoCommonPlatform,
		message: []string{"buildpack example/empty@0.0.1 has nothing"},
	}, {
		name:    "only wildcards",
		parts:   []PlatformPart{anywhere, linuxOnly},
		reason:  ReasonNoCommonPlatform,
		message: []string{"buildpack example/script@1.0.0 has */*", "buildpack example/go@1.0.0 has linux/*"},
	}, {
		name:    "explicit targets",
		targets: plats(t, "linux/arm64/v8", "linux/amd64", "linux/arm64"),
		parts:   []PlatformPart{stack, lifecycle, anywhere},
		want:    plats(t, "linux/amd64", "linux/arm64"),
	}, {
		name:    "explicit target a buildpack lacks",
		targets: plats(t, "linux/amd64", "linux/arm64"),
		parts:   []PlatformPart{stack, lifecycle, amd64Only},
		reason:  ReasonPlatformUnsupported,
		message: []string{"target linux/arm64 is not in buildpack example/hello@1.0.0"},
	}, {
		name:    "explicit target several parts lack",
		targets: plats(t, "linux/s390x"),
		parts:   []PlatformPart{stack, lifecycle, amd64Only},
		reason:  ReasonPlatformUnsupported,
		message: []string{"target linux/s390x is not in stack, buildpack example/hello@1.0.0"},
	}, {
		name:    "explicit target without arch",
		targets: plats(t, "linux/*"),
		parts:   []PlatformPart{stack},
		reason:  ReasonInvalidPlatform,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SelectPlatforms(tt.targets, tt.parts)
			if tt.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("platforms (-want +got):\n%s", diff)
				}
				return
			}
			e, ok := failure.As(err)
			if !ok || e.Reason != tt.reason || e.Class != failure.Permanent {
				t.Fatalf("err = %v, want a permanent %s", err, tt.reason)
			}
			for _, m := range tt.message {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not say %q", err, m)
				}
			}
		})
	}
}

func TestNoCommonPlatformMessageIsBrief(t *testing.T) {
	parts := []PlatformPart{{Name: "stack", Platforms: plats(t, "linux/amd64", "linux/arm64", "linux/arm/v7", "linux/arm/v6", "linux/s390x", "linux/ppc64le")}}
	for i := range 20 {
		parts = append(parts, PlatformPart{Name: "buildpack bp" + string(rune('a'+i)), Platforms: plats(t, "windows/amd64")})
	}
	_, err := SelectPlatforms(nil, parts)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"and 2 more platforms", "and 15 more parts"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if len(msg) > 400 {
		t.Errorf("message is %d characters long: %s", len(msg), msg)
	}
}

func TestDroppedPlatforms(t *testing.T) {
	parts := []PlatformPart{
		{Name: "stack", Platforms: plats(t, "linux/amd64", "linux/arm64")},
		{Name: "lifecycle", Platforms: plats(t, "linux/amd64", "linux/arm64", "linux/s390x")},
		{Name: "buildpack example/hello@1.0.0", Platforms: plats(t, "linux/amd64")},
		{Name: "buildpack example/go@1.0.0", Platforms: plats(t, "linux/*")},
	}
	got := DroppedPlatforms(parts)
	want := []DroppedPlatform{
		{Platform: plat(t, "linux/arm64"), MissingFrom: []string{"buildpack example/hello@1.0.0"}},
		{Platform: plat(t, "linux/s390x"), MissingFrom: []string{"stack", "buildpack example/hello@1.0.0"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
	if s := got[0].String(); s != "linux/arm64: not in buildpack example/hello@1.0.0" {
		t.Errorf("String() = %q", s)
	}
	if d := DroppedPlatforms(parts[:2]); len(d) != 1 || d[0].Platform != plat(t, "linux/s390x") {
		t.Errorf("stack and lifecycle alone drop %v, want only linux/s390x", d)
	}
}
