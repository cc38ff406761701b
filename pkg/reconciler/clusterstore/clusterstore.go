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
	return r.Policy.Reconcile(ctx, store, func(ctx context.Context) error { return r.reconcile(ctx, store) })
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
	reg := r.Registry.As(keychain)
	chosen := reconciler.NewChosenTags(store.Status.ChosenTags)
	perSource := make([]cnb.Package, len(store.Spec.Sources))
	errs := make([]error, len(store.Spec.Sources))
	var g errgroup.Group
	g.SetLimit(parallelReads)
	for i, source := range store.Spec.Sources {
		g.Go(func() error {
			var src reconciler.Source
			if src, errs[i] = chosen.Choose(ctx, reg, fmt.Sprintf("spec.sources[%d]", i), source.Image, source.Policy); errs[i] == nil {
				perSource[i], errs[i] = ReadPackage(ctx, reg, src.Ref)
			}
			return nil
		})
	}
	_ = g.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	var buildpacks, extensions [][]v1alpha1.StoreBuildpack
	for _, p := range perSource {
		buildpacks, extensions = append(buildpacks, p.Buildpacks), append(extensions, p.Extensions)
	}
	mergedBuildpacks, err := cnb.MergeBuildpacks(buildpacks...)
	if err != nil {
		return err
	}
	mergedExtensions, err := cnb.MergeExtensions(extensions...)
	if err != nil {
		return err
	}
	if err := cnb.CheckStoreSize(mergedBuildpacks, mergedExtensions); err != nil {
		return err
	}
	store.Status.Buildpacks, store.Status.Extensions = mergedBuildpacks, mergedExtensions
	store.Status.ChosenTags = chosen.Status()
	return nil
}

// ReadPackage reads one buildpackage or extension package and lists its
// buildpacks and extensions, each with the platforms the package has it
// for: an index is read platform by platform (each has its own layers).
// Buildpacks read their image with it too.
func ReadPackage(ctx context.Context, reg registry.Access, ref name.Reference) (cnb.Package, error) {
	img, err := reg.ReadImage(ctx, ref, nil)
	if err != nil {
		return cnb.Package{}, err
	}
	if len(img.Platforms) <= 1 {
		pkg, err := cnb.ReadPackage(img.Ref.String(), img.Config, img.Manifest)
		platforms := cnb.APIPlatforms(cnb.PlatformsOfV1(img.Platforms))
		for _, modules := range [][]v1alpha1.StoreBuildpack{pkg.Buildpacks, pkg.Extensions} {
			for i := range modules {
				modules[i].Platforms = platforms
			}
		}
		return pkg, err
	}
	platforms := cnb.DistinctPlatforms(img.Platforms)
	if len(platforms) > cnb.MaxIndexPlatforms { // a tenant's Buildpack names the image
		return cnb.Package{}, failure.Permanentf(cnb.ReasonTooManyPlatforms, "%s is an index of %d platforms, more than the %d a buildpackage may have",
			ref, len(platforms), cnb.MaxIndexPlatforms)
	}
	buildpacks := make([]cnb.PlatformBuildpacks, len(platforms))
	extensions := make([]cnb.PlatformBuildpacks, len(platforms))
	for i, p := range platforms {
		child, err := reg.ReadImage(ctx, img.Ref, &p)
		if err != nil {
			return cnb.Package{}, err
		}
		pkg, err := cnb.ReadPackage(img.Ref.String(), child.Config, child.Manifest)
		if err != nil {
			return cnb.Package{}, fmt.Errorf("%s: %w", cnb.PlatformOf(p), err)
		}
		buildpacks[i] = cnb.PlatformBuildpacks{Platform: cnb.PlatformOf(p), Buildpacks: pkg.Buildpacks}
		extensions[i] = cnb.PlatformBuildpacks{Platform: cnb.PlatformOf(p), Buildpacks: pkg.Extensions}
	}
	return cnb.Package{Buildpacks: cnb.IndexBuildpacks(buildpacks), Extensions: cnb.IndexBuildpacks(extensions)}, nil
}
