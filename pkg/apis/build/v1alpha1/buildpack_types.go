package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Buildpack is a buildpackage (or extension package) a namespace owns: a
// source of buildpacks for the Builders of its namespace, read with the
// namespace's own credentials, which no platform team need add to a
// ClusterStore. Its status lists what the image holds, as a ClusterStore's
// does (kpack's Buildpack).
//
// +genclient
// +genreconciler
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:shortName=bsbp,categories=buildsmith
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="UpToDate",type=string,JSONPath=`.status.conditions[?(@.type=="UpToDate")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Buildpack struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BuildpackSpec `json:"spec"`
	// +optional
	Status BuildpackStatus `json:"status,omitzero"`
}

// BuildpackSpec is the image of a Buildpack and who reads it.
type BuildpackSpec struct {
	// Image is a buildpackage or extension package: it must hold the
	// io.buildpacks.buildpack.layers or io.buildpacks.extension.layers
	// label.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Policy makes Image (then a repository) follow versions, as a store
	// source's does.
	// +optional
	Policy *TagPolicy `json:"policy,omitempty"`
	// ServiceAccountName names the ServiceAccount in the Buildpack's
	// namespace whose secrets hold the credentials to read the image.
	// +optional
	// +kubebuilder:default=default
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// BuildpackStatus is the observed state of a Buildpack.
type BuildpackStatus struct {
	ConditionedStatus `json:",inline"`

	// Buildpacks are the buildpacks of the image, listed as a
	// ClusterStore's are. Kept from the last success while a reconcile
	// fails.
	// +optional
	Buildpacks []StoreBuildpack `json:"buildpacks,omitempty"`
	// Extensions are the image extensions of the image.
	// +optional
	Extensions []StoreBuildpack `json:"extensions,omitempty"`
	// ChosenTags holds the tag the image's policy chose.
	// +optional
	ChosenTags []ChosenTag `json:"chosenTags,omitempty"`
}

// BuildpackList is a list of Buildpacks.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type BuildpackList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Buildpack `json:"items"`
}
