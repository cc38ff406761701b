// Package kpack converts kpack's builder-side manifests to buildsmith's,
// offline: YAML in, YAML out, no cluster and no registry.
//
// What it converts (apiVersion: kind → buildsmith.dev/v1alpha1 kind):
//
//	experimental.kpack.pivotal.io/v1alpha1: Store → ClusterStore, Stack → ClusterStack,
//	    CustomBuilder → Builder, CustomClusterBuilder → ClusterBuilder
//	kpack.io/v1alpha1 and v1alpha2: ClusterStore, ClusterStack, Builder and
//	    ClusterBuilder → the same kinds
//	kpack.io: Buildpack → Buildpack (same namespace and name, image and
//	    serviceAccountName); ClusterBuildpack → ClusterStore of that one
//	    image, read with its serviceAccountRef
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
// A ClusterBuildpack's ClusterStore is named <name>-clusterbuildpack,
// whatever the input: kpack lets a ClusterStore and a ClusterBuildpack
// share a name, and here they would be one object, the ClusterStore of one
// batch overwritten by the ClusterBuildpack of another when both are
// applied. While that name is taken in the input (by a ClusterStore, a
// store a builder names, or another ClusterBuildpack's), -2, -3… is
// appended, and a warning on the ClusterBuildpack gives the name. So a
// ClusterStore keeps its name, and a builder keeps the store it names.
//
// kpack's builders may refer to buildpacks by object (kind Buildpack or
// ClusterBuildpack and a name); buildsmith's builders by id, from their
// store and further sources (spec.sources). Such an entry becomes an id
// entry, and the object a source of the builder: the Buildpack itself
// (kind Buildpack: a Buildpack of the builder's namespace), or the
// ClusterBuildpack's ClusterStore; each once, in the order of first use. A
// ClusterBuilder may not draw from a Buildpack, which belongs to one
// namespace: a ClusterBuilder naming one is left out. The id is the
// entry's own, else that of the root buildpack in the object's status
// (present in the output of kubectl get -o yaml); when neither is there,
// the id cannot be known offline and the builder is left out of the
// output. kpack takes the buildpack from the object named alone, the
// highest version of the id it holds when the entry gives none;
// buildsmith from the store and all the sources together, where a higher
// version elsewhere would win. So an entry without a version gets the one
// kpack would take, the highest of the id the object's status lists; when
// the status does not tell (or the object is not in the input), the entry
// keeps its id alone, with a warning that the version floats over the
// builder's store and sources (unless they are all that object). An entry's
// own version is kept.
//
// An entry with an id alone draws, in kpack, from the builder's store, the
// Buildpacks of its namespace and the ClusterBuildpacks together, the
// highest version of them all when it gives none. Every Buildpack of the
// builder's namespace (none for a ClusterBuilder), then every
// ClusterBuildpack, of the input, in its order, whose status lists the id
// (at the entry's version, if it has one) becomes a source as well, so that
// buildsmith's pool holds what kpack's held. An object named but not in the
// input is a source all the same (a Buildpack by its name, a
// ClusterBuildpack by the name its ClusterStore gets), with a warning to
// convert it too.
//
// A builder without a store (kpack allows it, as buildsmith does when
// spec.sources names some) gets none: the objects its order draws from are
// its sources. No ClusterStore is made up for it, which would put a
// namespace's buildpackage and credentials on a cluster object. A builder
// that draws from no object is left out.
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
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

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
	// stands for it.
	Omitted bool

	seq int // the object's position in the input: warnings are sorted by it
}

func (w Warning) String() string {
	s := objectID{w.Kind, w.Namespace, w.Name}.path()
	if w.Field != "" {
		s += ": " + w.Field
	}
	return s + ": " + OneLine(w.Message)
}

// OneLine joins a message's lines with "; ": a warning is one line (the
// errors of several fields come one a line).
func OneLine(message string) string {
	return strings.Join(strings.FieldsFunc(message, func(r rune) bool { return r == '\n' }), "; ")
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
	if len(docs) == 0 {
		// kubectl says so too ("no objects passed to apply"): an empty
		// file, or a List with no items, is most likely not what was meant.
		return nil, nil, errors.New("the input holds no objects (empty, only comments, or a List without items)")
	}
	c := &converter{
		storeNames:             map[string]bool{},
		clusterBuildpackStores: map[string]string{},
		buildpacks:             map[objectID]*buildpack{},
		lifecycles:             map[string]bool{},
		sourceKeys:             map[*v1alpha1.ClusterStore]map[string]bool{},
	}
	objects := make([]*object, len(docs))
	for i := range docs {
		if err := docs[i].checkTypeFields(); err != nil {
			return nil, nil, err
		}
		objects[i] = c.newObject(&docs[i])
	}
	c.reserveStoreNames(objects)
	// Builders go last: they look up Buildpacks, ClusterBuildpacks and
	// ClusterLifecycles, wherever those are in the input.
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
	// Back to the order of the input; a generated store shares its
	// builder's position and was added just before it.
	sort.SliceStable(c.outputs, func(i, j int) bool { return c.outputs[i].from.doc.seq < c.outputs[j].from.doc.seq })
	// Everything is validated again at the end, as it is written.
	for _, result := range c.outputs {
		if result.converted != nil && !result.omitted {
			if err := validate(result.converted); err != nil {
				result.from.omit("", "not converted: not a valid %s: %v", result.converted.GetObjectKind().GroupVersionKind().Kind, err)
				result.omitted = true
			}
		}
	}
	c.warnUnconvertedRefs()
	if err := checkDuplicates(c.outputs); err != nil {
		return nil, nil, err
	}
	if out, err = c.write(); err != nil {
		return nil, nil, err
	}
	sort.SliceStable(c.warnings, func(i, j int) bool { return c.warnings[i].seq < c.warnings[j].seq })
	return out, c.warnings, nil
}

// output is one document of the output.
type output struct {
	from      *object
	converted buildsmithObject // nil when passed through
	omitted   bool
}

// buildsmithObject is one of the kinds the converter makes.
type buildsmithObject interface {
	GetObjectKind() schema.ObjectKind
	GetName() string
	GetNamespace() string
	Validate(context.Context) *apis.FieldError
}

type converter struct {
	outputs  []*output
	warnings []Warning
	// storeNames are the names of ClusterStores: the input's, those its
	// builders name, and those made of ClusterBuildpacks
	// (reserveStoreNames).
	storeNames map[string]bool
	// clusterBuildpackStores is the name of each ClusterBuildpack's
	// ClusterStore (clusterStoreName).
	clusterBuildpackStores map[string]string
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
	case toBuildpack, toClusterBuildpack:
		c.convertBuildpack(o)
	default:
		c.passThrough(o)
	}
}

func (c *converter) passThrough(o *object) {
	apiVersion, _ := o.doc.obj["apiVersion"].(string)
	switch {
	case isKpackGroup(apiVersion):
		o.warn("", "%s %s is not converted; passed through unchanged", apiVersion, o.kind)
	case apiVersion == v1alpha1.SchemeGroupVersion.String() && o.kind == "ClusterLifecycle":
		c.lifecycles[o.name] = true // buildsmith's own, for the builders that name it
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

func validate(obj buildsmithObject) error {
	if err := obj.Validate(context.Background()); err != nil {
		return err
	}
	return nil
}

// warnUnconvertedRefs warns on each builder that names a store, stack,
// lifecycle or source the input holds but the output does not (left out,
// or passed through unconverted, as an old experimental kind is): applied
// as it is, the builder would wait for an object nothing creates.
func (c *converter) warnUnconvertedRefs() {
	converted, leftOut := map[objectID]bool{}, map[objectID]*object{}
	for _, result := range c.outputs {
		switch obj := result.converted; {
		case obj != nil && !result.omitted:
			converted[objectID{obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName()}] = true
		case obj != nil:
			leftOut[objectID{obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName()}] = result.from
		default:
			if kind := clusterKindOf(result.from); kind != "" {
				leftOut[objectID{kind, "", result.from.name}] = result.from
			}
		}
	}
	for _, result := range c.outputs {
		spec := builderSpecOf(result)
		if spec == nil {
			continue
		}
		type ref struct {
			field string
			id    objectID
		}
		var refs []ref
		if spec.Store.Name != "" {
			refs = append(refs, ref{"spec.store", objectID{"ClusterStore", "", spec.Store.Name}})
		}
		refs = append(refs, ref{"spec.stack", objectID{"ClusterStack", "", spec.Stack.Name}})
		if spec.Lifecycle != nil {
			refs = append(refs, ref{"spec.lifecycle", objectID{"ClusterLifecycle", "", spec.Lifecycle.Name}})
		}
		for i, source := range spec.Sources {
			id := objectID{"ClusterStore", "", source.Name}
			if source.Kind == "Buildpack" {
				id = objectID{"Buildpack", result.converted.GetNamespace(), source.Name}
			}
			refs = append(refs, ref{fmt.Sprintf("spec.sources[%d]", i), id})
		}
		for _, r := range refs {
			from := leftOut[r.id]
			switch {
			case from == nil || converted[r.id]:
			case from.role == toClusterBuildpack:
				result.from.warn(r.field, "%s of the input, which becomes %s, is not in the output (see its warning): this builder waits for a %s of that name applied otherwise",
					from.path(), r.id.path(), r.id.kind)
			default:
				result.from.warn(r.field, "%s of the input is not in the output (see its warning): this builder waits for a %s of that name applied otherwise",
					r.id.path(), r.id.kind)
			}
		}
	}
}

// clusterKindOf is the buildsmith kind an input object of kpack's would
// have become, converted or not; "" for others (a buildsmith object passed
// through is in the output as it is).
func clusterKindOf(o *object) string {
	apiVersion, _ := o.doc.obj["apiVersion"].(string)
	kpackKind := o.role == passThrough && isKpackGroup(apiVersion)
	switch {
	case o.role == toClusterStore, kpackKind && (o.kind == "ClusterStore" || o.kind == "Store"):
		return "ClusterStore"
	case o.role == toClusterStack, kpackKind && (o.kind == "ClusterStack" || o.kind == "Stack"):
		return "ClusterStack"
	case o.role == toClusterLifecycle, kpackKind && o.kind == "ClusterLifecycle":
		return "ClusterLifecycle"
	}
	return ""
}

// builderSpecOf is the spec of a builder in the output; nil for others.
func builderSpecOf(result *output) *v1alpha1.BuilderSpec {
	if result.omitted {
		return nil
	}
	switch b := result.converted.(type) {
	case *v1alpha1.Builder:
		return &b.Spec.BuilderSpec
	case *v1alpha1.ClusterBuilder:
		return &b.Spec.BuilderSpec
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
