// Package packconfig converts a pack builder configuration (the
// builder.toml of `pack builder create --config`) to buildsmith's
// manifests, offline: TOML in, YAML and warnings out, no cluster and no
// registry.
//
// What becomes what:
//
//	[[buildpacks]], [[extensions]] (uri or image)   → the sources of a ClusterStore (images only)
//	[stack] id, [build] image, [[run.images]]        → a ClusterStack
//	  (or [stack] build-image, run-image, run-image-mirrors)
//	[lifecycle] version = "X.Y.Z"                    → a ClusterLifecycle of buildpacksio/lifecycle:X.Y.Z
//	description, [[order]], [[order-extensions]],   → a ClusterBuilder, or a Builder in a namespace
//	  [system], [[build.env]], [[targets]] os/arch/variant
//
// pack's `[lifecycle] version` makes pack download that release of the
// lifecycle (the release archive on the lifecycle's GitHub releases); the
// same release is the image buildpacksio/lifecycle:X.Y.Z (Docker Hub),
// which pack itself runs for builders it does not trust. buildsmith takes a
// lifecycle from an image, so the version becomes a ClusterLifecycle of
// that image, named lifecycle-X.Y.Z.
//
// The builder's tag (where it is pushed, the IMAGE of `pack builder create
// IMAGE`) is not in builder.toml: Options gives it, and the objects' names.
//
// Everything of the input that the output does not carry as it was is a
// Warning, one line each; an object that cannot be written (no image among
// the buildpacks, no build or run image, no stack id, no order) is left out
// with an Omitted warning saying why. A file that is not TOML, arrays and
// tables nested more than 64 deep, or a value of the wrong type (which
// pack refuses too), is an error.
package packconfig

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/kpack"
)

// Limits of buildsmith's CRDs that Validate leaves to the schema.
const (
	maxTargets = 16
	// maxDistros and maxDistroVersions: of a target.
	maxDistros        = 16
	maxDistroVersions = 16
	maxEnv            = 128
	maxEnvName        = 256
	maxMirrors        = 32
	// maxAdditionalRunImages: run images after the first.
	maxAdditionalRunImages = 8
	maxExtensions          = 128
	maxSystem              = 32
)

// Options are what a builder.toml does not say.
type Options struct {
	// Tag is where the builder image is pushed (required).
	Tag string
	// Name names the objects. Empty: the last part of Tag's repository.
	// The cluster-scoped objects of a namespaced Builder are named
	// <namespace>-<name>, as ClusterStores and ClusterStacks are shared
	// by all namespaces. The ClusterLifecycle is named after its version.
	Name string
	// Namespace, when set, makes a Builder in it instead of a
	// ClusterBuilder.
	Namespace string
	// ServiceAccount pushes the builder: a ServiceAccount name for a
	// Builder, NAMESPACE/NAME for a ClusterBuilder. Empty: a Builder's
	// default ServiceAccount; a ClusterBuilder pushes anonymously.
	ServiceAccount string
	// StackID is the ClusterStack's id when builder.toml has no stack id
	// (pack allows none since RFC 0096). Empty: a ClusterStack without
	// one, whose id is its images'.
	StackID string
	// Source names the input in warnings and errors. Empty: "builder.toml".
	Source string
	// IsLocalPath says whether a path exists relative to the builder.toml:
	// pack reads a naked buildpack uri as a path when it does. nil: none
	// does.
	IsLocalPath func(path string) bool
	// Flatten are the values of pack builder create's --flatten, each a
	// group of buildpacks put in one layer ("id@version,id@version"):
	// pack takes them from its command line, not from builder.toml.
	Flatten []string
}

// Warning is something of the builder.toml that the output does not carry
// as it was. Its String is "<source>: <field>: <message>", on one line, as
// the kpack converter's warnings are.
type Warning struct {
	Source string
	// Field is a path in the file, e.g. buildpacks[3].uri, run.images[1].
	Field   string
	Message string
	// Omitted says an object could not be written: the output lacks it.
	Omitted bool
}

func (w Warning) String() string {
	s := w.Source
	if w.Field != "" {
		s += ": " + w.Field
	}
	return s + ": " + kpack.OneLine(w.Message)
}

// Convert reads a builder.toml and returns the buildsmith manifests (YAML
// documents, in the order ClusterStore, ClusterStack, ClusterLifecycle,
// then the builder) and what was not carried. Every object written passes
// Validate. The error is for input that is not TOML, values of the wrong
// type, and options that do not name valid objects.
func Convert(in io.Reader, opts Options) (out []byte, warnings []Warning, err error) {
	if opts.Source == "" {
		opts.Source = "builder.toml"
	}
	names, err := objectNames(opts)
	if err != nil {
		return nil, nil, err
	}
	flatten, err := flattenOf(opts.Flatten)
	if err != nil {
		return nil, nil, err
	}
	text, err := io.ReadAll(in)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: reading the input: %w", opts.Source, err)
	}
	// Before the parser, which recurses once per level of nesting.
	if err := checkNesting(text, maxNesting); err != nil {
		return nil, nil, fmt.Errorf("%s: not a builder.toml: %v", opts.Source, err)
	}
	raw := map[string]any{}
	if _, err := toml.NewDecoder(bytes.NewReader(text)).Decode(&raw); err != nil {
		return nil, nil, fmt.Errorf("%s: not a builder.toml: %s", opts.Source, oneLine(err.Error()))
	}
	c := &converter{opts: opts, names: names, flatten: flatten}
	c.root = &table{c: c, m: raw}
	objects := c.convert()
	if len(c.errs) > 0 {
		return nil, nil, fmt.Errorf("%s: %s", opts.Source, strings.Join(c.errs, "; "))
	}
	if out, err = write(objects); err != nil {
		return nil, nil, err
	}
	return out, c.warnings, nil
}

// names are the objects' names.
type names struct {
	store, stack, builder string
}

func objectNames(opts Options) (names, error) {
	if opts.Tag == "" {
		return names{}, fmt.Errorf("no tag: give the image the builder is pushed to")
	}
	tag, err := name.NewTag(opts.Tag)
	if err != nil {
		return names{}, fmt.Errorf("tag %q: %v", opts.Tag, err)
	}
	base := opts.Name
	if base == "" {
		repo := tag.RepositoryStr()
		base = dnsName(repo[strings.LastIndex(repo, "/")+1:])
		if base == "" {
			return names{}, fmt.Errorf("no name can be made of tag %q: give one", opts.Tag)
		}
	} else if msgs := validation.IsDNS1123Subdomain(base); len(msgs) > 0 {
		return names{}, fmt.Errorf("name %q: %s", base, strings.Join(msgs, "; "))
	}
	n := names{store: base, stack: base, builder: base}
	if opts.Namespace != "" {
		if msgs := validation.IsDNS1123Label(opts.Namespace); len(msgs) > 0 {
			return names{}, fmt.Errorf("namespace %q: %s", opts.Namespace, strings.Join(msgs, "; "))
		}
		n.store = opts.Namespace + "-" + base
		n.stack = n.store
		if msgs := validation.IsDNS1123Subdomain(n.store); len(msgs) > 0 {
			return names{}, fmt.Errorf("name %q of the ClusterStore and ClusterStack: %s", n.store, strings.Join(msgs, "; "))
		}
	}
	if sa := opts.ServiceAccount; sa != "" {
		namespace, saName, qualified := strings.Cut(sa, "/")
		switch {
		case opts.Namespace != "" && qualified:
			return names{}, fmt.Errorf("service account %q: a Builder's is a name in its namespace", sa)
		case opts.Namespace == "" && (!qualified || namespace == "" || saName == ""):
			return names{}, fmt.Errorf("service account %q: a ClusterBuilder's is NAMESPACE/NAME", sa)
		}
	}
	return n, nil
}

// dnsName makes s a valid object name: lower case, every character but
// letters, digits, '.' and '-' replaced by '-', starting and ending with a
// letter or digit, and at most 253 characters.
func dnsName(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	out := strings.Trim(b.String(), "-.")
	if len(out) > validation.DNS1123SubdomainMaxLength {
		out = strings.TrimRight(out[:validation.DNS1123SubdomainMaxLength], "-.")
	}
	return out
}

type converter struct {
	opts     Options
	names    names
	root     *table
	warnings []Warning
	errs     []string
	// flatten is what Options.Flatten asks for; nil: nothing.
	flatten *v1alpha1.Flatten
}

func (c *converter) warn(field, format string, args ...any) {
	c.warnings = append(c.warnings, Warning{Source: c.opts.Source, Field: field, Message: oneLine(fmt.Sprintf(format, args...))})
}

// omit warns that an object is not in the output.
func (c *converter) omit(field, format string, args ...any) {
	c.warn(field, format, args...)
	c.warnings[len(c.warnings)-1].Omitted = true
}

func (c *converter) typeError(field, want string, found any) {
	c.errs = append(c.errs, fmt.Sprintf("%s: expected %s, found %s (pack refuses the file too)", field, want, describe(found)))
}

// oneLine keeps a warning on its line: the values in it are quoted, but
// the errors of Validate may span lines.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r", ""), "\n", "; ")
}

// object is one of the four kinds the converter writes.
type object interface {
	GetObjectKind() schema.ObjectKind
	GetName() string
	Validate(context.Context) *apis.FieldError
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: kind}
}

// convert takes the file apart in the order of pack's schema and returns
// the objects that can be written.
func (c *converter) convert() []object {
	// In the order of pack's schema, so that the warnings are too.
	root := c.root
	description := root.str("description")
	buildpacks := c.modules(root, "buildpacks")
	extensions := c.modules(root, "extensions")
	store := c.store(buildpacks, extensions)
	order, orderPaths := c.order(root, "order", "buildpack")
	orderExtensions, orderExtensionPaths := c.order(root, "order-extensions", "extension")
	system := c.system(root.table("system"))
	c.inferVersions(order, orderPaths, buildpacks)
	c.inferVersions(orderExtensions, orderExtensionPaths, extensions)
	c.unchecked(buildpacks, order, system)
	c.unchecked(extensions, orderExtensions, nil)
	stackTable, buildTable, runTable := root.table("stack"), root.table("build"), root.table("run")
	stack := c.stack(stackTable, buildTable, runTable)
	env := c.env(buildTable.tables("env"))
	lifecycle := c.lifecycle(root)
	targets := c.targets(root.tables("targets"))

	var objects []object
	if store != nil {
		objects = append(objects, store)
	}
	if stack != nil {
		objects = append(objects, stack)
	}
	if lifecycle != nil {
		objects = append(objects, lifecycle)
	}
	spec := v1alpha1.BuilderSpec{
		Tag:             c.opts.Tag,
		Stack:           v1alpha1.StackRef{Kind: "ClusterStack", Name: c.names.stack},
		Store:           v1alpha1.StoreRef{Kind: "ClusterStore", Name: c.names.store},
		Order:           order,
		OrderExtensions: orderExtensions,
		System:          system,
		Env:             env,
		Targets:         targets,
		Description:     description,
		Flatten:         c.flatten,
	}
	if root.has("flatten") {
		root.take("flatten")
		c.warn("flatten", "pack has no flatten key in builder.toml (it refuses a file with one): give its groups as pack's --flatten instead; dropped")
	}
	if lifecycle != nil {
		spec.Lifecycle = &v1alpha1.LifecycleRef{Kind: "ClusterLifecycle", Name: lifecycle.Name}
	}
	if builder := c.builder(spec); builder != nil {
		objects = append(objects, builder)
	}
	root.leftovers()
	return c.validate(objects)
}

// validate leaves out, with a warning, an object buildsmith would refuse.
func (c *converter) validate(objects []object) []object {
	var valid []object
	for _, obj := range objects {
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		if err := obj.Validate(context.Background()); err != nil {
			c.omit("", "%s %s not written: buildsmith would refuse it: %v", kind, obj.GetName(), err)
			continue
		}
		valid = append(valid, obj)
	}
	return valid
}

// write renders the objects as YAML documents separated by "---".
func write(objects []object) ([]byte, error) {
	var out []byte
	for _, obj := range objects {
		text, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("writing %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
		if len(out) > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, text...)
	}
	return out, nil
}

// flattenOf reads pack's --flatten values as pack does: each a group of
// id@version entries joined by commas, both parts given. What the API
// would refuse (more groups or entries than it takes, a buildpack in two
// groups) is an error here rather than a builder left out.
func flattenOf(values []string) (*v1alpha1.Flatten, error) {
	if len(values) == 0 {
		return nil, nil
	}
	if len(values) > maxFlattenGroups {
		return nil, fmt.Errorf("--flatten: %d groups, more than buildsmith's %d", len(values), maxFlattenGroups)
	}
	f := &v1alpha1.Flatten{}
	in := map[string]string{} // id@version → the value that named it
	for _, value := range values {
		var group v1alpha1.FlattenGroup
		entries := strings.Split(value, ",")
		if len(entries) > maxFlattenEntries {
			return nil, fmt.Errorf("--flatten %.64q…: %d buildpacks, more than buildsmith's %d a group", value, len(entries), maxFlattenEntries)
		}
		for _, entry := range entries {
			id, version, ok := strings.Cut(strings.TrimSpace(entry), "@")
			id, version = strings.TrimSpace(id), strings.TrimSpace(version)
			name := id + "@" + version
			switch {
			case !ok || id == "" || version == "" || strings.Contains(version, "@"):
				return nil, fmt.Errorf("--flatten %q: %q is not <buildpack-id>@<buildpack-version>", value, entry)
			case len(name) > maxFlattenName:
				return nil, fmt.Errorf("--flatten: %.64q… is longer than buildsmith's %d characters", name, maxFlattenName)
			case in[name] != "":
				return nil, fmt.Errorf("--flatten %q: %s is in --flatten %q already", value, name, in[name])
			}
			in[name] = value
			group.Buildpacks = append(group.Buildpacks, name)
		}
		f.Groups = append(f.Groups, group)
	}
	return f, nil
}

// The API's bounds on spec.flatten.groups.
const (
	maxFlattenGroups  = 64
	maxFlattenEntries = 256
	maxFlattenName    = 512
)
