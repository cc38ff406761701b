package kpack

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// role is what an input document becomes.
type role int

const (
	passThrough role = iota
	toClusterStore
	toClusterStack
	toClusterLifecycle
	toBuilder
	toClusterBuilder
	toBuildpack        // a Buildpack: becomes buildsmith's Buildpack
	toClusterBuildpack // a ClusterBuildpack: becomes a ClusterStore of one source
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
		case "Buildpack":
			return toBuildpack
		case "ClusterBuildpack":
			return toClusterBuildpack
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

// warned says whether a warning on the object's field already says phrase.
func (o *object) warned(field, phrase string) bool {
	for _, w := range o.c.warnings {
		if w.Kind == o.kind && w.Namespace == o.namespace && w.Name == o.name && w.seq == o.doc.seq && w.Field == field && strings.Contains(w.Message, phrase) {
			return true
		}
	}
	return false
}
