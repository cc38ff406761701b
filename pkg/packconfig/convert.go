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
// with an Omitted warning saying why. A file that is not TOML, or a value
// of the wrong type (which pack refuses too), is an error.
package packconfig

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
)

// LifecycleRepository is the repository of the lifecycle images, one tag
// per lifecycle release: what a builder.toml's [lifecycle] version becomes.
const LifecycleRepository = "buildpacksio/lifecycle"

// Limits of buildsmith's CRDs that Validate leaves to the schema.
const (
	maxTargets    = 16
	maxEnv        = 128
	maxEnvName    = 256
	maxMirrors    = 32
	maxExtensions = 128
	maxSystem     = 32
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
	// (pack allows none since RFC 0096; a ClusterStack needs one).
	StackID string
	// Source names the input in warnings and errors. Empty: "builder.toml".
	Source string
	// IsLocalPath says whether a path exists relative to the builder.toml:
	// pack reads a naked buildpack uri as a path when it does. nil: none
	// does.
	IsLocalPath func(path string) bool
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
	return s + ": " + w.Message
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
	text, err := io.ReadAll(in)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: reading the input: %w", opts.Source, err)
	}
	raw := map[string]any{}
	if _, err := toml.NewDecoder(bytes.NewReader(text)).Decode(&raw); err != nil {
		return nil, nil, fmt.Errorf("%s: not a builder.toml: %s", opts.Source, oneLine(err.Error()))
	}
	c := &converter{opts: opts, names: names}
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

// module is a [[buildpacks]] or [[extensions]] entry.
type module struct {
	path        string
	id, version string
	image       string // "" when it names no image
}

func (m module) String() string {
	switch {
	case m.id != "" && m.version != "":
		return m.id + "@" + m.version
	case m.id != "":
		return m.id
	}
	return "version " + m.version
}

// modules reads [[buildpacks]] or [[extensions]].
func (c *converter) modules(root *table, key string) []module {
	var out []module
	for _, t := range root.tables(key) {
		m := module{path: t.path, id: t.str("id"), version: t.str("version")}
		uri, image := t.str("uri"), t.str("image")
		switch {
		case image != "":
			if uri != "" {
				c.warn(t.at("uri"), "%q: the entry names an image too, which is taken; dropped", uri)
			}
			if _, err := name.ParseReference(image); err != nil {
				c.warn(t.at("image"), "%q is not an image reference (%v); dropped", image, err)
			} else {
				m.image = image
			}
		case uri != "":
			var why string
			if m.image, why = locate(uri, c.opts.IsLocalPath); why != "" {
				c.warn(t.at("uri"), "%s", why)
			}
		default:
			c.warn(t.path, "neither uri nor image: no buildpackage to take; dropped")
		}
		// pack reads a module's metadata from its buildpack.toml, not from here.
		for _, k := range []string{"name", "description", "homepage", "keywords", "licenses"} {
			if t.has(k) {
				t.take(k)
				c.warn(t.at(k), "a buildpack's metadata comes from its buildpackage; dropped")
			}
		}
		out = append(out, m)
	}
	return out
}

// order reads [[order]] or [[order-extensions]]; paths are where each
// entry of each group is in the file.
func (c *converter) order(root *table, key, what string) (order []v1alpha1.OrderEntry, paths [][]string) {
	for _, entry := range root.tables(key) {
		var group []v1alpha1.BuildpackRef
		var groupPaths []string
		first := map[string]string{}
		for _, ref := range entry.tables("group") {
			r := v1alpha1.BuildpackRef{ID: ref.str("id"), Version: ref.str("version"), Optional: ref.boolean("optional")}
			if r.ID == "" {
				c.warn(ref.path, "no id: an order names each %s by id; dropped", what)
				continue
			}
			if at, dup := first[r.ID]; dup {
				c.warn(ref.path, "%s is in the group already (%s): an id may be once in a group; dropped", r.ID, at)
				continue
			}
			first[r.ID] = ref.path
			group = append(group, r)
			groupPaths = append(groupPaths, ref.path)
		}
		if len(group) == 0 {
			c.warn(entry.path, "no %s in the group; dropped", what)
			continue
		}
		order = append(order, v1alpha1.OrderEntry{Group: group})
		paths = append(paths, groupPaths)
	}
	if key == "order-extensions" && len(order) > maxExtensions {
		c.warn(fmt.Sprintf("%s[%d]", key, maxExtensions), "%d groups, more than buildsmith's %d; these dropped", len(order), maxExtensions)
		order, paths = order[:maxExtensions], paths[:maxExtensions]
	}
	return order, paths
}

// inferVersions gives an order entry without a version the version its id
// has among modules when they name one, as pack does; buildsmith would
// take the store's highest, which is what an entry gets when they name
// several (pack refuses that).
func (c *converter) inferVersions(order []v1alpha1.OrderEntry, paths [][]string, modules []module) {
	versions := map[string][]string{}
	for _, m := range modules {
		if m.id != "" && m.version != "" && m.image != "" && !slices.Contains(versions[m.id], m.version) {
			versions[m.id] = append(versions[m.id], m.version)
		}
	}
	for i := range order {
		for j := range order[i].Group {
			r := &order[i].Group[j]
			switch v := versions[r.ID]; {
			case r.Version != "" || len(v) == 0:
			case len(v) == 1:
				r.Version = v[0]
			default:
				c.warn(paths[i][j], "no version, and the buildpackages are of several versions of %s (%s), which pack refuses: the builder takes the highest the ClusterStore has",
					r.ID, strings.Join(v, ", "))
			}
		}
	}
}

// unchecked warns about modules whose id or version pack checks against
// the buildpackage and nothing here does: a ClusterStore takes whatever
// its images hold, and only an order entry naming the buildpack makes the
// builder fail when the store lacks it.
func (c *converter) unchecked(modules []module, order []v1alpha1.OrderEntry, system *v1alpha1.SystemBuildpacks) {
	var refs []v1alpha1.BuildpackRef
	for _, entry := range order {
		refs = append(refs, entry.Group...)
	}
	if system != nil {
		for _, r := range slices.Concat(system.Pre, system.Post) {
			refs = append(refs, v1alpha1.BuildpackRef{ID: r.ID, Version: r.Version})
		}
	}
	for _, m := range modules {
		if m.image == "" || (m.id == "" && m.version == "") {
			continue
		}
		if slices.ContainsFunc(refs, func(r v1alpha1.BuildpackRef) bool {
			return (m.id == "" || r.ID == m.id) && (m.version == "" || r.Version == m.version)
		}) {
			continue
		}
		c.warn(m.path, "pack checks that %s holds %s; a ClusterStore takes whatever its images hold, and as no order entry names %s, nothing checks it; dropped", m.image, m, m)
	}
}

// system reads [system]: [system.pre] and [system.post], each with a list
// of buildpacks.
func (c *converter) system(t *table) *v1alpha1.SystemBuildpacks {
	var system v1alpha1.SystemBuildpacks
	first := map[string]string{}
	for _, part := range []struct {
		key  string
		refs *[]v1alpha1.SystemBuildpackRef
	}{{"pre", &system.Pre}, {"post", &system.Post}} {
		for _, ref := range t.table(part.key).tables("buildpacks") {
			r := v1alpha1.SystemBuildpackRef{ID: ref.str("id"), Version: ref.str("version")}
			optional := ref.boolean("optional")
			switch at, dup := first[r.ID]; {
			case r.ID == "":
				c.warn(ref.path, "no id: system buildpacks are named by id; dropped")
			case dup:
				c.warn(ref.path, "%s is a system buildpack already (%s), and the lifecycle would run it twice; dropped", r.ID, at)
			case optional:
				// Required, it would fail every group whose app it does not detect.
				c.warn(ref.path, "optional: buildsmith's system buildpacks are all required (a required one that does not pass detection fails every group); dropped")
			case len(*part.refs) == maxSystem:
				c.warn(ref.path, "more than buildsmith's %d system buildpacks in %s; dropped", maxSystem, part.key)
			default:
				first[r.ID] = ref.path
				*part.refs = append(*part.refs, r)
			}
		}
	}
	if len(system.Pre)+len(system.Post) == 0 {
		return nil
	}
	return &system
}

// runImage is a run image and its mirrors, and where the file names it.
type runImage struct {
	path    string
	image   string
	mirrors []string
}

// stack makes the ClusterStack from [stack], [build] and [run] (pack's
// rules: [build] image and the first [[run.images]] win over [stack]'s
// build-image, run-image and run-image-mirrors, which must then agree).
// nil when it cannot be written.
func (c *converter) stack(stack, build, run *table) *v1alpha1.ClusterStack {
	id := stack.str("id")
	stackBuild, stackRun := stack.str("build-image"), stack.str("run-image")
	stackMirrors := stack.strs("run-image-mirrors")
	buildImage := build.str("image")
	var runs []runImage
	for _, t := range run.tables("images") {
		r := runImage{path: t.path, image: t.str("image"), mirrors: t.strs("mirrors")}
		if r.image == "" {
			c.warn(t.path, "no image; dropped")
			continue
		}
		runs = append(runs, r)
	}

	switch {
	case buildImage == "":
		buildImage = stackBuild
	case stackBuild != "" && stackBuild != buildImage:
		c.warn("stack.build-image", "%q differs from build.image %q (pack refuses that); build.image taken; dropped", stackBuild, buildImage)
	}
	var run0 *runImage
	switch {
	case len(runs) > 0:
		run0 = &runs[0]
		if stackRun != "" && stackRun != run0.image {
			c.warn("stack.run-image", "%q differs from %s.image %q (pack refuses that); %s taken; dropped", stackRun, run0.path, run0.image, run0.path)
		} else if len(stackMirrors) > 0 && !slices.Equal(stackMirrors, run0.mirrors) {
			c.warn("stack.run-image-mirrors", "%q differ from %s.mirrors %q, which pack takes; dropped", stackMirrors, run0.path, run0.mirrors)
		}
	case stackRun != "":
		run0 = &runImage{path: "stack.run-image", image: stackRun, mirrors: stackMirrors}
	}
	for _, r := range runs[min(1, len(runs)):] {
		c.warn(r.path, "%q: a ClusterStack has one run image (with mirrors), and a builder's run.toml names its stack's only: "+
			"apps cannot be built for this run image with this builder; dropped", r.image)
	}
	if id == "" {
		id = c.opts.StackID
	} else if c.opts.StackID != "" && c.opts.StackID != id {
		c.warn("stack.id", "%q is taken; the stack id %q given is for a builder.toml without one", id, c.opts.StackID)
	}

	stackName := c.names.stack
	switch {
	case buildImage == "":
		c.omit("build.image", "missing, and no stack.build-image: ClusterStack %s not written (pack refuses the file too)", stackName)
		return nil
	case run0 == nil:
		c.omit("run.images", "missing, and no stack.run-image: ClusterStack %s not written (pack refuses the file too)", stackName)
		return nil
	case id == "":
		c.omit("stack.id", "missing (pack allows a stack without an id since RFC 0096; a ClusterStack needs one): ClusterStack %s not written; "+
			"give the stack id: the io.buildpacks.stack.id label of the build image, or for images without one an id the buildpacks' [[stacks]] accept", stackName)
		return nil
	}
	runSource := v1alpha1.RunImageSource{Image: run0.image}
	mirrorsField := run0.path + ".mirrors"
	if run0.path == "stack.run-image" {
		mirrorsField = "stack.run-image-mirrors"
	}
	for i, m := range run0.mirrors {
		if _, err := name.ParseReference(m); err != nil {
			c.warn(fmt.Sprintf("%s[%d]", mirrorsField, i), "%q is not an image reference (%v); dropped", m, err)
			continue
		}
		if len(runSource.Mirrors) == maxMirrors {
			c.warn(fmt.Sprintf("%s[%d]", mirrorsField, i), "%q: more than buildsmith's %d mirrors; dropped", m, maxMirrors)
			continue
		}
		runSource.Mirrors = append(runSource.Mirrors, m)
	}
	return &v1alpha1.ClusterStack{
		TypeMeta:   typeMeta("ClusterStack"),
		ObjectMeta: metav1.ObjectMeta{Name: stackName},
		Spec: v1alpha1.ClusterStackSpec{
			ID:         id,
			BuildImage: v1alpha1.ImageSource{Image: buildImage},
			RunImage:   runSource,
		},
	}
}

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

// lifecycleRelease matches the lifecycle's release archives, as pack
// downloads them for a [lifecycle] version:
// https://github.com/buildpacks/lifecycle/releases/download/vX.Y.Z/lifecycle-vX.Y.Z+linux.x86-64.tgz
var lifecycleRelease = regexp.MustCompile(`^https://github\.com/buildpacks/lifecycle/releases/download/v([^/]+)/lifecycle-v([^/+]+)\+[a-z]+\.[a-z0-9-]+\.tgz$`)

// lifecycle makes the ClusterLifecycle of [lifecycle]; nil when the
// builder takes buildsmith's default.
func (c *converter) lifecycle(root *table) *v1alpha1.ClusterLifecycle {
	present := root.has("lifecycle")
	t := root.table("lifecycle")
	version, uri := t.str("version"), t.str("uri")
	const fallback = "so the builder gets buildsmith's default lifecycle, the image the lifecycle-image ConfigMap in the controller's namespace names"
	switch {
	case version != "":
		if uri != "" {
			c.warn("lifecycle.uri", "%q: pack refuses both a version and a uri; the version is taken; dropped", uri)
		}
		v, err := semver.NewVersion(version)
		if err != nil {
			c.warn("lifecycle.version", "%q is not a semantic version (%v): dropped, %s", version, err, fallback)
			return nil
		}
		if v.Metadata() != "" {
			// Lifecycle releases have none; a tag cannot hold it.
			c.warn("lifecycle.version", "%q: build metadata +%s dropped: an image tag cannot hold a +", version, v.Metadata())
			if stripped, err := v.SetMetadata(""); err == nil {
				v = &stripped
			}
		}
		version = v.String()
	case uri != "":
		m := lifecycleRelease.FindStringSubmatch(uri)
		if m == nil || m[1] != m[2] {
			c.warn("lifecycle.uri", "%q: a lifecycle archive; buildsmith takes the lifecycle from an image (%s:VERSION, or one made of that archive): dropped, %s",
				uri, LifecycleRepository, fallback)
			return nil
		}
		v, err := semver.NewVersion(m[1])
		if err != nil {
			c.warn("lifecycle.uri", "%q: the version of the release, %q, is not a semantic version (%v): dropped, %s", uri, m[1], err, fallback)
			return nil
		}
		version = v.String()
		c.warn("lifecycle.uri", "%q is the archive of lifecycle release %s: taken as that release's image, %s:%s, which the builder takes the lifecycle from instead",
			uri, version, LifecycleRepository, version)
	case present:
		c.warn("lifecycle", "neither version nor uri: pack puts in the lifecycle its own release defaults to; %s", strings.TrimPrefix(fallback, "so "))
		return nil
	default:
		c.warn("lifecycle", "none: pack puts in the lifecycle its own release defaults to; %s", strings.TrimPrefix(fallback, "so "))
		return nil
	}
	return &v1alpha1.ClusterLifecycle{
		TypeMeta:   typeMeta("ClusterLifecycle"),
		ObjectMeta: metav1.ObjectMeta{Name: dnsName("lifecycle-" + version)},
		Spec:       v1alpha1.ClusterLifecycleSpec{ImageSource: v1alpha1.ImageSource{Image: LifecycleRepository + ":" + version}},
	}
}

// targets reads [[targets]]: the platforms to build the builder for.
func (c *converter) targets(tables []*table) []v1alpha1.Platform {
	var targets []v1alpha1.Platform
	for _, t := range tables {
		p := v1alpha1.Platform{OS: t.str("os"), Arch: t.str("arch"), Variant: t.str("variant")}
		var distros []string
		for _, d := range t.tables("distributions") {
			distro := d.str("name")
			if versions := d.strs("versions"); len(versions) > 0 {
				distro += " " + strings.Join(versions, ", ")
			}
			distros = append(distros, distro)
		}
		if len(distros) > 0 {
			c.warn(t.at("distributions"), "%s: a builder's targets are os, arch and variant: each platform's builder is for the distro of the stack's build image "+
				"(its io.buildpacks.base.distro.* labels, which the ClusterStack reads and checks against the run image's), not checked against these; dropped",
				strings.Join(distros, "; "))
		}
		if t.has("specs") {
			t.take("specs")
			c.warn(t.at("specs"), "a builder's targets are os, arch and variant: features, annotations, labels, flattening and paths are not carried; dropped")
		}
		switch {
		case p.OS == "" || p.Arch == "":
			c.warn(t.path, "a target needs both os and arch; dropped")
		case slices.Contains(targets, p):
			c.warn(t.path, "the same platform as an earlier target; dropped")
		case len(targets) == maxTargets:
			c.warn(t.path, "more than buildsmith's %d targets; dropped", maxTargets)
		default:
			targets = append(targets, p)
		}
	}
	return targets
}

// store makes the ClusterStore of the modules' images; nil when none is an
// image.
func (c *converter) store(buildpacks, extensions []module) *v1alpha1.ClusterStore {
	store := &v1alpha1.ClusterStore{TypeMeta: typeMeta("ClusterStore"), ObjectMeta: metav1.ObjectMeta{Name: c.names.store}}
	first := map[string]string{}
	for _, m := range slices.Concat(buildpacks, extensions) {
		if m.image == "" {
			continue
		}
		key := m.image
		if ref, err := name.ParseReference(m.image); err == nil {
			key = ref.Name() // "busybox" is index.docker.io/library/busybox:latest
		}
		if at, dup := first[key]; dup {
			c.warn(m.path, "the same image as %s: the ClusterStore lists it once", at)
			continue
		}
		first[key] = m.path
		store.Spec.Sources = append(store.Spec.Sources, v1alpha1.ImageSource{Image: m.image})
	}
	if len(store.Spec.Sources) == 0 {
		c.omit("buildpacks", "no buildpack or extension is an image: ClusterStore %s not written; make it of your buildpackages' images", store.Name)
		return nil
	}
	return store
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
