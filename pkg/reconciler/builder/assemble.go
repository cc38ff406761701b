package builder

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// assemble reads the build image and the buildpacks' layers for b's
// platform (lazily, and by digest, so from the registry client's cache
// after the first builder) and puts the builder image together.
func (r *Core) assemble(ctx context.Context, reg registry.Access, stack *v1alpha1.ClusterStack, b platformBuild,
	spec *v1alpha1.BuilderSpec, scratch scratchDir) (v1.Image, error) {
	platform := b.platform.V1()
	buildRef, err := name.NewDigest(stack.Status.BuildImage.LatestImage)
	if err != nil {
		return nil, failure.Permanentf(ReasonStackNotReady, "ClusterStack %s: build image %q: %v", stack.Name, stack.Status.BuildImage.LatestImage, err)
	}
	build, err := reg.ReadImage(ctx, buildRef, &platform)
	if err != nil {
		return nil, err
	}
	layers := make([]cnb.BuildpackLayer, 0, len(b.order.Buildpacks))
	for _, bp := range b.order.Buildpacks {
		layer, err := buildpackLayer(ctx, reg, bp, platform, false)
		if err != nil {
			return nil, err
		}
		layers = append(layers, cnb.BuildpackLayer{Buildpack: bp, Layer: layer})
	}
	if layers, err = cnb.Flatten(layers, spec.Flatten, r.Flattening.options(ctx, reg, scratch, cnb.LayerMediaType(build.Image))); err != nil {
		return nil, err
	}
	var extensions []cnb.BuildpackLayer
	var orderExtensions []v1alpha1.OrderEntry
	if b.extensions != nil {
		for _, ext := range b.extensions.Buildpacks {
			layer, err := buildpackLayer(ctx, reg, ext, platform, true)
			if err != nil {
				return nil, err
			}
			extensions = append(extensions, cnb.BuildpackLayer{Buildpack: ext, Layer: layer})
		}
		orderExtensions = b.extensions.Order
	}
	runImage, mirrors := runImageOf(stack, spec)
	return cnb.AssembleBuilder(cnb.BuilderSpec{
		BuildImage:          build.Image,
		Stack:               b.stack,
		RunImage:            runImage,
		RunImageMirrors:     mirrors,
		AdditionalRunImages: additionalRunImagesOf(stack, spec),
		Lifecycle:           b.lifecycle.Lifecycle,
		Buildpacks:          layers,
		Order:               b.order.Order,
		System:              b.order.System,
		Extensions:          extensions,
		OrderExtensions:     orderExtensions,
		AdditionalLabels:    spec.AdditionalLabels,
		Env:                 buildEnv(spec.Env),
		CreatedBy:           r.Version,
		Description:         spec.Description,
		MaxLayers:           r.MaxLayers,
	})
}

// buildpackLayer finds the layer holding bp (an image extension, with
// extension) in its store image's image for platform, by the layers label
// of that image: each platform of a buildpackage index has its own layer.
func buildpackLayer(ctx context.Context, reg registry.Access, bp v1alpha1.StoreBuildpack, platform v1.Platform, extension bool) (v1.Layer, error) {
	storeRef, err := name.NewDigest(bp.StoreImage.Image)
	if err != nil {
		return nil, failure.Permanentf(ReasonStoreNotReady, "buildpack %s@%s: store image %q: %v", bp.ID, bp.Version, bp.StoreImage.Image, err)
	}
	img, err := reg.ReadImage(ctx, storeRef, &platform)
	if err != nil {
		return nil, err
	}
	// A plain image is returned whatever platform was asked for: never put
	// another platform's layer into a builder.
	if own := (cnb.Platform{OS: img.Config.OS, Arch: img.Config.Architecture, Variant: img.Config.Variant}); !own.Matches(cnb.PlatformOf(platform)) {
		return nil, failure.Waitingf(ReasonStoreNotReady, "buildpack %s@%s: %s is for %s, not %s",
			bp.ID, bp.Version, bp.StoreImage.Image, own, cnb.PlatformOf(platform))
	}
	diffID, found, err := cnb.BuildpackDiffID(bp.StoreImage.Image, img.Config, img.Manifest, bp.ID, bp.Version, extension)
	if err != nil {
		return nil, err
	}
	if found {
		if layer, err := img.Image.LayerByDiffID(diffID); err == nil {
			return layer, nil
		}
	}
	// The store's status no longer matches the image: the store will
	// notice on its next read.
	return nil, failure.Waitingf(ReasonStoreNotReady, "buildpack %s@%s is not in %s for %s",
		bp.ID, bp.Version, bp.StoreImage.Image, cnb.PlatformOf(platform))
}

func buildEnv(env []v1alpha1.BuildEnv) []cnb.EnvVar {
	out := make([]cnb.EnvVar, len(env))
	for i, e := range env {
		out[i] = cnb.EnvVar{Name: e.Name, Value: e.Value, Suffix: e.Suffix, Delim: e.Delim}
	}
	return out
}

// runImageOf is the run image a builder names, and its mirrors (runImageAs).
func runImageOf(stack *v1alpha1.ClusterStack, spec *v1alpha1.BuilderSpec) (string, []string) {
	run := runImageAs(stack.Status.RunImage, 0, spec)
	return run.Image, run.Mirrors
}

// additionalRunImagesOf are the stack's additional run images as the
// builder names them (runImageAs).
func additionalRunImagesOf(stack *v1alpha1.ClusterStack, spec *v1alpha1.BuilderSpec) []cnb.RunImage {
	var out []cnb.RunImage
	// Copies have repositories of their own, but the stack's references,
	// their mirrors, may share one with an earlier run image's: the
	// lifecycle would take them for that one (checkRunImageRepositories),
	// so they are left out.
	taken := map[string]bool{}
	if spec.CopyRunImage {
		image, mirrors := runImageOf(stack, spec)
		for _, ref := range append([]string{image}, mirrors...) {
			taken[repositoryOf(ref)] = true
		}
	}
	for i, run := range stack.Status.AdditionalRunImages {
		r := runImageAs(run, i+1, spec)
		if spec.CopyRunImage {
			r.Mirrors = slices.DeleteFunc(r.Mirrors, func(m string) bool { return taken[repositoryOf(m)] })
			for _, ref := range append([]string{r.Image}, r.Mirrors...) {
				taken[repositoryOf(ref)] = true
			}
		}
		out = append(out, r)
	}
	return out
}

// repositoryOf is ref's repository, "" when ref is not a reference.
func repositoryOf(ref string) string {
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return ""
	}
	return parsed.Context().Name()
}

// runImageAs is the i-th run image of the stack (0: its runImage) as a
// builder of spec names it: as the stack's spec gives it; with
// spec.pinRunImage by the digest the stack resolved it to (mirrors hold the
// same image, so the same digest); with spec.copyRunImage by its copy
// (runImageCopy), the stack's references, pinned, as mirrors.
func runImageAs(run v1alpha1.ResolvedRunImage, i int, spec *v1alpha1.BuilderSpec) cnb.RunImage {
	byTag := cnb.RunImage{Image: run.Image, Mirrors: run.Mirrors}
	if (!spec.PinRunImage && !spec.CopyRunImage) || run.LatestImage == "" {
		return byTag
	}
	digest, err := name.NewDigest(run.LatestImage)
	if err != nil {
		return byTag
	}
	mirrors := make([]string, 0, len(run.Mirrors)+1)
	for _, m := range run.Mirrors {
		ref, err := name.ParseReference(m)
		if err != nil {
			return byTag // a stack that is Ready has none such
		}
		mirrors = append(mirrors, ref.Context().Digest(digest.DigestStr()).String())
	}
	pinned := cnb.RunImage{Image: digest.String(), Mirrors: mirrors}
	if !spec.CopyRunImage {
		return pinned
	}
	copied, ok := runImageCopy(run, i, spec)
	if !ok {
		return pinned
	}
	return cnb.RunImage{Image: copied.Context().Digest(digest.DigestStr()).String(), Mirrors: append([]string{pinned.Image}, mirrors...)}
}

// runImageCopy is where a builder of spec copies the i-th run image of its
// stack (spec.copyRunImage), tagged by the run image's digest so that the
// builders of a repository share copies. The first goes into the builder's
// own repository; each further one into a repository of its own beside it
// (<repository>-run-2, -run-3…): the lifecycle tells the run images of
// run.toml apart by repository alone once they are pinned by digest.
func runImageCopy(run v1alpha1.ResolvedRunImage, i int, spec *v1alpha1.BuilderSpec) (name.Tag, bool) {
	digest, err := name.NewDigest(run.LatestImage)
	if err != nil {
		return name.Tag{}, false
	}
	tag, err := name.NewTag(spec.Tag)
	if err != nil {
		return name.Tag{}, false
	}
	repo := tag.Context()
	if i > 0 {
		if repo, err = name.NewRepository(fmt.Sprintf("%s-run-%d", repo.Name(), i+1), nameOptions(tag)...); err != nil {
			return name.Tag{}, false
		}
	}
	return repo.Tag("run-" + strings.ReplaceAll(digest.DigestStr(), ":", "-")), true
}

// nameOptions parse a reference of ref's registry as ref was parsed.
func nameOptions(ref name.Reference) []name.Option {
	if ref.Context().Scheme() == "http" {
		return []name.Option{name.Insecure}
	}
	return nil
}

// ReasonRunImagesShareRepository: a pinned builder would name two run
// images of one repository.
const ReasonRunImagesShareRepository = "RunImagesShareRepository"

// checkRunImageRepositories refuses a builder whose run.toml would name
// two run images in one repository by digest (pinned or copied): the
// lifecycle (0.21) matches the run image an app is built on to run.toml's
// entries by repository alone once a digest is given, so the app would be
// labelled, and later rebased, as the first of them.
func checkRunImageRepositories(stack *v1alpha1.ClusterStack, spec *v1alpha1.BuilderSpec) error {
	if !spec.PinRunImage && !spec.CopyRunImage {
		return nil
	}
	image, mirrors := runImageOf(stack, spec)
	runs := append([]cnb.RunImage{{Image: image, Mirrors: mirrors}}, additionalRunImagesOf(stack, spec)...)
	owner := map[string]int{}
	for i, run := range runs {
		for _, ref := range append([]string{run.Image}, run.Mirrors...) {
			repo := repositoryOf(ref)
			if repo == "" {
				continue
			}
			if j, taken := owner[repo]; taken && j != i {
				return failure.Permanentf(ReasonRunImagesShareRepository,
					"run images %d and %d of ClusterStack %s are both in %s: pinned by digest (pinRunImage, copyRunImage), the lifecycle tells run images apart "+
						"by repository alone and would label apps built on one as the other; give each run image a repository of its own, or name them by tag",
					j+1, i+1, stack.Name, repo)
			}
			owner[repo] = i
		}
	}
	return nil
}

// copyRunImages copies the stack's run images for the builder
// (spec.copyRunImage): one HEAD each when the copy is there.
func copyRunImages(ctx context.Context, reg registry.Access, stack *v1alpha1.ClusterStack, spec *v1alpha1.BuilderSpec) error {
	if !spec.CopyRunImage {
		return nil
	}
	for i, run := range append([]v1alpha1.ResolvedRunImage{stack.Status.RunImage}, stack.Status.AdditionalRunImages...) {
		to, ok := runImageCopy(run, i, spec)
		if !ok {
			continue // the builder names the run image as the stack does
		}
		from, _ := name.NewDigest(run.LatestImage) // runImageCopy parsed it
		if _, err := reg.Copy(ctx, from, to, registry.CopyBounds{}); err != nil {
			return err
		}
	}
	return nil
}

// runImageName is the run image a builder names (runImageOf), without mirrors.
func runImageName(stack *v1alpha1.ClusterStack, spec *v1alpha1.BuilderSpec) string {
	image, _ := runImageOf(stack, spec)
	return image
}
