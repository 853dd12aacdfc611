package main

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Error messages about the configuration that a person can act on: each
// names the file and line (or the flag) of the key, the key, what is wrong
// and what would be right.

// source says where the configuration's values came from.
type source struct {
	path  string
	data  []byte
	keys  map[string]keyPos // dotted key → its first assignment in the file
	flags map[string]string // dotted key → the flag that overrode it
}

// keyPos is where a key is assigned, and its value as written.
type keyPos struct {
	line int
	raw  string
}

// at names the origin of key: "flag -listen", "config.toml:12", or the file
// alone when the key is not in it (its default applies).
func (s *source) at(key string) string {
	if f, ok := s.flags[key]; ok {
		return "flag -" + f
	}
	if s.path == "" {
		return "(no -config file)"
	}
	if p, ok := s.keys[key]; ok {
		return fmt.Sprintf("%s:%d", s.path, p.line)
	}
	return s.path
}

// durationError is a value that is not a Go duration string.
type durationError struct{ text string }

func (e *durationError) Error() string {
	return fmt.Sprintf("%q is not a duration: write a quoted string with a unit, such as \"50ms\", \"1.5s\" or \"60s\"", e.text)
}

var typeMismatch = regexp.MustCompile(`cannot decode TOML (\w+) into struct field \S+ of type (\S+)`)

// decodeError turns a go-toml error into lines of "file:line: key: problem".
func (s *source) decodeError(err error) error {
	var sm *toml.StrictMissingError
	var de *toml.DecodeError
	var dur *durationError
	switch {
	case errors.As(err, &sm):
		var msgs []string
		for _, e := range sm.Errors {
			row, _ := e.Position()
			key := strings.Join(e.Key(), ".")
			msg := fmt.Sprintf("%s:%d: unknown key %q", s.path, row, key)
			if hint := suggest(key); hint != "" {
				msg += "; did you mean " + hint + "?"
			} else {
				msg += " (config.toml in the repository lists every key lockproxy reads)"
			}
			msgs = append(msgs, msg)
		}
		return errors.New(strings.Join(msgs, "\n"))
	case errors.As(err, &de):
		row, col := de.Position()
		key := strings.Join(de.Key(), ".")
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if m := typeMismatch.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("expected %s, got %s %s", typeName(m[2]), article(m[1]), m[1])
		}
		if key == "" {
			return fmt.Errorf("%s:%d:%d: %s\n%s", s.path, row, col, msg, s.lineText(row))
		}
		return fmt.Errorf("%s:%d: %s: %s", s.path, row, key, msg)
	case errors.As(err, &dur):
		// A bare number given for a duration reaches the decoder's text
		// hook without a position: find the duration key written so.
		for _, key := range durationKeys() {
			if p, ok := s.keys[key]; ok && p.raw == dur.text {
				return fmt.Errorf("%s:%d: %s: %v", s.path, p.line, key, dur)
			}
		}
		return fmt.Errorf("%s: %v", s.path, dur)
	}
	return fmt.Errorf("%s: %w", s.path, err)
}

func (s *source) lineText(row int) string {
	lines := strings.Split(string(s.data), "\n")
	if row < 1 || row > len(lines) {
		return ""
	}
	return fmt.Sprintf("  %d | %s", row, lines[row-1])
}

// typeName says a Go field type the way config.toml documents values.
func typeName(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "string":
		return "a string"
	case "int", "int64":
		return "an integer"
	case "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "[]string":
		return `an array of strings, such as ["127.0.0.1:7001", "127.0.0.1:7002"]`
	case "main.duration":
		return `a duration string such as "50ms"`
	case "[]catalog.ScriptConfig":
		return "[[scripts]] tables"
	case "[]catalog.TTLArgConfig":
		return `an array of inline tables, such as [{ arg = 2, unit = "ms" }]`
	}
	if strings.HasPrefix(goType, "main.") || strings.HasPrefix(goType, "*main.") {
		return "a table"
	}
	return goType
}

func article(tomlType string) string {
	if strings.ContainsAny(tomlType[:1], "aeiouAEIOU") {
		return "an"
	}
	return "a"
}

// configKeys lists every dotted key fileConfig reads, with its Go type.
func configKeys() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("toml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			key := prefix + name
			out[key] = f.Type
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[duration]() {
				walk(key+".", ft)
			}
		}
	}
	walk("", reflect.TypeFor[fileConfig]())
	return out
}

func durationKeys() []string {
	var keys []string
	for k, t := range configKeys() {
		if t == reflect.TypeFor[duration]() {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// suggest returns the known key closest to an unknown one: the same name
// under another table (a key written above its [quorum] header, say), or
// a spelling within two edits.
func suggest(key string) string {
	known := configKeys()
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	sort.Strings(names)
	last := key[strings.LastIndex(key, ".")+1:]
	for _, k := range names {
		if k != key && k[strings.LastIndex(k, ".")+1:] == last {
			if i := strings.LastIndex(k, "."); i > 0 {
				return fmt.Sprintf("%q (under [%s])", k, k[:i])
			}
			return fmt.Sprintf("%q (at the top, before any [table])", k)
		}
	}
	best, bestD := "", 3
	for _, k := range names {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("%q", best)
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var (
	tableHeader = regexp.MustCompile(`^\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?`)
	assignment  = regexp.MustCompile(`^([A-Za-z0-9_.-]+)\s*=\s*(.*)$`)
	inlineKey   = regexp.MustCompile(`([A-Za-z0-9_-]+)\s*=`)
)

// scanKeys finds the line of each key's first assignment, with its value as
// written, for messages about values the decoder accepted but lockproxy
// does not. It understands what config files use: [table] and [[array]]
// headers, dotted keys, inline tables and multi-line strings.
func scanKeys(data []byte) map[string]keyPos {
	keys := map[string]keyPos{}
	table := ""
	inString := "" // the delimiter of a multi-line string being skipped
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if inString != "" {
			if strings.Contains(t, inString) {
				inString = ""
			}
			continue
		}
		if t == "" || t[0] == '#' {
			continue
		}
		if m := tableHeader.FindStringSubmatch(t); m != nil {
			table = m[1] + "."
			continue
		}
		m := assignment.FindStringSubmatch(t)
		if m == nil {
			continue
		}
		key, raw := table+m[1], stripComment(m[2])
		if _, dup := keys[key]; !dup {
			keys[key] = keyPos{line: i + 1, raw: raw}
		}
		for _, d := range []string{`'''`, `"""`} {
			if strings.HasPrefix(raw, d) && !strings.Contains(raw[3:], d) {
				inString = d
			}
		}
		if strings.HasPrefix(raw, "{") {
			for _, im := range inlineKey.FindAllStringSubmatch(raw, -1) {
				if _, dup := keys[key+"."+im[1]]; !dup {
					keys[key+"."+im[1]] = keyPos{line: i + 1}
				}
			}
		}
	}
	return keys
}

// stripComment removes a trailing # comment outside quotes.
func stripComment(v string) string {
	var quote byte
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
		case quote == 0 && c == '#':
			return strings.TrimSpace(v[:i])
		}
	}
	return strings.TrimSpace(v)
}
