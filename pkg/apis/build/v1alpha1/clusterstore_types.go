package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterStore is a list of buildpackage images. Its status lists every
// buildpack they hold, so that builders can resolve their order against it
// without reading the images again.
//
// +genclient
// +genclient:nonNamespaced
// +genreconciler
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=cstore,categories=buildsmith
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="UpToDate",type=string,JSONPath=`.status.conditions[?(@.type=="UpToDate")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterStore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterStoreSpec `json:"spec"`
	// +optional
	Status ClusterStoreStatus `json:"status,omitzero"`
}

// ClusterStoreSpec lists the buildpackages of a store.
type ClusterStoreSpec struct {
	// Sources are buildpackage images; each must hold the
	// io.buildpacks.buildpack.layers label.
	// +kubebuilder:validation:MinItems=1
	Sources []ImageSource `json:"sources"`
	// ServiceAccountRef names the ServiceAccount with credentials to read the
	// sources; anonymous when empty.
	// +optional
	ServiceAccountRef *ServiceAccountRef `json:"serviceAccountRef,omitempty"`
}

// ClusterStoreStatus is the observed state of a ClusterStore.
type ClusterStoreStatus struct {
	ConditionedStatus `json:",inline"`

	// Buildpacks are the buildpacks of all sources, sorted by id, then
	// version. Kept from the last success while a reconcile fails.
	// +optional
	Buildpacks []StoreBuildpack `json:"buildpacks,omitempty"`
	// Extensions are the image extensions of all sources (extension
	// packages), listed as buildpacks are.
	// +optional
	Extensions []StoreBuildpack `json:"extensions,omitempty"`
	// ChosenTags are the tags the policies of the sources chose.
	// +optional
	ChosenTags []ChosenTag `json:"chosenTags,omitempty"`
}

// StoreBuildpack is one buildpack found in a store's sources.
type StoreBuildpack struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	// +optional
	Homepage string `json:"homepage,omitempty"`
	// Licenses are those buildpack.toml declares, as the package's labels
	// carry them (pack copies them into io.buildpacks.buildpackage.metadata
	// for a package's own module and into io.buildpacks.builder.metadata
	// for each module of a builder); none when the labels do not say.
	// +optional
	// +listType=atomic
	Licenses []BuildpackLicense `json:"licenses,omitempty"`
	// API is the buildpack API version the buildpack implements.
	// +optional
	API string `json:"api,omitempty"`
	// DiffID is the uncompressed digest of the layer holding the buildpack.
	DiffID string `json:"diffId"`
	// Digest is the compressed digest of that layer, Size its size in bytes.
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// StoreImage is the buildpackage the layer comes from, by digest.
	StoreImage ImageSource `json:"storeImage"`
	// Order is set on meta-buildpacks: the groups of buildpacks they stand for.
	// +optional
	Order []OrderEntry `json:"order,omitempty"`
	// +optional
	Stacks []BuildpackStack `json:"stacks,omitempty"`
	// +optional
	Targets []BuildpackTarget `json:"targets,omitempty"`
	// Platforms are those the buildpackage has the buildpack for: several
	// when it is an image index. DiffID, Digest and Size describe the
	// layer of its first platform; builders find each platform's layer in
	// that platform's image.
	// +optional
	Platforms []Platform `json:"platforms,omitempty"`
}

// BuildpackLicense is one [[buildpack.licenses]] entry of buildpack.toml:
// an SPDX license expression, or the address of a license that has none.
type BuildpackLicense struct {
	// +optional
	Type string `json:"type,omitempty"`
	// +optional
	URI string `json:"uri,omitempty"`
}

// ClusterStoreList is a list of ClusterStores.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ClusterStoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterStore `json:"items"`
}
