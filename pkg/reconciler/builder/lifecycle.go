package builder

import (
	"context"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/system"

	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterlifecycle"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// The ConfigMap, in the controller's namespace, that names the lifecycle
// image, and its key.
const (
	LifecycleConfigMap = "lifecycle-image"
	LifecycleImageKey  = "image"
)

// ReasonLifecycleNotConfigured: the lifecycle-image ConfigMap names no
// image.
const ReasonLifecycleNotConfigured = "LifecycleNotConfigured"

// LifecycleSource is the lifecycle image of the builders that name no
// ClusterLifecycle: named by the lifecycle-image ConfigMap, resolved to a
// digest at most once per refresh interval, and shared by every builder.
// Builders then know the lifecycle's digest without asking the registry,
// which keeps an unchanged builder's reconcile at one request. Only the
// digest is shared: each builder reads the image with its own credentials
// (the registry client caches reads by digest per credentials), so no
// builder ever uses a layer read with another's secrets. What the image
// says of the lifecycle, cnb.ReadLifecycle reads.
type LifecycleSource struct {
	// Refresh is how long a resolved tag is trusted (the resync interval).
	Refresh time.Duration

	mu       sync.Mutex
	ref      string
	resolved *resolvedLifecycle // what ref named when last read
}

type resolvedLifecycle struct {
	digest name.Digest // an index's, for an index
	at     time.Time
}

// NewLifecycleSource returns the lifecycle source of the builder
// controllers; a resolved tag is trusted for the resync interval (at least
// a minute).
func NewLifecycleSource(resync time.Duration) *LifecycleSource {
	return &LifecycleSource{Refresh: max(resync, time.Minute)}
}

// Watch follows the lifecycle-image ConfigMap through cmw and calls
// onChange after each change of it (a controller reconciles all its
// builders). Each controller watches for itself; the source is shared.
func (s *LifecycleSource) Watch(ctx context.Context, cmw configmap.Watcher, onChange func()) {
	logger := logging.FromContext(ctx)
	observe := func(cm *corev1.ConfigMap) {
		if s.Update(cm) {
			logger.Infof("lifecycle image: %q", cm.Data[LifecycleImageKey])
		}
		onChange()
	}
	if dw, ok := cmw.(configmap.DefaultingWatcher); ok {
		// A missing ConfigMap is a waiting condition on builders, not a
		// reason for the controller not to start.
		dw.WatchWithDefault(corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: LifecycleConfigMap, Namespace: system.Namespace()}}, observe)
	} else {
		cmw.Watch(LifecycleConfigMap, observe)
	}
}

// Update records the ConfigMap's content (nil when it is absent) and
// reports whether it named another image.
func (s *LifecycleSource) Update(cm *corev1.ConfigMap) bool {
	ref := ""
	if cm != nil {
		ref = cm.Data[LifecycleImageKey]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ref == s.ref {
		return false
	}
	s.ref, s.resolved = ref, nil
	return true
}

// Reference is the lifecycle image the ConfigMap names ("" for none).
func (s *LifecycleSource) Reference() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ref
}

// Image returns the configured lifecycle image, read through reg.
func (s *LifecycleSource) Image(ctx context.Context, reg registry.Access) (clusterlifecycle.Image, error) {
	s.mu.Lock()
	ref, resolved := s.ref, s.resolved
	s.mu.Unlock()
	if ref == "" {
		return clusterlifecycle.Image{}, failure.Waitingf(ReasonLifecycleNotConfigured,
			"the ConfigMap %s (key %q) in the controller's namespace names no lifecycle image", LifecycleConfigMap, LifecycleImageKey)
	}
	fresh := resolved != nil && time.Since(resolved.at) < s.Refresh
	var read name.Reference
	if fresh {
		read = resolved.digest
	} else {
		parsed, err := name.ParseReference(ref)
		if err != nil {
			return clusterlifecycle.Image{}, failure.Permanentf(cnb.ReasonInvalidLifecycleImage, "lifecycle image %q: %v", ref, err)
		}
		read = parsed
	}
	img, err := reg.ReadImage(ctx, read, nil)
	if err != nil {
		return clusterlifecycle.Image{}, err
	}
	if !fresh {
		s.mu.Lock()
		if s.ref == ref {
			s.resolved = &resolvedLifecycle{digest: img.Ref, at: time.Now()}
		}
		s.mu.Unlock()
	}
	return clusterlifecycle.Image{Ref: img.Ref, Platforms: cnb.DistinctPlatforms(img.Platforms)}, nil
}
