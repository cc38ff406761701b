// Package attest writes what a builder image is made of: an SPDX 2.3 SBOM
// and an in-toto statement of SLSA v1 provenance, from the builder's
// resolved inputs. Both are deterministic (the same inputs give the same
// bytes: no clock, everything sorted), so that a builder rebuilt from the
// same inputs has the same attestations, and nothing is pushed again. No
// registry or Kubernetes access: the caller resolves, signs and pushes.
package attest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Builder is what an attestation says of one builder image.
type Builder struct {
	// Object is the Kubernetes object the builder is made for.
	Object Object
	// Image is the builder as pushed: repository@digest (an index's digest
	// for several platforms), and Platforms each platform's image.
	Image     string
	Platforms []PlatformImage
	// Created is the builder image's creation time (its config's): what
	// the SBOM says it was made at, the same at every rebuild of the same
	// inputs.
	Created time.Time

	BuildImage string   // repository@digest
	RunImages  []string // repository@digest, the stack's run image first
	Lifecycle  Lifecycle
	Buildpacks []Module
	Extensions []Module
	// BaseSBOMs are the SBOMs the stack's images carry, each in a layer
	// of its own (their io.buildpacks.base.sbom label).
	BaseSBOMs []BaseSBOM

	// Controller is what made it: its id (a URI) and version.
	Controller Controller
}

// Object names a Builder or ClusterBuilder.
type Object struct {
	Kind, Namespace, Name, UID string
	Generation                 int64
}

// PlatformImage is one platform's builder image.
type PlatformImage struct {
	Platform string // os/arch[/variant]
	Image    string // repository@digest
}

// Lifecycle is the lifecycle in the builder.
type Lifecycle struct {
	Version string
	Image   string // repository@digest it was taken from
}

// Module is a buildpack or an image extension in the builder.
type Module struct {
	ID, Version, Homepage string
	// Licenses are SPDX license expressions (buildpack.toml's
	// [[buildpack.licenses]] type); none: not asserted.
	Licenses []string
	// Layer is the digest of the layer holding it as stored (compressed),
	// DiffID its uncompressed digest.
	Layer, DiffID string
	// Source is the buildpackage it was taken from, repository@digest.
	Source string
	// System: one of /cnb/system.toml's (run before or after the order).
	System bool
}

// BaseSBOM is an SBOM a stack image carries.
type BaseSBOM struct {
	// Of is the stack image, as BuildImage or RunImages names it; Image
	// the image holding the SBOM (a platform's, of an index); both
	// repository@digest.
	Of, Image string
	// DiffID is the digest of the layer holding it, uncompressed.
	DiffID string
}

// Controller is the id and version of what made the builder.
type Controller struct {
	ID, Version string
}

// check fails inputs an attestation cannot be made of: references that
// are not repository@sha256:hex, which every name in both must be.
func (b Builder) check() error {
	refs := []string{b.Image, b.BuildImage, b.Lifecycle.Image}
	refs = append(refs, b.RunImages...)
	for _, p := range b.Platforms {
		refs = append(refs, p.Image)
	}
	for _, m := range b.modules() {
		refs = append(refs, m.Source)
	}
	for _, s := range b.BaseSBOMs {
		refs = append(refs, s.Of, s.Image, "layer@"+s.DiffID)
	}
	for _, ref := range refs {
		if _, _, err := splitDigest(ref); err != nil {
			return err
		}
	}
	return nil
}

// baseSBOMs are the SBOMs of the stack image of (repository@digest), each
// once, sorted.
func (b Builder) baseSBOMs(of string) []BaseSBOM {
	var out []BaseSBOM
	for _, s := range b.BaseSBOMs {
		if s.Of == of {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b BaseSBOM) int {
		return cmp.Or(strings.Compare(a.Image, b.Image), strings.Compare(a.DiffID, b.DiffID))
	})
	return slices.Compact(out)
}

// modules are the buildpacks then the extensions, each once, sorted by
// kind, id and version (and by every other field, so that one listed twice
// with different contents gives the same document whatever the order).
func (b Builder) modules() []module {
	var out []module
	for _, m := range b.Buildpacks {
		out = append(out, module{Module: m, kind: "buildpack"})
	}
	for _, m := range b.Extensions {
		out = append(out, module{Module: m, kind: "extension"})
	}
	slices.SortFunc(out, func(a, b module) int {
		return cmp.Or(strings.Compare(a.kind, b.kind), strings.Compare(a.ID, b.ID), strings.Compare(a.Version, b.Version),
			strings.Compare(a.Layer, b.Layer), strings.Compare(a.DiffID, b.DiffID), strings.Compare(a.Source, b.Source),
			strings.Compare(a.Homepage, b.Homepage), strings.Compare(strings.Join(a.Licenses, "\n"), strings.Join(b.Licenses, "\n")),
			cmp.Compare(btoi(a.System), btoi(b.System)))
	})
	return slices.CompactFunc(out, func(a, b module) bool { return a.kind == b.kind && a.ID == b.ID && a.Version == b.Version })
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

type module struct {
	Module
	kind string
}

// splitDigest splits repository@sha256:hex.
func splitDigest(ref string) (repository, hex string, err error) {
	repository, digest, ok := strings.Cut(ref, "@")
	hex, sha := strings.CutPrefix(digest, "sha256:")
	if !ok || !sha || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" || repository == "" {
		return "", "", fmt.Errorf("attest: %q is not repository@sha256:<hex>", ref)
	}
	return repository, hex, nil
}
