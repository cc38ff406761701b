package cnb

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Reasons of order errors.
const (
	ReasonBuildpackNotFound       = "BuildpackNotFound"
	ReasonInvalidBuildpackVersion = "InvalidBuildpackVersion"
	ReasonBuildpackCycle          = "BuildpackCycle"
)

// ResolvedOrder is a builder's order (and system buildpacks) with every
// version pinned, and every buildpack the builder must contain for them:
// those named and, recursively, the children of meta-buildpacks.
type ResolvedOrder struct {
	Order []v1alpha1.OrderEntry
	// System is nil when the builder has no system buildpacks.
	System *v1alpha1.SystemBuildpacks
	// Buildpacks are unique by id@version, sorted by id, then version.
	Buildpacks []v1alpha1.StoreBuildpack
}

// ResolveOrder pins order and system (nil for none) against the
// buildpacks of a pool (a builder's sources). A reference without a
// version takes the highest semantic version the pool has. All errors are
// Permanent: the spec or a source must change.
func ResolveOrder(order []v1alpha1.OrderEntry, system *v1alpha1.SystemBuildpacks, pool Pool) (*ResolvedOrder, error) {
	r := resolver{kind: "buildpack", where: pool.where(), byID: map[string][]v1alpha1.StoreBuildpack{}, used: map[string]v1alpha1.StoreBuildpack{}}
	for _, bp := range pool.Buildpacks {
		r.byID[bp.ID] = append(r.byID[bp.ID], bp)
	}
	out := &ResolvedOrder{Order: make([]v1alpha1.OrderEntry, len(order))}
	for i, entry := range order {
		out.Order[i].Group = make([]v1alpha1.BuildpackRef, len(entry.Group))
		for j, ref := range entry.Group {
			bp, err := r.resolve(ref)
			if err != nil {
				return nil, err
			}
			if err := r.use(bp, nil); err != nil {
				return nil, err
			}
			out.Order[i].Group[j] = v1alpha1.BuildpackRef{ID: bp.ID, Version: bp.Version, Optional: ref.Optional, ExecEnv: ref.ExecEnv}
		}
	}
	if system != nil && len(system.Pre)+len(system.Post) > 0 {
		out.System = &v1alpha1.SystemBuildpacks{}
		for _, list := range []struct {
			name     string
			refs     []v1alpha1.SystemBuildpackRef
			resolved *[]v1alpha1.SystemBuildpackRef
		}{{"pre", system.Pre, &out.System.Pre}, {"post", system.Post, &out.System.Post}} {
			for _, ref := range list.refs {
				bp, err := r.resolve(v1alpha1.BuildpackRef{ID: ref.ID, Version: ref.Version})
				if err == nil {
					err = r.use(bp, nil)
				}
				if err != nil {
					return nil, fmt.Errorf("system %s buildpacks: %w", list.name, err)
				}
				*list.resolved = append(*list.resolved, v1alpha1.SystemBuildpackRef{ID: bp.ID, Version: bp.Version})
			}
		}
	}
	for _, bp := range r.used {
		out.Buildpacks = append(out.Buildpacks, bp)
	}
	SortBuildpacks(out.Buildpacks)
	return out, nil
}

// ResolveExtensions pins an order of image extensions against the
// extensions of a pool, as ResolveOrder pins buildpacks. Extensions are
// always optional to the lifecycle; the resolved order keeps what the spec
// says.
func ResolveExtensions(order []v1alpha1.OrderEntry, pool Pool) (*ResolvedOrder, error) {
	r := resolver{kind: "extension", where: pool.where(), byID: map[string][]v1alpha1.StoreBuildpack{}, used: map[string]v1alpha1.StoreBuildpack{}}
	for _, ext := range pool.Extensions {
		r.byID[ext.ID] = append(r.byID[ext.ID], ext)
	}
	out := &ResolvedOrder{Order: make([]v1alpha1.OrderEntry, len(order))}
	for i, entry := range order {
		for _, ref := range entry.Group {
			ext, err := r.resolve(ref)
			if err != nil {
				return nil, fmt.Errorf("orderExtensions: %w", err)
			}
			r.used[ext.ID+"@"+ext.Version] = ext
			out.Order[i].Group = append(out.Order[i].Group, v1alpha1.BuildpackRef{ID: ext.ID, Version: ext.Version, Optional: ref.Optional, ExecEnv: ref.ExecEnv})
		}
	}
	for _, ext := range r.used {
		out.Buildpacks = append(out.Buildpacks, ext)
	}
	SortBuildpacks(out.Buildpacks)
	return out, nil
}

type resolver struct {
	kind  string // "buildpack", "extension": for messages
	where string // "the store": for messages (Pool.where)
	byID  map[string][]v1alpha1.StoreBuildpack
	used  map[string]v1alpha1.StoreBuildpack // by id@version
}

func (r *resolver) resolve(ref v1alpha1.BuildpackRef) (v1alpha1.StoreBuildpack, error) {
	candidates := r.byID[ref.ID]
	if len(candidates) == 0 {
		return v1alpha1.StoreBuildpack{}, failure.Permanentf(ReasonBuildpackNotFound, "%s %s is not in %s", r.kind, ref.ID, r.where)
	}
	if ref.Version != "" {
		for _, bp := range candidates {
			if bp.Version == ref.Version {
				return bp, nil
			}
		}
		return v1alpha1.StoreBuildpack{}, failure.Permanentf(ReasonBuildpackNotFound,
			"%s %s@%s is not in %s, which has versions %s", r.kind, ref.ID, ref.Version, r.where, versions(candidates))
	}
	var best v1alpha1.StoreBuildpack
	var bestVersion *semver.Version
	for _, bp := range candidates {
		v, err := semver.StrictNewVersion(strings.TrimPrefix(bp.Version, "v"))
		if err != nil {
			return v1alpha1.StoreBuildpack{}, failure.Permanentf(ReasonInvalidBuildpackVersion,
				"%s %s has version %q, which is not a semantic version: name the version to use", r.kind, bp.ID, bp.Version)
		}
		if bestVersion == nil || v.GreaterThan(bestVersion) {
			best, bestVersion = bp, v
		}
	}
	return best, nil
}

// use adds bp and, for a meta-buildpack, its children; path is the chain
// of meta-buildpacks that led here, to detect cycles.
func (r *resolver) use(bp v1alpha1.StoreBuildpack, path []string) error {
	key := bp.ID + "@" + bp.Version
	for i, p := range path {
		if p == key {
			return failure.Permanentf(ReasonBuildpackCycle, "meta-buildpacks form a cycle: %s",
				strings.Join(append(path[i:], key), " → "))
		}
	}
	if _, done := r.used[key]; done {
		return nil
	}
	for _, entry := range bp.Order {
		for _, ref := range entry.Group {
			child, err := r.resolve(ref)
			if err != nil {
				return fmt.Errorf("in meta-buildpack %s: %w", key, err)
			}
			if err := r.use(child, append(path, key)); err != nil {
				return err
			}
		}
	}
	r.used[key] = bp
	return nil
}

func versions(bps []v1alpha1.StoreBuildpack) string {
	var vs []string
	for _, bp := range bps {
		vs = append(vs, bp.Version)
	}
	sort.Strings(vs)
	return strings.Join(vs, ", ")
}

// Optional says whether the order names bp only as optional: a builder
// without it still detects every group (the group just does without it).
// Children of meta-buildpacks and system buildpacks are never optional.
func (o *ResolvedOrder) Optional(bp v1alpha1.StoreBuildpack) bool {
	if o.System != nil {
		for _, ref := range slices.Concat(o.System.Pre, o.System.Post) {
			if ref.ID == bp.ID && ref.Version == bp.Version {
				return false
			}
		}
	}
	for _, meta := range o.Buildpacks {
		for _, entry := range meta.Order {
			for _, ref := range entry.Group {
				if ref.ID == bp.ID && !ref.Optional {
					return false // a meta-buildpack needs it
				}
			}
		}
	}
	named := false
	for _, entry := range o.Order {
		for _, ref := range entry.Group {
			if ref.ID == bp.ID && ref.Version == bp.Version {
				if !ref.Optional {
					return false
				}
				named = true
			}
		}
	}
	return named
}

// Without returns the order without the buildpacks drop says, from the
// groups and the buildpacks; a group left empty goes too. For a platform
// that some optional buildpacks lack.
func (o *ResolvedOrder) Without(drop func(v1alpha1.StoreBuildpack) bool) *ResolvedOrder {
	out := &ResolvedOrder{System: o.System} // never optional, so never dropped
	dropped := map[string]bool{}
	for _, bp := range o.Buildpacks {
		if drop(bp) {
			dropped[bp.ID+"@"+bp.Version] = true
			continue
		}
		out.Buildpacks = append(out.Buildpacks, bp)
	}
	for _, entry := range o.Order {
		var group []v1alpha1.BuildpackRef
		for _, ref := range entry.Group {
			if !dropped[ref.ID+"@"+ref.Version] {
				group = append(group, ref)
			}
		}
		if len(group) > 0 {
			out.Order = append(out.Order, v1alpha1.OrderEntry{Group: group})
		}
	}
	return out
}
