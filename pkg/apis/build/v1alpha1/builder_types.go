package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Builder is a CNB builder image, assembled from a ClusterStack's build image,
// the lifecycle and a ClusterStore's buildpacks in the given order, and pushed
// to spec.tag with the credentials of a ServiceAccount in its namespace.
//
// +genclient
// +genreconciler
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:shortName=bsbldr,categories=buildsmith
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="UpToDate",type=string,JSONPath=`.status.conditions[?(@.type=="UpToDate")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="LatestImage",type=string,JSONPath=`.status.latestImage`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Builder struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NamespacedBuilderSpec `json:"spec"`
	// +optional
	Status BuilderStatus `json:"status,omitzero"`
}

// ClusterBuilder is a Builder that any namespace may use; its credentials come
// from a ServiceAccount named by namespace and name.
//
// +genclient
// +genclient:nonNamespaced
// +genreconciler
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=cbldr,categories=buildsmith
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="UpToDate",type=string,JSONPath=`.status.conditions[?(@.type=="UpToDate")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="LatestImage",type=string,JSONPath=`.status.latestImage`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterBuilder struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterBuilderSpec `json:"spec"`
	// +optional
	Status BuilderStatus `json:"status,omitzero"`
}

// BuilderSpec is what Builder and ClusterBuilder have in common.
//
// +kubebuilder:validation:XValidation:rule="has(self.store) || (has(self.sources) && size(self.sources) > 0)",message="a builder needs a store or sources"
type BuilderSpec struct {
	// Tag is where the builder image is pushed.
	// +kubebuilder:validation:MinLength=1
	Tag string `json:"tag"`
	// AdditionalTags are further tags the builder image is pushed to, in
	// its repository or in others, on any registry the builder's
	// credentials write to: each points at LatestImage. An image in
	// another repository is signed and attested there too, since cosign
	// and the referrers API look for signatures and attestations in the
	// image's own repository.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	AdditionalTags []string `json:"additionalTags,omitempty"`
	Stack          StackRef `json:"stack"`
	// Store is the builder's first source of buildpacks and extensions.
	// It may be left out when Sources names some: a Builder drawing only
	// from its namespace's Buildpacks needs no ClusterStore.
	// +optional
	Store StoreRef `json:"store,omitzero"`
	// Sources are further sources the order draws from, after Store:
	// ClusterStores and, for a Builder, Buildpacks of its namespace. Where several offer a buildpack of the same id and version,
	// the first of Store, Sources[0], Sources[1]… has it; status says
	// which source each buildpack came from.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Sources []SourceRef `json:"sources,omitempty"`
	// Lifecycle names the ClusterLifecycle whose lifecycle the builder
	// gets. Empty: the image the lifecycle-image ConfigMap in the
	// controller's namespace names.
	// +optional
	Lifecycle *LifecycleRef `json:"lifecycle,omitempty"`
	// Order is the detection order: the lifecycle tries each group in turn.
	// +kubebuilder:validation:MinItems=1
	Order []OrderEntry `json:"order"`
	// OrderExtensions is the order of image extensions (pack's
	// [[order-extensions]]) from the store's extension packages: the
	// lifecycle's detector tries them, each optional, before every group
	// of the order, and runs the ones that pass to generate Dockerfiles.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	OrderExtensions []OrderEntry `json:"orderExtensions,omitempty"`
	// System are buildpacks the lifecycle runs before (pre) and after
	// (post) every group of the order, as pack's [system]: written to
	// /cnb/system.toml, which the lifecycle reads at platform API 0.15 and
	// later.
	// +optional
	System *SystemBuildpacks `json:"system,omitempty"`
	// AdditionalLabels are added to the builder image; they may not set any
	// io.buildpacks.* label.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('io.buildpacks.'))",message="additionalLabels may not set io.buildpacks.* labels"
	AdditionalLabels map[string]string `json:"additionalLabels,omitempty"`
	// Env are build-time environment variables of every build with this
	// builder, as pack's [[build.env]]: files in /cnb/build-config/env/.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Env []BuildEnv `json:"env,omitempty"`
	// Targets are the platforms to build the builder for. Empty: every
	// platform the stack, the lifecycle image and every non-optional
	// buildpack of the order all have. With several, the tag holds an image
	// index of one builder image per platform.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Targets []Target `json:"targets,omitempty"`
	// Description is a human-readable description of the builder (pack's
	// description in builder.toml), written as the description of the
	// image's io.buildpacks.builder.metadata label, which `pack builder
	// inspect` shows.
	// +optional
	Description string `json:"description,omitempty"`
	// PinRunImage writes the stack's run image into the builder by digest
	// (an index's, for a multi-platform run image) rather than by tag, in
	// /cnb/run.toml, the metadata label and status.stack.runImage, mirrors
	// included (they hold the same image): the same builder then always
	// gives apps on the same run image, and the builder is rebuilt when the
	// stack's run image moves.
	// +optional
	PinRunImage bool `json:"pinRunImage,omitempty"`
	// CopyRunImage copies the stack's run images (a whole index, for a
	// multi-platform one) into the builder's repository, each tagged
	// run-sha256-<hex> by its digest, and names the copies in
	// /cnb/run.toml by digest, the stack's references after them as
	// mirrors: apps build where only the builder's registry is reachable
	// (air-gapped clusters). The builder's credentials must read the run
	// images. A run image that moves is copied again and the builder
	// rebuilt, as with PinRunImage.
	// +optional
	CopyRunImage bool `json:"copyRunImage,omitempty"`
	// Flatten puts buildpacks together in fewer layers of the builder
	// image (pack's --flatten), for a builder near the layer limit
	// (--max-builder-layers). A flattened layer is made by the controller
	// and uploaded, where other buildpack layers are mounted from their
	// buildpackages; the same inputs give the same layer, so the same
	// digest.
	// +optional
	Flatten *Flatten `json:"flatten,omitempty"`
	// Signing says how the builder's images are signed with the cosign
	// keys of its ServiceAccount. Set (even empty), the builder must be
	// signed: without a key it stalls, NoSigningKeys, before a push.
	// Unset: signed as kpack signs (format sig) when the ServiceAccount
	// holds keys, pushed unsigned when it holds none.
	// +optional
	Signing *Signing `json:"signing,omitempty"`
}

// Flatten says which buildpacks of a builder share layers. A buildpack is
// named by id, or id@version; naming a meta-buildpack names the buildpacks
// of its order too. A buildpack named by several groups goes in the first.
type Flatten struct {
	// Groups are buildpacks put together, each group in one layer.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Groups []FlattenGroup `json:"groups,omitempty"`
	// All puts every buildpack no group names, but those of Except, in
	// one layer.
	// +optional
	All bool `json:"all,omitempty"`
	// Except are buildpacks that All leaves in their own layers.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=512
	Except []string `json:"except,omitempty"`
}

// FlattenGroup is buildpacks that share one layer.
type FlattenGroup struct {
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=512
	// +listType=atomic
	Buildpacks []string `json:"buildpacks"`
}

// Target is a platform to build a builder for, and the distributions it is
// meant for.
type Target struct {
	Platform `json:",inline"`
	// Distributions are those the platform's builder is for (pack's
	// [[targets.distributions]]): the stack's distro (the
	// io.buildpacks.base.distro.* labels of its images), when they say
	// it, must be one of them, or the builder stalls (DistroMismatch)
	// instead of giving apps a distro its author did not mean. Empty: any.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Distributions []TargetDistribution `json:"distributions,omitempty"`
}

// TargetDistribution is a distribution, and the versions of it meant.
type TargetDistribution struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Versions are the versions meant; empty: any.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Versions []string `json:"versions,omitempty"`
}

// SystemBuildpacks are the buildpacks of /cnb/system.toml. The lifecycle
// puts pre before and post after the buildpacks of each group (leaving out
// one whose id the group has already). None is optional: lifecycle 0.21
// reads an id and a version of each (pack's optional is not in its
// system.toml), and each must pass detection for its group to.
type SystemBuildpacks struct {
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Pre []SystemBuildpackRef `json:"pre,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Post []SystemBuildpackRef `json:"post,omitempty"`
}

// SystemBuildpackRef names a buildpack of the store: in spec the version
// may be empty (the highest semver in the store wins); in status it is
// resolved.
type SystemBuildpackRef struct {
	// +kubebuilder:validation:MinLength=1
	ID string `json:"id"`
	// +optional
	Version string `json:"version,omitempty"`
}

// BuiltPlatform is one platform of a builder and its image.
type BuiltPlatform struct {
	Platform `json:",inline"`
	// Image is the platform's builder image, as repository@digest.
	Image string `json:"image"`
}

// ImageSignature is a cosign signature of a builder image.
type ImageSignature struct {
	// Image is the signed image, as repository@digest.
	Image string `json:"image"`
	// SigningSecret is the Secret holding the key, as namespace/name.
	SigningSecret string `json:"signingSecret"`
	// KeyID is the SHA-256 of the public key (PKIX): a new key in the
	// Secret signs again.
	KeyID string `json:"keyId"`
	// Signature is where the signature is: the signature image, as the
	// tag cosign reads (sha256-<hex>.sig) and the digest pushed,
	// tag@digest; for a bundle, the referrer, as repository@digest.
	Signature string `json:"signature"`
	// Format is sig or bundle (see Signing.Format); empty: sig.
	// +optional
	Format string `json:"format,omitempty"`
	// ListedBy says, for a bundle, how readers find it, as
	// ImageAttestation.ListedBy does.
	// +optional
	ListedBy string `json:"listedBy,omitempty"`
}

// ImageAttestation is an attestation attached to a builder image as an OCI
// 1.1 referrer.
type ImageAttestation struct {
	// Image is the builder image it is about, as repository@digest.
	Image string `json:"image"`
	// PredicateType is what it says: https://spdx.dev/Document (the
	// SBOM) or https://slsa.dev/provenance/v1.
	PredicateType string `json:"predicateType"`
	// Referrer is the artifact attached, as repository@digest.
	Referrer string `json:"referrer"`
	// ListedBy is how readers find it: "api", the registry's referrers
	// API; "tag", the fallback tag sha256-<hex> (a registry without it).
	ListedBy string `json:"listedBy"`
	// SigningSecret and KeyID name the key that signed it (a Sigstore
	// bundle of a DSSE envelope, as cosign v3 attests); empty: an
	// unsigned SBOM.
	// +optional
	SigningSecret string `json:"signingSecret,omitempty"`
	// +optional
	KeyID string `json:"keyId,omitempty"`
}

// BuildEnv is a build-time environment variable. Where the app's own
// environment or a buildpack sets it too, Suffix says which wins.
type BuildEnv struct {
	// Name may not contain '=', '.' or '/' (it becomes a file name, and
	// the lifecycle reads what follows a dot as a suffix), nor start with
	// CNB_ (those belong to the lifecycle and the platform).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[^=./]+$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('CNB_')",message="CNB_* variables belong to the lifecycle and the platform"
	Name string `json:"name"`
	// +optional
	Value string `json:"value,omitempty"`
	// Suffix is default (set unless already set; also what empty means),
	// override (always this value), append or prepend (joined with Delim
	// to a value set elsewhere).
	// +optional
	// +kubebuilder:validation:Enum=default;override;append;prepend
	Suffix string `json:"suffix,omitempty"`
	// Delim joins the value for append and prepend.
	// +optional
	Delim string `json:"delim,omitempty"`
}

// NamespacedBuilderSpec is the spec of a Builder.
type NamespacedBuilderSpec struct {
	BuilderSpec `json:",inline"`
	// ServiceAccountName names the ServiceAccount in the Builder's namespace
	// whose secrets hold the credentials to push the tag and read the images.
	// +optional
	// +kubebuilder:default=default
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// ClusterBuilderSpec is the spec of a ClusterBuilder.
//
// +kubebuilder:validation:XValidation:rule="!has(self.sources) || self.sources.all(s, !has(s.kind) || s.kind != 'Buildpack')",message="a ClusterBuilder draws from ClusterStores only: a Buildpack belongs to one namespace"
type ClusterBuilderSpec struct {
	BuilderSpec `json:",inline"`
	// ServiceAccountRef names the ServiceAccount whose secrets hold the
	// credentials to push the tag and read the images; anonymous when empty.
	// +optional
	ServiceAccountRef *ServiceAccountRef `json:"serviceAccountRef,omitempty"`
}

// BuilderStatus is the observed state of a Builder or ClusterBuilder.
type BuilderStatus struct {
	ConditionedStatus `json:",inline"`

	// LatestImage is the last builder image pushed, as repository@digest. A
	// failed reconcile never clears it.
	// +optional
	LatestImage string `json:"latestImage,omitempty"`
	// AdditionalTags are the tags of spec.additionalTags that point at
	// LatestImage.
	// +optional
	AdditionalTags []string `json:"additionalTags,omitempty"`
	// Platforms are the platforms LatestImage was built for, each with its
	// builder image (LatestImage itself when there is one platform).
	// +optional
	Platforms []BuiltPlatform `json:"platforms,omitempty"`
	// Signatures are the cosign signatures pushed for LatestImage and, when
	// it is an index, for each platform's image: one per image, signing key
	// of the builder's ServiceAccount and format (spec.signing.format).
	// +optional
	Signatures []ImageSignature `json:"signatures,omitempty"`
	// Attestations are the SBOM and the provenance attached to LatestImage
	// as OCI referrers (when the controller's --builder-attestations says
	// so): each signed by each signing key, or without keys the SBOM
	// alone, unsigned.
	// +optional
	Attestations []ImageAttestation `json:"attestations,omitempty"`
	// AttestedDocuments is the SHA-256 of what Attestations say (the SBOM
	// and the provenance): when it changes without the image (a run image
	// moved under its tag, say), they are attached anew.
	// +optional
	AttestedDocuments string `json:"attestedDocuments,omitempty"`
	// SkippedPlatforms says which platforms of the stack were left out of
	// a default (no targets) build, and for lack of what.
	// +optional
	SkippedPlatforms []string `json:"skippedPlatforms,omitempty"`
	// BuilderMetadata lists the buildpacks in the image.
	// +optional
	BuilderMetadata []BuildpackMetadata `json:"builderMetadata,omitempty"`
	// Order is the spec's order with every version resolved.
	// +optional
	Order []OrderEntry `json:"order,omitempty"`
	// OrderExtensions is the spec's order of extensions, resolved.
	// +optional
	OrderExtensions []OrderEntry `json:"orderExtensions,omitempty"`
	// System is the spec's system buildpacks with every version resolved.
	// +optional
	System *SystemBuildpacks `json:"system,omitempty"`
	// +optional
	Stack BuiltStack `json:"stack,omitzero"`
	// +optional
	Lifecycle LifecycleStatus `json:"lifecycle,omitzero"`
	// ObservedStackGeneration and ObservedStoreGeneration are the generations
	// of the stack and store that LatestImage was built from.
	// +optional
	ObservedStackGeneration int64 `json:"observedStackGeneration,omitempty"`
	// +optional
	ObservedStoreGeneration int64 `json:"observedStoreGeneration,omitempty"`
	// Sources are the builder's sources of buildpacks (spec.store, then
	// spec.sources) at the generations LatestImage was built from.
	// +optional
	Sources []ObservedSource `json:"sources,omitempty"`
	// Fingerprint identifies the inputs LatestImage was built from (image
	// digests, resolved order, labels, tag): while they and the tag stay
	// the same, nothing is rebuilt or pushed.
	// +optional
	Fingerprint string `json:"fingerprint,omitempty"`
}

// BuildpackMetadata describes a buildpack in a builder image.
type BuildpackMetadata struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	// +optional
	Homepage string `json:"homepage,omitempty"`
	// Source is the source the builder took the buildpack from, as
	// Kind/name (ClusterStore/paketo).
	// +optional
	Source string `json:"source,omitempty"`
}

// ObservedSource is one of a builder's sources of buildpacks at the
// generation a builder image was built from.
type ObservedSource struct {
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
}

// BuiltStack is the stack a builder image was built from.
type BuiltStack struct {
	// +optional
	ID string `json:"id,omitempty"`
	// RunImage is the run image apps built by this builder run on.
	// +optional
	RunImage string `json:"runImage,omitempty"`
}

// LifecycleStatus is the CNB lifecycle inside a builder image.
type LifecycleStatus struct {
	// Image is the lifecycle image the builder took it from, by digest (an
	// index's, for an index).
	// +optional
	Image string `json:"image,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	APIs LifecycleAPIs `json:"apis,omitzero"`
}

// LifecycleAPIs are the buildpack and platform API versions a lifecycle
// supports.
type LifecycleAPIs struct {
	// +optional
	Buildpack APIVersions `json:"buildpack,omitzero"`
	// +optional
	Platform APIVersions `json:"platform,omitzero"`
}

// APIVersions lists API versions, e.g. "0.12".
type APIVersions struct {
	// +optional
	Deprecated []string `json:"deprecated,omitempty"`
	// +optional
	Supported []string `json:"supported,omitempty"`
}

// BuilderList is a list of Builders.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type BuilderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Builder `json:"items"`
}

// ClusterBuilderList is a list of ClusterBuilders.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ClusterBuilderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterBuilder `json:"items"`
}
