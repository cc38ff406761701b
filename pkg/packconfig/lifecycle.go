package packconfig

import (
	"regexp"
	"strings"

	"github.com/Masterminds/semver/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// LifecycleRepository is the repository of the lifecycle images, one tag
// per lifecycle release: what a builder.toml's [lifecycle] version becomes.
const LifecycleRepository = "buildpacksio/lifecycle"

// lifecycleRelease matches the lifecycle's release archives, as pack
// downloads them for a [lifecycle] version:
// https://github.com/buildpacks/lifecycle/releases/download/vX.Y.Z/lifecycle-vX.Y.Z+linux.x86-64.tgz
var lifecycleRelease = regexp.MustCompile(`^https://github\.com/buildpacks/lifecycle/releases/download/v([^/]+)/lifecycle-v([^/+]+)\+[a-z]+\.[a-z0-9-]+\.tgz$`)

// lifecycle makes the ClusterLifecycle of [lifecycle]; nil when the
// builder takes buildsmith's default.
func (c *converter) lifecycle(root *table) *v1alpha1.ClusterLifecycle {
	present := root.has("lifecycle")
	t := root.table("lifecycle")
	version, uri := t.str("version"), t.str("uri")
	const fallback = "so the builder gets buildsmith's default lifecycle, the image the lifecycle-image ConfigMap in the controller's namespace names"
	switch {
	case version != "":
		if uri != "" {
			c.warn("lifecycle.uri", "%q: pack refuses both a version and a uri; the version is taken; dropped", uri)
		}
		v, err := semver.NewVersion(version)
		if err != nil {
			c.warn("lifecycle.version", "%q is not a semantic version (%v): dropped, %s", version, err, fallback)
			return nil
		}
		if v.Metadata() != "" {
			// Lifecycle releases have none; a tag cannot hold it.
			c.warn("lifecycle.version", "%q: build metadata +%s dropped: an image tag cannot hold a +", version, v.Metadata())
			if stripped, err := v.SetMetadata(""); err == nil {
				v = &stripped
			}
		}
		version = v.String()
	case uri != "":
		m := lifecycleRelease.FindStringSubmatch(uri)
		if m == nil || m[1] != m[2] {
			c.warn("lifecycle.uri", "%q: a lifecycle archive; buildsmith takes the lifecycle from an image (%s:VERSION, or one made of that archive): dropped, %s",
				uri, LifecycleRepository, fallback)
			return nil
		}
		v, err := semver.NewVersion(m[1])
		if err != nil {
			c.warn("lifecycle.uri", "%q: the version of the release, %q, is not a semantic version (%v): dropped, %s", uri, m[1], err, fallback)
			return nil
		}
		version = v.String()
		c.warn("lifecycle.uri", "%q is the archive of lifecycle release %s: taken as that release's image, %s:%s, which the builder takes the lifecycle from instead",
			uri, version, LifecycleRepository, version)
	case present:
		c.warn("lifecycle", "neither version nor uri: pack puts in the lifecycle its own release defaults to; %s", strings.TrimPrefix(fallback, "so "))
		return nil
	default:
		c.warn("lifecycle", "none: pack puts in the lifecycle its own release defaults to; %s", strings.TrimPrefix(fallback, "so "))
		return nil
	}
	return &v1alpha1.ClusterLifecycle{
		TypeMeta:   typeMeta("ClusterLifecycle"),
		ObjectMeta: metav1.ObjectMeta{Name: dnsName("lifecycle-" + version)},
		Spec:       v1alpha1.ClusterLifecycleSpec{ImageSource: v1alpha1.ImageSource{Image: LifecycleRepository + ":" + version}},
	}
}
