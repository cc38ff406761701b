package builder

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// The ConfigMap, in the controller's namespace, that names the lifecycle
// image, and its key.
const (
	LifecycleConfigMap = "lifecycle-image"
	LifecycleImageKey  = "image"
)

// Reasons of lifecycle errors.
const (
	ReasonLifecycleNotConfigured = "LifecycleNotConfigured"
	ReasonInvalidLifecycleImage  = "InvalidLifecycleImage"
)

// LifecycleSource is the lifecycle image all builders use: named by the
// lifecycle-image ConfigMap, resolved to a digest at most once per refresh
// interval and per platform, and shared by every builder. Builders then
// know the lifecycle's digest without asking the registry, which keeps an
// unchanged builder's reconcile at one request. Only the digest is shared:
// each builder reads the image with its own credentials (the registry
// client caches reads by digest per credentials), so no builder ever uses a
// layer read with another's secrets.
//
// Its version and APIs come from the image's io.buildpacks.lifecycle.version
// and io.buildpacks.lifecycle.apis labels, which the lifecycle's own image
// build sets: reading them costs nothing, while /cnb/lifecycle.toml would
// mean downloading the lifecycle layer.
type LifecycleSource struct {
	Registry *registry.Client
	// Refresh is how long a resolved tag is trusted (the resync interval).
	Refresh time.Duration

	mu       sync.Mutex
	ref      string
	resolved map[string]*resolvedLifecycle // by platform
}

type resolvedLifecycle struct {
	digest name.Digest // what the reference resolved to
	at     time.Time
}

// Update records the ConfigMap's content (nil when it is absent).
func (s *LifecycleSource) Update(cm *corev1.ConfigMap) {
	ref := ""
	if cm != nil {
		ref = cm.Data[LifecycleImageKey]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref != s.ref {
		s.ref, s.resolved = ref, nil
	}
}

// PlatformLifecycle is the lifecycle of one platform, the digest of its
// image, and every platform the configured image has.
type PlatformLifecycle struct {
	cnb.Lifecycle
	Digest    string
	Platforms []v1.Platform
}

// Get returns the lifecycle for platform (any, for the zero platform), read
// with kc.
func (s *LifecycleSource) Get(ctx context.Context, platform v1.Platform, kc authn.Keychain) (PlatformLifecycle, error) {
	s.mu.Lock()
	ref := s.ref
	key := platform.OS + "/" + platform.Architecture + "/" + platform.Variant
	cached := s.resolved[key]
	s.mu.Unlock()
	if ref == "" {
		return PlatformLifecycle{}, failure.Waitingf(ReasonLifecycleNotConfigured,
			"the ConfigMap %s (key %q) in the controller's namespace names no lifecycle image", LifecycleConfigMap, LifecycleImageKey)
	}
	var read name.Reference = cached.digestOr(nil)
	if cached == nil || time.Since(cached.at) >= s.Refresh {
		parsed, err := name.ParseReference(ref)
		if err != nil {
			return PlatformLifecycle{}, failure.Permanentf(ReasonInvalidLifecycleImage, "lifecycle image %q: %v", ref, err)
		}
		read = parsed
	}
	var want *v1.Platform // the zero platform: any the image has
	if platform.OS != "" || platform.Architecture != "" {
		want = &platform
	}
	img, err := s.Registry.ReadImage(ctx, read, want, kc)
	if err != nil {
		return PlatformLifecycle{}, err
	}
	lifecycle, err := lifecycleOf(img)
	if err != nil {
		return PlatformLifecycle{}, err
	}
	if _, byTag := read.(name.Tag); byTag || cached == nil {
		s.mu.Lock()
		if s.ref == ref {
			if s.resolved == nil {
				s.resolved = map[string]*resolvedLifecycle{}
			}
			// The digest the reference resolved to (an index's, for an
			// index), so that later reads still see all its platforms.
			s.resolved[key] = &resolvedLifecycle{digest: img.Ref, at: time.Now()}
		}
		s.mu.Unlock()
	}
	// The image for the platform, by digest: an index's child when the
	// reference names an index.
	digest := img.Ref.Context().Digest(img.Digest.String())
	return PlatformLifecycle{Lifecycle: lifecycle, Digest: digest.String(), Platforms: img.Platforms}, nil
}

func (r *resolvedLifecycle) digestOr(fallback name.Reference) name.Reference {
	if r == nil {
		return fallback
	}
	return r.digest
}

// lifecycleOf reads the lifecycle from its image: the last layer and the
// labels.
func lifecycleOf(img *registry.Image) (cnb.Lifecycle, error) {
	labels := img.Config.Config.Labels
	version := labels[cnb.LabelLifecycleVer]
	rawAPIs, ok := labels[cnb.LabelLifecycleAPIs]
	if version == "" || !ok {
		return cnb.Lifecycle{}, failure.Permanentf(ReasonInvalidLifecycleImage,
			"%s lacks the labels %s and %s: not a lifecycle image", img.Ref, cnb.LabelLifecycleVer, cnb.LabelLifecycleAPIs)
	}
	var apis v1alpha1.LifecycleAPIs
	if err := json.Unmarshal([]byte(rawAPIs), &apis); err != nil || len(apis.Buildpack.Supported) == 0 || len(apis.Platform.Supported) == 0 {
		return cnb.Lifecycle{}, failure.Permanentf(ReasonInvalidLifecycleImage,
			"%s: label %s does not list supported buildpack and platform APIs", img.Ref, cnb.LabelLifecycleAPIs)
	}
	layers, err := img.Image.Layers()
	if err != nil || len(layers) == 0 {
		return cnb.Lifecycle{}, failure.Permanentf(ReasonInvalidLifecycleImage, "%s has no layers", img.Ref)
	}
	return cnb.Lifecycle{Layer: layers[len(layers)-1], Version: version, APIs: apis}, nil
}
