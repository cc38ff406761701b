package cnb

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Labels and environment variables of stack images (CNB platform spec).
const (
	LabelStackID       = "io.buildpacks.stack.id"
	LabelStackMixins   = "io.buildpacks.stack.mixins"
	LabelDistroName    = "io.buildpacks.base.distro.name"
	LabelDistroVersion = "io.buildpacks.base.distro.version"
	// LabelBaseSBOM names, by diffID, the layer of a stack image holding
	// its SBOM (at /cnb/sbom/bom.<ext>.json, CNB RFC 0105).
	LabelBaseSBOM = "io.buildpacks.base.sbom"
	EnvUserID     = "CNB_USER_ID"
	EnvGroupID    = "CNB_GROUP_ID"
)

// Reasons of stack errors.
const (
	ReasonStackIDMismatch   = "StackIdMismatch"
	ReasonPlatformMismatch  = "PlatformMismatch"
	ReasonInvalidBuildImage = "InvalidBuildImage"
	ReasonInvalidRunImage   = "InvalidRunImage"
	ReasonMixinsMismatch    = "MixinsMismatch"
)

// Stack is what a build and run image pair says about itself.
type Stack struct {
	ID string
	// Mixins are the build image's mixins.
	Mixins          []string
	UserID, GroupID int
	OS, Arch        string
	Variant         string
	// DistroName and DistroVersion are empty when the images do not say.
	DistroName, DistroVersion string
}

// ReadStack checks that build and run image configs form the stack id and
// returns what they say. Without an id (a stack of RFC 0096), the stack's is
// the one its images carry, if they do. Every error is Permanent: the images
// or the spec must change.
func ReadStack(id string, build, run *v1.ConfigFile) (*Stack, error) {
	if id == "" {
		id = cmp.Or(build.Config.Labels[LabelStackID], run.Config.Labels[LabelStackID])
	}
	for _, image := range []struct {
		role   string
		config *v1.ConfigFile
		reason string
	}{{"build", build, ReasonInvalidBuildImage}, {"run", run, ReasonInvalidRunImage}} {
		if got, ok := image.config.Config.Labels[LabelStackID]; ok && got != id {
			return nil, failure.Permanentf(ReasonStackIDMismatch,
				"%s image has stack id %q (label %s), the stack says %q", image.role, got, LabelStackID, id)
		}
	}
	if build.OS != run.OS || build.Architecture != run.Architecture || build.Variant != run.Variant {
		return nil, failure.Permanentf(ReasonPlatformMismatch, "build image is %s, run image is %s",
			platform(build), platform(run))
	}
	buildDistro := distro(build)
	if runDistro := distro(run); buildDistro != runDistro {
		return nil, failure.Permanentf(ReasonPlatformMismatch, "build image is distro %q, run image is distro %q",
			buildDistro, runDistro)
	}

	uid, err := idFromEnv(build, EnvUserID)
	if err != nil {
		return nil, err
	}
	gid, err := idFromEnv(build, EnvGroupID)
	if err != nil {
		return nil, err
	}

	buildMixins, err := mixins(build, "build", ReasonInvalidBuildImage)
	if err != nil {
		return nil, err
	}
	runMixins, err := mixins(run, "run", ReasonInvalidRunImage)
	if err != nil {
		return nil, err
	}
	for _, m := range buildMixins {
		if !strings.Contains(m, ":") && !slices.Contains(runMixins, m) {
			return nil, failure.Permanentf(ReasonMixinsMismatch,
				"mixin %q of the build image is missing from the run image", m)
		}
	}

	s := &Stack{ID: id, Mixins: buildMixins, UserID: uid, GroupID: gid,
		OS: build.OS, Arch: build.Architecture, Variant: build.Variant}
	s.DistroName, s.DistroVersion, _ = strings.Cut(buildDistro, "@")
	return s, nil
}

func platform(c *v1.ConfigFile) string {
	p := c.OS + "/" + c.Architecture
	if c.Variant != "" {
		p += "/" + c.Variant
	}
	return p
}

// distro returns "name@version" from the distro labels, "" without them.
func distro(c *v1.ConfigFile) string {
	name := c.Config.Labels[LabelDistroName]
	if name == "" {
		return ""
	}
	return name + "@" + c.Config.Labels[LabelDistroVersion]
}

func idFromEnv(c *v1.ConfigFile, key string) (int, error) {
	for _, kv := range c.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k != key {
			continue
		}
		id, err := strconv.Atoi(v)
		if err != nil || id < 0 {
			return 0, failure.Permanentf(ReasonInvalidBuildImage, "build image sets %s=%q: not a user or group id", key, v)
		}
		if id == 0 {
			return 0, failure.Permanentf(ReasonInvalidBuildImage, "build image sets %s=0: the lifecycle refuses to build as root", key)
		}
		return id, nil
	}
	return 0, failure.Permanentf(ReasonInvalidBuildImage, "build image does not set %s", key)
}

// mixins reads the mixins label; "build:" mixins may not be on the run image
// and "run:" mixins may not be on the build image.
// MaxMixins bounds the mixins a stack image may list (real stacks list a
// few dozen packages at most).
const MaxMixins = 1000

// maxMixinsBytes bounds the mixins label as a whole, whatever their number.
const maxMixinsBytes = 64 << 10

func mixins(c *v1.ConfigFile, role, reason string) ([]string, error) {
	raw, ok := c.Config.Labels[LabelStackMixins]
	if !ok || raw == "" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		return nil, failure.Permanentf(reason, "%s image label %s is not a JSON list of strings", role, LabelStackMixins)
	}
	// Status lists them; the API server refuses objects over ~1.5 MiB.
	if len(list) > MaxMixins || len(raw) > maxMixinsBytes {
		return nil, failure.Permanentf(reason, "%s image label %s lists %d mixins in %d bytes, more than the %d mixins or %d KiB allowed",
			role, LabelStackMixins, len(list), len(raw), MaxMixins, maxMixinsBytes>>10)
	}
	wrong := "run:"
	if role == "run" {
		wrong = "build:"
	}
	for _, m := range list {
		if strings.HasPrefix(m, wrong) {
			return nil, failure.Permanentf(ReasonMixinsMismatch, "%s image lists mixin %q, which is for the other image", role, m)
		}
	}
	return list, nil
}

// BaseSBOMLayer is the diffID of the layer holding the SBOM of the image
// of config, as its io.buildpacks.base.sbom label names it, when that is a
// sha256 digest of one of the image's layers: anything else the image's
// author wrote there names no SBOM and is not repeated.
func BaseSBOMLayer(config *v1.ConfigFile) (string, bool) {
	if config == nil {
		return "", false
	}
	label := config.Config.Labels[LabelBaseSBOM]
	diffID, err := v1.NewHash(label)
	if err != nil || diffID.Algorithm != "sha256" {
		return "", false
	}
	if !slices.Contains(config.RootFS.DiffIDs, diffID) {
		return "", false
	}
	return diffID.String(), true
}
