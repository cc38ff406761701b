package builder

import (
	"context"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterlifecycle"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// inputs are what a builder is made of, resolved.
type inputs struct {
	tag            name.Tag
	additionalTags []name.Tag
	stack          *v1alpha1.ClusterStack
	// sources are the builder's sources of buildpacks (spec.store, then
	// spec.sources), pooled: what the order is resolved against.
	sources  []source
	pool     cnb.Pool
	registry registry.Access // with the builder's credentials
	keys     []signingKey    // of the builder's ServiceAccount
	// lifecycle is the lifecycle image, named lifecycleName in messages.
	lifecycle     clusterlifecycle.Image
	lifecycleName string
	resolved      *cnb.ResolvedOrder
	extensions    *cnb.ResolvedOrder // nil without orderExtensions
	builds        []platformBuild
	skipped       []string
	// runImage is the run image the builder names (runImageOf).
	runImage string
	// fingerprint identifies all of the above and the spec: a builder
	// pushed from the same fingerprint is the same builder.
	fingerprint string
	// signing is the formats the builder's signatures are made in.
	signing signatureFormats
	// pushed describes what this reconcile pushed (none: nil): the image
	// or index at the tag, then an index's images.
	pushed []v1.Descriptor
	// published is what this reconcile did to the additional tags.
	published published
}

// resolveInputs validates the spec and resolves the stack, the sources, the
// credentials, the order and the platforms to build.
func (r *Core) resolveInputs(ctx context.Context, obj object, spec *v1alpha1.BuilderSpec,
	account *v1alpha1.ServiceAccountRef) (*inputs, error) {
	if err := reconciler.Validate(ctx, obj); err != nil {
		return nil, err
	}
	in := &inputs{}
	var err error
	if in.tag, err = name.NewTag(spec.Tag); err != nil {
		return nil, failure.Permanentf(reconciler.ReasonInvalidSpec, "spec.tag: %v", err)
	}
	if in.additionalTags, err = additionalTagsOf(spec); err != nil {
		return nil, err
	}
	if in.stack, err = ready(r, obj, "ClusterStack", "", spec.Stack.Name, r.Stacks.Get, ReasonStackNotReady); err != nil {
		return nil, err
	}
	if in.sources, err = r.sources(obj, spec); err != nil {
		return nil, err
	}
	in.pool = poolOf(in.sources)
	if err := cnb.ValidateEnv(buildEnv(spec.Env)); err != nil {
		return nil, err
	}
	kc, err := r.Credentials.ForServiceAccount(ctx, obj, account)
	if err != nil {
		return nil, err
	}
	in.registry = r.Registry.As(kc)
	// Signing keys before any push: a key that does not parse is known
	// before a builder it could not sign is pushed.
	secrets, err := r.Credentials.SigningSecrets(ctx, obj, account, cosign.SecretKey, cosign.SecretPassword)
	if err != nil {
		return nil, err
	}
	if in.keys, err = r.keys.of(ctx, secrets); err != nil {
		return nil, err
	}
	if in.resolved, err = cnb.ResolveOrder(spec.Order, spec.System, in.pool); err != nil {
		return nil, err
	}
	if len(spec.OrderExtensions) > 0 {
		if in.extensions, err = cnb.ResolveExtensions(spec.OrderExtensions, in.pool); err != nil {
			return nil, err
		}
	}
	if in.lifecycle, in.lifecycleName, err = r.lifecycle(ctx, obj, in.registry, spec.Lifecycle); err != nil {
		return nil, err
	}
	if in.builds, in.skipped, err = r.platforms(ctx, in, spec.Targets); err != nil {
		return nil, err
	}
	if err := in.checkSigning(spec, account); err != nil {
		return nil, err
	}
	if err := checkRunImageRepositories(in.stack, spec); err != nil {
		return nil, err
	}
	// Against the buildpacks of every platform: a platform without an
	// optional buildpack flattens without it.
	if err := cnb.CheckFlatten(in.resolved.Buildpacks, spec.Flatten); err != nil {
		return nil, err
	}
	in.runImage = runImageName(in.stack, spec)
	in.fingerprint = fingerprintOf(in.stack, in.builds, in.resolved, in.extensions, spec, r.Version)
	return in, nil
}

// status is the builder's status for these inputs, keeping the conditions
// and the last image of status.
func (in *inputs) status(status *v1alpha1.BuilderStatus) v1alpha1.BuilderStatus {
	next := v1alpha1.BuilderStatus{
		ConditionedStatus: status.ConditionedStatus,
		LatestImage:       status.LatestImage,
		Platforms:         status.Platforms,
		SkippedPlatforms:  in.skipped,
		Order:             in.resolved.Order,
		System:            in.resolved.System,
		OrderExtensions:   in.orderExtensions(),
		Stack:             v1alpha1.BuiltStack{ID: in.stack.Status.ID, RunImage: in.runImage},
		Lifecycle: v1alpha1.LifecycleStatus{Image: in.lifecycle.Ref.String(),
			Version: in.builds[0].lifecycle.Version, APIs: in.builds[0].lifecycle.APIs},
		ObservedStackGeneration: in.stack.Generation,
		ObservedStoreGeneration: in.storeGeneration(),
		Fingerprint:             in.fingerprint,
	}
	for _, s := range in.sources {
		next.Sources = append(next.Sources, v1alpha1.ObservedSource{Kind: s.ref.Kind, Name: s.ref.Name, Generation: s.generation})
	}
	for _, bp := range in.resolved.Buildpacks {
		next.BuilderMetadata = append(next.BuilderMetadata, v1alpha1.BuildpackMetadata{ID: bp.ID, Version: bp.Version, Homepage: bp.Homepage,
			Source: in.pool.SourceOf(bp)})
	}
	return next
}

// storeGeneration is the generation of the builder's store; 0 without one.
func (in *inputs) storeGeneration() int64 {
	if len(in.sources) > 0 && in.sources[0].store {
		return in.sources[0].generation
	}
	return 0
}

// orderExtensions is the resolved order of extensions, or nil.
func (in *inputs) orderExtensions() []v1alpha1.OrderEntry {
	if in.extensions == nil {
		return nil
	}
	return in.extensions.Order
}

// inputsMoved reports whether the builder's inputs changed since its status
// was written, as far as can be told without a registry: a failure while
// resolving them is then part of an update, not a re-check (see
// reconciler.Updating). It compares what the status records — the stack's
// and sources' generations, the stack's run image, the lifecycle image's
// repository (its digest, for a ClusterLifecycle) — and a push not recorded
// yet. A stack whose build image moved under the same tag shows only in the
// fingerprint, which needs the image read.
func (r *Core) inputsMoved(key types.NamespacedName, spec *v1alpha1.BuilderSpec, status *v1alpha1.BuilderStatus) bool {
	if last := r.lastPush(key, status); last.fingerprint != status.Fingerprint {
		return true
	}
	if stack, err := r.Stacks.Get(spec.Stack.Name); err == nil &&
		(stack.Generation != status.ObservedStackGeneration || runImageName(stack, spec) != status.Stack.RunImage) {
		return true
	}
	for i, ref := range sourceRefs(spec) {
		store := i == 0 && spec.Store.Name != ""
		if generation, ok := r.generation(key.Namespace, ref); ok && generation != observedSourceGeneration(status, store, ref) {
			return true
		}
	}
	if spec.Lifecycle != nil {
		lc, err := r.Lifecycles.Get(spec.Lifecycle.Name)
		return err == nil && lc.Status.Image.LatestImage != status.Lifecycle.Image
	}
	return !sameRepository(r.Lifecycle.Reference(), status.Lifecycle.Image)
}

// sameRepository reports whether two image references name one repository
// (either unparsable or empty: true, nothing to tell).
func sameRepository(a, b string) bool {
	ra, errA := name.ParseReference(a)
	rb, errB := name.ParseReference(b)
	return errA != nil || errB != nil || ra.Context().String() == rb.Context().String()
}
