package cnb

import (
	"encoding/json"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// ReasonInvalidLifecycleImage: the image named as the lifecycle is not one.
const ReasonInvalidLifecycleImage = "InvalidLifecycleImage"

// ReadLifecycle reads the lifecycle of a lifecycle image (named image in
// messages) from its config and layers: the version and APIs from the
// io.buildpacks.lifecycle.version and io.buildpacks.lifecycle.apis labels,
// which the lifecycle's own image build sets, and /cnb/lifecycle/ from the
// last layer, reused as is. The labels cost nothing to read, where
// /cnb/lifecycle.toml would mean downloading the layer.
func ReadLifecycle(image string, config *v1.ConfigFile, layers []v1.Layer) (Lifecycle, error) {
	labels := config.Config.Labels
	version := labels[LabelLifecycleVer]
	rawAPIs, ok := labels[LabelLifecycleAPIs]
	if version == "" || !ok {
		return Lifecycle{}, failure.Permanentf(ReasonInvalidLifecycleImage,
			"%s lacks the labels %s and %s: not a lifecycle image", image, LabelLifecycleVer, LabelLifecycleAPIs)
	}
	var apis v1alpha1.LifecycleAPIs
	if err := json.Unmarshal([]byte(rawAPIs), &apis); err != nil || len(apis.Buildpack.Supported) == 0 || len(apis.Platform.Supported) == 0 {
		return Lifecycle{}, failure.Permanentf(ReasonInvalidLifecycleImage,
			"%s: label %s does not list supported buildpack and platform APIs", image, LabelLifecycleAPIs)
	}
	if len(layers) == 0 {
		return Lifecycle{}, failure.Permanentf(ReasonInvalidLifecycleImage, "%s has no layers", image)
	}
	return Lifecycle{Layer: layers[len(layers)-1], Version: version, APIs: apis}, nil
}
