package cnb

import (
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Reasons of platform selection errors.
const (
	ReasonPlatformUnsupported = "PlatformUnsupported"
	ReasonNoCommonPlatform    = "NoCommonPlatform"
	ReasonInvalidPlatform     = "InvalidPlatform"
)

// Platform is an OS, an architecture and an optional architecture variant,
// as image indexes and buildpack targets name them.
//
// Matching (see Matches) follows two rules:
//
//   - Names are normalised first, as containerd does: "aarch64" is arm64,
//     "x86_64" is amd64, and a variant that only names the architecture's
//     baseline says nothing: arm64/v8 is arm64, amd64/v1 is amd64. So an
//     arm64 image without a variant and a part that lists linux/arm64/v8
//     match. Variants are otherwise compared as they are ("7" is "v7").
//   - A field left empty says nothing and matches any value: a buildpack
//     target without arch runs on every architecture, a part listing
//     linux/arm matches linux/arm/v7. Two different variants never match
//     (arm/v6 and arm/v7 are different platforms).
type Platform struct {
	OS, Arch, Variant string
}

// String is "os/arch" or "os/arch/variant", the form docker and crane take.
func (p Platform) String() string {
	s := p.OS + "/" + p.Arch
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatform reads "os/arch" or "os/arch/variant".
func ParsePlatform(s string) (Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Platform{}, failure.Permanentf(ReasonInvalidPlatform,
			"platform %q is not of the form os/arch or os/arch/variant", s)
	}
	p := Platform{OS: parts[0], Arch: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// PlatformOf returns the platform an image index or image config names
// (os.version and features are not part of CNB targets and are dropped).
func PlatformOf(p v1.Platform) Platform {
	return Platform{OS: p.OS, Arch: p.Architecture, Variant: p.Variant}
}

// V1 returns p as go-containerregistry's platform, for index manifests.
func (p Platform) V1() v1.Platform {
	return v1.Platform{OS: p.OS, Architecture: p.Arch, Variant: p.Variant}
}

// Normalize returns p with containerd's names: see Platform.
func (p Platform) Normalize() Platform {
	switch p.Arch {
	case "aarch64":
		p.Arch = "arm64"
	case "x86_64", "x86-64":
		p.Arch = "amd64"
	}
	if p.Variant != "" && p.Variant[0] >= '0' && p.Variant[0] <= '9' {
		p.Variant = "v" + p.Variant
	}
	switch {
	case p.Arch == "arm64" && (p.Variant == "v8" || p.Variant == "v8.0"):
		p.Variant = ""
	case p.Arch == "amd64" && p.Variant == "v1":
		p.Variant = ""
	}
	return p
}

// Matches says whether p and q can be the same platform: after
// normalising, every field is equal or empty in one of them.
func (p Platform) Matches(q Platform) bool {
	p, q = p.Normalize(), q.Normalize()
	field := func(a, b string) bool { return a == b || a == "" || b == "" }
	return field(p.OS, q.OS) && field(p.Arch, q.Arch) && field(p.Variant, q.Variant)
}

// concrete: a platform an image can be built for names at least os and arch.
func (p Platform) concrete() bool { return p.OS != "" && p.Arch != "" }

func comparePlatforms(a, b Platform) int {
	return strings.Compare(a.OS+"/"+a.Arch+"/"+a.Variant, b.OS+"/"+b.Arch+"/"+b.Variant)
}

// PlatformPart is one thing every platform of a builder needs: the stack,
// the lifecycle, a buildpack. Name says which in messages ("stack",
// "lifecycle", "buildpack example/hello@1.0.0").
type PlatformPart struct {
	Name string
	// Platforms are the platforms the part has. Empty fields match
	// anything (Platform{} runs everywhere); an empty list has nothing.
	Platforms []Platform
}

func (part PlatformPart) has(p Platform) bool {
	return slices.ContainsFunc(part.Platforms, p.Matches)
}

// MaxIndexPlatforms bounds the platforms of an index read one by one (a
// buildpackage's, a stack image's): each is read and checked, and what it
// says held until all are merged, while a 4 MiB index, the registry's to
// fill, can name tens of thousands. Real ones have two to four.
const MaxIndexPlatforms = 32

// ReasonTooManyPlatforms: an index names more platforms than
// MaxIndexPlatforms.
const ReasonTooManyPlatforms = "TooManyPlatforms"

// CheckIndexPlatforms refuses an index (what, in messages) of more
// distinct platforms than MaxIndexPlatforms.
func CheckIndexPlatforms(what string, platforms []v1.Platform) error {
	if n := len(DistinctPlatforms(platforms)); n > MaxIndexPlatforms {
		return failure.Permanentf(ReasonTooManyPlatforms, "%s is an index of %d platforms, more than the %d an index may have here",
			what, n, MaxIndexPlatforms)
	}
	return nil
}

// DistinctPlatforms are platforms (an index's) each once, as containerd
// names them (aarch64 is arm64): the first entry of each, as the index
// names it, so that reading by it finds that entry. An index naming one
// platform thousands of times is read, and recorded, once.
func DistinctPlatforms(platforms []v1.Platform) []v1.Platform {
	seen := map[string]bool{}
	var out []v1.Platform
	for _, p := range platforms {
		if key := PlatformOf(p).Normalize().String(); !seen[key] {
			seen[key] = true
			out = append(out, p)
		}
	}
	return out
}

// SelectPlatforms returns the platforms to build, normalised and sorted.
//
// With no targets, that is every platform that all parts have: candidates
// are the concrete platforms (os and arch named) any part lists. Where both
// os/arch and os/arch/variant qualify, the one naming the variant is kept:
// it says more about what was checked.
//
// With targets, each must be concrete and in every part; a target a part
// lacks is a Permanent PlatformUnsupported that names both.
//
// No platform at all is a Permanent NoCommonPlatform that says what each
// part has.
func SelectPlatforms(targets []Platform, parts []PlatformPart) ([]Platform, error) {
	if len(targets) > 0 {
		return checkTargets(targets, parts)
	}
	selected, _ := splitCandidates(parts)
	if len(selected) == 0 {
		return nil, failure.Permanentf(ReasonNoCommonPlatform,
			"no platform is common to all parts: %s", describeParts(parts))
	}
	return selected, nil
}

func checkTargets(targets []Platform, parts []PlatformPart) ([]Platform, error) {
	var out []Platform
	var problems []string
	for _, t := range targets {
		if !t.concrete() {
			return nil, failure.Permanentf(ReasonInvalidPlatform, "target platform %q must name an os and an arch", t)
		}
		t = t.Normalize()
		if missing := partsLacking(t, parts); len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("target %s is not in %s", t, joinCapped(missing, 3, ", ", "parts")))
			continue
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(problems) > 0 {
		return nil, failure.Permanentf(ReasonPlatformUnsupported, "%s", joinCapped(problems, 3, "; ", "platforms"))
	}
	slices.SortFunc(out, comparePlatforms)
	return out, nil
}

// DroppedPlatform is a platform some part has that the builder will not:
// the parts in MissingFrom lack it.
type DroppedPlatform struct {
	Platform    Platform
	MissingFrom []string
}

// String reads "linux/arm64: not in buildpack example/hello@1.0.0", for a
// condition message.
func (d DroppedPlatform) String() string {
	return fmt.Sprintf("%s: not in %s", d.Platform, joinCapped(d.MissingFrom, 3, ", ", "parts"))
}

// DroppedPlatforms returns, for SelectPlatforms without targets, the
// candidates left out and which parts lack them, sorted by platform, so
// that status can say why a builder is amd64 only.
func DroppedPlatforms(parts []PlatformPart) []DroppedPlatform {
	_, dropped := splitCandidates(parts)
	return dropped
}

// splitCandidates sorts the concrete platforms of all parts into those
// every part has and those some part lacks.
func splitCandidates(parts []PlatformPart) (selected []Platform, dropped []DroppedPlatform) {
	var candidates []Platform
	for _, part := range parts {
		for _, p := range part.Platforms {
			if p = p.Normalize(); p.concrete() && !slices.Contains(candidates, p) {
				candidates = append(candidates, p)
			}
		}
	}
	slices.SortFunc(candidates, comparePlatforms)
	for _, c := range candidates {
		if missing := partsLacking(c, parts); len(missing) > 0 {
			dropped = append(dropped, DroppedPlatform{Platform: c, MissingFrom: missing})
		} else {
			selected = append(selected, c)
		}
	}
	// linux/arm and linux/arm/v7 both qualify when a part says only "arm":
	// build the one that names the variant.
	selected = slices.DeleteFunc(selected, func(p Platform) bool {
		return p.Variant == "" && slices.ContainsFunc(selected, func(q Platform) bool {
			return q.OS == p.OS && q.Arch == p.Arch && q.Variant != ""
		})
	})
	return selected, dropped
}

func partsLacking(p Platform, parts []PlatformPart) []string {
	var missing []string
	for _, part := range parts {
		if !part.has(p) {
			missing = append(missing, part.Name)
		}
	}
	return missing
}

// describeParts says what each part has, briefly: a builder may have
// dozens of buildpacks, and a condition message should stay readable.
func describeParts(parts []PlatformPart) string {
	var each []string
	for _, part := range parts {
		var names []string
		for _, p := range part.Platforms {
			names = append(names, describePlatform(p))
		}
		has := "nothing"
		if len(names) > 0 {
			has = joinCapped(names, 4, ", ", "platforms")
		}
		each = append(each, part.Name+" has "+has)
	}
	return joinCapped(each, 6, "; ", "parts")
}

// describePlatform shows empty fields as "*", what they mean.
func describePlatform(p Platform) string {
	star := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	s := star(p.OS) + "/" + star(p.Arch)
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// joinCapped joins at most limit items with sep and says how many more
// there were.
func joinCapped(items []string, limit int, sep, what string) string {
	if len(items) <= limit {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s and %d more %s", strings.Join(items[:limit], sep), len(items)-limit, what)
}

// APIPlatforms returns ps as the API writes them in status.
func APIPlatforms(ps []Platform) []v1alpha1.Platform {
	out := make([]v1alpha1.Platform, len(ps))
	for i, p := range ps {
		out[i] = v1alpha1.Platform{OS: p.OS, Arch: p.Arch, Variant: p.Variant}
	}
	return out
}

// PlatformsOf returns the API's platforms as Platforms.
func PlatformsOf(ps []v1alpha1.Platform) []Platform {
	out := make([]Platform, len(ps))
	for i, p := range ps {
		out[i] = Platform{OS: p.OS, Arch: p.Arch, Variant: p.Variant}
	}
	return out
}

// PlatformsOfV1 returns go-containerregistry's platforms as Platforms.
func PlatformsOfV1(ps []v1.Platform) []Platform {
	out := make([]Platform, len(ps))
	for i, p := range ps {
		out[i] = PlatformOf(p)
	}
	return out
}
