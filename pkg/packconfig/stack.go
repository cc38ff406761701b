package packconfig

import (
	"fmt"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// runImage is a run image and its mirrors, and where the file names it.
type runImage struct {
	path    string
	image   string
	mirrors []string
}

// stack makes the ClusterStack from [stack], [build] and [run] (pack's
// rules: [build] image and the first [[run.images]] win over [stack]'s
// build-image, run-image and run-image-mirrors, which must then agree).
// nil when it cannot be written.
func (c *converter) stack(stack, build, run *table) *v1alpha1.ClusterStack {
	id := stack.str("id")
	stackBuild, stackRun := stack.str("build-image"), stack.str("run-image")
	stackMirrors := stack.strs("run-image-mirrors")
	buildImage := build.str("image")
	var runs []runImage
	for _, t := range run.tables("images") {
		r := runImage{path: t.path, image: t.str("image"), mirrors: t.strs("mirrors")}
		if r.image == "" {
			c.warn(t.path, "no image; dropped")
			continue
		}
		runs = append(runs, r)
	}

	switch {
	case buildImage == "":
		buildImage = stackBuild
	case stackBuild != "" && stackBuild != buildImage:
		c.warn("stack.build-image", "%q differs from build.image %q (pack refuses that); build.image taken; dropped", stackBuild, buildImage)
	}
	var run0 *runImage
	switch {
	case len(runs) > 0:
		run0 = &runs[0]
		if stackRun != "" && stackRun != run0.image {
			c.warn("stack.run-image", "%q differs from %s.image %q (pack refuses that); %s taken; dropped", stackRun, run0.path, run0.image, run0.path)
		} else if len(stackMirrors) > 0 && !slices.Equal(stackMirrors, run0.mirrors) {
			c.warn("stack.run-image-mirrors", "%q differ from %s.mirrors %q, which pack takes; dropped", stackMirrors, run0.path, run0.mirrors)
		}
	case stackRun != "":
		run0 = &runImage{path: "stack.run-image", image: stackRun, mirrors: stackMirrors}
	}
	var more []runImage
	for _, r := range runs[min(1, len(runs)):] {
		if len(more) == maxAdditionalRunImages {
			c.warn(r.path, "%q: more than buildsmith's %d run images after the first; dropped", r.image, maxAdditionalRunImages)
			continue
		}
		more = append(more, r)
	}
	if id == "" {
		id = c.opts.StackID
	} else if c.opts.StackID != "" && c.opts.StackID != id {
		c.warn("stack.id", "%q is taken; the stack id %q given is for a builder.toml without one", id, c.opts.StackID)
	}

	stackName := c.names.stack
	switch {
	case buildImage == "":
		c.omit("build.image", "missing, and no stack.build-image: ClusterStack %s not written (pack refuses the file too)", stackName)
		return nil
	case run0 == nil:
		c.omit("run.images", "missing, and no stack.run-image: ClusterStack %s not written (pack refuses the file too)", stackName)
		return nil
	}
	out := &v1alpha1.ClusterStack{
		TypeMeta:   typeMeta("ClusterStack"),
		ObjectMeta: metav1.ObjectMeta{Name: stackName},
		Spec: v1alpha1.ClusterStackSpec{
			ID:         id,
			BuildImage: v1alpha1.ImageSource{Image: buildImage},
			RunImage:   c.runImageSource(run0),
		},
	}
	for i := range more {
		out.Spec.AdditionalRunImages = append(out.Spec.AdditionalRunImages, c.runImageSource(&more[i]))
	}
	return out
}

// runImageSource is the ClusterStack's run image: run's image, and those of
// its mirrors that are image references, up to buildsmith's limit.
func (c *converter) runImageSource(run *runImage) v1alpha1.RunImageSource {
	runSource := v1alpha1.RunImageSource{Image: run.image}
	mirrorsField := run.path + ".mirrors"
	if run.path == "stack.run-image" {
		mirrorsField = "stack.run-image-mirrors"
	}
	for i, m := range run.mirrors {
		if _, err := name.ParseReference(m); err != nil {
			c.warn(fmt.Sprintf("%s[%d]", mirrorsField, i), "%q is not an image reference (%v); dropped", m, err)
			continue
		}
		if len(runSource.Mirrors) == maxMirrors {
			c.warn(fmt.Sprintf("%s[%d]", mirrorsField, i), "%q: more than buildsmith's %d mirrors; dropped", m, maxMirrors)
			continue
		}
		runSource.Mirrors = append(runSource.Mirrors, m)
	}
	return runSource
}
