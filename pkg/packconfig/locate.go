package packconfig

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// What pack makes of a [[buildpacks]] (or [[extensions]]) uri, in its order
// (pack's buildpack locators):
//
//   - "docker://REF" or "docker:/REF": the buildpackage image REF;
//   - "urn:cnb:registry:ID[@VERSION]": an id of a buildpack registry, whose
//     index names the image;
//   - "urn:cnb:builder:ID" and "from=builder[:ID]": a buildpack of the
//     builder in use (meaningful for `pack build`, not here);
//   - any other "SCHEME://…" (https, file): an archive (.tgz) or a
//     buildpackage file (.cnb) to download or read;
//   - anything else ("naked"): a path, if one exists relative to the
//     builder.toml; else a registry id if it has the shape
//     NAMESPACE/NAME[@VERSION]; else an image reference if it parses as one.
//
// A ClusterStore reads buildpackages from images only: everything but an
// image is reported, not carried.

// registryID is the shape pack takes a naked uri for a buildpack registry id
// by: NAMESPACE/NAME, optionally with a port after the namespace and a
// semantic version after an @.
var registryID = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9.-]+(@[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?)?$`)

// scheme matches a URI's scheme and "://".
var scheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// archiveSuffixes are file names pack reads as archives or buildpackage files.
var archiveSuffixes = []string{".tgz", ".tar", ".tar.gz", ".cnb", ".zip"}

// howToPublish ends every message about a buildpack that is not an image.
const howToPublish = "a ClusterStore reads buildpackages from images only: publish it as one " +
	"(pack buildpack package IMAGE --config package.toml --publish) and name the image (docker://IMAGE); dropped"

// locate returns the image a module's uri names, or "" and why it names
// none. isLocalPath says whether a path exists, relative to the
// builder.toml (nil: no path does).
func locate(uri string, isLocalPath func(string) bool) (image, why string) {
	switch {
	case strings.HasPrefix(uri, "docker:/"):
		ref := strings.TrimPrefix(strings.TrimPrefix(uri, "docker://"), "docker:/")
		if _, err := name.ParseReference(ref); err != nil {
			return "", fmt.Sprintf("%q is not an image reference (%v); dropped", uri, err)
		}
		return ref, ""
	case strings.HasPrefix(uri, "urn:cnb:registry:"):
		return "", fmt.Sprintf("%q is a buildpack registry id: the registry's index, which names its image, is not read offline; "+
			"name the buildpackage's image instead (docker://IMAGE); dropped", uri)
	case strings.HasPrefix(uri, "urn:cnb:builder:") || uri == "from=builder" || strings.HasPrefix(uri, "from=builder:"):
		return "", fmt.Sprintf("%q names a buildpack of the builder `pack build` runs with, not a buildpackage; "+
			"name the buildpackage's image instead (docker://IMAGE); dropped", uri)
	}
	if m := scheme.FindStringSubmatch(uri); m != nil {
		switch s := strings.ToLower(m[1]); s {
		case "http", "https":
			return "", fmt.Sprintf("%q is an archive to download (%s), not an image: %s", uri, s, howToPublish)
		case "file":
			return "", fmt.Sprintf("%q is a file on the machine that runs pack, not an image: %s", uri, howToPublish)
		default:
			return "", fmt.Sprintf("%q is a %s URI, not an image: %s", uri, s, howToPublish)
		}
	}
	if looksLikePath(uri) || (isLocalPath != nil && isLocalPath(uri)) {
		return "", fmt.Sprintf("%q is a path on the machine that runs pack (a directory, an archive or a .cnb file), not an image: %s", uri, howToPublish)
	}
	if registryID.MatchString(uri) {
		return "", fmt.Sprintf("%q is read by pack as a buildpack registry id (NAMESPACE/NAME[@VERSION]), whose image is not looked up offline; "+
			"if it is an image, write docker://%s; dropped", uri, uri)
	}
	if _, err := name.ParseReference(uri); err != nil {
		return "", fmt.Sprintf("%q is neither an image reference (%v), a path nor a registry id; dropped", uri, err)
	}
	return uri, ""
}

// looksLikePath says whether a naked uri can only be a path.
func looksLikePath(uri string) bool {
	if uri == "." || uri == ".." || strings.HasPrefix(uri, "/") || strings.HasPrefix(uri, "./") ||
		strings.HasPrefix(uri, "../") || strings.HasPrefix(uri, "~") || strings.Contains(uri, `\`) {
		return true
	}
	for _, suffix := range archiveSuffixes {
		if strings.HasSuffix(strings.ToLower(uri), suffix) {
			return true
		}
	}
	return false
}
