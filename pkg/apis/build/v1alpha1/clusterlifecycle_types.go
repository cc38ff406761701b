package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterLifecycle is a CNB lifecycle image that builders may name in
// spec.lifecycle instead of the controller's default (the lifecycle-image
// ConfigMap), so that builders can move to a new lifecycle one at a time.
//
// +genclient
// +genclient:nonNamespaced
// +genreconciler
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=clc,categories=buildsmith
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="UpToDate",type=string,JSONPath=`.status.conditions[?(@.type=="UpToDate")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterLifecycle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterLifecycleSpec `json:"spec"`
	// +optional
	Status ClusterLifecycleStatus `json:"status,omitzero"`
}

// ClusterLifecycleSpec names a lifecycle image: one like
// buildpacksio/lifecycle, with the lifecycle's binaries under /cnb/lifecycle
// and its APIs in the io.buildpacks.lifecycle.apis label.
type ClusterLifecycleSpec struct {
	ImageSource `json:",inline"`
	// ServiceAccountRef names the ServiceAccount with credentials to read
	// the image; anonymous when empty. Builders read the layers again with
	// their own credentials.
	// +optional
	ServiceAccountRef *ServiceAccountRef `json:"serviceAccountRef,omitempty"`
}

// ClusterLifecycleStatus is the observed state of a ClusterLifecycle. Its
// resolved fields are kept from the last success while a reconcile fails.
type ClusterLifecycleStatus struct {
	ConditionedStatus `json:",inline"`

	// Image is the spec's image and the digest it resolved to: builders
	// that use this lifecycle take it from that digest.
	// +optional
	Image ResolvedImage `json:"image,omitzero"`
	// Version is the lifecycle's version (of the first platform; every
	// platform of an index must have the same).
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	APIs LifecycleAPIs `json:"apis,omitzero"`
	// Platforms are the platforms the image has a lifecycle for.
	// +optional
	Platforms []Platform `json:"platforms,omitempty"`
	// ChosenTags holds the tag the image's policy chose.
	// +optional
	ChosenTags []ChosenTag `json:"chosenTags,omitempty"`
}

// ClusterLifecycleList is a list of ClusterLifecycles.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ClusterLifecycleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterLifecycle `json:"items"`
}
