package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/buildsmith/buildsmith/pkg/apis/build"
)

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: build.GroupName, Version: "v1alpha1"}

// Kind returns a GroupKind of this group for the given kind.
func Kind(kind string) schema.GroupKind { return SchemeGroupVersion.WithKind(kind).GroupKind() }

// Resource returns a GroupResource of this group for the given resource.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&ClusterStore{}, &ClusterStoreList{},
		&ClusterStack{}, &ClusterStackList{},
		&ClusterLifecycle{}, &ClusterLifecycleList{},
		&Builder{}, &BuilderList{},
		&ClusterBuilder{}, &ClusterBuilderList{},
		&Buildpack{}, &BuildpackList{},
		&Receiver{}, &ReceiverList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
