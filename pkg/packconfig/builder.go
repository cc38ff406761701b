package packconfig

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
)

// env reads [[build.env]].
func (c *converter) env(tables []*table) []v1alpha1.BuildEnv {
	var env []v1alpha1.BuildEnv
	var vars []cnb.EnvVar
	for _, t := range tables {
		e := v1alpha1.BuildEnv{Name: t.str("name"), Value: t.str("value"), Suffix: t.str("suffix"), Delim: t.str("delim")}
		v := cnb.EnvVar{Name: e.Name, Value: e.Value, Suffix: e.Suffix, Delim: e.Delim}
		switch err := cnb.ValidateEnv(append(slices.Clone(vars), v)); {
		case err != nil:
			c.warn(t.path, "%v; dropped", err)
		case len(e.Name) > maxEnvName:
			c.warn(t.path, "a name of %d characters, more than buildsmith's %d; dropped", len(e.Name), maxEnvName)
		case len(env) == maxEnv:
			c.warn(t.path, "more than buildsmith's %d variables; dropped", maxEnv)
		default:
			env = append(env, e)
			vars = append(vars, v)
		}
	}
	return env
}

// targets reads [[targets]]: the platforms to build the builder for, and
// the distributions each is for.
func (c *converter) targets(tables []*table) []v1alpha1.Target {
	var targets []v1alpha1.Target
	var platforms []v1alpha1.Platform
	for _, t := range tables {
		target := v1alpha1.Target{Platform: v1alpha1.Platform{OS: t.str("os"), Arch: t.str("arch"), Variant: t.str("variant")}}
		for _, d := range t.tables("distributions") {
			distro := v1alpha1.TargetDistribution{Name: d.str("name"), Versions: d.strs("versions")}
			switch {
			case distro.Name == "":
				c.warn(d.path, "no name; dropped")
			case len(distro.Versions) > maxDistroVersions:
				c.warn(d.at("versions"), "more than buildsmith's %d versions; dropped", maxDistroVersions)
			case len(target.Distributions) == maxDistros:
				c.warn(d.path, "more than buildsmith's %d distributions of a target; dropped", maxDistros)
			default:
				target.Distributions = append(target.Distributions, distro)
			}
		}
		if t.has("specs") {
			t.take("specs")
			c.warn(t.at("specs"), "a builder's targets are os, arch, variant and distributions: features, annotations, labels, flattening and paths are not carried; dropped")
		}
		switch p := target.Platform; {
		case p.OS == "" || p.Arch == "":
			c.warn(t.path, "a target needs both os and arch; dropped")
		case slices.Contains(platforms, p):
			c.warn(t.path, "the same platform as an earlier target; dropped")
		case len(targets) == maxTargets:
			c.warn(t.path, "more than buildsmith's %d targets; dropped", maxTargets)
		default:
			targets = append(targets, target)
			platforms = append(platforms, p)
		}
	}
	return targets
}

// builder makes the ClusterBuilder, or the Builder in Options.Namespace;
// nil when it cannot be written.
func (c *converter) builder(spec v1alpha1.BuilderSpec) object {
	kind := "ClusterBuilder"
	if c.opts.Namespace != "" {
		kind = "Builder"
	}
	if len(spec.Order) == 0 {
		c.omit("order", "no group: %s %s not written (a builder needs an order)", kind, c.names.builder)
		return nil
	}
	if c.opts.Namespace != "" {
		return &v1alpha1.Builder{
			TypeMeta:   typeMeta(kind),
			ObjectMeta: metav1.ObjectMeta{Name: c.names.builder, Namespace: c.opts.Namespace},
			Spec:       v1alpha1.NamespacedBuilderSpec{BuilderSpec: spec, ServiceAccountName: c.opts.ServiceAccount},
		}
	}
	b := &v1alpha1.ClusterBuilder{
		TypeMeta:   typeMeta(kind),
		ObjectMeta: metav1.ObjectMeta{Name: c.names.builder},
		Spec:       v1alpha1.ClusterBuilderSpec{BuilderSpec: spec},
	}
	if namespace, saName, ok := strings.Cut(c.opts.ServiceAccount, "/"); ok {
		b.Spec.ServiceAccountRef = &v1alpha1.ServiceAccountRef{Name: saName, Namespace: namespace}
	}
	return b
}
