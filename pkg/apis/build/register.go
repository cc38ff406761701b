// Package build holds the name of the buildsmith API group; its versions live
// in subpackages.
package build

// GroupName is the API group of every buildsmith resource.
const GroupName = "buildsmith.dev"
