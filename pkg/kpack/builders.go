package kpack

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// maxAdditionalLabels is the maxProperties of additionalLabels in the
// Builder and ClusterBuilder CRDs.
const maxAdditionalLabels = 256

// maxSources is the maxItems of spec.sources in the Builder and
// ClusterBuilder CRDs.
const maxSources = 16

// use is an order entry whose buildpack kpack takes from a Buildpack or
// ClusterBuildpack: one that names the object, or whose id kpack finds in
// its status. The builder draws from the object: it is in spec.sources.
type use struct {
	field      string // the order entry
	id         string
	named      objectID   // the object the entry names; empty: kpack finds the id in bp
	bp         *buildpack // the object; nil: not in the input
	idInStatus bool       // the id came from the object's status
	// For an entry naming an object without a version: pinned says the
	// version kpack takes from the object (version) came from its status;
	// floats, when it could not, says why: buildsmith then takes the
	// highest version in the builder's store and sources.
	version string
	pinned  bool
	floats  string
	// source is the object as the builder names it; empty for an id found
	// in no object, in the order of a builder without a store.
	source v1alpha1.SourceRef
}

func (c *converter) convertBuilder(o *object) {
	clusterScoped := o.role == toClusterBuilder
	meta := metadata(o, clusterScoped)
	if meta.Name == "" {
		o.omit("metadata.name", "not converted: no name")
		return
	}
	spec := o.root.mapping("spec")
	common := v1alpha1.BuilderSpec{
		Tag:              spec.str("tag"),
		Stack:            v1alpha1.StackRef{Kind: "ClusterStack", Name: refName(spec, "stack", "ClusterStack")},
		AdditionalLabels: spec.stringMap("additionalLabels"),
	}
	storeName := refName(spec, "store", "ClusterStore")
	storeless := storeName == ""
	common.Lifecycle = c.lifecycle(o, spec)

	order, uses := c.order(o, spec, meta.Namespace, clusterScoped, storeless)
	common.Order = order
	if !o.omitted {
		// Without a store, as kpack allows, the builder draws from the
		// objects its order names alone (buildsmith's store is optional
		// then): no ClusterStore is made up that would widen a
		// namespace's Buildpack to the whole cluster.
		common.Sources = sourcesOf(storeName, uses)
		if n := len(common.Sources); n > maxSources { // the CRD's limit; Validate leaves it to the schema
			o.omit("spec.order", "not converted: it draws from %d Buildpacks and ClusterBuildpacks besides its store, more than buildsmith's %d further sources (spec.sources)", n, maxSources)
		}
		if storeless && len(common.Sources) == 0 {
			o.omit("spec.store", "not converted: it has no store, and its order draws from no Buildpack or ClusterBuildpack of the input; give it a store")
		}
	}
	if storeName != "" {
		common.Store = v1alpha1.StoreRef{Kind: "ClusterStore", Name: storeName}
	}
	if o.omitted {
		// The order's problems are reported; the rest of the builder is
		// checked on, so that all of its problems are.
		common.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "reported"}}}}
		common.Sources = nil
		if storeless {
			common.Store = v1alpha1.StoreRef{Kind: "ClusterStore", Name: "reported"}
		}
	}
	builder := newBuilder(meta, spec, clusterScoped, common)
	if err := validate(builder); err != nil {
		o.omit("", "not converted: not a valid %s: %v", builder.GetObjectKind().GroupVersionKind().Kind, err)
	}
	if len(common.AdditionalLabels) > maxAdditionalLabels { // the CRD's limit; Validate leaves it to the schema
		o.omit("spec.additionalLabels", "not converted: %d labels, more than buildsmith's %d", len(common.AdditionalLabels), maxAdditionalLabels)
	}
	if o.omitted {
		return
	}
	c.reportUses(o, storeName, uses)
	c.emit(o, builder)
}

// newBuilder is the ClusterBuilder or Builder of common, with the
// credentials spec names.
func newBuilder(meta metav1.ObjectMeta, spec *fields, clusterScoped bool, common v1alpha1.BuilderSpec) buildsmithObject {
	if clusterScoped {
		return &v1alpha1.ClusterBuilder{TypeMeta: typeMeta("ClusterBuilder"), ObjectMeta: meta,
			Spec: v1alpha1.ClusterBuilderSpec{BuilderSpec: common, ServiceAccountRef: serviceAccountRef(spec, "serviceAccountRef")}}
	}
	return &v1alpha1.Builder{TypeMeta: typeMeta("Builder"), ObjectMeta: meta,
		Spec: v1alpha1.NamespacedBuilderSpec{BuilderSpec: common, ServiceAccountName: serviceAccountName(spec)}}
}

// refName takes a reference to a stack or store: a name (experimental
// kpack) or an object reference {kind, name} (kpack.io).
func refName(spec *fields, key, kind string) string {
	switch v := spec.m[key].(type) {
	case string:
		spec.take(key)
		return v
	case nil:
		spec.take(key)
		return ""
	}
	ref := spec.mapping(key)
	if k := ref.str("kind"); k != "" && k != kind {
		ref.obj.warn(ref.fieldPath("kind"), "%s: buildsmith's builders use a %s; the name is taken as one", k, kind)
	}
	return ref.str("name")
}

// serviceAccountName takes a Builder's service account: serviceAccountName,
// or serviceAccount (experimental kpack, kpack.io/v1alpha1, and still read
// by kpack.io/v1alpha2, where serviceAccountName wins).
func serviceAccountName(spec *fields) string {
	name, old := spec.str("serviceAccountName"), spec.str("serviceAccount")
	if name == "" {
		return old
	}
	if old != "" && old != name {
		spec.obj.warn("spec.serviceAccount", "%s: serviceAccountName %s wins, as in kpack; dropped", old, name)
	}
	return name
}

// kpackDefaultLifecycle is the ClusterLifecycle kpack's builders use when
// they name none (kpack sets it in every builder it stores).
const kpackDefaultLifecycle = "default-lifecycle"

// lifecycle takes a builder's spec.lifecycle. kpack's default lifecycle,
// unless the input converts it, becomes buildsmith's default: the image the
// lifecycle-image ConfigMap names.
func (c *converter) lifecycle(o *object, spec *fields) *v1alpha1.LifecycleRef {
	name := refName(spec, "lifecycle", "ClusterLifecycle")
	switch {
	case name == "" && c.lifecycles[kpackDefaultLifecycle]:
		// kpack builds a builder that names none with its default.
		return &v1alpha1.LifecycleRef{Kind: "ClusterLifecycle", Name: kpackDefaultLifecycle}
	case name == "":
		return nil
	case c.lifecycles[name]:
		return &v1alpha1.LifecycleRef{Kind: "ClusterLifecycle", Name: name}
	case name == kpackDefaultLifecycle:
		o.warn("spec.lifecycle", "kpack's default ClusterLifecycle %s is not in the input: dropped, so the builder uses buildsmith's default, "+
			"the image named in the ConfigMap lifecycle-image (key image) in the controller's namespace", name)
		return nil
	}
	o.warn("spec.lifecycle", "ClusterLifecycle %s is not in the input: convert it too, or the builder waits for it", name)
	return &v1alpha1.LifecycleRef{Kind: "ClusterLifecycle", Name: name}
}

// order converts a builder's order. Entries naming a Buildpack or
// ClusterBuildpack become id entries; the returned uses say which objects
// the builder draws from. When an entry cannot be converted, the builder is
// omitted.
func (c *converter) order(o *object, spec *fields, namespace string, clusterScoped, storeless bool) ([]v1alpha1.OrderEntry, []use) {
	var order []v1alpha1.OrderEntry
	var uses []use
	for _, entry := range spec.list("order") {
		var group []v1alpha1.BuildpackRef
		for _, ref := range entry.list("group") {
			r := v1alpha1.BuildpackRef{ID: ref.str("id"), Version: ref.str("version"), Optional: ref.boolean("optional")}
			kind, objectName := ref.str("kind"), ref.str("name")
			switch {
			case kind != "" || objectName != "":
				// On past an entry that fails, to report every one that does.
				if u, ok := c.byName(o, ref.path, objectID{kind, namespace, objectName}, clusterScoped, &r); ok {
					uses = append(uses, u)
				}
			case r.ID == "":
				o.omit(ref.path, "not converted: the entry has neither an id nor a Buildpack or ClusterBuildpack name")
			default:
				// kpack looks for an id in the namespace's Buildpacks, the
				// ClusterBuildpacks and the builder's store, if it has one,
				// all together; buildsmith in the builder's store and
				// sources, so every object of the input holding it becomes
				// a source. Without a store, one found nowhere is warned of.
				holders := c.holdersOf(namespace, clusterScoped, r)
				for _, bp := range holders {
					uses = append(uses, use{field: ref.path, id: r.ID, version: r.Version, bp: bp, source: bp.source})
				}
				if len(holders) == 0 && storeless {
					uses = append(uses, use{field: ref.path, id: r.ID})
				}
			}
			group = append(group, r)
		}
		order = append(order, v1alpha1.OrderEntry{Group: group})
	}
	if o.omitted {
		return nil, nil
	}
	return order, uses
}

// byName resolves an entry that names a Buildpack or ClusterBuildpack: it
// sets the entry's id if it has none, and its version, if it has none, to
// the one kpack takes from the object when the object's status tells; and
// returns the source the builder draws from for it. ok is false when the
// builder was omitted.
func (c *converter) byName(o *object, field string, id objectID, clusterScoped bool, r *v1alpha1.BuildpackRef) (u use, ok bool) {
	switch id.kind {
	case "ClusterBuildpack":
		id.namespace = ""
	case "Buildpack": // in the builder's namespace
	default:
		o.omit(field+".kind", "not converted: %q: expected Buildpack or ClusterBuildpack", id.kind)
		return use{}, false
	}
	if id.name == "" {
		o.omit(field+".name", "not converted: missing, with kind %s", id.kind)
		return use{}, false
	}
	if id.kind == "Buildpack" && clusterScoped {
		o.omit(field, "not converted: it names Buildpack %s, and a ClusterBuilder may not draw from a Buildpack, which belongs to one namespace; "+
			"make it a Builder in that namespace, or put the buildpackage into a ClusterStore (a ClusterBuildpack becomes one)", id.name)
		return use{}, false
	}
	bp := c.buildpacks[id]
	idInStatus := false
	if r.ID == "" {
		var why string
		switch {
		case bp == nil:
			why = fmt.Sprintf("%s is not in the input", id.path())
		case len(bp.roots) == 0:
			why = fmt.Sprintf("the status of %s lists no buildpacks", id.path())
		case len(bp.roots) > 1:
			why = fmt.Sprintf("the status of %s lists several root buildpacks (%s)", id.path(), strings.Join(bp.roots, ", "))
		}
		if why != "" {
			o.omit(field, "not converted: the entry has no id and %s, so its buildpack cannot be known offline; give the entry an id, or add the %s with its status (kubectl get -o yaml) to the input", why, id.kind)
			return use{}, false
		}
		r.ID, idInStatus = bp.roots[0], true
	}
	u = use{field: field, id: r.ID, named: id, bp: bp, idInStatus: idInStatus}
	// kpack takes the buildpack from the object alone; buildsmith from the
	// builder's store and all its sources, the highest version when the
	// entry has none: the version kpack would take is pinned.
	if r.Version == "" {
		r.Version, u.floats = kpackVersion(bp, id, r.ID)
		u.pinned = r.Version != ""
	} else if bp != nil && len(bp.listed) > 0 && !slices.Contains(bp.versionsOf(r.ID), r.Version) {
		listed := strings.Join(bp.versionsOf(r.ID), ", ")
		if listed == "" {
			listed = "none of " + r.ID
		}
		o.warn(field, "version %s of %s is not one the status of %s lists (%s): kpack would not find it there; buildsmith takes it from "+
			"whichever of spec.store and spec.sources holds it, and the builder stalls (BuildpackNotFound) if none does", r.Version, r.ID, id.path(), listed)
	}
	u.version = r.Version
	switch {
	case bp != nil:
		u.source = bp.source
	case id.kind == "Buildpack":
		u.source = v1alpha1.SourceRef{Kind: "Buildpack", Name: id.name}
	default:
		u.source = v1alpha1.SourceRef{Kind: "ClusterStore", Name: c.clusterStoreName(id.name)}
	}
	return u, true
}

// objectPath names the object a use draws from.
func (u *use) objectPath() string {
	if u.named != (objectID{}) {
		return u.named.path()
	}
	return u.bp.from.path()
}

// sourcesOf lists the sources of a builder's uses, each once, in the order
// of first use, without its store.
func sourcesOf(storeName string, uses []use) []v1alpha1.SourceRef {
	var sources []v1alpha1.SourceRef
	for _, u := range uses {
		s := u.source
		if s == (v1alpha1.SourceRef{}) || s.Kind == "ClusterStore" && s.Name == storeName || slices.Contains(sources, s) {
			continue
		}
		sources = append(sources, s)
	}
	return sources
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// mapAt returns m[key] if it is a mapping, else nil.
func mapAt(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}
