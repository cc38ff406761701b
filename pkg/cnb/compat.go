package cnb

import (
	"slices"
	"strings"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Reasons of compatibility errors.
const (
	ReasonBuildpackAPIUnsupported = "BuildpackAPIUnsupported"
	ReasonIncompatibleBuildpack   = "IncompatibleBuildpack"
	// ReasonPlatformAPIUnsupported: the builder needs a platform API (for
	// system buildpacks or extensions) its lifecycle does not have.
	ReasonPlatformAPIUnsupported = "PlatformAPIUnsupported"
	// ReasonDistroMismatch: the stack is not of a distribution a target of
	// the builder is for.
	ReasonDistroMismatch = "DistroMismatch"
)

// CheckDistro checks that the stack is of one of distros (a target's; none:
// any), as its images' labels say. A stack whose images do not say passes:
// nothing tells its distro, and pack builds such builders too.
func CheckDistro(distros []v1alpha1.TargetDistribution, stack *Stack) error {
	if len(distros) == 0 || stack.DistroName == "" {
		return nil
	}
	var meant []string
	for _, d := range distros {
		if d.Name == stack.DistroName && (len(d.Versions) == 0 || slices.Contains(d.Versions, stack.DistroVersion)) {
			return nil
		}
		meant = append(meant, strings.TrimSpace(d.Name+" "+strings.Join(d.Versions, ", ")))
	}
	return failure.Permanentf(ReasonDistroMismatch, "the %s target is for %s; the stack is %s %s",
		Platform{OS: stack.OS, Arch: stack.Arch, Variant: stack.Variant}, strings.Join(meant, "; "), stack.DistroName, stack.DistroVersion)
}

// SystemPlatformAPI is the first platform API whose lifecycle reads
// /cnb/system.toml; ExtensionsPlatformAPI the first whose detector runs
// image extensions (experimental until 0.13: CNB_EXPERIMENTAL_MODE=warn).
const (
	SystemPlatformAPI     = "0.15"
	ExtensionsPlatformAPI = "0.10"
)

// CheckPlatformAPI checks that a lifecycle supports platform API want or a
// later one, for what (e.g. "system buildpacks"): an older lifecycle would
// ignore the files the builder has for it, and the builder would quietly
// not do what its spec says.
func CheckPlatformAPI(lifecycle Lifecycle, want, what string) error {
	for _, api := range slices.Concat(lifecycle.APIs.Platform.Supported, lifecycle.APIs.Platform.Deprecated) {
		if !apiLess(api, want) {
			return nil
		}
	}
	return failure.Permanentf(ReasonPlatformAPIUnsupported, "%s need platform API %s or later; lifecycle %s supports %s",
		what, want, lifecycle.Version, strings.Join(lifecycle.APIs.Platform.Supported, ", "))
}

// CheckCompatibility checks that the lifecycle can run every buildpack
// (meta-buildpacks' children included: the lifecycle reads them all), and
// that every buildpack can run on the stack. Errors are Permanent and name
// the buildpack.
func CheckCompatibility(buildpacks []v1alpha1.StoreBuildpack, lifecycleAPIs v1alpha1.APIVersions, stack *Stack) error {
	for _, bp := range buildpacks {
		key := bp.ID + "@" + bp.Version
		if bp.API != "" && !slices.Contains(lifecycleAPIs.Supported, bp.API) && !slices.Contains(lifecycleAPIs.Deprecated, bp.API) {
			return failure.Permanentf(ReasonBuildpackAPIUnsupported,
				"buildpack %s implements buildpack API %s; the lifecycle supports %s",
				key, bp.API, strings.Join(append(slices.Clone(lifecycleAPIs.Supported), lifecycleAPIs.Deprecated...), ", "))
		}
		// As the lifecycle does: [[targets]], when present, replace the
		// legacy [[stacks]].
		if len(bp.Stacks) > 0 && len(bp.Targets) == 0 && !runsOnStack(bp.Stacks, stack) {
			if stack.ID == "" {
				return failure.Permanentf(ReasonIncompatibleBuildpack,
					"buildpack %s names stacks (%s) and no targets, and the stack has no id: it runs only on stack \"*\"", key, stackIDs(bp.Stacks))
			}
			return failure.Permanentf(ReasonIncompatibleBuildpack,
				"buildpack %s does not run on stack %s (its stacks: %s, or mixins missing from the build image)",
				key, stack.ID, stackIDs(bp.Stacks))
		}
		if len(bp.Targets) > 0 && !runsOnTarget(bp.Targets, stack) {
			return failure.Permanentf(ReasonIncompatibleBuildpack,
				"buildpack %s has no target for %s/%s", key, stack.OS, stack.Arch)
		}
	}
	return nil
}

// runsOnStack: a stack entry with the stack's id (or "*") whose build-time
// mixins the build image has. "build:x" is satisfied by "build:x" or "x";
// "run:" mixins concern the run image, which ClusterStack checked.
func runsOnStack(stacks []v1alpha1.BuildpackStack, stack *Stack) bool {
	for _, s := range stacks {
		if s.ID != "*" && (s.ID != stack.ID || stack.ID == "") {
			continue
		}
		ok := true
		for _, m := range s.Mixins {
			if strings.HasPrefix(m, "run:") {
				continue
			}
			name := strings.TrimPrefix(m, "build:")
			if !slices.Contains(stack.Mixins, m) && !slices.Contains(stack.Mixins, name) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// runsOnTarget: a target whose platform matches the stack's (see
// Platform), and whose distros, when both it and the stack name one,
// include the stack's.
func runsOnTarget(targets []v1alpha1.BuildpackTarget, stack *Stack) bool {
	platform := Platform{OS: stack.OS, Arch: stack.Arch, Variant: stack.Variant}
	for _, t := range targets {
		if !(Platform{OS: t.OS, Arch: t.Arch, Variant: t.Variant}).Matches(platform) {
			continue
		}
		if len(t.Distros) == 0 || stack.DistroName == "" {
			return true
		}
		for _, d := range t.Distros {
			if d.Name == stack.DistroName && (d.Version == "" || stack.DistroVersion == "" || d.Version == stack.DistroVersion) {
				return true
			}
		}
	}
	return false
}

func stackIDs(stacks []v1alpha1.BuildpackStack) string {
	var ids []string
	for _, s := range stacks {
		ids = append(ids, s.ID)
	}
	return strings.Join(ids, ", ")
}
