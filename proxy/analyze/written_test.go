package analyze

import (
	"reflect"
	"testing"
)

// TestWrittenKeys: of the keys besides the lock's, the ones the probes saw
// written are reported apart from the ones only read. The masters leave a
// call's other keys as they were except those (quorum.Check.Aux): a key
// reported written that is only read would let an acquire's unprobed path
// delete another client's lock named there; a key written but not
// reported would have every grant of a legitimate script put back.
func TestWrittenKeys(t *testing.T) {
	for _, c := range []struct {
		name         string
		body         string
		aux, written []Arg
	}{
		{"a second key read only", `local t = redis.call("PTTL", KEYS[2])
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end
return 0`, []Arg{{Keys: true, Index: 2}}, nil},
		{"a fencing counter", `if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return redis.call("INCR", KEYS[2])
end
return 0`, []Arg{{Keys: true, Index: 2}}, []Arg{{Keys: true, Index: 2}}},
		{"no other key", `if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end
return 0`, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !reflect.DeepEqual(sem.AuxKeys, c.aux) || !reflect.DeepEqual(sem.WrittenKeys, c.written) {
				t.Errorf("AuxKeys %v, WrittenKeys %v; want %v, %v", sem.AuxKeys, sem.WrittenKeys, c.aux, c.written)
			}
		})
	}
}

// TestReadOnlyCommandsModelled: every command readOnly names is one the
// analyzer models, so that a misspelt name cannot mark a write as a read.
func TestReadOnlyCommandsModelled(t *testing.T) {
	for name := range readOnly {
		if _, ok := commands[name]; !ok {
			t.Errorf("readOnly names %q, which commands does not model", name)
		}
	}
}
