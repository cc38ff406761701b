package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageSource names an image by reference (a tag or a digest), or a
// repository whose tag a policy chooses.
type ImageSource struct {
	// Image is an image reference, e.g. registry.example.com/buildpacks/go:1.2;
	// with a policy, a repository (no tag, no digest).
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Policy makes Image follow versions: of the repository's tags, the
	// one with the highest version the policy allows is read, by digest.
	// status.chosenTags says which, and since when.
	// +optional
	Policy *TagPolicy `json:"policy,omitempty"`
}

// TagPolicy chooses one of a repository's tags, as Flux's ImagePolicy does:
// the highest semantic version within Semver.Range, of the tags FilterTags
// lets through. The repository's tags are listed on every reconcile (a
// resync, or at once when a Receiver hears of a push to it).
type TagPolicy struct {
	Semver SemverPolicy `json:"semver"`
	// FilterTags keeps the tags that match a pattern, and can take the
	// version out of each (e.g. 1.2.3 from 1.2.3-jammy).
	// +optional
	FilterTags *TagFilter `json:"filterTags,omitempty"`
}

// SemverPolicy chooses the highest version within a range.
type SemverPolicy struct {
	// Range is a semantic version constraint, e.g. ">=10.2.0 <11" or "4.x".
	// Prereleases match only a range that names one.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Range string `json:"range"`
}

// TagFilter keeps the tags that match Pattern.
type TagFilter struct {
	// Pattern is a regular expression (RE2) a tag must match, e.g.
	// '^(?P<version>[0-9.]+)-jammy$'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Pattern string `json:"pattern"`
	// Extract is the version within a matching tag, from the pattern's
	// groups: "$version", "${1}". Empty: what the pattern matched.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Extract string `json:"extract,omitempty"`
}

// ChosenTag is the tag a policy chose from a repository.
type ChosenTag struct {
	// Field is where the spec names the image, e.g. spec.sources[2] or
	// spec.runImage.
	Field string `json:"field"`
	// Image is the repository, as the spec names it.
	Image string `json:"image"`
	// Tag is the tag chosen, Version the version read in it.
	Tag     string `json:"tag"`
	Version string `json:"version"`
	// LatestImage is the tag resolved to repository@digest: what was read.
	LatestImage string `json:"latestImage"`
	// ChosenAt is when this tag, at this digest, was first chosen.
	ChosenAt metav1.Time `json:"chosenAt"`
}

// ServiceAccountRef names a ServiceAccount whose secrets and imagePullSecrets
// hold the registry credentials to use.
type ServiceAccountRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
}

// StackRef points a builder at a ClusterStack.
type StackRef struct {
	// +kubebuilder:validation:Enum=ClusterStack
	// +kubebuilder:default=ClusterStack
	// +optional
	Kind string `json:"kind,omitempty"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// StoreRef points a builder at a ClusterStore.
type StoreRef struct {
	// +kubebuilder:validation:Enum=ClusterStore
	// +kubebuilder:default=ClusterStore
	// +optional
	Kind string `json:"kind,omitempty"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// SourceRef names one of a builder's further sources of buildpacks. Kind
// has no schema default, unlike StoreRef's: the API server filling it in
// inside a list would make every re-apply of a manifest without it a change
// (a list is replaced whole by a merge patch).
type SourceRef struct {
	// Kind is ClusterStore (also when empty) or, for a Builder, Buildpack:
	// one in the Builder's namespace.
	// +kubebuilder:validation:Enum=ClusterStore;Buildpack
	// +optional
	Kind string `json:"kind,omitempty"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// LifecycleRef points a builder at a ClusterLifecycle.
type LifecycleRef struct {
	// +kubebuilder:validation:Enum=ClusterLifecycle
	// +kubebuilder:default=ClusterLifecycle
	// +optional
	Kind string `json:"kind,omitempty"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// OrderEntry is one group of buildpacks that the lifecycle tries together; the
// first group whose non-optional buildpacks all pass detection is used.
type OrderEntry struct {
	// +kubebuilder:validation:MinItems=1
	Group []BuildpackRef `json:"group"`
}

// BuildpackRef names a buildpack in an order. In a Builder's spec the version
// may be empty (the highest semver in the store wins); everywhere in status it
// is resolved.
type BuildpackRef struct {
	// +kubebuilder:validation:MinLength=1
	ID string `json:"id"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	Optional bool `json:"optional,omitempty"`
	// ExecEnv are the execution environments (RFC 0134: "production",
	// "test", "*") the entry is for, as pack's builder.toml gives them on an
	// order group's entries; written into /cnb/order.toml and the order
	// label as pack writes them. The lifecycle (0.21) chooses by the
	// buildpack's own buildpack.toml exec-env and CNB_EXEC_ENV, and does
	// not read these yet.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	ExecEnv []string `json:"execEnv,omitempty"`
}

// BuildpackStack is a stack a buildpack declares it runs on ([[stacks]] in
// buildpack.toml); ID "*" means any stack.
type BuildpackStack struct {
	ID string `json:"id"`
	// +optional
	Mixins []string `json:"mixins,omitempty"`
}

// BuildpackTarget is a platform a buildpack declares it runs on ([[targets]]
// in buildpack.toml). Empty fields match anything.
type BuildpackTarget struct {
	// +optional
	OS string `json:"os,omitempty"`
	// +optional
	Arch string `json:"arch,omitempty"`
	// +optional
	Variant string `json:"variant,omitempty"`
	// +optional
	Distros []Distro `json:"distros,omitempty"`
}

// Distro is an operating system distribution, as in the
// io.buildpacks.base.distro.* labels of a base image.
type Distro struct {
	Name string `json:"name"`
	// +optional
	Version string `json:"version,omitempty"`
}

// Platform is an operating system, an architecture and an optional variant,
// as image indexes name them: linux/amd64, linux/arm64, linux/arm/v7.
type Platform struct {
	// +kubebuilder:validation:MinLength=1
	OS string `json:"os"`
	// +kubebuilder:validation:MinLength=1
	Arch string `json:"arch"`
	// +optional
	Variant string `json:"variant,omitempty"`
}
