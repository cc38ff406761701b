package cnb

import (
	"strings"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// Source is one of a builder's sources of buildpacks: its name as status
// and messages give it (Kind/name), and what it holds.
type Source struct {
	Name       string
	Buildpacks []v1alpha1.StoreBuildpack
	Extensions []v1alpha1.StoreBuildpack
}

// Pool is what a builder's order is resolved against: the buildpacks and
// extensions of its sources, merged.
type Pool struct {
	Buildpacks []v1alpha1.StoreBuildpack
	Extensions []v1alpha1.StoreBuildpack
	// names are the sources' names, in order; from the source of each
	// module, by id@version.
	names []string
	from  map[string]string
}

// Merge pools sources. Where several hold a module of the same id and
// version, the first source in the list has it and the others' copies are
// left out, whatever their layers: one rule, the order the user wrote,
// rather than a guess at which copy is better.
func Merge(sources ...Source) Pool {
	p := Pool{from: map[string]string{}}
	for _, s := range sources {
		p.names = append(p.names, s.Name)
		p.Buildpacks = p.add(p.Buildpacks, s.Name, "buildpack", s.Buildpacks)
		p.Extensions = p.add(p.Extensions, s.Name, "extension", s.Extensions)
	}
	return p
}

func (p *Pool) add(pooled []v1alpha1.StoreBuildpack, source, kind string, modules []v1alpha1.StoreBuildpack) []v1alpha1.StoreBuildpack {
	for _, m := range modules {
		key := kind + ":" + m.ID + "@" + m.Version
		if _, taken := p.from[key]; taken {
			continue
		}
		p.from[key] = source
		pooled = append(pooled, m)
	}
	return pooled
}

// SourceOf names the source a buildpack of the pool came from; "" for one
// not in it.
func (p Pool) SourceOf(bp v1alpha1.StoreBuildpack) string {
	return p.from["buildpack:"+bp.ID+"@"+bp.Version]
}

// where names where the pool's modules come from, for messages: "the
// store" for one source (or a pool made without Merge), else the sources.
func (p Pool) where() string {
	if len(p.names) <= 1 {
		return "the store"
	}
	return "any of " + strings.Join(p.names, ", ")
}
