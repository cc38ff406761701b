package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Receiver takes a registry's push notifications and reconciles at once
// the objects that read the pushed repository: the Buildpacks of its
// namespace and, for a Receiver in the controller's own namespace, the
// ClusterStores, ClusterStacks and ClusterLifecycles (whose builders follow
// them). A notification is only a hint: what was pushed is read from the
// registry, never taken from it. The sender posts to status.webhookPath on
// the controller's receiver port (the chart's receiver Service); the last
// notification that woke something is status.lastNotification.
//
// +genclient
// +genreconciler
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:categories=buildsmith
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.webhookPath`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Receiver struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ReceiverSpec `json:"spec"`
	// +optional
	Status ReceiverStatus `json:"status,omitzero"`
}

// Receiver types: how a sender formats its notifications and proves it
// holds the token.
const (
	// ReceiverDistribution: the CNCF distribution registry's notifications
	// (an envelope of events), with the header Authorization: Bearer TOKEN
	// set in the registry's notifications.endpoints headers.
	ReceiverDistribution = "distribution"
	// ReceiverHarbor: Harbor's webhooks, with the auth header set to TOKEN.
	ReceiverHarbor = "harbor"
	// ReceiverDockerHub: Docker Hub's webhooks; the path is the secret.
	ReceiverDockerHub = "dockerhub"
	// ReceiverQuay: Quay's repository notifications; the path is the secret.
	ReceiverQuay = "quay"
	// ReceiverGitHub: GitHub's package and registry_package events, signed
	// with TOKEN (X-Hub-Signature-256).
	ReceiverGitHub = "github"
	// ReceiverACR: Azure Container Registry's webhooks, with the custom
	// header Authorization: Bearer TOKEN.
	ReceiverACR = "acr"
	// ReceiverGCR: Google Artifact Registry's (and Container Registry's)
	// Pub/Sub notifications delivered by a push subscription; the path is
	// the secret.
	ReceiverGCR = "gcr"
	// ReceiverGeneric: {"repository": "HOST/PATH", "tag": "…"}; the path is
	// the secret.
	ReceiverGeneric = "generic"
	// ReceiverGenericHMAC: the generic body signed with TOKEN
	// (X-Signature: sha256=HEX).
	ReceiverGenericHMAC = "generic-hmac"
)

// ReceiverSpec is what a Receiver takes and whom it may wake.
type ReceiverSpec struct {
	// Type is how the sender formats and authenticates its notifications.
	// +kubebuilder:validation:Enum=distribution;harbor;dockerhub;quay;github;acr;gcr;generic;generic-hmac
	Type string `json:"type"`
	// SecretRef names a Secret of the Receiver's namespace whose key
	// "token" is the secret the sender shares: the webhook path is made
	// from it, and senders that sign or send a token must use it.
	SecretRef LocalSecretReference `json:"secretRef"`
	// Resources, when given, are the only objects the Receiver may wake
	// (still only those that read the pushed repository, in its scope).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Resources []ReceiverResource `json:"resources,omitempty"`
}

// LocalSecretReference names a Secret in the referring object's namespace.
type LocalSecretReference struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ReceiverResource is a kind, and optionally one name, a Receiver may
// wake.
type ReceiverResource struct {
	// +kubebuilder:validation:Enum=ClusterStore;ClusterStack;ClusterLifecycle;Buildpack
	Kind string `json:"kind"`
	// Name is the object's name; empty: every object of the kind.
	// +optional
	Name string `json:"name,omitempty"`
}

// ReceiverStatus is the observed state of a Receiver.
type ReceiverStatus struct {
	ConditionedStatus `json:",inline"`

	// WebhookPath is where the sender posts, on the controller's receiver
	// port: /hook/ and the SHA-256 of the token, the name and the
	// namespace, in hex (Flux's Receivers' convention). It changes when
	// the token does.
	// +optional
	WebhookPath string `json:"webhookPath,omitempty"`
	// LastNotification is the last notification that named a repository
	// something in the Receiver's reach reads: the replica that took it
	// records it here, and every replica reconciles what reads those
	// repositories (only the object's leader does the work).
	// +optional
	LastNotification *ReceiverNotification `json:"lastNotification,omitempty"`
}

// ReceiverNotification is a notification a Receiver took.
type ReceiverNotification struct {
	// ReceivedAt is when it was taken.
	ReceivedAt metav1.MicroTime `json:"receivedAt"`
	// Repositories are the pushed repositories it named that something in
	// the Receiver's reach reads.
	// +kubebuilder:validation:MaxItems=64
	Repositories []string `json:"repositories"`
}

// ReceiverList is a list of Receivers.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ReceiverList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Receiver `json:"items"`
}
