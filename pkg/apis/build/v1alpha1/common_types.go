package v1alpha1

// ImageSource names an image by reference (a tag or a digest).
type ImageSource struct {
	// Image is an image reference, e.g. registry.example.com/buildpacks/go:1.2.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
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
