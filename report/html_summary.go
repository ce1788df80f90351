package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// This file turns any summary.json into the report's tables: an
// order-keeping JSON decoder (the tables read in the order the run wrote
// its keys), the flattening of nested objects into dotted names and of
// arrays of objects into tables of their own, and the formatting of
// values. It is its own file because it knows nothing of experiments:
// whatever a run writes renders through it.

// ---- ordered JSON -------------------------------------------------------

// object keeps a JSON object's keys in the order the run wrote them, so the
// tables read like the summary.
type object []field

type field struct {
	Key string
	Val any
}

func (o object) get(k string) any {
	for _, f := range o {
		if f.Key == k {
			return f.Val
		}
	}
	return nil
}

func decodeOrdered(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch d := t.(type) {
	case json.Delim:
		switch d {
		case '{':
			var o object
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o = append(o, field{k.(string), v})
			}
			_, err := dec.Token()
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", d)
	case json.Number:
		f, err := d.Float64()
		return f, err
	default:
		return t, nil // string, bool, nil
	}
}

// ---- tables ---------------------------------------------------------------

type row struct{ Key, Val string }

type table struct {
	Name    string
	Columns []string
	Rows    [][]string
}

// tables splits the summary: scalars (flattened, dotted) and one table per
// array of objects (its rows flattened the same way).
func tables(o object) ([]row, []table) {
	var scalars []row
	var tabs []table
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case object:
			for _, f := range x {
				walk(join(prefix, f.Key), f.Val)
			}
		case []any:
			if len(x) > 0 && allObjects(x) {
				tabs = append(tabs, arrayTable(prefix, x))
				return
			}
			parts := make([]string, len(x))
			for i, e := range x {
				parts[i] = format(e)
			}
			scalars = append(scalars, row{prefix, strings.Join(parts, ", ")})
		default:
			scalars = append(scalars, row{prefix, format(v)})
		}
	}
	walk("", o)
	return scalars, tabs
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func allObjects(a []any) bool {
	for _, e := range a {
		if _, ok := e.(object); !ok {
			return false
		}
	}
	return true
}

func arrayTable(name string, a []any) table {
	t := table{Name: name}
	idx := map[string]int{}
	var rows []map[string]string
	for _, e := range a {
		r := map[string]string{}
		var flat func(prefix string, v any)
		flat = func(prefix string, v any) {
			if o, ok := v.(object); ok {
				for _, f := range o {
					flat(join(prefix, f.Key), f.Val)
				}
				return
			}
			if _, ok := idx[prefix]; !ok {
				idx[prefix] = len(t.Columns)
				t.Columns = append(t.Columns, prefix)
			}
			if arr, ok := v.([]any); ok {
				parts := make([]string, len(arr))
				for i, x := range arr {
					parts[i] = format(x)
				}
				r[prefix] = strings.Join(parts, ", ")
				return
			}
			r[prefix] = format(v)
		}
		flat("", e)
		rows = append(rows, r)
	}
	for _, r := range rows {
		line := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			line[i] = r[c]
		}
		t.Rows = append(t.Rows, line)
	}
	return t
}

func format(v any) string {
	switch x := v.(type) {
	case nil:
		return "–"
	case float64:
		return strconv.FormatFloat(x, 'g', 6, 64)
	case object:
		b, _ := json.Marshal(flatMap(x))
		return string(b)
	default:
		return fmt.Sprint(x)
	}
}

func flatMap(o object) map[string]any {
	m := map[string]any{}
	for _, f := range o {
		m[f.Key] = f.Val
	}
	return m
}

func num(v any) float64 {
	if f, ok := v.(float64); ok {
		return f
	}
	return math.NaN()
}
