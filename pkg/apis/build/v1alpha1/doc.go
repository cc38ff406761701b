// Package v1alpha1 is version v1alpha1 of the buildsmith.dev API: ClusterStore,
// Buildpack, ClusterStack, ClusterLifecycle, Builder, ClusterBuilder and
// Receiver.
//
// The JSON field names are a contract with the users' manifests and with tests
// outside this repository; docs/api.md (generated from these types) lists each
// field, docs/concepts.md what the kinds are for.
//
// +k8s:deepcopy-gen=package
// +groupName=buildsmith.dev
package v1alpha1
