package cnb

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// LabelBuildpackageMetadata describes a package's own module (the one
// `pack buildpack package` was given) as buildpack.toml does.
const LabelBuildpackageMetadata = "io.buildpacks.buildpackage.metadata"

// Bounds on the licenses a label may give one module: real buildpacks
// declare one or two, of a few dozen bytes.
const (
	MaxModuleLicenses    = 16
	maxLicenseFieldBytes = 1024
)

// moduleLicenses is the part of a module's description (buildpack.toml's
// [buildpack], as pack copies it into labels) that names its licenses.
type moduleLicenses struct {
	ID       string                      `json:"id"`
	Version  string                      `json:"version"`
	Licenses []v1alpha1.BuildpackLicense `json:"licenses"`
}

// addLicenses gives the modules of p the licenses the image's labels
// declare for them. The labels are pack's: a buildpackage's metadata names
// its own module's licenses, a builder's metadata those of every module it
// holds. They are the only place licenses are found without reading the
// layers (where buildpack.toml comes after the buildpack's binaries).
// Licenses are optional metadata: a label that does not parse, or a
// module's licenses past the bounds, leaves those licenses unasserted and
// the package as it is, never failing a store over them.
func addLicenses(config *v1.ConfigFile, p *Package) {
	labels := config.Config.Labels
	buildpacks, extensions := byIDVersion(p.Buildpacks), byIDVersion(p.Extensions)
	var own moduleLicenses
	if decodeLabel(labels[LabelBuildpackageMetadata], &own) {
		setLicenses(buildpacks, own)
		setLicenses(extensions, own)
	}
	var builder struct {
		Buildpacks []moduleLicenses `json:"buildpacks"`
		Extensions []moduleLicenses `json:"extensions"`
	}
	if decodeLabel(labels[LabelBuilderMetadata], &builder) {
		for _, m := range builder.Buildpacks {
			setLicenses(buildpacks, m)
		}
		for _, m := range builder.Extensions {
			setLicenses(extensions, m)
		}
	}
}

// byIDVersion indexes modules by id@version: a label may describe many
// modules (up to maxLabelSize of them), each looked up once.
func byIDVersion(modules []v1alpha1.StoreBuildpack) map[string]*v1alpha1.StoreBuildpack {
	index := make(map[string]*v1alpha1.StoreBuildpack, len(modules))
	for i := range modules {
		index[modules[i].ID+"@"+modules[i].Version] = &modules[i]
	}
	return index
}

// decodeLabel decodes raw into v, reporting whether it could: not when
// absent, larger than maxLabelSize or not of the shape.
func decodeLabel(raw string, v any) bool {
	return raw != "" && len(raw) <= maxLabelSize && decodeStrict(raw, v) == nil
}

// setLicenses gives the module of modules that m describes, if any, m's
// licenses when they are within the bounds.
func setLicenses(modules map[string]*v1alpha1.StoreBuildpack, m moduleLicenses) {
	if len(m.Licenses) == 0 || len(m.Licenses) > MaxModuleLicenses {
		return
	}
	for _, l := range m.Licenses {
		if len(l.Type) > maxLicenseFieldBytes || len(l.URI) > maxLicenseFieldBytes {
			return
		}
	}
	if module, ok := modules[m.ID+"@"+m.Version]; ok {
		module.Licenses = m.Licenses
	}
}
