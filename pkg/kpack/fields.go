package kpack

import (
	"fmt"
	"sort"
)

// fields is a mapping of an input object that a converter takes fields out
// of. What is still in it when the converter is done is reported by
// leftovers: a field the converter does not know is never dropped without a
// warning.
type fields struct {
	obj      *object
	path     string // of this mapping in the object: "spec", "spec.order[0].group[1]"
	m        map[string]any
	children []*fields
}

func (f *fields) fieldPath(key string) string {
	if f.path == "" {
		return key
	}
	return f.path + "." + key
}

// take removes a field and returns its value (nil when absent).
func (f *fields) take(key string) any {
	v := f.m[key]
	delete(f.m, key)
	return v
}

// str takes a string field: "" when absent, or (with a warning) not a string.
func (f *fields) str(key string) string {
	switch v := f.take(key).(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		f.obj.warn(f.fieldPath(key), "expected a string, found %v; dropped", v)
		return ""
	}
}

// boolean takes a boolean field: false when absent. One that is not a
// boolean ("yes", quoted) leaves the object out: kpack would refuse it too,
// and neither value can be assumed (a buildpack made required, or
// optional, changes which builds pass).
func (f *fields) boolean(key string) bool {
	switch v := f.take(key).(type) {
	case nil:
		return false
	case bool:
		return v
	default:
		f.obj.omit(f.fieldPath(key), "not converted: expected true or false, found %q", fmt.Sprint(v))
		return false
	}
}

// mapping takes a mapping field. The result is never nil: an absent field
// (or, with a warning, one that is not a mapping) gives an empty mapping.
func (f *fields) mapping(key string) *fields {
	child := &fields{obj: f.obj, path: f.fieldPath(key)}
	switch v := f.take(key).(type) {
	case nil:
	case map[string]any:
		child.m = v
		f.children = append(f.children, child)
	default:
		f.obj.warn(child.path, "expected a mapping, found %v; dropped", v)
	}
	return child
}

// list takes a list of mappings. Items that are not mappings are dropped
// with a warning.
func (f *fields) list(key string) []*fields {
	path := f.fieldPath(key)
	v := f.take(key)
	items, ok := v.([]any)
	if !ok {
		if v != nil {
			f.obj.warn(path, "expected a list, found %v; dropped", v)
		}
		return nil
	}
	var result []*fields
	for i, item := range items {
		itemPath := fmt.Sprintf("%s[%d]", path, i)
		m, ok := item.(map[string]any)
		if !ok {
			f.obj.warn(itemPath, "expected a mapping, found %v; dropped", item)
			continue
		}
		child := &fields{obj: f.obj, path: itemPath, m: m}
		f.children = append(f.children, child)
		result = append(result, child)
	}
	return result
}

// stringMap takes a mapping of strings (labels, annotations). Values that
// are not strings are dropped with a warning.
func (f *fields) stringMap(key string) map[string]string {
	path := f.fieldPath(key)
	v := f.take(key)
	m, ok := v.(map[string]any)
	if !ok {
		if v != nil {
			f.obj.warn(path, "expected a mapping of strings, found %v; dropped", v)
		}
		return nil
	}
	result := make(map[string]string, len(m))
	for k, value := range m {
		s, ok := value.(string)
		if !ok {
			f.obj.warn(path+"."+k, "expected a string, found %v; dropped", value)
			continue
		}
		result[k] = s
	}
	if len(result) == 0 {
		return nil
	}
	return result
}

// leftovers warns about every field not taken, here and in the mappings
// taken from here, in the order of their paths.
func (f *fields) leftovers() {
	var paths []string
	var collect func(*fields)
	collect = func(f *fields) {
		for key := range f.m {
			paths = append(paths, f.fieldPath(key))
		}
		for _, child := range f.children {
			collect(child)
		}
	}
	collect(f)
	sort.Strings(paths)
	for _, path := range paths {
		f.obj.warn(path, "buildsmith has no such field; dropped")
	}
}
