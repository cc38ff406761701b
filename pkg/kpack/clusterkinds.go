package kpack

import (
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// convertStore makes the ClusterStore of a kpack store.
func (c *converter) convertStore(o *object) {
	store := &v1alpha1.ClusterStore{TypeMeta: typeMeta("ClusterStore"), ObjectMeta: metadata(o, true)}
	spec := o.root.mapping("spec")
	store.Spec.ServiceAccountRef = serviceAccountRef(spec, "serviceAccountRef")
	for _, source := range spec.list("sources") {
		if image := source.str("image"); !c.addSource(store, image) {
			o.warn(source.path, "same image as an earlier source; dropped")
		}
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
