package builder

import (
	"context"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/attest"
)

// attachment is a referrer a builder image should carry: a statement of
// predicateType about image, signed by key; without a key, the SBOM
// itself.
type attachment struct {
	image         name.Digest
	predicateType string
	key           *signingKey
}

// keyID is the ID of a's key; "" unsigned.
func (a attachment) keyID() string {
	if a.key == nil {
		return ""
	}
	return a.key.key.ID
}

// attached is where an attachment is: its referrer (repository@digest)
// and how readers find it (registry.ListedByAPI, registry.ListedByTag).
type attached struct {
	referrer, listedBy string
}

// attachments are the referrers the builder next should carry: a signature
// bundle of each image per key when spec.signing.format asks for them,
// then the attestations of its image per key (its SBOM then its
// provenance) that --builder-attestations asks for, or without keys the
// SBOM alone with AttestAll. A key whose Secret asks for Docker media
// types attests nothing (its registry refuses OCI manifests; checkSignatures
// refused it a bundle). At most two per key and image: status holds them
// within the bound of status.signatures' keys.
func (r *Core) attachments(in *inputs, next *v1alpha1.BuilderStatus) ([]attachment, error) {
	var out []attachment
	if in.signing.bundle && len(in.keys) > 0 {
		images, err := signedImages(next)
		if err != nil {
			return nil, err
		}
		for _, image := range images {
			for i := range in.keys {
				out = append(out, attachment{image, attest.SignPredicateType, &in.keys[i]})
			}
		}
	}
	if r.Attestations != AttestSigned && r.Attestations != AttestAll {
		return out, nil
	}
	latest, err := name.NewDigest(next.LatestImage)
	if err != nil {
		return nil, err
	}
	// The image in each repository it is published to.
	for _, image := range copiesOf([]name.Digest{latest}, otherRepositories(latest.Context(), next.AdditionalTags)) {
		for i := range in.keys {
			if in.keys[i].docker {
				continue
			}
			out = append(out, attachment{image, attest.SPDXPredicateType, &in.keys[i]}, attachment{image, attest.ProvenancePredicateType, &in.keys[i]})
		}
		if len(in.keys) == 0 && r.Attestations == AttestAll {
			out = append(out, attachment{image: image, predicateType: attest.SPDXPredicateType})
		}
	}
	return out, nil
}

// attach makes sure each of want is attached and returns where, in want's
// order. One that recorded finds is trusted without a request. The others
// are written a batch at a time, one per image and key, so that no more
// than one key's referrers are held at once and each batch costs one
// listing (registry.WriteReferrers): an image's signature bundle and its
// attestations by the same key share it. A key in two Secrets makes each
// referrer once. Signatures are deterministic: attached again, an
// attachment is the same referrer.
func (r *Core) attach(ctx context.Context, in *inputs, documents *documents, want []attachment,
	recorded func(attachment) (attached, bool)) ([]attached, error) {
	type batchKey struct{ image, keyID string }
	out := make([]attached, len(want))
	batches := map[batchKey][]int{} // want's indexes
	var order []batchKey
	for i, w := range want {
		if a, ok := recorded(w); ok {
			out[i] = a
			continue
		}
		k := batchKey{w.image.String(), w.keyID()}
		if batches[k] == nil {
			order = append(order, k)
		}
		batches[k] = append(batches[k], i)
	}
	subjects := map[string]v1.Descriptor{} // by image: one look each, however many keys
	for _, k := range order {
		batch := batches[k]
		subject, ok := subjects[k.image]
		if !ok {
			var err error
			if subject, err = subjectOf(ctx, in, want[batch[0]].image); err != nil {
				return nil, err
			}
			subjects[k.image] = subject
		}
		var referrers []v1.Image
		made := map[string]int{} // the referrers' indexes, by predicate type
		for _, i := range batch {
			if _, ok := made[want[i].predicateType]; ok {
				continue
			}
			referrer, err := documents.referrer(subject, want[i])
			if err != nil {
				return nil, err
			}
			made[want[i].predicateType] = len(referrers)
			referrers = append(referrers, referrer)
		}
		refs, listed, err := in.registry.WriteReferrers(ctx, want[batch[0]].image, referrers...)
		if err != nil {
			return nil, err
		}
		for _, i := range batch {
			out[i] = attached{referrer: refs[made[want[i].predicateType]].String(), listedBy: listed}
		}
	}
	return out, nil
}

// referrers signs the builder's images in the formats its spec asks for
// and attaches the attestations --builder-attestations asks for, and
// returns status.signatures (the .sig tag's, then the bundles) and
// status.attestations. Those recorded in status for the same image,
// predicate and key are trusted, unless this reconcile pushed the image
// (again: a repository recreated may have lost them).
func (r *Core) referrers(ctx context.Context, obj object, in *inputs, status, next *v1alpha1.BuilderStatus) (
	[]v1alpha1.ImageSignature, []v1alpha1.ImageAttestation, error) {
	var signatures []v1alpha1.ImageSignature
	if in.signing.sig {
		recorded := status.Signatures
		if len(in.pushed) > 0 {
			recorded = nil // each .sig tag read: one HEAD, and the signature kept if there
		}
		recorded = slices.DeleteFunc(slices.Clone(recorded), func(s v1alpha1.ImageSignature) bool {
			return in.published.rewritten(s.Image)
		})
		var err error
		if signatures, err = sign(ctx, in.registry, in.keys, next, recorded); err != nil {
			return nil, nil, err
		}
	}
	want, err := r.attachments(in, next)
	if err != nil {
		return nil, nil, err
	}
	documents := r.documents(obj, in, next)
	// The attestations recorded say what the documents say now, or are
	// attached anew (their inputs moved without the image: a run image
	// under its tag).
	same := true
	if slices.ContainsFunc(want, func(a attachment) bool { return a.predicateType != attest.SignPredicateType }) {
		if next.AttestedDocuments, err = documents.digest(); err != nil {
			return nil, nil, err
		}
		same = next.AttestedDocuments == status.AttestedDocuments
	}
	recorded := func(a attachment) (attached, bool) {
		if len(in.pushed) > 0 || in.published.rewritten(a.image.String()) || !same && a.predicateType != attest.SignPredicateType {
			return attached{}, false
		}
		return recordedAttachment(status, a)
	}
	got, err := r.attach(ctx, in, documents, want, recorded)
	if err != nil {
		return nil, nil, err
	}
	var attestations []v1alpha1.ImageAttestation
	for i, a := range want {
		var secret, keyID string
		if a.key != nil {
			secret, keyID = a.key.secret, a.key.key.ID
		}
		if a.predicateType == attest.SignPredicateType {
			signatures = append(signatures, v1alpha1.ImageSignature{Image: a.image.String(), SigningSecret: secret, KeyID: keyID,
				Signature: got[i].referrer, Format: v1alpha1.SignatureFormatBundle, ListedBy: got[i].listedBy})
			continue
		}
		attestations = append(attestations, v1alpha1.ImageAttestation{Image: a.image.String(), PredicateType: a.predicateType,
			Referrer: got[i].referrer, ListedBy: got[i].listedBy, SigningSecret: secret, KeyID: keyID})
	}
	return signatures, attestations, nil
}

// recordedAttachment finds a in status: a signature bundle among its
// signatures, an attestation among its attestations, of the same image
// and by the same Secret and key (a key moved to another Secret, or
// replaced, attaches again).
func recordedAttachment(status *v1alpha1.BuilderStatus, a attachment) (attached, bool) {
	var secret, keyID string
	if a.key != nil {
		secret, keyID = a.key.secret, a.key.key.ID
	}
	if a.predicateType == attest.SignPredicateType {
		for _, s := range status.Signatures {
			if s.Format == v1alpha1.SignatureFormatBundle && s.Image == a.image.String() && s.SigningSecret == secret && s.KeyID == keyID {
				return attached{s.Signature, s.ListedBy}, true
			}
		}
		return attached{}, false
	}
	for _, s := range status.Attestations {
		if s.Image == a.image.String() && s.PredicateType == a.predicateType && s.SigningSecret == secret && s.KeyID == keyID {
			return attached{s.Referrer, s.ListedBy}, true
		}
	}
	return attached{}, false
}
