package kpack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// buildpack is a Buildpack or ClusterBuildpack of the input: a buildpackage
// image that kpack builders may name in their order.
type buildpack struct {
	from    *object
	image   string
	account *v1alpha1.ServiceAccountRef // reads the image; nil: anonymously
	// listed are the buildpacks its status lists; roots are the ids of
	// those no other's order names: what kpack uses for an entry that names
	// the object without an id.
	listed []v1alpha1.BuildpackRef
	roots  []string
	// usedIn are the ClusterStores its image was put in, for the report.
	usedIn []string
}

func (c *converter) readBuildpack(o *object) {
	clusterScoped := o.kind == "ClusterBuildpack"
	status := mapAt(o.doc.obj, "status") // metadata drops it
	meta := metadata(o, clusterScoped)
	if _, dup := c.buildpacks[o.objectID]; dup {
		o.omit("", "not converted: the input has %s twice; the first is used", o.path())
		return
	}
	spec := o.root.mapping("spec")
	bp := &buildpack{from: o, image: spec.str("image")}
	if clusterScoped {
		bp.account = serviceAccountRef(spec, "serviceAccountRef")
	} else if account := spec.str("serviceAccountName"); account != "" {
		if meta.Namespace != "" {
			bp.account = &v1alpha1.ServiceAccountRef{Name: account, Namespace: meta.Namespace}
		} else {
			o.warn("spec.serviceAccountName", "the object has no namespace, so the ServiceAccount cannot be named from a ClusterStore; dropped")
		}
	}
	bp.listed, bp.roots = statusBuildpacks(status)
	// A bad image would make the whole store it goes into invalid.
	if bp.image == "" {
		o.warn("spec.image", "missing: builders that name this object get no buildpackage from it")
	} else if _, err := name.ParseReference(bp.image); err != nil {
		o.warn("spec.image", "%v: builders that name this object get no buildpackage from it", err)
		bp.image = ""
	}
	c.buildpacks[o.objectID] = bp
	c.buildpackList = append(c.buildpackList, bp)
	o.root.leftovers()
}

// statusBuildpacks reads the buildpacks a Buildpack's status lists, and the
// ids of the roots among them.
func statusBuildpacks(status map[string]any) (listed []v1alpha1.BuildpackRef, roots []string) {
	named := map[string]bool{} // ids in some buildpack's order
	for _, item := range asList(status["buildpacks"]) {
		bp := asMap(item)
		id, _ := bp["id"].(string)
		version, _ := bp["version"].(string)
		if id == "" {
			continue
		}
		listed = append(listed, v1alpha1.BuildpackRef{ID: id, Version: version})
		for _, entry := range asList(bp["order"]) {
			for _, ref := range asList(asMap(entry)["group"]) {
				if id, _ := asMap(ref)["id"].(string); id != "" {
					named[id] = true
				}
			}
		}
	}
	for _, bp := range listed {
		if !named[bp.ID] && !slices.Contains(roots, bp.ID) {
			roots = append(roots, bp.ID)
		}
	}
	return listed, roots
}

// maxAdditionalLabels is the maxProperties of additionalLabels in the
// Builder and ClusterBuilder CRDs.
const maxAdditionalLabels = 256

// fold is an order entry whose buildpack kpack takes from a Buildpack or
// ClusterBuildpack: that object's image goes into the builder's store.
type fold struct {
	field      string // the order entry
	id         string
	bp         *buildpack // nil: not in the input (or without an image)
	named      objectID   // the object the entry names; empty: kpack finds the id in bp
	idInStatus bool       // the id came from the object's status
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
	generated := storeName == ""
	if generated {
		// ClusterStores are cluster-wide: two namespaces may have a Builder
		// of the same name.
		storeName = meta.Name + "-buildpacks"
		if !clusterScoped && meta.Namespace != "" {
			storeName = meta.Namespace + "-" + storeName
		}
	}
	common.Store = v1alpha1.StoreRef{Kind: "ClusterStore", Name: storeName}
	common.Lifecycle = c.lifecycle(o, spec)

	var builder buildsmithObject
	if clusterScoped {
		builder = &v1alpha1.ClusterBuilder{TypeMeta: typeMeta("ClusterBuilder"), ObjectMeta: meta,
			Spec: v1alpha1.ClusterBuilderSpec{ServiceAccountRef: serviceAccountRef(spec, "serviceAccountRef")}}
	} else {
		builder = &v1alpha1.Builder{TypeMeta: typeMeta("Builder"), ObjectMeta: meta,
			Spec: v1alpha1.NamespacedBuilderSpec{ServiceAccountName: serviceAccountName(spec)}}
	}
	order, folds := c.order(o, spec, meta.Namespace, generated)
	common.Order = order
	if o.omitted {
		// The order's problems are reported; the rest of the builder is
		// checked on, so that all of its problems are.
		common.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "reported"}}}}
	}
	switch b := builder.(type) {
	case *v1alpha1.ClusterBuilder:
		b.Spec.BuilderSpec = common
	case *v1alpha1.Builder:
		b.Spec.BuilderSpec = common
	}
	// Checked before any store changes for it.
	if err := validate(builder); err != nil {
		o.omit("", "not converted: not a valid %s: %v", builder.GetObjectKind().GroupVersionKind().Kind, err)
	}
	if len(common.AdditionalLabels) > maxAdditionalLabels { // the CRD's limit; Validate leaves it to the schema
		o.omit("spec.additionalLabels", "not converted: %d labels, more than buildsmith's %d", len(common.AdditionalLabels), maxAdditionalLabels)
	}
	if o.omitted {
		return
	}
	if generated {
		if !c.generateStore(o, storeName, folds) {
			return
		}
	} else {
		c.fold(o, storeName, c.stores[storeName], folds)
	}
	c.emit(o, builder)
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
// ClusterBuildpack become id entries; the returned folds say which images
// the builder's store needs. When an entry cannot be converted, the builder
// is omitted.
func (c *converter) order(o *object, spec *fields, namespace string, generated bool) ([]v1alpha1.OrderEntry, []fold) {
	var order []v1alpha1.OrderEntry
	var folds []fold
	for _, entry := range spec.list("order") {
		var group []v1alpha1.BuildpackRef
		for _, ref := range entry.list("group") {
			r := v1alpha1.BuildpackRef{ID: ref.str("id"), Version: ref.str("version"), Optional: ref.boolean("optional")}
			kind, objectName := ref.str("kind"), ref.str("name")
			switch {
			case kind != "" || objectName != "":
				// On past an entry that fails, to report every one that does.
				if f, ok := c.byName(o, ref.path, objectID{kind, namespace, objectName}, &r); ok {
					folds = append(folds, f)
				}
			case r.ID == "":
				o.omit(ref.path, "not converted: the entry has neither an id nor a Buildpack or ClusterBuildpack name")
			default:
				// kpack looks for an id in the namespace's Buildpacks, the
				// ClusterBuildpacks and the builder's store, if it has one;
				// buildsmith only in the store, so one found in the input
				// goes into it. Without a store, one not found is warned of.
				if bp := c.findByID(namespace, r); bp != nil || generated {
					folds = append(folds, fold{field: ref.path, id: r.ID, bp: bp})
				}
			}
			group = append(group, r)
		}
		order = append(order, v1alpha1.OrderEntry{Group: group})
	}
	if o.omitted {
		return nil, nil
	}
	return order, folds
}

// byName resolves an entry that names a Buildpack or ClusterBuildpack: it
// sets the entry's id if it has none, and returns what to fold into the
// store. ok is false when the builder was omitted.
func (c *converter) byName(o *object, field string, id objectID, r *v1alpha1.BuildpackRef) (f fold, ok bool) {
	switch id.kind {
	case "ClusterBuildpack":
		id.namespace = ""
	case "Buildpack": // in the builder's namespace
	default:
		o.omit(field+".kind", "not converted: %q: expected Buildpack or ClusterBuildpack", id.kind)
		return fold{}, false
	}
	if id.name == "" {
		o.omit(field+".name", "not converted: missing, with kind %s", id.kind)
		return fold{}, false
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
			return fold{}, false
		}
		r.ID, idInStatus = bp.roots[0], true
	}
	if bp != nil && bp.image == "" {
		bp = nil
	}
	return fold{field: field, id: r.ID, bp: bp, named: id, idInStatus: idInStatus}, true
}

// findByID returns the first Buildpack of the namespace, else the first
// ClusterBuildpack, whose status lists the buildpack: where kpack looks for
// it. nil when there is none.
func (c *converter) findByID(namespace string, r v1alpha1.BuildpackRef) *buildpack {
	for _, kind := range []string{"Buildpack", "ClusterBuildpack"} {
		for _, bp := range c.buildpackList {
			if bp.from.kind != kind || bp.image == "" || (kind == "Buildpack" && bp.from.namespace != namespace) {
				continue
			}
			if slices.ContainsFunc(bp.listed, func(l v1alpha1.BuildpackRef) bool {
				return l.ID == r.ID && (r.Version == "" || l.Version == r.Version)
			}) {
				return bp
			}
		}
	}
	return nil
}

// generateStore makes the ClusterStore of a builder that has none, from the
// images its order needs. false: the builder was omitted.
func (c *converter) generateStore(o *object, storeName string, folds []fold) bool {
	if _, taken := c.stores[storeName]; taken {
		o.omit("spec.store", "not converted: it has no store, and the name of the one it would get, %s, is taken", storeName)
		return false
	}
	if msgs := validation.IsDNS1123Subdomain(storeName); len(msgs) > 0 {
		o.omit("spec.store", "not converted: it has no store, and the one it would get cannot be named %s: %s", storeName, strings.Join(msgs, "; "))
		return false
	}
	store := &v1alpha1.ClusterStore{TypeMeta: typeMeta("ClusterStore")}
	store.Name = storeName
	for _, f := range folds {
		if f.bp == nil {
			continue
		}
		c.addSource(store, f.bp.image)
		if store.Spec.ServiceAccountRef == nil && f.bp.account != nil {
			store.Spec.ServiceAccountRef = f.bp.account
			if f.bp.from.kind == "Buildpack" {
				// A tenant's credentials on a cluster object.
				o.warn("spec.store", "the generated ClusterStore %s uses the ServiceAccount %s/%s of %s: a cluster object with "+
					"a namespace's credentials, which a controller run with --cluster-credential-namespaces refuses unless "+
					"that namespace is listed (ServiceAccountNotAllowed); creating it takes the right to create ClusterStores",
					storeName, f.bp.account.Namespace, f.bp.account.Name, f.bp.from.path())
			}
		}
	}
	if len(store.Spec.Sources) == 0 {
		o.omit("spec.store", "not converted: it has no store, and none of its buildpacks comes from a Buildpack or ClusterBuildpack of the input with a usable image; give it a store")
		return false
	}
	if err := validate(store); err != nil {
		o.omit("spec.store", "not converted: it has no store, and the one made for it is not valid: %v", err)
		return false
	}
	c.stores[storeName] = store
	c.outputs = append(c.outputs, &output{from: o, converted: store})
	o.warn("spec.store", "missing (buildsmith needs a store): generated ClusterStore %s", storeName)
	c.fold(o, storeName, store, folds)
	return true
}

// fold puts the images of folds into a store (nil: the store is not among
// the converted objects) and says so at each entry.
func (c *converter) fold(o *object, storeName string, store *v1alpha1.ClusterStore, folds []fold) {
	for _, f := range folds {
		var what string
		switch {
		case f.named != objectID{} && f.bp == nil:
			o.warn(f.field, "%s is not in the input, or has no image: replaced by buildpack id %s; add its buildpackage to ClusterStore %s", f.named.path(), f.id, storeName)
			continue
		case f.bp == nil:
			o.warn(f.field, "buildpack %s is in no Buildpack or ClusterBuildpack of the input, where kpack looks for it when a builder has no store; add its buildpackage to ClusterStore %s", f.id, storeName)
			continue
		case f.named != objectID{}:
			what = fmt.Sprintf("%s replaced by buildpack id %s", f.named.path(), f.id)
			if f.idInStatus {
				what += " (from its status)"
			}
		default:
			what = fmt.Sprintf("buildpack %s: kpack finds it in %s", f.id, f.bp.from.path())
		}
		usedIn := storeName
		if store == nil {
			o.warn(f.field, "%s; add its image %s to ClusterStore %s, which is not among the converted objects", what, f.bp.image, storeName)
			usedIn += " (by hand: not converted here)"
		} else {
			c.addSource(store, f.bp.image)
			o.warn(f.field, "%s; its image %s is a source of ClusterStore %s", what, f.bp.image, storeName)
		}
		if !slices.Contains(f.bp.usedIn, usedIn) {
			f.bp.usedIn = append(f.bp.usedIn, usedIn)
		}
		if store == nil {
			if f.bp.account != nil {
				o.warn(f.field, "%s reads its image with ServiceAccount %s/%s; ClusterStore %s is not among the converted objects: give it credentials for %s if it needs them",
					f.bp.from.path(), f.bp.account.Namespace, f.bp.account.Name, storeName, f.bp.image)
			}
			continue
		}
		if f.bp.account != nil && (store.Spec.ServiceAccountRef == nil || *store.Spec.ServiceAccountRef != *f.bp.account) {
			o.warn(f.field, "%s reads its image with ServiceAccount %s/%s; ClusterStore %s reads its sources %s: give it credentials for %s if it needs them",
				f.bp.from.path(), f.bp.account.Namespace, f.bp.account.Name, storeName, accountText(store.Spec.ServiceAccountRef), f.bp.image)
		}
	}
}

func accountText(ref *v1alpha1.ServiceAccountRef) string {
	if ref == nil {
		return "anonymously"
	}
	return "with ServiceAccount " + ref.Namespace + "/" + ref.Name
}

// reportBuildpacks says, on each Buildpack and ClusterBuildpack of the
// input, what became of it: they are not in the output themselves.
func (c *converter) reportBuildpacks() {
	for _, bp := range c.buildpackList {
		switch {
		case bp.image == "":
			bp.from.warn("", "consumed: without a usable image, it is in no ClusterStore")
			continue
		case len(bp.usedIn) == 0:
			bp.from.warn("", "consumed: no converted builder uses it, so its image %s is in no ClusterStore", bp.image)
			continue
		}
		bp.from.warn("", "consumed: its image %s is a source of ClusterStore %s", bp.image, strings.Join(bp.usedIn, ", "))
	}
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
