package cnb

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
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
func addLicenses(storeImage string, config *v1.ConfigFile, p *Package) error {
	labels := config.Config.Labels
	buildpacks, extensions := byIDVersion(p.Buildpacks), byIDVersion(p.Extensions)
	if raw, ok := labels[LabelBuildpackageMetadata]; ok {
		var own moduleLicenses
		if err := decodeLabel(storeImage, LabelBuildpackageMetadata, raw, &own); err != nil {
			return err
		}
		for _, modules := range []map[string]*v1alpha1.StoreBuildpack{buildpacks, extensions} {
			if err := setLicenses(storeImage, LabelBuildpackageMetadata, modules, own); err != nil {
				return err
			}
		}
	}
	if raw, ok := labels[LabelBuilderMetadata]; ok {
		var builder struct {
			Buildpacks []moduleLicenses `json:"buildpacks"`
			Extensions []moduleLicenses `json:"extensions"`
		}
		if err := decodeLabel(storeImage, LabelBuilderMetadata, raw, &builder); err != nil {
			return err
		}
		for _, list := range []struct {
			described []moduleLicenses
			modules   map[string]*v1alpha1.StoreBuildpack
		}{{builder.Buildpacks, buildpacks}, {builder.Extensions, extensions}} {
			for _, m := range list.described {
				if err := setLicenses(storeImage, LabelBuilderMetadata, list.modules, m); err != nil {
					return err
				}
			}
		}
	}
	return nil
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

func decodeLabel(storeImage, label, raw string, v any) error {
	if len(raw) > maxLabelSize {
		return failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s is larger than %d bytes", storeImage, label, maxLabelSize)
	}
	if err := decodeStrict(raw, v); err != nil {
		return failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s: %v", storeImage, label, err)
	}
	return nil
}

// setLicenses sets m's licenses on the module of modules that is m, if
// any, after checking them against the bounds.
func setLicenses(storeImage, label string, modules map[string]*v1alpha1.StoreBuildpack, m moduleLicenses) error {
	if len(m.Licenses) == 0 {
		return nil
	}
	if len(m.Licenses) > MaxModuleLicenses {
		return failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s gives %s@%s %d licenses, more than %d",
			storeImage, label, m.ID, m.Version, len(m.Licenses), MaxModuleLicenses)
	}
	for _, l := range m.Licenses {
		if len(l.Type) > maxLicenseFieldBytes || len(l.URI) > maxLicenseFieldBytes {
			return failure.Permanentf(ReasonInvalidBuildpackage, "%s: label %s gives %s@%s a license longer than %d bytes",
				storeImage, label, m.ID, m.Version, maxLicenseFieldBytes)
		}
	}
	if module, ok := modules[m.ID+"@"+m.Version]; ok {
		module.Licenses = m.Licenses
	}
	return nil
}
