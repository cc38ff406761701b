package packconfig

import (
	"fmt"
	"sort"
	"time"
)

// table is a TOML table of the input that the converter takes keys out of.
// What is still in it when the converter is done is reported by leftovers:
// a key the converter does not know is never dropped without a warning.
// A value of the wrong type is an error (pack refuses such a file too).
type table struct {
	c        *converter
	path     string // of this table in the file: "", "stack", "order[0].group[1]"
	m        map[string]any
	children []*table
}

func (t *table) at(key string) string {
	if t.path == "" {
		return key
	}
	return t.path + "." + key
}

// has says whether the table has key (taken or not yet).
func (t *table) has(key string) bool {
	_, ok := t.m[key]
	return ok
}

// take removes a key and returns its value (nil when absent).
func (t *table) take(key string) any {
	v := t.m[key]
	delete(t.m, key)
	return v
}

// str takes a string: "" when absent.
func (t *table) str(key string) string {
	switch v := t.take(key).(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		t.c.typeError(t.at(key), "a string", v)
		return ""
	}
}

// boolean takes a boolean: false when absent.
func (t *table) boolean(key string) bool {
	switch v := t.take(key).(type) {
	case nil:
		return false
	case bool:
		return v
	default:
		t.c.typeError(t.at(key), "true or false", v)
		return false
	}
}

// strs takes a list of strings: nil when absent.
func (t *table) strs(key string) []string {
	v := t.take(key)
	if v == nil {
		return nil
	}
	items, ok := v.([]any)
	if !ok {
		t.c.typeError(t.at(key), "a list of strings", v)
		return nil
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		s, ok := item.(string)
		if !ok {
			t.c.typeError(fmt.Sprintf("%s[%d]", t.at(key), i), "a string", item)
			continue
		}
		out = append(out, s)
	}
	return out
}

// table takes a table. The result is never nil: an absent key gives an
// empty table.
func (t *table) table(key string) *table {
	child := &table{c: t.c, path: t.at(key)}
	switch v := t.take(key).(type) {
	case nil:
	case map[string]any:
		child.m = v
		t.children = append(t.children, child)
	default:
		t.c.typeError(child.path, "a table", v)
	}
	return child
}

// tables takes an array of tables ([[key]], or key = [{...}, ...]).
func (t *table) tables(key string) []*table {
	path := t.at(key)
	var items []map[string]any
	switch v := t.take(key).(type) {
	case nil:
		return nil
	case []map[string]any:
		items = v
	case []any:
		for i, item := range v {
			m, ok := item.(map[string]any)
			if !ok {
				t.c.typeError(fmt.Sprintf("%s[%d]", path, i), "a table", item)
				m = map[string]any{}
			}
			items = append(items, m)
		}
	default:
		t.c.typeError(path, "an array of tables", v)
		return nil
	}
	out := make([]*table, len(items))
	for i, m := range items {
		out[i] = &table{c: t.c, path: fmt.Sprintf("%s[%d]", path, i), m: m}
		t.children = append(t.children, out[i])
	}
	return out
}

// leftovers warns about every key not taken, here and in the tables taken
// from here, in the order of their paths.
func (t *table) leftovers() {
	var paths []string
	var collect func(*table)
	collect = func(t *table) {
		for key := range t.m {
			paths = append(paths, t.at(key))
		}
		for _, child := range t.children {
			collect(child)
		}
	}
	collect(t)
	sort.Strings(paths)
	for _, path := range paths {
		t.c.warn(path, "buildsmith has no such field; dropped")
	}
}

// describe says what a TOML value is, for errors.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "a list"
	case time.Time:
		return "a date-time"
	default:
		return fmt.Sprint(v)
	}
}
