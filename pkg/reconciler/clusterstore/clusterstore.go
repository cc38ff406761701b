// Package clusterstore reconciles ClusterStores: it reads every
// buildpackage and lists the buildpacks they hold.
package clusterstore

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"golang.org/x/sync/errgroup"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// parallelReads bounds how many sources of one store are read at once.
const parallelReads = 4

// Reconciler reconciles ClusterStores.
type Reconciler struct{ reconciler.Base }

// ReconcileKind implements the generated reconciler's Interface.
func (r *Reconciler) ReconcileKind(ctx context.Context, store *v1alpha1.ClusterStore) pkgreconciler.Event {
	return r.Policy.Finish(ctx, store, r.reconcile(ctx, store))
}

// reconcile reads all sources and replaces status.buildpacks only when every
// source was read: a failure of any keeps the last good list whole.
func (r *Reconciler) reconcile(ctx context.Context, store *v1alpha1.ClusterStore) error {
	if err := reconciler.Validate(ctx, store); err != nil {
		return err
	}
	keychain, err := r.Credentials.ForServiceAccount(ctx, store, store.Spec.ServiceAccountRef)
	if err != nil {
		return err
	}

	// Every source is read to the end (no cancelling the others on the
	// first failure), and the first failure in source order is reported:
	// the same failures always give the same condition.
	perSource := make([][]v1alpha1.StoreBuildpack, len(store.Spec.Sources))
	errs := make([]error, len(store.Spec.Sources))
	var g errgroup.Group
	g.SetLimit(parallelReads)
	for i, source := range store.Spec.Sources {
		g.Go(func() error {
			errs[i] = readSource(ctx, r.Registry.As(keychain), source.Image, &perSource[i])
			return nil
		})
	}
	_ = g.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	buildpacks, err := cnb.MergeBuildpacks(perSource...)
	if err != nil {
		return err
	}
	store.Status.Buildpacks = buildpacks
	return nil
}

// readSource reads one buildpackage and lists its buildpacks into out, each
// with the platforms the buildpackage has it for: an index is read
// platform by platform (each has its own layers).
func readSource(ctx context.Context, reg registry.Access, image string, out *[]v1alpha1.StoreBuildpack) error {
	ref, err := name.ParseReference(image)
	if err != nil { // Validate parsed it already
		return failure.Permanentf(registry.ReasonInvalidReference, "%v", err)
	}
	img, err := reg.ReadImage(ctx, ref, nil)
	if err != nil {
		return err
	}
	if len(img.Platforms) <= 1 {
		bps, err := cnb.Buildpackage(img.Ref.String(), img.Config, img.Manifest)
		for i := range bps {
			bps[i].Platforms = cnb.APIPlatforms(cnb.PlatformsOfV1(img.Platforms))
		}
		*out = bps
		return err
	}
	images := make([]cnb.PlatformBuildpacks, len(img.Platforms))
	for i, p := range img.Platforms {
		child, err := reg.ReadImage(ctx, img.Ref, &p)
		if err != nil {
			return err
		}
		bps, err := cnb.Buildpackage(img.Ref.String(), child.Config, child.Manifest)
		if err != nil {
			return fmt.Errorf("%s: %w", cnb.PlatformOf(p), err)
		}
		images[i] = cnb.PlatformBuildpacks{Platform: cnb.PlatformOf(p), Buildpacks: bps}
	}
	*out = cnb.IndexBuildpacks(images)
	return nil
}
