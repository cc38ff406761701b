// Package builder reconciles Builders and ClusterBuilders (one
// implementation): it resolves the order against the store, checks the
// buildpacks against the lifecycle and the stack, assembles the builder
// image and pushes it — or, when nothing changed, only checks that the tag
// still points at it.
package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/apis"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	listers "github.com/buildsmith/buildsmith/pkg/client/listers/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterlifecycle"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Reasons of dependency errors.
const (
	ReasonStackNotReady     = "StackNotReady"
	ReasonStoreNotReady     = "StoreNotReady"
	ReasonLifecycleNotReady = "LifecycleNotReady"
)

// Core is what Builder and ClusterBuilder reconcilers share.
type Core struct {
	reconciler.Base
	Stacks listers.ClusterStackLister
	Stores listers.ClusterStoreLister
	// Lifecycles are the ClusterLifecycles builders may name; Lifecycle
	// is the default of those that name none.
	Lifecycles listers.ClusterLifecycleLister
	Tracker    tracker.Interface
	Lifecycle  *LifecycleSource
	// Version is buildsmith's version, recorded in the builder metadata.
	Version string
	// MaxLayers is the most layers a builder image may have (0: the default).
	MaxLayers int

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
			return r.finish(ctx, in, status, next)
		}
		// The tag moved or is gone: push again.
	}
	if next.LatestImage, next.Platforms, err = r.buildAndPush(ctx, in, spec); err != nil {
		return reconciler.Updating(err)
	}
	r.pushes.Store(key, pushRecord{fingerprint: next.Fingerprint, latestImage: next.LatestImage, platforms: next.Platforms})
	return reconciler.Updating(r.finish(ctx, in, status, next))
}

// finish signs the builder's images when it has signing keys, and records
// next as its status. A failed signature leaves the status as it was: the
// next reconcile finds the pushed image (one HEAD) and signs it then.
func (r *Core) finish(ctx context.Context, in *inputs, status *v1alpha1.BuilderStatus, next v1alpha1.BuilderStatus) error {
	var err error
	if next.Signatures, err = sign(ctx, in.registry, in.keys, &next, status.Signatures); err != nil {
		return err
	}
	*status = next
	return nil
}

// buildAndPush assembles the builder for each platform and pushes it (an
// index when there are several), returning what the status records.
func (r *Core) buildAndPush(ctx context.Context, in *inputs, spec *v1alpha1.BuilderSpec) (string, []v1alpha1.BuiltPlatform, error) {
	images := make([]cnb.PlatformImage, len(in.builds))
	for i, b := range in.builds {
		img, err := r.assemble(ctx, in.registry, in.stack, b, spec)
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
	var platforms []v1alpha1.BuiltPlatform
	for _, img := range images {
		digest, err := img.Image.Digest()
		if err != nil {
			return "", nil, err
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

// platformBuild is one platform of a builder, its lifecycle, and its order
// (without the optional buildpacks the platform lacks).
type platformBuild struct {
	platform   cnb.Platform
	stack      *cnb.Stack
	lifecycle  clusterlifecycle.PlatformLifecycle
	order      *cnb.ResolvedOrder
	extensions *cnb.ResolvedOrder // nil without orderExtensions
}

// lifecycle returns the lifecycle image of a builder: its ClusterLifecycle's
// when ref names one (which must be Ready), else the lifecycle-image
// ConfigMap's; and how messages name it.
func (r *Core) lifecycle(ctx context.Context, obj object, reg registry.Access, ref *v1alpha1.LifecycleRef) (clusterlifecycle.Image, string, error) {
	if ref == nil {
		image, err := r.Lifecycle.Image(ctx, reg)
		return image, "the lifecycle image", err
	}
	lc, err := ready(r, obj, "ClusterLifecycle", ref.Name, r.Lifecycles.Get, ReasonLifecycleNotReady)
	if err != nil {
		return clusterlifecycle.Image{}, "", err
	}
	image, err := clusterlifecycle.ImageOf(lc)
	return image, "ClusterLifecycle " + lc.Name, err
}

// platforms chooses the platforms to build, as spec.targets asks or (with
// none) every platform the stack, the lifecycle image and every buildpack
// of the order have, and checks the buildpacks against each platform's
// lifecycle and stack. skipped says which of the stack's platforms a
// default build leaves out, and why.
func (r *Core) platforms(ctx context.Context, in *inputs, targets []v1alpha1.Platform) ([]platformBuild, []string, error) {
	stack, resolved, extensions := in.stack, in.resolved, in.extensions
	stackPlatforms := cnb.PlatformsOf(stack.Status.Platforms)
	parts := []cnb.PlatformPart{
		{Name: "ClusterStack " + stack.Name, Platforms: stackPlatforms},
		{Name: in.lifecycleName, Platforms: cnb.PlatformsOfV1(in.lifecycle.Platforms)},
	}
	for _, bp := range resolved.Buildpacks {
		if !resolved.Optional(bp) {
			parts = append(parts, cnb.PlatformPart{Name: "buildpack " + bp.ID + "@" + bp.Version, Platforms: cnb.PlatformsOf(bp.Platforms)})
		}
	}
	if extensions != nil {
		for _, ext := range extensions.Buildpacks {
			parts = append(parts, cnb.PlatformPart{Name: "extension " + ext.ID + "@" + ext.Version, Platforms: cnb.PlatformsOf(ext.Platforms)})
		}
	}
	selected, err := cnb.SelectPlatforms(cnb.PlatformsOf(targets), parts)
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

func buildEnv(env []v1alpha1.BuildEnv) []cnb.EnvVar {
	out := make([]cnb.EnvVar, len(env))
	for i, e := range env {
		out[i] = cnb.EnvVar{Name: e.Name, Value: e.Value, Suffix: e.Suffix, Delim: e.Delim}
	}
	return out
}

// assemble reads the build image and the buildpacks' layers for b's
// platform (lazily, and by digest, so from the registry client's cache
// after the first builder) and puts the builder image together.
func (r *Core) assemble(ctx context.Context, reg registry.Access, stack *v1alpha1.ClusterStack, b platformBuild,
	spec *v1alpha1.BuilderSpec) (v1.Image, error) {
	platform := b.platform.V1()
	buildRef, err := name.NewDigest(stack.Status.BuildImage.LatestImage)
	if err != nil {
		return nil, failure.Permanentf(ReasonStackNotReady, "ClusterStack %s: build image %q: %v", stack.Name, stack.Status.BuildImage.LatestImage, err)
	}
	build, err := reg.ReadImage(ctx, buildRef, &platform)
	if err != nil {
		return nil, err
	}
	layers := make([]cnb.BuildpackLayer, 0, len(b.order.Buildpacks))
	for _, bp := range b.order.Buildpacks {
		layer, err := buildpackLayer(ctx, reg, bp, platform, false)
		if err != nil {
			return nil, err
		}
		layers = append(layers, cnb.BuildpackLayer{Buildpack: bp, Layer: layer})
	}
	var extensions []cnb.BuildpackLayer
	var orderExtensions []v1alpha1.OrderEntry
	if b.extensions != nil {
		for _, ext := range b.extensions.Buildpacks {
			layer, err := buildpackLayer(ctx, reg, ext, platform, true)
			if err != nil {
				return nil, err
			}
			extensions = append(extensions, cnb.BuildpackLayer{Buildpack: ext, Layer: layer})
		}
		orderExtensions = b.extensions.Order
	}
	runImage, mirrors := runImageOf(stack, spec)
	return cnb.AssembleBuilder(cnb.BuilderSpec{
		BuildImage:       build.Image,
		Stack:            b.stack,
		RunImage:         runImage,
		RunImageMirrors:  mirrors,
		Lifecycle:        b.lifecycle.Lifecycle,
		Buildpacks:       layers,
		Order:            b.order.Order,
		System:           b.order.System,
		Extensions:       extensions,
		OrderExtensions:  orderExtensions,
		AdditionalLabels: spec.AdditionalLabels,
		Env:              buildEnv(spec.Env),
		CreatedBy:        r.Version,
		Description:      spec.Description,
		MaxLayers:        r.MaxLayers,
	})
}

// buildpackLayer finds the layer holding bp (an image extension, with
// extension) in its store image's image for platform, by the layers label
// of that image: each platform of a buildpackage index has its own layer.
func buildpackLayer(ctx context.Context, reg registry.Access, bp v1alpha1.StoreBuildpack, platform v1.Platform, extension bool) (v1.Layer, error) {
	storeRef, err := name.NewDigest(bp.StoreImage.Image)
	if err != nil {
		return nil, failure.Permanentf(ReasonStoreNotReady, "buildpack %s@%s: store image %q: %v", bp.ID, bp.Version, bp.StoreImage.Image, err)
	}
	img, err := reg.ReadImage(ctx, storeRef, &platform)
	if err != nil {
		return nil, err
	}
	// A plain image is returned whatever platform was asked for: never put
	// another platform's layer into a builder.
	if own := (cnb.Platform{OS: img.Config.OS, Arch: img.Config.Architecture, Variant: img.Config.Variant}); !own.Matches(cnb.PlatformOf(platform)) {
		return nil, failure.Waitingf(ReasonStoreNotReady, "buildpack %s@%s: %s is for %s, not %s",
			bp.ID, bp.Version, bp.StoreImage.Image, own, cnb.PlatformOf(platform))
	}
	diffID, found, err := cnb.BuildpackDiffID(bp.StoreImage.Image, img.Config, img.Manifest, bp.ID, bp.Version, extension)
	if err != nil {
		return nil, err
	}
	if found {
		if layer, err := img.Image.LayerByDiffID(diffID); err == nil {
			return layer, nil
		}
	}
	// The store's status no longer matches the image: the store will
	// notice on its next read.
	return nil, failure.Waitingf(ReasonStoreNotReady, "buildpack %s@%s is not in %s for %s",
		bp.ID, bp.Version, bp.StoreImage.Image, cnb.PlatformOf(platform))
}

// ready returns the dependency of obj that get finds by name if it is Ready
// for its current generation, and tracks it either way (a stack becoming
// Ready wakes the builders waiting on it).
func ready[T reconciler.Object](r *Core, obj object, kind, name string, get func(string) (T, error), reason string) (T, error) {
	var none T
	_ = r.Tracker.TrackReference(tracker.Reference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: kind, Name: name}, obj)
	dep, err := get(name)
	if apierrors.IsNotFound(err) {
		return none, failure.Waitingf(reason, "%s %s not found", kind, name)
	} else if err != nil {
		return none, err
	}
	if status := dep.Conditions(); !status.IsReady() || status.ObservedGeneration != dep.GetGeneration() {
		return none, failure.Waitingf(reason, "%s %s is not Ready%s", kind, name, why(*status))
	}
	return dep, nil
}

func why(s v1alpha1.ConditionedStatus) string {
	if c := s.GetCondition(v1alpha1.ConditionReady); c != nil && c.Reason != "" {
		return fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
	}
	return ""
}

// fingerprintOf digests every input of the builder image, and nothing
// else: a buildpack counts by its layer and its metadata, not by the
// buildpackage it came from (re-pushing a buildpackage with the same layer
// changes no builder).
func fingerprintOf(stack *v1alpha1.ClusterStack, builds []platformBuild, resolved, extensions *cnb.ResolvedOrder,
	spec *v1alpha1.BuilderSpec, version string) string {
	platforms := make([]string, len(builds)) // each built, with its lifecycle image
	for i, b := range builds {
		platforms[i] = b.platform.String() + "=" + b.lifecycle.Digest
	}
	var extensionModules []v1alpha1.StoreBuildpack
	var orderExtensions []v1alpha1.OrderEntry
	if extensions != nil {
		extensionModules, orderExtensions = fingerprinted(extensions.Buildpacks), extensions.Order
	}
	runImage, mirrors := runImageOf(stack, spec)
	raw, _ := json.Marshal(struct {
		BuildImage, RunImage, Tag, Version string
		RunImageMirrors                    []string
		Platforms                          []string
		Buildpacks                         []v1alpha1.StoreBuildpack
		Order                              []v1alpha1.OrderEntry
		Labels                             map[string]string
		Env                                []v1alpha1.BuildEnv
		// Omitted when empty: the fingerprints of builders from before
		// system buildpacks, extensions and descriptions stay the same.
		System          *v1alpha1.SystemBuildpacks `json:",omitempty"`
		Extensions      []v1alpha1.StoreBuildpack  `json:",omitempty"`
		OrderExtensions []v1alpha1.OrderEntry      `json:",omitempty"`
		Description     string                     `json:",omitempty"`
	}{stack.Status.BuildImage.LatestImage, runImage, spec.Tag, version, mirrors,
		platforms, fingerprinted(resolved.Buildpacks), resolved.Order, spec.AdditionalLabels, spec.Env, resolved.System,
		extensionModules, orderExtensions, spec.Description})
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fingerprinted is what of each buildpack (or extension) is an input of
// the builder image.
func fingerprinted(modules []v1alpha1.StoreBuildpack) []v1alpha1.StoreBuildpack {
	out := make([]v1alpha1.StoreBuildpack, len(modules))
	for i, bp := range modules {
		// The layer's digests identify a single-platform buildpack; the
		// store image does not (another buildpackage may hold the same
		// layer). For an index, the layer is the first platform's only:
		// the index's digest stands for the other platforms' layers.
		if len(bp.Platforms) <= 1 {
			bp.StoreImage = v1alpha1.ImageSource{}
		}
		// Which platforms the store has it for counts only through the
		// platforms built (below): a platform the builder does not build
		// changes nothing.
		bp.Platforms = nil
		out[i] = bp
	}
	return out
}

// runImageOf is the run image a builder names, and its mirrors: the stack's
// as its spec gives them, or, with spec.pinRunImage, by the digest the stack
// resolved its run image to (mirrors hold the same image, so the same
// digest).
func runImageOf(stack *v1alpha1.ClusterStack, spec *v1alpha1.BuilderSpec) (string, []string) {
	run := stack.Status.RunImage
	if !spec.PinRunImage || run.LatestImage == "" {
		return run.Image, run.Mirrors
	}
	pinned, err := name.NewDigest(run.LatestImage)
	if err != nil {
		return run.Image, run.Mirrors
	}
	mirrors := make([]string, 0, len(run.Mirrors))
	for _, m := range run.Mirrors {
		ref, err := name.ParseReference(m)
		if err != nil {
			return run.Image, run.Mirrors // a stack that is Ready has none such
		}
		mirrors = append(mirrors, ref.Context().Digest(pinned.DigestStr()).String())
	}
	return pinned.String(), mirrors
}

// runImageName is the run image a builder names (runImageOf), without mirrors.
func runImageName(stack *v1alpha1.ClusterStack, spec *v1alpha1.BuilderSpec) string {
	image, _ := runImageOf(stack, spec)
	return image
}
