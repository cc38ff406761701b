package builder

import (
	"cmp"
	"context"
	"slices"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterlifecycle"
)

// platformBuild is one platform of a builder, its lifecycle, and its order
// (without the optional buildpacks the platform lacks).
type platformBuild struct {
	platform   cnb.Platform
	stack      *cnb.Stack
	lifecycle  clusterlifecycle.PlatformLifecycle
	order      *cnb.ResolvedOrder
	extensions *cnb.ResolvedOrder // nil without orderExtensions
}

// platforms chooses the platforms to build, as spec.targets asks or (with
// none) every platform the stack, the lifecycle image and every buildpack
// of the order have, and checks the buildpacks against each platform's
// lifecycle and stack. skipped says which of the stack's platforms a
// default build leaves out, and why.
func (r *Core) platforms(ctx context.Context, in *inputs, targets []v1alpha1.Target) ([]platformBuild, []string, error) {
	stack, resolved, extensions := in.stack, in.resolved, in.extensions
	stackPlatforms := cnb.PlatformsOf(stack.Status.Platforms)
	parts := platformParts(in)
	asked := make([]v1alpha1.Platform, len(targets))
	for i, t := range targets {
		asked[i] = t.Platform
	}
	selected, err := cnb.SelectPlatforms(cnb.PlatformsOf(asked), parts)
	if err != nil {
		return nil, nil, err
	}
	var skipped []string
	if len(targets) == 0 {
		for _, d := range cnb.DroppedPlatforms(parts) {
			if slices.ContainsFunc(stackPlatforms, d.Platform.Matches) {
				skipped = append(skipped, d.String())
			}
		}
	}

	builds := make([]platformBuild, len(selected))
	for i, p := range selected {
		lifecycle, err := in.lifecycle.For(ctx, in.registry, p.V1())
		if err != nil {
			return nil, nil, err
		}
		// Optional buildpacks the platform lacks stay out of its builder.
		order := resolved.Without(func(bp v1alpha1.StoreBuildpack) bool {
			return resolved.Optional(bp) && !slices.ContainsFunc(cnb.PlatformsOf(bp.Platforms), p.Matches)
		})
		info := &cnb.Stack{ID: stack.Status.ID, Mixins: stack.Status.Mixins, UserID: stack.Status.UserID,
			GroupID: stack.Status.GroupID, OS: p.OS, Arch: p.Arch, Variant: p.Variant}
		if d := stack.Status.Distro; d != nil {
			info.DistroName, info.DistroVersion = d.Name, d.Version
		}
		if err := checkTargetDistros(targets, p, info); err != nil {
			return nil, nil, err
		}
		if err := cnb.CheckCompatibility(order.Buildpacks, lifecycle.APIs.Buildpack, info); err != nil {
			return nil, nil, err
		}
		if order.System != nil {
			if err := cnb.CheckPlatformAPI(lifecycle.Lifecycle, cnb.SystemPlatformAPI, "system buildpacks"); err != nil {
				return nil, nil, err
			}
		}
		if extensions != nil {
			if err := cnb.CheckPlatformAPI(lifecycle.Lifecycle, cnb.ExtensionsPlatformAPI, "image extensions"); err != nil {
				return nil, nil, err
			}
			if err := cnb.CheckCompatibility(extensions.Buildpacks, lifecycle.APIs.Buildpack, info); err != nil {
				return nil, nil, err
			}
		}
		builds[i] = platformBuild{platform: p, stack: info, lifecycle: lifecycle, order: order, extensions: extensions}
	}
	return builds, skipped, nil
}

// checkTargetDistros checks the stack of platform p against the targets
// that ask for p: one of them passing is enough.
func checkTargetDistros(targets []v1alpha1.Target, p cnb.Platform, stack *cnb.Stack) error {
	var first error
	for _, t := range targets {
		if !(cnb.Platform{OS: t.OS, Arch: t.Arch, Variant: t.Variant}).Matches(p) {
			continue
		}
		err := cnb.CheckDistro(t.Distributions, stack)
		if err == nil {
			return nil
		}
		first = cmp.Or(first, err)
	}
	return first
}

// platformParts are the parts of a builder whose platforms it may have:
// the stack, the lifecycle, each buildpack that is not optional and each
// extension.
func platformParts(in *inputs) []cnb.PlatformPart {
	parts := []cnb.PlatformPart{
		{Name: "ClusterStack " + in.stack.Name, Platforms: cnb.PlatformsOf(in.stack.Status.Platforms)},
		{Name: in.lifecycleName, Platforms: cnb.PlatformsOfV1(in.lifecycle.Platforms)},
	}
	for _, bp := range in.resolved.Buildpacks {
		if !in.resolved.Optional(bp) {
			parts = append(parts, cnb.PlatformPart{Name: "buildpack " + bp.ID + "@" + bp.Version, Platforms: cnb.PlatformsOf(bp.Platforms)})
		}
	}
	if in.extensions != nil {
		for _, ext := range in.extensions.Buildpacks {
			parts = append(parts, cnb.PlatformPart{Name: "extension " + ext.ID + "@" + ext.Version, Platforms: cnb.PlatformsOf(ext.Platforms)})
		}
	}
	return parts
}
