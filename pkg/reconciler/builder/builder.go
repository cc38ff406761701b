// Package builder reconciles Builders and ClusterBuilders (one
// implementation): it resolves the order against the store, checks the
// buildpacks against the lifecycle and the stack, assembles the builder
// image and pushes it — or, when nothing changed, only checks that the tag
// still points at it.
package builder

import (
	"context"
	"sync"

	"github.com/google/go-containerregistry/pkg/v1/partial"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/apis"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	listers "github.com/buildsmith/buildsmith/pkg/client/listers/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Core is what Builder and ClusterBuilder reconcilers share.
type Core struct {
	reconciler.Base
	Stacks listers.ClusterStackLister
	Stores listers.ClusterStoreLister
	// Buildpacks are the namespaces' own sources of buildpacks.
	Buildpacks listers.BuildpackLister
	// Lifecycles are the ClusterLifecycles builders may name; Lifecycle
	// is the default of those that name none.
	Lifecycles listers.ClusterLifecycleLister
	Tracker    tracker.Interface
	Lifecycle  *LifecycleSource
	// Version is buildsmith's version, recorded in the builder metadata.
	Version string
	// MaxLayers is the most layers a builder image may have (0: the default).
	MaxLayers int
	// Flattening is where and how big flattened layers are made.
	Flattening Flattening
	// Attestations says which builders carry attestations: AttestNone
	// (also when empty), AttestSigned or AttestAll.
	Attestations string

	// pushes remembers, by builder, what was last pushed until its status
	// records it: when the status write after a push fails (the API server
	// busy or electing a leader), the next reconcile starts from the old
	// status again, and must find the pushed image (one HEAD) rather than
	// push it again.
	pushes sync.Map // types.NamespacedName → pushRecord

	keys signingKeys // parsed once per Secret version, within Config.Signing
}

// pushRecord is a push of a builder: its inputs and what it made.
type pushRecord struct {
	fingerprint string
	latestImage string
	platforms   []v1alpha1.BuiltPlatform
}

// BuilderReconciler reconciles Builders.
type BuilderReconciler struct{ *Core }

// ReconcileKind implements the generated reconciler's Interface.
func (r *BuilderReconciler) ReconcileKind(ctx context.Context, b *v1alpha1.Builder) pkgreconciler.Event {
	account := b.Spec.ServiceAccountName
	if account == "" {
		account = v1alpha1.DefaultServiceAccountName
	}
	return r.Policy.Reconcile(ctx, b, func(ctx context.Context) error {
		return r.reconcile(ctx, b, &b.Spec.BuilderSpec, &b.Status, &v1alpha1.ServiceAccountRef{Namespace: b.Namespace, Name: account})
	})
}

// ClusterBuilderReconciler reconciles ClusterBuilders.
type ClusterBuilderReconciler struct{ *Core }

// ReconcileKind implements the generated reconciler's Interface.
func (r *ClusterBuilderReconciler) ReconcileKind(ctx context.Context, b *v1alpha1.ClusterBuilder) pkgreconciler.Event {
	return r.Policy.Reconcile(ctx, b, func(ctx context.Context) error {
		return r.reconcile(ctx, b, &b.Spec.BuilderSpec, &b.Status, b.Spec.ServiceAccountRef)
	})
}

// ObserveDeletion drops the deleted builder's backoff, circuit waits and
// push record.
func (r *Core) ObserveDeletion(ctx context.Context, key types.NamespacedName) error {
	r.pushes.Delete(key)
	return r.Base.ObserveDeletion(ctx, key)
}

type object interface {
	reconciler.Object
	Validate(context.Context) *apis.FieldError
}

// reconcile makes the builder image, or checks that the one built from the
// same inputs is still at the tag, and signs it with the keys of account
// (the builder's ServiceAccount; nil for anonymous). Status changes only on
// success. Everything up to that check is a re-check of a builder whose
// inputs did not change as far as it knows; a push is an update (see
// reconciler.Updating): a Ready builder whose re-check fails for a passing
// reason stays Ready, one that has to push a new image and cannot does not.
func (r *Core) reconcile(ctx context.Context, obj object, spec *v1alpha1.BuilderSpec, status *v1alpha1.BuilderStatus,
	account *v1alpha1.ServiceAccountRef) error {
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	in, err := r.resolveInputs(ctx, obj, spec, account)
	if err != nil {
		if r.inputsMoved(key, spec, status) {
			return reconciler.Updating(err)
		}
		return err
	}
	next := in.status(status)
	last := r.lastPush(key, status)
	if last.fingerprint == next.Fingerprint && last.latestImage != "" {
		// Nothing changed since the last push: one HEAD to check that the
		// tag still points at it. The status is refreshed all the same (a
		// new stack or store generation may resolve to the same inputs).
		desc, found, err := in.registry.Lookup(ctx, in.tag)
		if err != nil {
			return err
		}
		if found && desc.Ref.String() == last.latestImage {
			next.LatestImage, next.Platforms = last.latestImage, last.platforms
			return r.finish(ctx, obj, in, status, next)
		}
		// The tag moved or is gone: push again.
	}
	if next.LatestImage, next.Platforms, err = r.buildAndPush(ctx, key.Namespace, in, spec); err != nil {
		return reconciler.Updating(err)
	}
	r.pushes.Store(key, pushRecord{fingerprint: next.Fingerprint, latestImage: next.LatestImage, platforms: next.Platforms})
	return reconciler.Updating(r.finish(ctx, obj, in, status, next))
}

// finish points the additional tags at the builder image, signs its images
// (in every repository it is in) when it has signing keys, attaches its
// attestations, and records next as its status. A failed copy, signature
// or attestation leaves the status as it was: the next reconcile finds the
// pushed image (one HEAD) and goes on from there.
func (r *Core) finish(ctx context.Context, obj object, in *inputs, status *v1alpha1.BuilderStatus, next v1alpha1.BuilderStatus) error {
	var copyErr, err error
	in.published, copyErr = publish(ctx, in.registry, in.additionalTags, next.LatestImage, r.copyBounds(len(in.builds)))
	next.AdditionalTags = in.published.tags
	if next.Signatures, next.Attestations, err = r.referrers(ctx, obj, in, status, &next); err != nil {
		return err
	}
	if copyErr != nil {
		return copyErr // what was published is signed; status waits for the rest
	}
	*status = next
	return nil
}

// buildAndPush assembles the builder for each platform and pushes it (an
// index when there are several), returning what the status records.
func (r *Core) buildAndPush(ctx context.Context, namespace string, in *inputs, spec *v1alpha1.BuilderSpec) (
	latest string, platforms []v1alpha1.BuiltPlatform, err error) {
	if err := copyRunImages(ctx, in.registry, in.stack, spec); err != nil {
		return "", nil, err
	}
	ctx, scratch, err := r.Flattening.scratch(ctx, namespace, spec)
	if err != nil {
		return "", nil, err
	}
	defer scratch.remove()
	defer func() { err = r.Flattening.Slots.heldTooLong(ctx, err) }()
	images := make([]cnb.PlatformImage, len(in.builds))
	for i, b := range in.builds {
		img, err := r.assemble(ctx, in.registry, in.stack, b, spec, scratch)
		if err != nil {
			return "", nil, err
		}
		images[i] = cnb.PlatformImage{Platform: b.platform, Image: img}
	}
	// One platform: the builder image itself at the tag, as pack makes
	// it. Several: an index of them, pushed with its images.
	var artifact registry.Artifact = images[0].Image
	if len(images) > 1 {
		index, err := cnb.AssembleIndex(images)
		if err != nil {
			return "", nil, err
		}
		artifact = index
	}
	pushed, err := in.registry.Write(ctx, in.tag, artifact)
	if err != nil {
		return "", nil, err
	}
	// What the signatures' and attestations' subjects are: no need to
	// ask the registry.
	if described, ok := artifact.(partial.Describable); ok {
		desc, err := partial.Descriptor(described)
		if err != nil {
			return "", nil, err
		}
		in.pushed = append(in.pushed, *desc)
	}
	for _, img := range images {
		digest, err := img.Image.Digest()
		if err != nil {
			return "", nil, err
		}
		if len(images) > 1 {
			desc, err := partial.Descriptor(img.Image)
			if err != nil {
				return "", nil, err
			}
			in.pushed = append(in.pushed, *desc)
		}
		platforms = append(platforms, v1alpha1.BuiltPlatform{
			Platform: cnb.APIPlatforms([]cnb.Platform{img.Platform})[0], Image: in.tag.Context().Digest(digest.String()).String()})
	}
	return pushed.String(), platforms, nil
}

// lastPush returns the builder's last push: the one its status records,
// unless a later one was made whose status write has not been seen yet.
func (r *Core) lastPush(key types.NamespacedName, status *v1alpha1.BuilderStatus) pushRecord {
	recorded := pushRecord{fingerprint: status.Fingerprint, latestImage: status.LatestImage, platforms: status.Platforms}
	remembered, ok := r.pushes.Load(key)
	if !ok {
		return recorded
	}
	if p := remembered.(pushRecord); p.latestImage != recorded.latestImage || p.fingerprint != recorded.fingerprint {
		return p
	}
	r.pushes.Delete(key) // the status has it now
	return recorded
}
