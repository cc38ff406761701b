// Package cnb is the Cloud Native Buildpacks knowledge of buildsmith, as
// pure functions over image configs and labels: what a stack's images say
// about it, which buildpacks a buildpackage holds, and (later) how a builder
// image is assembled. No registry or Kubernetes access happens here; errors
// are classified with package failure.
package cnb
