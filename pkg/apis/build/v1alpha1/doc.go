// Package v1alpha1 is version v1alpha1 of the buildsmith.dev API: ClusterStore,
// ClusterStack, Builder and ClusterBuilder.
//
// The JSON field names are a contract with the users' manifests and with tests
// outside this repository; docs/design.md explains each field.
//
// +k8s:deepcopy-gen=package
// +groupName=buildsmith.dev
package v1alpha1
