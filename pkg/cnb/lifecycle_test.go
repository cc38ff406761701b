package cnb

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

func TestReadLifecycle(t *testing.T) {
	layer, err := random.Layer(64, "application/vnd.oci.image.layer.v1.tar+gzip")
	if err != nil {
		t.Fatal(err)
	}
	first, err := random.Layer(64, "application/vnd.oci.image.layer.v1.tar+gzip")
	if err != nil {
		t.Fatal(err)
	}
	const apis = `{"buildpack":{"deprecated":[],"supported":["0.10","0.11"]},"platform":{"deprecated":[],"supported":["0.13"]}}`
	for _, tc := range []struct {
		name   string
		labels map[string]string
		layers []v1.Layer
		reason string // "": read
	}{
		{name: "version, APIs and the last layer", labels: map[string]string{LabelLifecycleVer: "0.21.0", LabelLifecycleAPIs: apis},
			layers: []v1.Layer{first, layer}},
		{name: "no labels", layers: []v1.Layer{layer}, reason: ReasonInvalidLifecycleImage},
		{name: "no APIs label", labels: map[string]string{LabelLifecycleVer: "0.21.0"}, layers: []v1.Layer{layer},
			reason: ReasonInvalidLifecycleImage},
		{name: "APIs not JSON", labels: map[string]string{LabelLifecycleVer: "0.21.0", LabelLifecycleAPIs: "0.10"},
			layers: []v1.Layer{layer}, reason: ReasonInvalidLifecycleImage},
		{name: "no platform API", labels: map[string]string{LabelLifecycleVer: "0.21.0",
			LabelLifecycleAPIs: `{"buildpack":{"supported":["0.10"]},"platform":{"supported":[]}}`},
			layers: []v1.Layer{layer}, reason: ReasonInvalidLifecycleImage},
		{name: "no layers", labels: map[string]string{LabelLifecycleVer: "0.21.0", LabelLifecycleAPIs: apis},
			reason: ReasonInvalidLifecycleImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := &v1.ConfigFile{}
			config.Config.Labels = tc.labels
			got, err := ReadLifecycle("registry.example.com/lifecycle:0.21.0", config, tc.layers)
			if tc.reason != "" {
				if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != tc.reason {
					t.Fatalf("error = %v, want Permanent %s", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != "0.21.0" || got.Layer != layer || len(got.APIs.Buildpack.Supported) != 2 || got.APIs.Platform.Supported[0] != "0.13" {
				t.Errorf("ReadLifecycle = %+v", got)
			}
		})
	}
}
