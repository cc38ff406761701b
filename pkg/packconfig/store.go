package packconfig

import (
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// module is a [[buildpacks]] or [[extensions]] entry.
type module struct {
	path        string
	id, version string
	image       string // "" when it names no image
}

func (m module) String() string {
	switch {
	case m.id != "" && m.version != "":
		return m.id + "@" + m.version
	case m.id != "":
		return m.id
	}
	return "version " + m.version
}

// modules reads [[buildpacks]] or [[extensions]].
func (c *converter) modules(root *table, key string) []module {
	var out []module
	for _, t := range root.tables(key) {
		m := module{path: t.path, id: t.str("id"), version: t.str("version")}
		uri, image := t.str("uri"), t.str("image")
		switch {
		case image != "":
			if uri != "" {
				c.warn(t.at("uri"), "%q: the entry names an image too, which is taken; dropped", uri)
			}
			if _, err := name.ParseReference(image); err != nil {
				c.warn(t.at("image"), "%q is not an image reference (%v); dropped", image, err)
			} else {
				m.image = image
			}
		case uri != "":
			var why string
			if m.image, why = locate(uri, c.opts.IsLocalPath); why != "" {
				c.warn(t.at("uri"), "%s", why)
			}
		default:
			c.warn(t.path, "neither uri nor image: no buildpackage to take; dropped")
		}
		// pack reads a module's metadata from its buildpack.toml, not from here.
		for _, k := range []string{"name", "description", "homepage", "keywords", "licenses"} {
			if t.has(k) {
				t.take(k)
				c.warn(t.at(k), "a buildpack's metadata comes from its buildpackage; dropped")
			}
		}
		out = append(out, m)
	}
	return out
}

// store makes the ClusterStore of the modules' images; nil when none is an
// image.
func (c *converter) store(buildpacks, extensions []module) *v1alpha1.ClusterStore {
	store := &v1alpha1.ClusterStore{TypeMeta: typeMeta("ClusterStore"), ObjectMeta: metav1.ObjectMeta{Name: c.names.store}}
	first := map[string]string{}
	for _, m := range slices.Concat(buildpacks, extensions) {
		if m.image == "" {
			continue
		}
		key := m.image
		if ref, err := name.ParseReference(m.image); err == nil {
			key = ref.Name() // "busybox" is index.docker.io/library/busybox:latest
		}
		if at, dup := first[key]; dup {
			c.warn(m.path, "the same image as %s: the ClusterStore lists it once", at)
			continue
		}
		first[key] = m.path
		store.Spec.Sources = append(store.Spec.Sources, v1alpha1.ImageSource{Image: m.image})
	}
	if len(store.Spec.Sources) == 0 {
		c.omit("buildpacks", "no buildpack or extension is an image: ClusterStore %s not written; make it of your buildpackages' images", store.Name)
		return nil
	}
	return store
}
