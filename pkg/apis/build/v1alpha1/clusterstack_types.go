package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterStack is a build image and a run image that belong together: they
// share a stack id, or (for stack-less images) os, architecture and distro.
//
// +genclient
// +genclient:nonNamespaced
// +genreconciler
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=cstack,categories=buildsmith
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="UpToDate",type=string,JSONPath=`.status.conditions[?(@.type=="UpToDate")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterStack struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterStackSpec `json:"spec"`
	// +optional
	Status ClusterStackStatus `json:"status,omitzero"`
}

// ClusterStackSpec names a stack's images.
type ClusterStackSpec struct {
	// ID is the stack id, e.g. io.buildpacks.stacks.jammy. Images that carry
	// io.buildpacks.stack.id must carry this one. Empty: a stack of images
	// identified by os, architecture and distro (buildpacks RFC 0096); its
	// id is then the build image's label, if it has one, and buildpacks
	// that name stacks and no targets run on it only with stack "*".
	// +optional
	ID         string         `json:"id,omitempty"`
	BuildImage ImageSource    `json:"buildImage"`
	RunImage   RunImageSource `json:"runImage"`
	// AdditionalRunImages are more run images of the stack, each checked
	// against the build image as RunImage is. Builders list them after
	// RunImage in /cnb/run.toml: the lifecycle exports an app onto
	// RunImage unless the platform names another of them (pack build
	// --run-image).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	AdditionalRunImages []RunImageSource `json:"additionalRunImages,omitempty"`
	// ServiceAccountRef names the ServiceAccount with credentials to read the
	// images; anonymous when empty.
	// +optional
	ServiceAccountRef *ServiceAccountRef `json:"serviceAccountRef,omitempty"`
}

// ClusterStackStatus is the observed state of a ClusterStack. Its resolved
// fields are kept from the last success while a reconcile fails.
type ClusterStackStatus struct {
	ConditionedStatus `json:",inline"`

	// +optional
	ID string `json:"id,omitempty"`
	// +optional
	Mixins []string `json:"mixins,omitempty"`
	// UserID and GroupID are CNB_USER_ID and CNB_GROUP_ID of the build image.
	// +optional
	UserID int `json:"userId,omitempty"`
	// +optional
	GroupID int `json:"groupId,omitempty"`
	// Platforms are the platforms both images have (one for plain images,
	// those of both indexes for indexes), each checked as a stack. OS and
	// Arch are the first's.
	// +optional
	Platforms []Platform `json:"platforms,omitempty"`
	// +optional
	OS string `json:"os,omitempty"`
	// +optional
	Arch string `json:"arch,omitempty"`
	// +optional
	Distro *Distro `json:"distro,omitempty"`
	// +optional
	BuildImage ResolvedImage `json:"buildImage,omitzero"`
	// +optional
	RunImage ResolvedRunImage `json:"runImage,omitzero"`
	// +optional
	AdditionalRunImages []ResolvedRunImage `json:"additionalRunImages,omitempty"`
	// ChosenTags are the tags the policies of the images chose.
	// +optional
	ChosenTags []ChosenTag `json:"chosenTags,omitempty"`
}

// RunImageSource is the run image, and mirrors of it: other repositories
// (in other registries, say) holding the same image, from which a platform
// may pull it instead, e.g. the one in the registry an app is pushed to.
type RunImageSource struct {
	// Image is a tag or digest reference; with a policy, a repository.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Policy makes Image follow versions, as an ImageSource's does.
	// +optional
	Policy *TagPolicy `json:"policy,omitempty"`
	// Mirrors are references to the same image elsewhere; they are written
	// into the builder for platforms to choose from, and not read. With a
	// policy they name repositories, and the tag chosen is theirs too.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Mirrors []string `json:"mirrors,omitempty"`
}

// ResolvedRunImage is the run image as resolved, and its mirrors.
type ResolvedRunImage struct {
	// Image is the reference from the spec, or the tag its policy chose.
	// +optional
	Image string `json:"image,omitempty"`
	// LatestImage is Image resolved to repository@digest.
	// +optional
	LatestImage string `json:"latestImage,omitempty"`
	// +optional
	Mirrors []string `json:"mirrors,omitempty"`
	// SBOMs are the SBOMs the image carries, as ResolvedImage's.
	// +optional
	SBOMs []BaseSBOM `json:"sboms,omitempty"`
}

// ResolvedImage is an image reference and the digest it resolved to.
type ResolvedImage struct {
	// Image is the reference from the spec, or the tag its policy chose.
	// +optional
	Image string `json:"image,omitempty"`
	// LatestImage is Image resolved to repository@digest.
	// +optional
	LatestImage string `json:"latestImage,omitempty"`
	// SBOMs are the SBOMs the image carries (for an index, each platform's
	// of the stack's platforms that carries one), which builders' SBOMs
	// refer to.
	// +optional
	SBOMs []BaseSBOM `json:"sboms,omitempty"`
}

// BaseSBOM is an SBOM a stack image carries in a layer of its own (at
// /cnb/sbom/), which its io.buildpacks.base.sbom label names by diffID.
type BaseSBOM struct {
	// Image is the image carrying it, as repository@digest: a platform's,
	// for an index.
	Image string `json:"image"`
	// DiffID is the layer's uncompressed digest, one of the image's.
	DiffID string `json:"diffId"`
}

// ClusterStackList is a list of ClusterStacks.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ClusterStackList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterStack `json:"items"`
}
