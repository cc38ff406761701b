// Package clusterstack reconciles ClusterStacks: it resolves the build and
// run images, checks that they form the stack, and records what they say.
package clusterstack

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/utils/ptr"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Reconciler reconciles ClusterStacks.
type Reconciler struct{ reconciler.Base }

// ReconcileKind implements the generated reconciler's Interface.
func (r *Reconciler) ReconcileKind(ctx context.Context, stack *v1alpha1.ClusterStack) pkgreconciler.Event {
	return r.Policy.Reconcile(ctx, stack, func(ctx context.Context) error { return r.reconcile(ctx, stack) })
}

// reconcile resolves the stack and, only when all of it succeeded, replaces
// the resolved part of the status: a failure keeps the last good one.
func (r *Reconciler) reconcile(ctx context.Context, stack *v1alpha1.ClusterStack) error {
	spec := stack.Spec
	if err := reconciler.Validate(ctx, stack); err != nil {
		return err
	}
	keychain, err := r.Credentials.ForServiceAccount(ctx, stack, spec.ServiceAccountRef)
	if err != nil {
		return err
	}
	reg := r.Registry.As(keychain)
	chosen := reconciler.NewChosenTags(stack.Status.ChosenTags)
	build, buildSource, err := readBuildImage(ctx, reg, chosen, spec.BuildImage)
	if err != nil {
		return err
	}
	first := cnb.Platform{OS: build.Config.OS, Arch: build.Config.Architecture, Variant: build.Config.Variant}
	runs, sources, err := readRunImages(ctx, reg, chosen, spec, first)
	if err != nil {
		return err
	}
	s, err := stackOf(spec.ID, build, runs, sources)
	if err != nil {
		return err
	}
	platforms, sboms, err := platformsOf(ctx, reg, first, build, runs, sources, s)
	if err != nil {
		return err
	}

	record(stack, s, platforms, build, runs, sources, sboms)
	stack.Status.BuildImage.Image = buildSource.Named
	stack.Status.ChosenTags = chosen.Status()
	return nil
}

// stackOf reads the stack the build image forms with every run image,
// under one id: the spec's (id), or, for a stack without one, the first its
// images carry (which every other image carrying one must then carry too).
func stackOf(id string, build *registry.Image, runs []*registry.Image, sources []v1alpha1.RunImageSource) (*cnb.Stack, error) {
	for _, run := range runs {
		id = cmp.Or(id, build.Config.Config.Labels[cnb.LabelStackID], run.Config.Config.Labels[cnb.LabelStackID])
	}
	var s *cnb.Stack
	for i, run := range runs {
		pair, err := cnb.ReadStack(id, build.Config, run.Config)
		if err != nil {
			return nil, runImageError(i, sources[i], err)
		}
		if s == nil {
			s = pair
		}
	}
	return s, nil
}

// platformsOf are the stack's platforms (first alone, unless its images
// are indexes: then every platform all have, each checked as a stack that
// agrees with s) and the SBOMs its images carry.
func platformsOf(ctx context.Context, reg registry.Access, first cnb.Platform, build *registry.Image, runs []*registry.Image,
	sources []v1alpha1.RunImageSource, s *cnb.Stack) ([]cnb.Platform, *stackSBOMs, error) {
	// Each platform is read and checked, and recorded in status.
	if err := cnb.CheckIndexPlatforms("the build image", build.Platforms); err != nil {
		return nil, nil, err
	}
	parts := []cnb.PlatformPart{{Name: "build image", Platforms: cnb.PlatformsOfV1(build.Platforms)}}
	indexes := len(build.Platforms) > 1
	for i, run := range runs {
		if err := cnb.CheckIndexPlatforms("the "+runImageName(i, sources[i]), run.Platforms); err != nil {
			return nil, nil, err
		}
		parts = append(parts, cnb.PlatformPart{Name: runImageName(i, sources[i]), Platforms: cnb.PlatformsOfV1(run.Platforms)})
		indexes = indexes || len(run.Platforms) > 1
	}
	sboms := newStackSBOMs(len(runs))
	if !indexes {
		sboms.add(-1, build)
		for i, run := range runs {
			sboms.add(i, run)
		}
		return []cnb.Platform{first}, sboms, nil
	}
	// Indexes: every platform all have is a stack of its own, checked as
	// the first was; builders need them to agree on the user.
	platforms, err := cnb.SelectPlatforms(nil, parts)
	if err != nil {
		return nil, nil, err
	}
	if err := checkPlatforms(ctx, reg, platforms, build, runs, sources, s, sboms); err != nil {
		return nil, nil, err
	}
	return platforms, sboms, nil
}

// readBuildImage reads the build image first: when a run image is an
// index, the image for the build image's platform is the one that matters.
func readBuildImage(ctx context.Context, reg registry.Access, chosen *reconciler.ChosenTags, source v1alpha1.ImageSource) (
	*registry.Image, reconciler.Source, error) {
	found, err := chosen.Choose(ctx, reg, "spec.buildImage", source.Image, source.Policy)
	if err != nil {
		return nil, reconciler.Source{}, err
	}
	build, err := reg.ReadImage(ctx, found.Ref, nil)
	return build, found, err
}

// readRunImages reads the run image and the additional ones for the build
// image's platform, first; it returns them and their sources as builders
// name them (resolvedSource).
func readRunImages(ctx context.Context, reg registry.Access, chosen *reconciler.ChosenTags, spec v1alpha1.ClusterStackSpec,
	first cnb.Platform) ([]*registry.Image, []v1alpha1.RunImageSource, error) {
	sources := append([]v1alpha1.RunImageSource{spec.RunImage}, spec.AdditionalRunImages...)
	runs := make([]*registry.Image, len(sources))
	for i, source := range sources {
		found, err := chosen.Choose(ctx, reg, runImageField(i), source.Image, source.Policy)
		if err != nil {
			return nil, nil, runImageError(i, source, err)
		}
		if runs[i], err = reg.ReadImage(ctx, found.Ref, ptr.To(first.V1())); err != nil {
			return nil, nil, err
		}
		sources[i] = resolvedSource(source, found)
	}
	return runs, sources, nil
}

// resolvedSource is source as builders name it: followed, the repository at
// the tag found, its mirrors too.
func resolvedSource(source v1alpha1.RunImageSource, found reconciler.Source) v1alpha1.RunImageSource {
	if found.Tag == "" {
		return source
	}
	out := v1alpha1.RunImageSource{Image: found.Named}
	for _, m := range source.Mirrors {
		out.Mirrors = append(out.Mirrors, m+":"+found.Tag) // repositories: Validate checked
	}
	return out
}

// record writes what the stack resolved to into its status: s read from
// build and runs (of sources, as builders name them), on platforms.
func record(stack *v1alpha1.ClusterStack, s *cnb.Stack, platforms []cnb.Platform, build *registry.Image,
	runs []*registry.Image, sources []v1alpha1.RunImageSource, sboms *stackSBOMs) {
	spec := stack.Spec
	status := &stack.Status
	status.ID, status.Mixins = s.ID, s.Mixins
	status.UserID, status.GroupID = s.UserID, s.GroupID
	status.OS, status.Arch = s.OS, s.Arch
	status.Platforms = cnb.APIPlatforms(platforms)
	status.Distro = nil
	if s.DistroName != "" {
		status.Distro = &v1alpha1.Distro{Name: s.DistroName, Version: s.DistroVersion}
	}
	status.BuildImage = v1alpha1.ResolvedImage{Image: spec.BuildImage.Image, LatestImage: build.Ref.String(), SBOMs: sboms.build}
	resolved := make([]v1alpha1.ResolvedRunImage, len(runs))
	for i, run := range runs {
		resolved[i] = v1alpha1.ResolvedRunImage{Image: sources[i].Image, LatestImage: run.Ref.String(), Mirrors: sources[i].Mirrors,
			SBOMs: sboms.runs[i]}
	}
	status.RunImage, status.AdditionalRunImages = resolved[0], resolved[1:]
	if len(status.AdditionalRunImages) == 0 {
		status.AdditionalRunImages = nil
	}
}

// runImageField is where the spec names the i-th run image (0:
// spec.runImage).
func runImageField(i int) string {
	if i == 0 {
		return "spec.runImage"
	}
	return fmt.Sprintf("spec.additionalRunImages[%d]", i-1)
}

// runImageName names the i-th run image of a stack (0: spec.runImage) in
// messages.
func runImageName(i int, source v1alpha1.RunImageSource) string {
	if i == 0 {
		return "run image"
	}
	return fmt.Sprintf("additional run image %s", source.Image)
}

// runImageError says which run image err is about, when there are several.
func runImageError(i int, source v1alpha1.RunImageSource, err error) error {
	if i == 0 {
		return err
	}
	return fmt.Errorf("spec.additionalRunImages[%d] %s: %w", i-1, source.Image, err)
}

// checkPlatforms checks each platform of indexes as a stack (checkPlatform),
// noting the SBOMs its images carry.
func checkPlatforms(ctx context.Context, reg registry.Access, platforms []cnb.Platform, build *registry.Image, runs []*registry.Image,
	sources []v1alpha1.RunImageSource, first *cnb.Stack, sboms *stackSBOMs) error {
	for _, p := range platforms {
		for i, run := range runs {
			b, r, err := checkPlatform(ctx, reg, build.Ref, run.Ref, p, first)
			if err != nil {
				return runImageError(i, sources[i], err)
			}
			sboms.add(-1, b)
			sboms.add(i, r)
		}
	}
	return nil
}

// checkPlatform reads the build and run images of platform p from their
// indexes (by digest: from the client's cache when read before) and checks
// them as a stack that agrees with first on the user and the distro.
func checkPlatform(ctx context.Context, reg registry.Access, buildIndex, runIndex name.Digest, p cnb.Platform, first *cnb.Stack) (
	build, run *registry.Image, err error) {
	if build, err = reg.ReadImage(ctx, buildIndex, ptr.To(p.V1())); err != nil {
		return nil, nil, err
	}
	if run, err = reg.ReadImage(ctx, runIndex, ptr.To(p.V1())); err != nil {
		return nil, nil, err
	}
	s, err := cnb.ReadStack(first.ID, build.Config, run.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p, err)
	}
	if s.UserID != first.UserID || s.GroupID != first.GroupID || s.DistroName != first.DistroName || s.DistroVersion != first.DistroVersion {
		return nil, nil, failure.Permanentf(cnb.ReasonPlatformMismatch, "the %s images have user %d:%d and distro %q %q, the %s/%s ones %d:%d and %q %q",
			p, s.UserID, s.GroupID, s.DistroName, s.DistroVersion, first.OS, first.Arch, first.UserID, first.GroupID, first.DistroName, first.DistroVersion)
	}
	return build, run, nil
}

// stackSBOMs are the SBOMs a stack's images carry, as their status records
// them: the build image's, and each run image's.
type stackSBOMs struct {
	build []v1alpha1.BaseSBOM
	runs  [][]v1alpha1.BaseSBOM
}

func newStackSBOMs(runs int) *stackSBOMs { return &stackSBOMs{runs: make([][]v1alpha1.BaseSBOM, runs)} }

// add notes the SBOM img carries, if any, as the build image's (run -1)
// or the run-th run image's; an image is noted once.
func (s *stackSBOMs) add(run int, img *registry.Image) {
	diffID, ok := cnb.BaseSBOMLayer(img.Config)
	if !ok {
		return
	}
	list := &s.build
	if run >= 0 {
		list = &s.runs[run]
	}
	sbom := v1alpha1.BaseSBOM{Image: img.Ref.Context().Digest(img.Digest.String()).String(), DiffID: diffID}
	if !slices.Contains(*list, sbom) {
		*list = append(*list, sbom)
	}
}
