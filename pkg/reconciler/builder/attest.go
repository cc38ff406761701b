package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/attest"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Which builders carry attestations (--builder-attestations).
const (
	// AttestNone: none.
	AttestNone = "none"
	// AttestSigned: builders with signing keys carry their SBOM and
	// provenance, signed by each key.
	AttestSigned = "signed"
	// AttestAll: AttestSigned, and builders without keys their SBOM,
	// unsigned.
	AttestAll = "all"
)

// ControllerID is what provenance names as the builder of builder images
// (SLSA's runDetails.builder.id).
const ControllerID = "https://github.com/buildsmith/buildsmith"

// MaxAttestationBytes bounds each document attested: what a builder's
// inputs make of it (a tenant's buildpackages name the buildpacks and
// their homepages) is held, signed and pushed once per key.
const MaxAttestationBytes = 4 << 20

// ReasonAttestationTooLarge: a builder's SBOM or provenance is larger than
// MaxAttestationBytes.
const ReasonAttestationTooLarge = "AttestationTooLarge"

// ReasonAttestationFailed: a builder's inputs do not make an SBOM or a
// provenance (an image not named by digest).
const ReasonAttestationFailed = "AttestationFailed"

// documents make what a builder's referrers say, each document once.
type documents struct {
	builder                         func() attest.Builder
	made                            bool
	sbom, sbomStatement, provenance []byte
}

func (r *Core) documents(obj object, in *inputs, next *v1alpha1.BuilderStatus) *documents {
	return &documents{builder: func() attest.Builder { return r.attested(obj, in, next) }}
}

// digest is the SHA-256 of the SBOM and the provenance, as
// status.attestedDocuments records it.
func (d *documents) digest() (string, error) {
	if err := d.make(); err != nil {
		return "", err
	}
	h := sha256.New()
	for _, doc := range [][]byte{d.sbom, d.sbomStatement, d.provenance} {
		fmt.Fprintf(h, "%d:", len(doc))
		h.Write(doc)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// make makes the SBOM and the provenance, the first time.
func (d *documents) make() error {
	if d.made {
		return nil
	}
	b := d.builder()
	var err error
	if d.sbom, err = attest.SPDX(b); err == nil {
		if d.sbomStatement, err = attest.SBOMStatement(b); err == nil {
			d.provenance, err = attest.Provenance(b)
		}
	}
	if err != nil { // what the inputs name is not by digest: until they change
		return failure.Permanentf(ReasonAttestationFailed, "the builder's SBOM and provenance: %v", err)
	}
	for _, doc := range [][]byte{d.sbomStatement, d.provenance} {
		if len(doc) > MaxAttestationBytes {
			return failure.Permanentf(ReasonAttestationTooLarge, "the builder's SBOM or provenance is %d bytes, more than the %d an attestation may be",
				len(doc), MaxAttestationBytes)
		}
	}
	d.made = true
	return nil
}

// subjectOf describes image: as this reconcile pushed it, else as the
// registry answers a HEAD.
func subjectOf(ctx context.Context, in *inputs, image name.Digest) (v1.Descriptor, error) {
	for _, pushed := range in.pushed {
		if pushed.Digest.String() == image.DigestStr() {
			return v1.Descriptor{MediaType: pushed.MediaType, Size: pushed.Size, Digest: pushed.Digest}, nil
		}
	}
	resolved, err := in.registry.Resolve(ctx, image)
	if err != nil {
		return v1.Descriptor{}, err
	}
	digest, err := v1.NewHash(image.DigestStr())
	return v1.Descriptor{MediaType: types.MediaType(resolved.MediaType), Size: resolved.Size, Digest: digest}, err
}

// referrer is a's artifact about subject: a Sigstore bundle of the signed
// statement, as cosign v3 signs and attests; unsigned, the SBOM itself.
func (d *documents) referrer(subject v1.Descriptor, a attachment) (v1.Image, error) {
	if a.predicateType == attest.SignPredicateType {
		statement, err := attest.SignStatement(a.image.String())
		if err != nil {
			return nil, err
		}
		return bundleReferrer(subject, a.key.key, a.predicateType, statement)
	}
	if err := d.make(); err != nil {
		return nil, err
	}
	if a.key == nil {
		return registry.NewReferrer(subject, attest.SPDXMediaType, nil, registry.ReferrerLayer{MediaType: attest.SPDXMediaType, Data: d.sbom})
	}
	statement := d.provenance
	if a.predicateType == attest.SPDXPredicateType {
		statement = d.sbomStatement
	}
	return bundleReferrer(subject, a.key.key, a.predicateType, statement)
}

// bundleReferrer is a Sigstore bundle of statement signed by key, attached
// to subject as cosign v3 attaches one.
func bundleReferrer(subject v1.Descriptor, key *cosign.Key, predicateType string, statement []byte) (v1.Image, error) {
	bundle, err := key.Bundle(statement)
	if err != nil {
		return nil, err
	}
	annotations := map[string]string{cosign.AnnotationBundleContent: "dsse-envelope", cosign.AnnotationBundlePredicateType: predicateType}
	return registry.NewReferrer(subject, cosign.BundleMediaType, annotations, registry.ReferrerLayer{MediaType: cosign.BundleMediaType, Data: bundle})
}

// attested is what the attestations of the builder next describes say:
// the images it was pushed as, and its inputs by digest.
func (r *Core) attested(obj object, in *inputs, next *v1alpha1.BuilderStatus) attest.Builder {
	b := attest.Builder{
		Object:     attest.Object{Kind: kindOf(obj), Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID()), Generation: obj.GetGeneration()},
		Image:      next.LatestImage,
		BuildImage: in.stack.Status.BuildImage.LatestImage,
		Lifecycle:  attest.Lifecycle{Image: in.lifecycle.Ref.String()},
		Controller: attest.Controller{ID: ControllerID, Version: r.Version},
	}
	if len(in.builds) > 0 {
		b.Lifecycle.Version = in.builds[0].lifecycle.Version
	}
	for _, p := range next.Platforms {
		b.Platforms = append(b.Platforms, attest.PlatformImage{Platform: cnb.PlatformsOf([]v1alpha1.Platform{p.Platform})[0].String(), Image: p.Image})
	}
	for _, sbom := range in.stack.Status.BuildImage.SBOMs {
		b.BaseSBOMs = append(b.BaseSBOMs, attest.BaseSBOM{Of: b.BuildImage, Image: sbom.Image, DiffID: sbom.DiffID})
	}
	for _, run := range append([]v1alpha1.ResolvedRunImage{in.stack.Status.RunImage}, in.stack.Status.AdditionalRunImages...) {
		b.RunImages = append(b.RunImages, run.LatestImage)
		for _, sbom := range run.SBOMs {
			b.BaseSBOMs = append(b.BaseSBOMs, attest.BaseSBOM{Of: run.LatestImage, Image: sbom.Image, DiffID: sbom.DiffID})
		}
	}
	system := systemIDs(in.resolved.System)
	for _, bp := range in.resolved.Buildpacks {
		b.Buildpacks = append(b.Buildpacks, moduleOf(bp, system[bp.ID+"@"+bp.Version]))
	}
	if in.extensions != nil {
		for _, ext := range in.extensions.Buildpacks {
			b.Extensions = append(b.Extensions, moduleOf(ext, false))
		}
	}
	return b
}

func moduleOf(bp v1alpha1.StoreBuildpack, system bool) attest.Module {
	m := attest.Module{ID: bp.ID, Version: bp.Version, Homepage: bp.Homepage, Layer: bp.Digest, DiffID: bp.DiffID,
		Source: bp.StoreImage.Image, System: system}
	for _, l := range bp.Licenses {
		// A license given by its address alone has no expression to
		// declare: the SBOM does not assert the module's licenses then.
		m.Licenses = append(m.Licenses, l.Type)
	}
	return m
}

// systemIDs are the id@version of system buildpacks.
func systemIDs(system *v1alpha1.SystemBuildpacks) map[string]bool {
	out := map[string]bool{}
	if system == nil {
		return out
	}
	for _, bp := range append(slices.Clone(system.Pre), system.Post...) {
		out[bp.ID+"@"+bp.Version] = true
	}
	return out
}

// kindOf is obj's kind.
func kindOf(obj object) string {
	if _, ok := obj.(*v1alpha1.ClusterBuilder); ok {
		return "ClusterBuilder"
	}
	return "Builder"
}
