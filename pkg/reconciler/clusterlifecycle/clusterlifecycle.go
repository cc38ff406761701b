// Package clusterlifecycle reconciles ClusterLifecycles: it resolves the
// lifecycle image, reads the lifecycle of each of its platforms, and records
// its version, APIs and platforms. Builders that name the ClusterLifecycle
// take their lifecycle from the digest it records.
package clusterlifecycle

import (
	"context"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Reconciler reconciles ClusterLifecycles.
type Reconciler struct{ reconciler.Base }

// ReconcileKind implements the generated reconciler's Interface.
func (r *Reconciler) ReconcileKind(ctx context.Context, lc *v1alpha1.ClusterLifecycle) pkgreconciler.Event {
	return r.Policy.Reconcile(ctx, lc, func(ctx context.Context) error { return r.reconcile(ctx, lc) })
}

// reconcile reads the lifecycle of every platform of the image and, only
// when all of it succeeded, replaces the resolved part of the status: a
// failure keeps the last good one, so builders keep their lifecycle.
func (r *Reconciler) reconcile(ctx context.Context, lc *v1alpha1.ClusterLifecycle) error {
	if err := reconciler.Validate(ctx, lc); err != nil {
		return err
	}
	keychain, err := r.Credentials.ForServiceAccount(ctx, lc, lc.Spec.ServiceAccountRef)
	if err != nil {
		return err
	}
	reg := r.Registry.As(keychain)
	chosen := reconciler.NewChosenTags(lc.Status.ChosenTags)
	src, err := chosen.Choose(ctx, reg, "spec.image", lc.Spec.Image, lc.Spec.Policy)
	if err != nil {
		return err
	}
	img, err := reg.ReadImage(ctx, src.Ref, nil)
	if err != nil {
		return err
	}
	// Each platform's lifecycle is read and checked, once.
	if err := cnb.CheckIndexPlatforms(img.Ref.String(), img.Platforms); err != nil {
		return err
	}
	image := Image{Ref: img.Ref, Platforms: cnb.DistinctPlatforms(img.Platforms)}
	var first PlatformLifecycle
	for i, p := range image.Platforms {
		l, err := image.For(ctx, reg, p)
		if err != nil {
			return err
		}
		if i == 0 {
			first = l
			continue
		}
		// Builders report one lifecycle whatever platforms they have.
		if l.Version != first.Version {
			return failure.Permanentf(cnb.ReasonInvalidLifecycleImage, "%s: the %s lifecycle is %s, the %s one %s: every platform must have the same version",
				img.Ref, cnb.PlatformOf(p), l.Version, cnb.PlatformOf(image.Platforms[0]), first.Version)
		}
	}

	status := &lc.Status
	status.Image = v1alpha1.ResolvedImage{Image: src.Named, LatestImage: img.Ref.String()}
	status.Version, status.APIs = first.Version, first.APIs
	status.Platforms = cnb.APIPlatforms(cnb.PlatformsOfV1(image.Platforms))
	status.ChosenTags = chosen.Status()
	return nil
}

// Image is a lifecycle image at one digest: every platform of one builder
// takes its lifecycle from it, so that a tag moved meanwhile cannot give
// one builder's platforms different lifecycles.
type Image struct {
	Ref       name.Digest   // an index's, for an index
	Platforms []v1.Platform // every platform it has
}

// ImageOf is the image a Ready ClusterLifecycle recorded.
func ImageOf(lc *v1alpha1.ClusterLifecycle) (Image, error) {
	ref, err := name.NewDigest(lc.Status.Image.LatestImage)
	if err != nil {
		return Image{}, failure.Permanentf(cnb.ReasonInvalidLifecycleImage, "ClusterLifecycle %s: image %q: %v", lc.Name, lc.Status.Image.LatestImage, err)
	}
	var platforms []v1.Platform
	for _, p := range cnb.PlatformsOf(lc.Status.Platforms) {
		platforms = append(platforms, p.V1())
	}
	return Image{Ref: ref, Platforms: platforms}, nil
}

// PlatformLifecycle is the lifecycle of one platform and the digest of its
// image.
type PlatformLifecycle struct {
	cnb.Lifecycle
	Digest string
}

// For returns the lifecycle for platform, read through reg.
func (i Image) For(ctx context.Context, reg registry.Access, platform v1.Platform) (PlatformLifecycle, error) {
	img, err := reg.ReadImage(ctx, i.Ref, &platform)
	if err != nil {
		return PlatformLifecycle{}, err
	}
	layers, err := img.Image.Layers()
	if err != nil {
		return PlatformLifecycle{}, err
	}
	lifecycle, err := cnb.ReadLifecycle(img.Ref.String(), img.Config, layers)
	if err != nil {
		return PlatformLifecycle{}, err
	}
	// The image for the platform, by digest: an index's child when the
	// reference names an index.
	digest := img.Ref.Context().Digest(img.Digest.String())
	return PlatformLifecycle{Lifecycle: lifecycle, Digest: digest.String()}, nil
}
