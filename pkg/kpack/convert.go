// Package kpack converts kpack's builder-side manifests to buildsmith's,
// offline: YAML in, YAML out, no cluster and no registry.
//
// What it converts (apiVersion: kind → buildsmith.dev/v1alpha1 kind):
//
//	experimental.kpack.pivotal.io/v1alpha1: Store → ClusterStore, Stack → ClusterStack,
//	    CustomBuilder → Builder, CustomClusterBuilder → ClusterBuilder
//	kpack.io/v1alpha1 and v1alpha2: ClusterStore, ClusterStack, Builder and
//	    ClusterBuilder → the same kinds
//	kpack.io: Buildpack and ClusterBuildpack → folded into the stores of the
//	    builders that use them (they are not in the output)
//
// Names, namespaces, labels and annotations are kept. Every other document
// (other kinds, other apiVersions) is passed through unchanged; those of
// kpack's groups with a warning, since they will not work without kpack.
// The input is a stream of YAML documents, or of JSON objects (one after
// another, as `jq '.items[]'` prints them); the items of a List (v1 List,
// or a typed one such as ClusterStoreList) are converted one by one, as
// separate documents. Every object of the input is read: what is not one
// is an error, never skipped.
//
// kpack's builders may refer to buildpacks by object (kind Buildpack or
// ClusterBuildpack and a name); buildsmith's builders take every buildpack
// from one ClusterStore, by id. Such an entry becomes an id entry, and the
// object's image a source of the builder's store: of its ClusterStore in the
// input, which every builder using that store then sees (as kpack's
// ClusterBuildpacks are seen by every builder), or, for a store not in the
// input, a warning saying what to add to it. The id is the entry's own,
// else that of the root buildpack in the object's status (present in the
// output of kubectl get -o yaml); when neither is there, the id cannot be
// known offline and the builder is left out of the output. A builder without
// a store (kpack allows it, buildsmith does not) gets one, generated and
// named after it: <name>-buildpacks for a ClusterBuilder, and
// <namespace>-<name>-buildpacks for a Builder, as ClusterStores are
// cluster-wide. Its sources are the images of the Buildpacks and
// ClusterBuildpacks its order names, or in whose status kpack would have
// found the ids it lists.
//
// An object that cannot be converted, or whose result buildsmith's CRDs or
// Validate would refuse, is left out with a warning saying why (Omitted).
//
// Nothing is dropped without a warning, except what describes kpack's
// state rather than the user's intent: status, the metadata the API server
// sets (uid, resourceVersion, generation, creationTimestamp, managedFields,
// selfLink) and the kubectl.kubernetes.io/last-applied-configuration
// annotation. Comments in converted documents are lost; passed-through
// documents are copied as they were.
package kpack

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// Warning is something of the input that the output does not carry as it
// was. Its String is "<kind>/<namespace>/<name>: <field>: <message>",
// without "<namespace>/" for cluster-scoped objects and without "<field>: "
// for a whole object.
type Warning struct {
	// Kind, Namespace and Name name the input object; Namespace is empty
	// for cluster-scoped objects.
	Kind, Namespace, Name string
	// Field is a path in the input object, e.g. spec.order[0].group[1];
	// empty when the warning is about the whole object.
	Field   string
	Message string
	// Omitted says the object could not be converted: nothing in the output
	// stands for it. (Buildpacks and ClusterBuildpacks, folded into stores,
	// are not omitted.)
	Omitted bool

	seq int // the object's position in the input: warnings are sorted by it
}

func (w Warning) String() string {
	s := objectID{w.Kind, w.Namespace, w.Name}.path()
	if w.Field != "" {
		s += ": " + w.Field
	}
	return s + ": " + w.Message
}

// Convert reads kpack manifests (a stream of YAML documents or JSON objects)
// and returns the buildsmith manifests, as a stream of YAML documents in the
// order of the input, a ClusterStore generated for a builder coming just
// before it.
// Every output object is valid for buildsmith's CRDs and passes its
// Validate; an object that would not is left out, with a warning. The
// error is for input that is not YAML or not Kubernetes objects, and for
// two documents that would become the same object.
func Convert(in io.Reader) (out []byte, warnings []Warning, err error) {
	docs, err := readDocuments(in)
	if err != nil {
		return nil, nil, err
	}
	c := &converter{
		stores:     map[string]*v1alpha1.ClusterStore{},
		buildpacks: map[objectID]*buildpack{},
		lifecycles: map[string]bool{},
		sourceKeys: map[*v1alpha1.ClusterStore]map[string]bool{},
	}
	objects := make([]*object, len(docs))
	for i := range docs {
		objects[i] = c.newObject(&docs[i])
	}
	// Builders go last: they add sources to stores and look up Buildpacks
	// and ClusterLifecycles, wherever those are in the input.
	for _, o := range objects {
		if !o.role.isBuilder() {
			c.convert(o)
		}
	}
	for _, o := range objects {
		if o.role.isBuilder() {
			c.convert(o)
		}
	}
	c.reportBuildpacks()
	// Back to the order of the input; a generated store shares its
	// builder's position and was added just before it.
	sort.SliceStable(c.outputs, func(i, j int) bool { return c.outputs[i].from.doc.seq < c.outputs[j].from.doc.seq })
	// Everything is validated again at the end: builders may have added
	// sources to stores.
	for _, result := range c.outputs {
		if result.converted != nil && !result.omitted {
			if err := validate(result.converted); err != nil {
				result.from.omit("", "not converted: not a valid %s: %v", result.converted.GetObjectKind().GroupVersionKind().Kind, err)
				result.omitted = true
			}
		}
	}
	if err := checkDuplicates(c.outputs); err != nil {
		return nil, nil, err
	}
	if out, err = c.write(); err != nil {
		return nil, nil, err
	}
	sort.SliceStable(c.warnings, func(i, j int) bool { return c.warnings[i].seq < c.warnings[j].seq })
	return out, c.warnings, nil
}

// role is what an input document becomes.
type role int

const (
	passThrough role = iota
	toClusterStore
	toClusterStack
	toClusterLifecycle
	toBuilder
	toClusterBuilder
	toStoreSource // a Buildpack or ClusterBuildpack: its image goes into stores
)

func (r role) isBuilder() bool { return r == toBuilder || r == toClusterBuilder }

func roleOf(apiVersion, kind string) role {
	switch apiVersion {
	case "experimental.kpack.pivotal.io/v1alpha1":
		switch kind {
		case "Store":
			return toClusterStore
		case "Stack":
			return toClusterStack
		case "CustomBuilder":
			return toBuilder
		case "CustomClusterBuilder":
			return toClusterBuilder
		}
	case "kpack.io/v1alpha1", "kpack.io/v1alpha2":
		switch kind {
		case "ClusterStore":
			return toClusterStore
		case "ClusterStack":
			return toClusterStack
		case "Builder":
			return toBuilder
		case "ClusterBuilder":
			return toClusterBuilder
		case "ClusterLifecycle":
			return toClusterLifecycle
		case "Buildpack", "ClusterBuildpack":
			return toStoreSource
		}
	}
	return passThrough
}

// isKpackGroup says whether an apiVersion is one of kpack's: such documents
// are passed through with a warning, as they need kpack.
func isKpackGroup(apiVersion string) bool {
	group, _, _ := strings.Cut(apiVersion, "/")
	return group == "kpack.io" || group == "build.pivotal.io" || strings.HasSuffix(group, "kpack.pivotal.io")
}

// objectID names an object by kind, namespace and name.
type objectID struct{ kind, namespace, name string }

// path is kind/namespace/name, or kind/name without a namespace.
func (id objectID) path() string {
	if id.namespace == "" {
		return id.kind + "/" + id.name
	}
	return id.kind + "/" + id.namespace + "/" + id.name
}

// object is an input document being converted.
type object struct {
	objectID
	doc     *document
	role    role
	root    *fields
	omitted bool
	c       *converter
}

func (c *converter) newObject(doc *document) *object {
	o := &object{doc: doc, c: c}
	o.root = &fields{obj: o, m: doc.obj}
	apiVersion, _ := doc.obj["apiVersion"].(string)
	o.kind, _ = doc.obj["kind"].(string)
	o.role = roleOf(apiVersion, o.kind)
	if meta, ok := doc.obj["metadata"].(map[string]any); ok {
		o.name, _ = meta["name"].(string)
		o.namespace, _ = meta["namespace"].(string)
	}
	return o
}

func (o *object) warn(field, format string, args ...any) {
	o.c.warnings = append(o.c.warnings, Warning{
		Kind: o.kind, Namespace: o.namespace, Name: o.name,
		Field: field, Message: fmt.Sprintf(format, args...), seq: o.doc.seq,
	})
}

// omit leaves the object out of the output, saying why.
func (o *object) omit(field, format string, args ...any) {
	o.warn(field, format, args...)
	o.c.warnings[len(o.c.warnings)-1].Omitted = true
	o.omitted = true
}

// output is one document of the output.
type output struct {
	from      *object
	converted buildsmithObject // nil when passed through
	omitted   bool
}

// buildsmithObject is one of the four kinds the converter makes.
type buildsmithObject interface {
	GetObjectKind() schema.ObjectKind
	GetName() string
	GetNamespace() string
	Validate(context.Context) *apis.FieldError
}

type converter struct {
	outputs  []*output
	warnings []Warning
	// stores are the ClusterStores converted or generated, by name.
	stores map[string]*v1alpha1.ClusterStore
	// buildpacks are the Buildpacks and ClusterBuildpacks of the input,
	// by kind, namespace and name, and in the order of the input.
	buildpacks    map[objectID]*buildpack
	buildpackList []*buildpack
	// lifecycles are the names of the input's ClusterLifecycles.
	lifecycles map[string]bool
	// sourceKeys are the imageKeys of each store's sources (addSource).
	sourceKeys map[*v1alpha1.ClusterStore]map[string]bool
}

func (c *converter) convert(o *object) {
	switch o.role {
	case toClusterStore:
		c.convertStore(o)
	case toClusterStack:
		c.convertStack(o)
	case toClusterLifecycle:
		c.convertLifecycle(o)
	case toBuilder, toClusterBuilder:
		c.convertBuilder(o)
	case toStoreSource:
		c.readBuildpack(o)
	default:
		c.passThrough(o)
	}
}

func (c *converter) passThrough(o *object) {
	if apiVersion, _ := o.doc.obj["apiVersion"].(string); isKpackGroup(apiVersion) {
		o.warn("", "%s %s is not converted; passed through unchanged", apiVersion, o.kind)
	}
	c.outputs = append(c.outputs, &output{from: o})
}

// emit adds a converted object to the output and reports the input's fields
// that it does not carry.
func (c *converter) emit(o *object, converted buildsmithObject) {
	if converted.GetName() == "" {
		o.omit("metadata.name", "not converted: no name")
		return
	}
	c.outputs = append(c.outputs, &output{from: o, converted: converted})
	o.root.leftovers()
}

// metadata takes the metadata of an input object; clusterScoped objects
// lose their namespace, with a warning.
func metadata(o *object, clusterScoped bool) metav1.ObjectMeta {
	o.root.take("apiVersion")
	o.root.take("kind")
	o.root.take("status") // kpack's state, not the user's intent
	m := o.root.mapping("metadata")
	meta := metav1.ObjectMeta{
		Name:        m.str("name"),
		Namespace:   m.str("namespace"),
		Labels:      m.stringMap("labels"),
		Annotations: m.stringMap("annotations"),
	}
	// Set by the API server for the kpack object; meaningless for a new one.
	for _, key := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink"} {
		m.take(key)
	}
	// kubectl's record of the kpack object; kept, it would make the next
	// kubectl apply of the buildsmith object compute its patch from it.
	delete(meta.Annotations, "kubectl.kubernetes.io/last-applied-configuration")
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	if clusterScoped && meta.Namespace != "" {
		o.warn("metadata.namespace", "%s is cluster-scoped; dropped", o.kind)
		meta.Namespace = ""
	}
	return meta
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: kind}
}

func (c *converter) convertStore(o *object) {
	store := &v1alpha1.ClusterStore{TypeMeta: typeMeta("ClusterStore"), ObjectMeta: metadata(o, true)}
	spec := o.root.mapping("spec")
	store.Spec.ServiceAccountRef = serviceAccountRef(spec, "serviceAccountRef")
	for _, source := range spec.list("sources") {
		if image := source.str("image"); !c.addSource(store, image) {
			o.warn(source.path, "same image as an earlier source; dropped")
		}
	}
	if _, taken := c.stores[store.Name]; !taken {
		c.stores[store.Name] = store
	}
	c.emit(o, store)
}

func (c *converter) convertStack(o *object) {
	stack := &v1alpha1.ClusterStack{TypeMeta: typeMeta("ClusterStack"), ObjectMeta: metadata(o, true)}
	spec := o.root.mapping("spec")
	stack.Spec.ID = spec.str("id")
	stack.Spec.BuildImage.Image = spec.mapping("buildImage").str("image")
	stack.Spec.RunImage.Image = spec.mapping("runImage").str("image")
	stack.Spec.ServiceAccountRef = serviceAccountRef(spec, "serviceAccountRef")
	c.emit(o, stack)
}

func (c *converter) convertLifecycle(o *object) {
	lifecycle := &v1alpha1.ClusterLifecycle{TypeMeta: typeMeta("ClusterLifecycle"), ObjectMeta: metadata(o, true)}
	spec := o.root.mapping("spec")
	lifecycle.Spec.Image = spec.str("image")
	lifecycle.Spec.ServiceAccountRef = serviceAccountRef(spec, "serviceAccountRef")
	c.lifecycles[lifecycle.Name] = true // for the builders that name it
	c.emit(o, lifecycle)
}

// serviceAccountRef takes a kpack service account reference (a Kubernetes
// ObjectReference). buildsmith needs both name and namespace; with only one
// of them, it is dropped with a warning.
func serviceAccountRef(f *fields, key string) *v1alpha1.ServiceAccountRef {
	if f.m[key] == nil {
		f.take(key)
		return nil
	}
	ref := f.mapping(key)
	name, namespace := ref.str("name"), ref.str("namespace")
	if kind := ref.str("kind"); kind != "" && kind != "ServiceAccount" {
		ref.obj.warn(ref.fieldPath("kind"), "%s: buildsmith reads credentials from a ServiceAccount only; taken as one", kind)
	}
	if apiVersion := ref.str("apiVersion"); apiVersion != "" && apiVersion != "v1" {
		ref.obj.warn(ref.fieldPath("apiVersion"), "%s: expected v1; dropped", apiVersion)
	}
	switch {
	case name == "" && namespace == "":
		return nil
	case name == "" || namespace == "":
		ref.obj.warn(ref.path, "buildsmith needs both name and namespace; dropped, so the images are read anonymously")
		return nil
	}
	return &v1alpha1.ServiceAccountRef{Name: name, Namespace: namespace}
}

// addSource adds an image to a store's sources unless it is there already,
// compared as Validate compares them. The keys of each store's sources are
// kept, so that adding N sources takes time linear in N: parsing every
// source again for each new one took minutes for a store of 30,000.
func (c *converter) addSource(store *v1alpha1.ClusterStore, image string) bool {
	keys := c.sourceKeys[store]
	if keys == nil {
		keys = make(map[string]bool, len(store.Spec.Sources)+1)
		for _, s := range store.Spec.Sources {
			keys[imageKey(s.Image)] = true
		}
		c.sourceKeys[store] = keys
	}
	key := imageKey(image)
	if keys[key] {
		return false
	}
	keys[key] = true
	store.Spec.Sources = append(store.Spec.Sources, v1alpha1.ImageSource{Image: image})
	return true
}

// imageKey is an image reference in full ("busybox" is
// index.docker.io/library/busybox:latest), or as written when it does not
// parse.
func imageKey(image string) string {
	if ref, err := name.ParseReference(image); err == nil {
		return ref.Name()
	}
	return image
}

func validate(obj buildsmithObject) error {
	if err := obj.Validate(context.Background()); err != nil {
		return err
	}
	return nil
}

// checkDuplicates refuses two documents that become one object, as
// kubectl apply would silently apply the second over the first.
func checkDuplicates(outputs []*output) error {
	first := map[string]*object{}
	for _, result := range outputs {
		if result.omitted {
			continue
		}
		var apiVersion, kind, namespace, name string
		if obj := result.converted; obj != nil {
			gvk := obj.GetObjectKind().GroupVersionKind()
			apiVersion, kind, namespace, name = gvk.GroupVersion().String(), gvk.Kind, obj.GetNamespace(), obj.GetName()
		} else {
			apiVersion, _ = result.from.doc.obj["apiVersion"].(string)
			kind, namespace, name = result.from.kind, result.from.namespace, result.from.name
		}
		if name == "" {
			continue // not ours to judge: passed through
		}
		group, _, _ := strings.Cut(apiVersion, "/")
		key := strings.Join([]string{group, kind, namespace, name}, "/")
		if earlier, dup := first[key]; dup {
			return fmt.Errorf("%s (%s) and %s (%s) both become %s %s",
				earlier.doc.where, earlier.path(), result.from.doc.where, result.from.path(), apiVersion, objectID{kind, namespace, name}.path())
		}
		first[key] = result.from
	}
	return nil
}

// write renders the output documents, separated by "---".
func (c *converter) write() ([]byte, error) {
	var out []byte
	for _, result := range c.outputs {
		if result.omitted {
			continue
		}
		text := result.from.doc.raw
		if result.converted != nil || text == nil {
			var value any = result.from.doc.obj
			if result.converted != nil {
				value = result.converted
			}
			var err error
			if text, err = yaml.Marshal(value); err != nil {
				return nil, fmt.Errorf("%s: writing %s: %w", result.from.doc.where, result.from.path(), err)
			}
		}
		if len(out) > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, text...)
		if !strings.HasSuffix(string(text), "\n") {
			out = append(out, '\n')
		}
	}
	return out, nil
}

// mapAt returns m[key] if it is a mapping, else nil.
func mapAt(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}
