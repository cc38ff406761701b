package builder

import (
	"context"
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

// wantedAttestation is one attestation a builder should carry: of a
// predicate, signed by a key (nil: unsigned).
type wantedAttestation struct {
	predicateType string
	key           *signingKey
}

// wantedAttestations are those a builder with keys carries under the
// setting: for each key, its SBOM then its provenance.
func wantedAttestations(setting string, keys []signingKey) []wantedAttestation {
	var out []wantedAttestation
	for i := range keys {
		if setting == AttestSigned || setting == AttestAll {
			out = append(out, wantedAttestation{attest.SPDXPredicateType, &keys[i]}, wantedAttestation{attest.ProvenancePredicateType, &keys[i]})
		}
	}
	if len(keys) == 0 && setting == AttestAll {
		out = append(out, wantedAttestation{predicateType: attest.SPDXPredicateType})
	}
	return out
}

// attestations attaches to next.LatestImage the attestations it should
// carry and returns them as status records them. One recorded for the
// same image, predicate and key is trusted without a request, unless this
// reconcile pushed the image (again: a repository recreated may have lost
// them); the others cost a referrer each and their listing
// (registry.WriteReferrers), written a key at a time so that no more than
// one key's are held at once. Signatures are deterministic: attached
// again, an attestation is the same referrer.
func (r *Core) attestations(ctx context.Context, obj object, in *inputs, next *v1alpha1.BuilderStatus,
	recorded []v1alpha1.ImageAttestation) ([]v1alpha1.ImageAttestation, error) {
	wanted := wantedAttestations(r.Attestations, in.keys)
	if len(in.pushed) > 0 {
		recorded = nil
	}
	out := make([]v1alpha1.ImageAttestation, len(wanted))
	var missing []int
	for i, w := range wanted {
		j := slices.IndexFunc(recorded, func(a v1alpha1.ImageAttestation) bool { return w.matches(a, next.LatestImage) })
		if j < 0 {
			missing = append(missing, i)
			continue
		}
		out[i] = recorded[j]
	}
	if len(missing) == 0 {
		return out[:len(wanted):len(wanted)], nil
	}
	image, err := name.NewDigest(next.LatestImage)
	if err != nil {
		return nil, fmt.Errorf("attesting %q: %w", next.LatestImage, err)
	}
	docs, err := documentsOf(r.attested(obj, in, next))
	if err != nil {
		return nil, err
	}
	desc, err := subjectOf(ctx, in, image)
	if err != nil {
		return nil, err
	}
	for len(missing) > 0 {
		n := 1 // this key's (or the unsigned SBOM's)
		for n < len(missing) && wanted[missing[n]].key == wanted[missing[0]].key {
			n++
		}
		batch := missing[:n]
		missing = missing[n:]
		referrers := make([]v1.Image, len(batch))
		for m, i := range batch {
			if referrers[m], err = docs.referrer(desc, wanted[i]); err != nil {
				return nil, err
			}
		}
		refs, listed, err := in.registry.WriteReferrers(ctx, image, referrers...)
		if err != nil {
			return nil, err
		}
		for m, i := range batch {
			out[i] = v1alpha1.ImageAttestation{Image: next.LatestImage, PredicateType: wanted[i].predicateType, Referrer: refs[m].String(), ListedBy: listed}
			if k := wanted[i].key; k != nil {
				out[i].SigningSecret, out[i].KeyID = k.secret, k.key.ID
			}
		}
	}
	return out, nil
}

// MaxAttestationBytes bounds each document attested: what a builder's
// inputs make of it (a tenant's buildpackages name the buildpacks and
// their homepages) is held, signed and pushed once per key.
const MaxAttestationBytes = 4 << 20

// ReasonAttestationTooLarge: a builder's SBOM or provenance is larger than
// MaxAttestationBytes.
const ReasonAttestationTooLarge = "AttestationTooLarge"

// documents are a builder's attested documents, each made once.
type documents struct {
	sbom, sbomStatement, provenance []byte
}

func documentsOf(b attest.Builder) (documents, error) {
	var d documents
	var err error
	if d.sbom, err = attest.SPDX(b); err != nil {
		return d, err
	}
	if d.sbomStatement, err = attest.SBOMStatement(b); err != nil {
		return d, err
	}
	if d.provenance, err = attest.Provenance(b); err != nil {
		return d, err
	}
	for _, doc := range [][]byte{d.sbomStatement, d.provenance} {
		if len(doc) > MaxAttestationBytes {
			return d, failure.Permanentf(ReasonAttestationTooLarge, "the builder's SBOM or provenance is %d bytes, more than the %d an attestation may be",
				len(doc), MaxAttestationBytes)
		}
	}
	return d, nil
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

// matches reports whether a recorded attestation is w's of image.
func (w wantedAttestation) matches(a v1alpha1.ImageAttestation, image string) bool {
	if a.Image != image || a.PredicateType != w.predicateType {
		return false
	}
	if w.key == nil {
		return a.SigningSecret == "" && a.KeyID == ""
	}
	return a.SigningSecret == w.key.secret && a.KeyID == w.key.key.ID
}

// referrer is w's artifact about subject: a Sigstore bundle of the signed
// statement, as cosign v3 attests; unsigned, the SBOM itself.
func (d documents) referrer(subject v1.Descriptor, w wantedAttestation) (v1.Image, error) {
	if w.key == nil {
		return registry.NewReferrer(subject, attest.SPDXMediaType, nil, registry.ReferrerLayer{MediaType: attest.SPDXMediaType, Data: d.sbom})
	}
	statement := d.provenance
	if w.predicateType == attest.SPDXPredicateType {
		statement = d.sbomStatement
	}
	return bundleReferrer(subject, w.key.key, w.predicateType, statement)
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
	for _, run := range append([]v1alpha1.ResolvedRunImage{in.stack.Status.RunImage}, in.stack.Status.AdditionalRunImages...) {
		b.RunImages = append(b.RunImages, run.LatestImage)
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
	return attest.Module{ID: bp.ID, Version: bp.Version, Homepage: bp.Homepage, Layer: bp.Digest, DiffID: bp.DiffID,
		Source: bp.StoreImage.Image, System: system}
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
